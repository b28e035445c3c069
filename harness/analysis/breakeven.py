"""Where a candidate's delta crosses zero along a swept axis, with an interval.

Input: one estimate per cell along the axis (its value on the analysis scale, standard error and
degrees of freedom, as harness.analysis.stats gives them; cells are independent launches). The
delta is
taken to move one way along the axis (the way its precision-weighted trend goes): the estimates
get a weighted monotone (isotonic) fit, which pools neighbours that disagree with that direction
instead of picking a crossing out of noise near zero, and the crossing is where that fit crosses
zero, by linear interpolation between the two neighbouring cells on the axis's log or linear
scale. Its interval is a parametric bootstrap: every draw moves each cell by its own
t-distributed error, fits again and finds the crossing again; a draw whose fit stays on one side
puts the crossing beyond the grid on that side. The 2.5% and 97.5% points of the draws are the
interval, which may be open at either end ("below 1", "above 64").

Checked by simulation in tests/unit/test_breakeven.py on per-cell data with the machine's noise
structure run through harness.analysis.stats: about 95% coverage of the true crossing (the
crossing of
the raw estimates nearest the winning end, tried first, was biased by noise and covered 89%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

DRAWS = 4000
CONFIDENCE = 0.95
Scale = Literal["log", "linear"]
Direction = Literal["rising", "falling"]


@dataclass(frozen=True)
class AxisPoint:
    """One cell's estimate at one axis value (analysis scale: log ratio or points)."""

    x: float
    value: float
    se: float | None
    df: float | None


@dataclass(frozen=True)
class Crossing:
    """Where the delta crosses zero along the axis, as far as the grid can tell.

    `direction` says which way the delta crosses with the axis growing: rising (below zero
    below the crossing, above it above) or falling. Interval ends are axis values, or -inf /
    +inf when a share of the draws put the crossing below / above the grid."""

    scale: Scale
    direction: Direction
    estimate: float | None  # the crossing of the estimates themselves; None: not in the grid
    ci_low: float | None  # None: not estimable (a cell without a standard error)
    ci_high: float | None
    inside: float  # share of draws that cross inside the grid
    below: float  # share of draws whose crossing lies below the grid's smallest value
    above: float
    crossings: int  # sign changes of the estimates along the grid (more than 1: not monotone)
    x_min: float
    x_max: float
    sign: int = 0  # without a crossing: the side the monotone fit stays on (+1 or -1)


def choose_scale(xs: list[float], scale: str = "auto") -> Scale:
    """log for values growing by factors (every value positive, largest >= 4x smallest)."""
    if scale in ("log", "linear"):
        return scale  # type: ignore[return-value]
    positive = min(xs) > 0
    return "log" if positive and max(xs) >= 4 * min(xs) else "linear"


def _boundary(values: np.ndarray, u: np.ndarray, rising: bool) -> np.ndarray:
    """Per row of `values` (draws x cells, cells by growing u): where the region in which the
    candidate is ahead (value >= 0) begins, for a rising delta (ahead from there to the grid's
    high end), or ends, for a falling one (ahead from the low end up to there); interpolated
    between the neighbouring cells. -inf / +inf: the boundary lies below / above the grid
    (ahead everywhere, or not ahead at the end where it should be)."""
    behind = values < 0
    n = values.shape[1]
    rows = np.arange(values.shape[0])
    if rising:
        # the last cell behind; the boundary lies between it and the next
        any_behind = behind.any(axis=1)
        i = n - 1 - np.argmax(behind[:, ::-1], axis=1)
        edge = np.where(~any_behind, -np.inf, np.inf)
        inside = any_behind & (i < n - 1)
        a, b = np.minimum(i, n - 2), np.minimum(i, n - 2) + 1
    else:
        # the first cell behind; the boundary lies between it and the one before
        any_behind = behind.any(axis=1)
        i = np.argmax(behind, axis=1)
        edge = np.where(~any_behind, np.inf, -np.inf)
        inside = any_behind & (i > 0)
        a, b = np.maximum(i, 1) - 1, np.maximum(i, 1)
    v0, v1 = values[rows, a], values[rows, b]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(v1 != v0, -v0 / (v1 - v0), 0.5)
    at = u[a] + np.clip(frac, 0.0, 1.0) * (u[b] - u[a])
    result: np.ndarray = np.where(inside, at, edge)
    return result


def _monotone(values: np.ndarray, weights: np.ndarray, rising: bool) -> np.ndarray:
    """Each row's weighted isotonic fit (pool adjacent violators): the closest monotone curve
    to the estimates, so noise near zero is pooled instead of picked from."""
    from scipy.optimize import isotonic_regression

    return np.array(
        [isotonic_regression(row, weights=weights, increasing=rising).x for row in values]
    )


