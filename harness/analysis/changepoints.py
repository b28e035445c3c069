"""Change points in a series of per-run values: E-Divisive means (Matteson and James 2014, the
method of MongoDB's signal-processing-algorithms) proposes where a series splits, and Apache
Otava's significance test (a Student t-test between the segments on either side of each
point, instead of E-Divisive's random permutation test) decides which points stay. Own code,
numpy and scipy only, and deterministic: the same series always gives the same answer.

Why not Otava itself: apache-otava 0.8.0 pins numpy 2.2 and scipy < 1.17 (this project runs
numpy 2.3.5, scipy 1.17.1) and pulls in BigQuery, Slack and Postgres clients; what we need of
it is about eighty lines. `signal-processing-algorithms` does not build against numpy 2.

The procedure, as in Otava's `compute_change_points`:
1. split: recursively, the split of a segment that maximises the energy divergence between
   its two sides (alpha = 1), kept as a candidate when its t-test p-value is below the
   permissive SPLIT_PVALUE; both sides are split again (binary segmentation), each side at
   least `min_size` values long. A permissive level here, because binary segmentation
   stopping at the first insignificant split misses a bump (a regression fixed a few runs
   later: the whole series' best split mixes the two levels on one side);
2. prune: each point re-tested against its neighbours' segments (previous point .. next
   point); the weakest point above `max_pvalue` is dropped and the rest re-tested, until every
   point is significant. Unlike Otava's, the test allows for a linear trend across the window
   (`trend=True`, the default): the step is the jump at the point on top of a common slope
   (least squares, y = a + b t + c [t >= point], the t-test of c). A slow drift is then not a
   step at one commit: binary segmentation proposes a split on a ramp (a two-sample t-test
   between its halves is significant), and without the trend term it was kept in 54-67% of
   histories drifting by 2% over 30 runs (tests/unit/test_changepoints.py);
3. drifts: each segment between the kept points is tested for a slope (`drifts`), at
   DRIFT_PVALUE (one test a segment, not a search), and reported with its slope and interval.
Validated by simulated histories with this machine's noise (tests/unit/test_changepoints.py,
benchmarks/changepoints.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

# A run-to-run series: a list of values or the array a caller already holds.
Series = Sequence[float] | npt.NDArray[np.float64]

# A step's p-value must be below this: a history of 30 runs tests ~25 splits at each level,
# so the per-test level is far below 5% (simulated: no alarm in >= 95% of step-free series).
MAX_PVALUE = 0.001
# The fewest values on either side of a change point: a step is seen 3 runs after it lands.
MIN_SIZE = 3
# Candidates only: the prune step decides at MAX_PVALUE.
SPLIT_PVALUE = 0.05
# A segment's slope is a drift below this p-value: one test per segment between change
# points, no search over positions, so no correction for one (step-free histories: ~1%).
DRIFT_PVALUE = 0.01
# The fewest values a segment needs for its slope to be tested.
DRIFT_MIN_SIZE = 8


@dataclass(frozen=True)
class ChangePoint:
    """A change in a series, at the first value after it."""

    index: int  # position of the first value after the change
    before: float  # mean of the segment before (from the previous change point)
    after: float  # mean of the segment after (to the next change point)
    step: float  # after - before, in the series' own unit
    ci_low: float  # 95% interval of the step (pooled t)
    ci_high: float
    p_value: float


@dataclass(frozen=True)
class Drift:
    """A linear trend across one segment of a series (between change points)."""

    start: int  # position of the segment's first value
    end: int  # one past its last value
    slope: float  # per value (per run), in the series' own unit
    ci_low: float  # 95% interval of the slope
    ci_high: float
    p_value: float

    @property
    def change(self) -> float:
        """The fitted change from the segment's first value to its last."""
        return self.slope * (self.end - self.start - 1)


