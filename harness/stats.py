"""Uncertainty for A/B deltas: intervals, tests, noise, minimum detectable effect (numpy/scipy).

Two kinds of metric, two methods (both validated by coverage and A/A tests in tests/unit):
- pass-level metrics (throughputs, acceptance): one value per measured pass. The interval is a
  t interval on the log ratio (paired by pass position when both arms pair up, Welch
  otherwise): a percentile bootstrap of 2-6 values under-covers badly.
- request-level metrics (TTFT, TPOT, ITL, E2EL): a two-level bootstrap, resampling passes and
  then requests within them, so launch-to-launch and request-to-request noise both count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
POWER = 0.8
POWER_Z = 0.8416  # z for 80% power (bootstrap intervals, many samples)
NOISE_CV = 0.05  # an arm whose passes vary by more than 5% cannot resolve ~1% effects

Stat = Literal["mean", "median", "p99"]
DeltaKind = Literal["relative", "points"]


@dataclass(frozen=True)
class DeltaEstimate:
    """A candidate-vs-baseline delta with its uncertainty. Relative deltas are fractions
    (0.01 = +1%), point deltas are in the metric's own unit."""

    kind: DeltaKind
    delta: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    test: str | None
    significant: bool
    mde: float | None  # minimum detectable |delta| at 80% power, alpha 0.05, same kind
    cv_baseline: float | None
    cv_candidate: float | None
    noisy: bool
    n_baseline: int
    n_candidate: int
    note: str | None = None


