"""Where a candidate's delta crosses zero along a swept axis, with an interval.

Input: one estimate per cell along the axis (its value on the analysis scale, standard error and
degrees of freedom, as harness.stats gives them; cells are independent launches). The crossing
is linear interpolation between the two neighbouring cells whose deltas differ in sign, on the
axis's log or linear scale. Its interval is a parametric bootstrap of the per-cell estimates:
every draw moves each cell by its own t-distributed error and finds its crossing again; a draw
without one puts the crossing beyond the grid on the side its signs say. The 2.5% and 97.5%
points of the draws are the interval, which may be open at either end ("below 1", "above 64").
Coverage and false claims are checked by simulation in tests/unit/test_breakeven.py, on
per-cell data with the machine's noise structure run through harness.stats.
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
    sign: int = 0  # without a crossing: the sign every estimate has (+1 or -1)


def choose_scale(xs: list[float], scale: str = "auto") -> Scale:
    """log for values growing by factors (every value positive, largest >= 4x smallest)."""
    if scale in ("log", "linear"):
        return scale  # type: ignore[return-value]
    positive = min(xs) > 0
    return "log" if positive and max(xs) >= 4 * min(xs) else "linear"


def _first_crossing(values: np.ndarray, u: np.ndarray, rising: bool) -> np.ndarray:
    """Per row of `values` (draws x cells, cells by growing u): the u where the first sign
    change in `rising`'s direction happens, interpolated; -inf when every cell is already past
    it (on the far side of zero), +inf when none has reached it."""
    past = values >= 0 if rising else values <= 0
    change = ~past[:, :-1] & past[:, 1:]
    has = change.any(axis=1)
    i = np.argmax(change, axis=1)
    rows = np.arange(values.shape[0])
    v0, v1 = values[rows, i], values[rows, i + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(v1 != v0, -v0 / (v1 - v0), 0.0)
    out = u[i] + np.clip(frac, 0.0, 1.0) * (u[i + 1] - u[i])
    result: np.ndarray = np.where(has, out, np.where(past[:, 0], -np.inf, np.inf))
    return result


def break_even(points: list[AxisPoint], scale: str = "auto", draws: int = DRAWS,
               seed: int = 0) -> Crossing:
    """The crossing of zero along the axis, and its bootstrap interval (see the module)."""
    pts = sorted(points, key=lambda p: p.x)
    xs = np.array([p.x for p in pts], dtype=float)
    if len(pts) < 2 or len(set(xs.tolist())) != len(xs):
        raise ValueError("break-even needs at least 2 cells at distinct axis values")
    chosen = choose_scale(xs.tolist(), scale)
    u = np.log(xs) if chosen == "log" else xs
    values = np.array([p.value for p in pts], dtype=float)
    signs = np.sign(values)
    crossings = int(np.sum(signs[:-1] * signs[1:] < 0))
    # Which way it crosses: as the estimates cross, else by the weighted trend along the axis.
    if crossings:
        first = int(np.argmax(signs[:-1] * signs[1:] < 0))
        rising = bool(values[first + 1] > values[first])
    else:
        w = np.array([1.0 / p.se**2 if p.se else 1.0 for p in pts])
        slope = np.polyfit(u, values, 1, w=np.sqrt(w))[0] if len(pts) >= 2 else 0.0
        rising = bool(slope >= 0)
    point = _first_crossing(values[None, :], u, rising)[0]
    estimate = _to_axis(point, chosen) if math.isfinite(point) else None
    sign = 0 if estimate is not None else (1 if values[0] >= 0 else -1)
    direction: Direction = "rising" if rising else "falling"
    if any(p.se is None or not math.isfinite(p.se) or p.df is None or p.df < 1 for p in pts):
        return Crossing(chosen, direction, estimate, None, None, math.nan, math.nan, math.nan,
                        crossings, float(xs[0]), float(xs[-1]), sign)
    rng = np.random.default_rng(seed)
    se = np.array([p.se for p in pts], dtype=float)
    dfs = np.array([p.df for p in pts], dtype=float)
    sampled = values + se * rng.standard_t(dfs, size=(draws, len(pts)))
    found = _first_crossing(sampled, u, rising)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(found, [tail, 1 - tail], method="inverted_cdf")
    return Crossing(chosen, direction, estimate, _to_axis(float(low), chosen),
                    _to_axis(float(high), chosen), float(np.mean(np.isfinite(found))),
                    float(np.mean(found == -np.inf)), float(np.mean(found == np.inf)),
                    crossings, float(xs[0]), float(xs[-1]), sign)


def _to_axis(u: float, scale: Scale) -> float:
    if not math.isfinite(u):
        return u
    return math.exp(u) if scale == "log" else u


def describe(c: Crossing, axis: str, candidate: str, metric_label: str,
             higher_is_better: bool) -> str:
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

    interval = ("no interval (a cell has too few units to estimate its error)"
                if c.ci_low is None or c.ci_high is None else
                f"95% interval [{fmt(c.ci_low)}, {fmt(c.ci_high)}]; {100 * c.inside:.0f}% of "
                f"draws cross inside the grid")
    grid = f"{axis} {_num(c.x_min)}..{_num(c.x_max)}"
    if c.estimate is None:
        where = "ahead" if (c.sign > 0) == higher_is_better else "behind"
        return (f"break-even on {axis}: no crossing within the grid ({grid}): {candidate} is "
                f"{where} everywhere on the estimates; {interval}")
    shape = "" if c.crossings <= 1 else (f" (the estimates cross zero {c.crossings} times: "
                                         "not monotone; the first crossing is shown)")
    return (f"break-even on {axis}: {wins} {axis} ≈ {_num(c.estimate)}; {interval} "
            f"({c.scale} interpolation){shape}")


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}"