def _ols(y: np.ndarray, design: np.ndarray, column: int) -> tuple[float, float, int]:
    """Least squares of `y` on `design`: (coefficient `column`, its standard error, residual
    df); se inf when the fit has no residual df, 0 when it fits exactly."""
    n, k = design.shape
    df = n - k
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    if df < 1:
        return float(coef[column]), math.inf, df
    resid = y - design @ coef
    sigma2 = float(resid @ resid) / df
    cov = np.linalg.pinv(design.T @ design)
    return float(coef[column]), math.sqrt(max(sigma2 * float(cov[column, column]), 0.0)), df


def _p_and_half(estimate: float, se: float, df: int) -> tuple[float, float]:
    if df < 1 or not math.isfinite(se):
        return 1.0, math.inf
    if se == 0.0:
        return (0.0 if estimate != 0 else 1.0), 0.0
    p = float(2 * sps.t.sf(abs(estimate / se), df))
    return p, float(sps.t.ppf(0.975, df)) * se


def _trend_step(x: np.ndarray, start: int, tau: int, end: int) -> tuple[float, float, float]:
    """The jump at `tau` on top of one linear trend across x[start:end]: (p-value, step,
    half-width of its 95% interval)."""
    t = np.arange(start, end, dtype=float)
    design = np.column_stack([np.ones(len(t)), t - t.mean(), (t >= tau).astype(float)])
    step, se, df = _ols(x[start:end], design, 2)
    p, half = _p_and_half(step, se, df)
    return p, step, half


def _t_test(left: np.ndarray, right: np.ndarray) -> tuple[float, float, float]:
    """Student's t-test with pooled variance (Otava's): (p-value, step, half-width of its 95%
    interval). Two constant segments at different levels differ with certainty."""
    n1, n2 = len(left), len(right)
    step = float(np.mean(right) - np.mean(left))
    df = n1 + n2 - 2
    if df < 1:
        return 1.0, step, math.inf
    pooled = float(np.sum((left - left.mean()) ** 2) + np.sum((right - right.mean()) ** 2)) / df
    se = math.sqrt(pooled * (1 / n1 + 1 / n2))
    if se == 0.0:
        return (0.0 if step != 0 else 1.0), step, 0.0
    t = step / se
    p = float(2 * sps.t.sf(abs(t), df))
    return p, step, float(sps.t.ppf(0.975, df)) * se


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float] | None:
    """E-Divisive means (alpha 1): the split of `x` maximising the scaled energy divergence
    between its two sides, as (index, statistic); None when no split has both sides at least
    `min_size` long or every split is as good as none."""
    n = len(x)
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    # Prefix sums make every split's within- and between-side sums O(1).
    cum = np.cumsum(np.cumsum(d, axis=0), axis=1)

    def block(r0: int, r1: int, c0: int, c1: int) -> float:
        """Sum of d[r0:r1, c0:c1]."""
        total = cum[r1 - 1, c1 - 1]
        if r0 > 0:
            total -= cum[r0 - 1, c1 - 1]
        if c0 > 0:
            total -= cum[r1 - 1, c0 - 1]
        if r0 > 0 and c0 > 0:
            total += cum[r0 - 1, c0 - 1]
        return float(total)

    best: tuple[int, float] | None = None
    for tau in range(min_size, n - min_size + 1):
        m, k = tau, n - tau
        between = block(0, tau, tau, n) / (m * k)
        within_left = block(0, tau, 0, tau) / (m * (m - 1)) if m > 1 else 0.0
        within_right = block(tau, n, tau, n) / (k * (k - 1)) if k > 1 else 0.0
        q = (m * k / n) * (2 * between - within_left - within_right)
        if best is None or q > best[1] + 1e-15:
            best = (tau, q)
    if best is None or best[1] <= 1e-15:
        return None
    return best


def _split(
    x: np.ndarray, start: int, end: int, split_pvalue: float, min_size: int, found: list[int]
) -> None:
    chosen = _best_split(x[start:end], min_size)
    if chosen is None:
        return
    tau = start + chosen[0]
    p, _, _ = _t_test(x[start:tau], x[tau:end])
    if p >= split_pvalue:
        return
    found.append(tau)
    _split(x, start, tau, split_pvalue, min_size, found)
    _split(x, tau, end, split_pvalue, min_size, found)