def break_even(
    points: list[AxisPoint], scale: str = "auto", draws: int = DRAWS, seed: int = 0
) -> Crossing:
    """The crossing of zero along the axis, and its bootstrap interval (see the module)."""
    pts = sorted(points, key=lambda p: p.x)
    xs = np.array([p.x for p in pts], dtype=float)
    if len(pts) < 2 or len(set(xs.tolist())) != len(xs):
        raise ValueError("break-even needs at least 2 cells at distinct axis values")
    chosen = choose_scale(xs.tolist(), scale)
    u = np.log(xs) if chosen == "log" else xs
    values = np.array([p.value for p in pts], dtype=float)
    ahead = values >= 0
    crossings = int(np.sum(ahead[:-1] != ahead[1:]))
    # Which way it crosses: the trend of the estimates along the axis (weighted by their
    # precision), so a noisy wiggle near zero does not decide it.
    w = np.array([1.0 / p.se**2 if p.se else 1.0 for p in pts])
    rising = bool(np.polyfit(u, values, 1, w=np.sqrt(w))[0] >= 0)
    fitted = _monotone(values[None, :], w, rising)
    point = _boundary(fitted, u, rising)[0]
    estimate = _to_axis(point, chosen) if math.isfinite(point) else None
    # Without a crossing: the side the fit stays on.
    sign = 0 if estimate is not None else (1 if fitted[0, 0] >= 0 else -1)
    direction: Direction = "rising" if rising else "falling"
    if any(p.se is None or not math.isfinite(p.se) or p.df is None or p.df < 1 for p in pts):
        return Crossing(
            chosen,
            direction,
            estimate,
            None,
            None,
            math.nan,
            math.nan,
            math.nan,
            crossings,
            float(xs[0]),
            float(xs[-1]),
            sign,
        )
    rng = np.random.default_rng(seed)
    se = np.array([p.se for p in pts], dtype=float)
    dfs = np.array([p.df for p in pts], dtype=float)
    sampled = values + se * rng.standard_t(dfs, size=(draws, len(pts)))
    found = _boundary(_monotone(sampled, w, rising), u, rising)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(found, [tail, 1 - tail], method="inverted_cdf")
    return Crossing(
        chosen,
        direction,
        estimate,
        _to_axis(float(low), chosen),
        _to_axis(float(high), chosen),
        float(np.mean(np.isfinite(found))),
        float(np.mean(found == -np.inf)),
        float(np.mean(found == np.inf)),
        crossings,
        float(xs[0]),
        float(xs[-1]),
        sign,
    )


def _to_axis(u: float, scale: Scale) -> float:
    if not math.isfinite(u):
        return u
    return math.exp(u) if scale == "log" else u


def describe(
    c: Crossing, axis: str, candidate: str, metric_label: str, higher_is_better: bool
) -> str:
    """One sentence: where the candidate starts (or stops) winning, with its interval."""
    # The delta rising through zero means the candidate gains with the axis.
    gains = (c.direction == "rising") == higher_is_better
    side = "from" if gains else "up to"
    wins = f"{candidate} wins on {metric_label} {side}"

    def fmt(x: float) -> str:
        if x == -math.inf:
            return f"below {_num(c.x_min)}"
        if x == math.inf:
            return f"above {_num(c.x_max)}"
        return _num(x)

    interval = (
        "no interval (a cell has too few units to estimate its error)"
        if c.ci_low is None or c.ci_high is None
        else f"95% interval [{fmt(c.ci_low)}, {fmt(c.ci_high)}]; {100 * c.inside:.0f}% of "
        f"draws cross inside the grid"
    )
    grid = f"{axis} {_num(c.x_min)}..{_num(c.x_max)}"
    if c.estimate is None:
        where = "ahead" if (c.sign > 0) == higher_is_better else "behind"
        wiggle = (
            f" (the raw estimates cross zero {c.crossings} times; a monotone fit pools them)"
            if c.crossings
            else ""
        )
        return (
            f"break-even on {axis}: no crossing within the grid ({grid}): {candidate} is "
            f"{where} everywhere{wiggle}; {interval}"
        )
    shape = (
        ""
        if c.crossings <= 1
        else (f" (the raw estimates cross zero {c.crossings} times; a monotone fit pools them)")
    )
    return (
        f"break-even on {axis}: {wins} {axis} ≈ {_num(c.estimate)}; {interval} "
        f"({c.scale} interpolation){shape}"
    )


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}"