def coefficient_of_variation(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    if len(values) < 2 or np.mean(values) == 0:
        return None
    return float(np.std(values, ddof=1) / abs(np.mean(values)))


def _significant(p: float | None, low: float | None, high: float | None) -> bool:
    """Both the test and the interval must agree: conservative on purpose."""
    if p is None or low is None or high is None:
        return False
    return p < ALPHA and (low > 0 or high < 0)


def pass_level_delta(base: np.ndarray, cand: np.ndarray, kind: DeltaKind,
                     paired: bool) -> DeltaEstimate:
    """Delta of per-pass values (one per measured pass). `paired`: element i of each arm was
    measured at the same position of the interleaved schedule."""
    base = np.asarray(base, dtype=float)
    cand = np.asarray(cand, dtype=float)
    if paired and len(base) == len(cand):
        keep = np.isfinite(base) & np.isfinite(cand)
        base, cand = base[keep], cand[keep]
    else:
        base, cand = base[np.isfinite(base)], cand[np.isfinite(cand)]
        paired = False
    nb, nc = len(base), len(cand)
    cv_b, cv_c = coefficient_of_variation(base), coefficient_of_variation(cand)
    noisy = any(cv is not None and cv > NOISE_CV for cv in (cv_b, cv_c))
    if nb == 0 or nc == 0:
        return DeltaEstimate(kind, math.nan, None, None, None, None, False, None, cv_b, cv_c,
                             noisy, nb, nc, "no data")
    mean_b, mean_c = float(np.mean(base)), float(np.mean(cand))
    positive = bool(np.all(base > 0) and np.all(cand > 0))
    relative = kind == "relative"
    if relative and not positive:
        return DeltaEstimate(kind, math.nan, None, None, None, None, False, None, cv_b, cv_c,
                             noisy, nb, nc, "relative delta needs positive values")
    delta = mean_c / mean_b - 1.0 if relative else mean_c - mean_b
    # Work on log values for relative deltas: ratios become differences, intervals stay
    # asymmetric as ratios are.
    tb = np.log(base) if relative else base
    tc = np.log(cand) if relative else cand
    low = high = p = se = None
    test = None
    if paired and nb >= 2:
        diff = tc - tb
        sd = float(np.std(diff, ddof=1))
        se = sd / math.sqrt(nb)
        dof = float(nb - 1)
        test = "paired t"
        if se > 0:
            t_crit = float(sps.t.ppf(1 - ALPHA / 2, dof))
            mid = float(np.mean(diff))
            low, high = mid - t_crit * se, mid + t_crit * se
            p = float(2 * sps.t.sf(abs(mid / se), dof))
        else:
            mid = float(np.mean(diff))
            low = high = mid
            p = 0.0 if mid != 0 else 1.0
    elif nb >= 2 and nc >= 2:
        vb, vc = float(np.var(tb, ddof=1)), float(np.var(tc, ddof=1))
        se = math.sqrt(vb / nb + vc / nc)
        mid = float(np.mean(tc) - np.mean(tb))
        test = "Welch t"
        dof = float(nb + nc - 2)
        if se > 0:
            dof = se**4 / ((vb / nb) ** 2 / (nb - 1) + (vc / nc) ** 2 / (nc - 1))
            t_crit = float(sps.t.ppf(1 - ALPHA / 2, dof))
            low, high = mid - t_crit * se, mid + t_crit * se
            p = float(2 * sps.t.sf(abs(mid / se), dof))
        else:
            low = high = mid
            p = 0.0 if mid != 0 else 1.0
    else:
        return DeltaEstimate(kind, delta, None, None, None, None, False, None, cv_b, cv_c, noisy,
                             nb, nc, "one pass per arm: no interval (add rounds or repeats)")
    # With a handful of passes the t quantiles, not the normal ones, set what is detectable.
    mde = (float(sps.t.ppf(1 - ALPHA / 2, dof)) + float(sps.t.ppf(POWER, dof))) * se
    if relative:
        low, high = math.expm1(low), math.expm1(high)
        mde = math.expm1(mde)
    return DeltaEstimate(kind, delta, low, high, p, test, _significant(p, low, high), mde, cv_b,
                         cv_c, noisy, nb, nc)


def _stat_rows(matrix: np.ndarray, stat: Stat) -> np.ndarray:
    """Statistic of each row of a (replicates, samples) matrix, ignoring NaN padding."""
    if stat == "mean":
        rows = np.nanmean(matrix, axis=1)
    elif stat == "median":
        rows = np.nanmedian(matrix, axis=1)
    else:
        rows = np.nanpercentile(matrix, 99, axis=1)
    return np.asarray(rows, dtype=float)


def pooled_statistic(groups: list[np.ndarray], stat: Stat) -> float:
    """`stat` over the requests of all passes together."""
    pooled = np.concatenate(groups)
    return float(_stat_rows(pooled[None, :], stat)[0])


def _bootstrap_arm(groups: list[np.ndarray], stat: Stat, n_boot: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Two-level bootstrap replicates of `stat` over passes, then requests within them."""
    k = len(groups)
    width = max(len(g) for g in groups)
    padded = np.full((k, width), np.nan)
    for i, g in enumerate(groups):
        padded[i, : len(g)] = g
    sizes = np.array([len(g) for g in groups])
    pick = rng.integers(0, k, size=(n_boot, k))  # passes
    u = rng.random((n_boot, k, width))
    req = np.floor(u * sizes[pick][:, :, None]).astype(int)  # requests within each pass
    values = padded[pick[:, :, None], req]
    valid = np.arange(width)[None, None, :] < sizes[pick][:, :, None]
    values = np.where(valid, values, np.nan).reshape(n_boot, k * width)
    return _stat_rows(values, stat)


def request_level_delta(base: list[np.ndarray], cand: list[np.ndarray], stat: Stat,
                        kind: DeltaKind = "relative", n_boot: int = 2000,
                        seed: int = 0) -> DeltaEstimate:
    """Delta of a per-request statistic; `base`/`cand` hold one array of request values per
    measured pass."""
    base = [g[np.isfinite(g)] for g in map(np.asarray, base)]
    cand = [g[np.isfinite(g)] for g in map(np.asarray, cand)]
    base = [g for g in base if len(g)]
    cand = [g for g in cand if len(g)]
    nb, nc = len(base), len(cand)
    if nb == 0 or nc == 0:
        return DeltaEstimate(kind, math.nan, None, None, None, None, False, None, None, None,
                             False, nb, nc, "no data")
    per_pass_b = np.array([pooled_statistic([g], stat) for g in base])
    per_pass_c = np.array([pooled_statistic([g], stat) for g in cand])
    cv_b, cv_c = coefficient_of_variation(per_pass_b), coefficient_of_variation(per_pass_c)
    noisy = any(cv is not None and cv > NOISE_CV for cv in (cv_b, cv_c))
    point_b, point_c = pooled_statistic(base, stat), pooled_statistic(cand, stat)
    relative = kind == "relative"
    if relative and point_b <= 0:
        return DeltaEstimate(kind, math.nan, None, None, None, None, False, None, cv_b, cv_c,
                             noisy, nb, nc, "relative delta needs a positive baseline")
    delta = point_c / point_b - 1.0 if relative else point_c - point_b

    # Keep the replicate matrix within a few tens of MB.
    cells = max(nb, nc) * max(max(map(len, base)), max(map(len, cand)))
    n_boot = max(200, min(n_boot, 20_000_000 // max(cells, 1)))
    rng = np.random.default_rng(seed)
    boot_b = _bootstrap_arm(base, stat, n_boot, rng)
    boot_c = _bootstrap_arm(cand, stat, n_boot, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = boot_c / boot_b - 1.0 if relative else boot_c - boot_b
    reps = reps[np.isfinite(reps)]
    low, high = (float(v) for v in np.percentile(reps, [2.5, 97.5]))
    se = float(np.std(reps, ddof=1))
    mde = (1.959964 + POWER_Z) * se

    # Two-sided p of the bootstrap: how often the replicates land on the other side of zero.
    p = min(1.0, 2 * min(float(np.mean(reps <= 0)), float(np.mean(reps >= 0))))
    note = None if nb >= 2 and nc >= 2 else "one launch per arm: launch-to-launch noise not sampled"
    return DeltaEstimate(kind, delta, low, high, p, "two-level bootstrap",
                         _significant(p, low, high), mde, cv_b, cv_c, noisy, nb, nc, note)