def _tested(x: np.ndarray, points: list[int], trend: bool) -> list[ChangePoint]:
    bounds = [0, *points, len(x)]
    out = []
    for i, tau in enumerate(points):
        left, right = x[bounds[i] : tau], x[tau : bounds[i + 2]]
        p, step, half = (
            _trend_step(x, bounds[i], tau, bounds[i + 2]) if trend else _t_test(left, right)
        )
        out.append(
            ChangePoint(
                tau, float(left.mean()), float(right.mean()), step, step - half, step + half, p
            )
        )
    return out


def change_points(
    values: Series,
    *,
    max_pvalue: float = MAX_PVALUE,
    min_size: int = MIN_SIZE,
    trend: bool = True,
) -> list[ChangePoint]:
    """The change points of a series, oldest first; with `trend`, each a jump on top of a
    linear trend across its window (a ramp has none). NaN values are refused (ValueError): a
    caller drops runs without a value before, and maps the indices back."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError("change_points: a one-dimensional series")
    if not np.all(np.isfinite(x)):
        raise ValueError("change_points: the series holds NaN or infinite values")
    found: list[int] = []
    _split(x, 0, len(x), max(SPLIT_PVALUE, max_pvalue), min_size, found)
    points = sorted(found)
    while points:
        tested = _tested(x, points, trend)
        worst = max(tested, key=lambda c: c.p_value)
        if worst.p_value < max_pvalue:
            return tested
        points.remove(worst.index)
    return []


def drifts(
    values: Series,
    points: Sequence[ChangePoint] = (),
    *,
    max_pvalue: float = DRIFT_PVALUE,
    min_size: int = DRIFT_MIN_SIZE,
) -> list[Drift]:
    """The segments of a series between its change `points` whose values trend: the least
    squares slope per value with its 95% interval, kept when its t-test p-value is below
    `max_pvalue`; segments shorter than `min_size` are not tested."""
    x = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("drifts: the series holds NaN or infinite values")
    bounds = [0, *(c.index for c in points), len(x)]
    out = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        if end - start < min_size:
            continue
        t = np.arange(end - start, dtype=float)
        design = np.column_stack([np.ones(len(t)), t - t.mean()])
        slope, se, df = _ols(x[start:end], design, 1)
        p, half = _p_and_half(slope, se, df)
        if p < max_pvalue:
            out.append(Drift(start, end, slope, slope - half, slope + half, p))
    return out


def noise_sd(values: Series) -> float:
    """The series' run-to-run sd, robust to steps: the MAD of successive differences, scaled
    to an sd of one value (a step moves one difference, not the median)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 3:
        return math.nan
    diffs = np.diff(x)
    return float(1.4826 * np.median(np.abs(diffs - np.median(diffs))) / math.sqrt(2))


def detectable_step(
    values: Series,
    *,
    max_pvalue: float = MAX_PVALUE,
    n_after: int = MIN_SIZE,
    power: float = 0.8,
) -> float:
    """The smallest step (in the series' unit) detected with about `power` when it lands
    `n_after` runs before the end of a series as long as this one with its noise: the
    t-test's critical value plus the power quantile, times the step's standard error (with
    the linear trend change_points allows for: the jump's own, larger, error)."""
    n = len(values)
    sd = noise_sd(values)
    n_before = n - n_after
    if n_before < 2 or not math.isfinite(sd):
        return math.nan
    df = n - 3
    t = np.arange(n, dtype=float)
    design = np.column_stack([np.ones(n), t - t.mean(), (t >= n_before).astype(float)])
    factor = math.sqrt(float(np.linalg.pinv(design.T @ design)[2, 2]))
    crit = float(sps.t.ppf(1 - max_pvalue / 2, df)) + float(sps.t.ppf(power, df))
    return crit * sd * factor
