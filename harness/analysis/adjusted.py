"""The speed-adjusted end-to-end estimate: the candidate's output-throughput delta
with the machine's speed taken out, by regression on the parts of the step the change leaves
alone.

The noise of a shared launch is mostly the machine's speed, which moves every part of a pass at
once. The step parts outside the change's declared part (for a change in the drafter: the
verification forward and the rest of the step, their time per step summed) measure that speed
in the same passes, so their block difference x_b predicts the throughput's, d_b. The estimate
is ANCOVA (CUPED) on the primary row's blocks (its launches, its warm-up cut):
d_b = delta + theta * x_b + e_b, theta fitted on the blocks (df n - 2 in one launch; with
several, theta within them and the launches' adjusted means as the error term, df L - 1),
delta read at x = 0, where the untouched parts did not move. Regression, not a ratio
estimator (theta fixed at -1): the throughput moves by more than the step parts do (theta -1.4
to -1.7 on the demo, whose time outside the steps moves with the speed too), and a fitted
theta costs one degree of freedom.

The assumption is checked in every run; the row is withdrawn, with a line saying why, when
- the covariate's own delta moved: its 95% interval excludes 0; or
- two untouched parts moved against each other (their ratio, in which the machine's speed
  cancels): the equivalence test at +-EQUIVALENCE_MARGIN fails (90% interval not inside it).
The covariate's own interval is as wide as the primary row's (the speed moves it), so only
the ratio sees a move of the size that biases the row; inside the margin the ratio's estimate
z still biases it by up to |theta| * share * |z| (share: the larger part's share of the
covariate), whichever of the two parts moved, so the interval is widened by that much on each
side. A change that moves every untouched part by the same factor is indistinguishable from
the machine's speed: the assumption left, stated with the row.

Where every pass carries the speed probe (the scenario's speed_probe: a fixed Python loop timed
before each step, harness.engine.steptimes.install_probe), the covariate is the probe's
time per step instead (_probe_fit): no change to vLLM runs its code, so that blind spot is
gone. The row is withdrawn where the probe's own delta moved at PROBE_CHECK_LEVEL; where the
probe's twin ran beside it (the same loop at the same moment in a process of its own,
harness.engine.twin), the probe over its twin is the checked pair, as the parts' pair is: the
machine's speed cancels in it, so a change that slowed the probe itself (through the worker's
interpreter, a thread, its core's caches) shows there, widens the row by the bias it would
cause and withdraws it past the margin. Without the twin nothing widens. The probe removes
less of the variance than the step parts, so its interval is wider.

Validated by simulated A/A, coverage and bias through this code (benchmarks/adjusted_stress.py,
tests/unit/test_adjusted.py); the rates are docs/statistics.md's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from harness.analysis.comparison import Check, MetricRow, SpeedAdjustment, Withdrawal
from harness.analysis.stats import (
    ALPHA,
    POWER,
    WARMUP_MARGIN,
    WARMUP_P,
    DeltaEstimate,
    Design,
    _sd,
    _t,
    coefficient_of_variation,
    trimmed,
    warmup_cut,
)
from harness.config.scenario import ADJUSTED_METRIC
from harness.config.swaps import SWAPS

KEY = ADJUSTED_METRIC
LABEL = "Output throughput, speed-adjusted (tok/s)"
# The equivalence margin of the speed-cancelled check (log ratio of covariate to reference):
# a move beyond it withdraws the row; within it, the row's interval carries the bound.
EQUIVALENCE_MARGIN = 0.02
# Each part's per-pass column (harness.results.metrics) and its name in the row's note.
PART_COLUMNS = {
    "draft": ("draft_ms_per_step", "draft time"),
    "forward": ("forward_ms_per_step", "verification forward"),
    "rest": ("rest_ms_per_step", "rest of the step"),
}
# The change's own part -> (the step parts summed as the covariate, the two parts whose ratio
# checks it): parts it leaves alone. A change of undeclared part (a patch, an overlay in
# several parts) is taken to leave the forward and the rest alone, and the row says so.
_PLAN: dict[str | None, tuple[tuple[str, ...], tuple[str, str]]] = {
    "draft": (("forward", "rest"), ("forward", "rest")),
    "outside": (("forward", "rest"), ("forward", "rest")),
    None: (("forward", "rest"), ("forward", "rest")),
    "rest": (("forward",), ("forward", "draft")),
    "forward": (("rest",), ("rest", "draft")),
}


def declared_part(implementation: str | None) -> str | None:
    """The part of the step a candidate's change declares (its swap's `part`) from its proof
    label ('medusa-proposer:optimized'); None for a patch, an overlay or no swap. The same
    choice in both arms (an A/A) keeps the swap's part: what is adjusted for is where the
    swapped code runs."""
    name, sep, _choice = (implementation or "").partition(":")
    swap = SWAPS.get(name) if sep else None
    return swap.part if swap is not None else None


def covariate_of(part: str | None) -> tuple[tuple[str, ...], tuple[str, str]]:
    """(the covariate's parts, the checked pair) for a change whose own part is `part` (a key
    of config.scenario.PART_ROWS, or None: not declared)."""
    return _PLAN.get(part, _PLAN[None])


@dataclass(frozen=True)
class Fit:
    """One ANCOVA fit on the log scale: the delta at covariate 0 and its standard error."""

    est: float
    se: float
    df: float
    theta: float
    removed: float  # share of the blocks' variance the covariate explains
    error_unit: str
    error_sd: float
    error_n: int

    def interval(self) -> tuple[float, float]:
        half = _t(self.df, 1 - ALPHA / 2) * self.se
        return self.est - half, self.est + half

    def p_value(self) -> float:
        from scipy import special

        return float(2 * special.stdtr(self.df, -abs(self.est / self.se)))


@dataclass(frozen=True)
class Adjustment:
    """The adjusted delta, the checks of its assumption and the bias they leave room for."""

    fit: Fit
    units: int
    covariate: Check  # the covariate's own delta (95%; the probe's 99%)
    contrast: Check | None  # the checked pair's ratio, 90% (the equivalence test's); None: probe
    widen: float  # |theta| * share * |z|: added to each side of the interval
    withdrawn: Withdrawal | None  # why the row is withdrawn; None: shown

    def interval(self) -> tuple[float, float]:
        low, high = self.fit.interval()
        return low - self.widen, high + self.widen

    def p_value(self) -> float:
        """The p-value of the widened interval: the estimate beyond the widening, in se."""
        from scipy import special

        beyond = max(0.0, abs(self.fit.est) - self.widen) / self.fit.se
        return float(2 * special.stdtr(self.fit.df, -beyond))


def _mean_check(v: np.ndarray, launch: np.ndarray, level: float) -> Check:
    """Mean of block differences with its t interval on the design's unit: blocks in one
    launch, launch means with several (as analysis.stats._one_engine)."""
    means = _launch_means(v, launch)
    unit = v if len(means) == 1 else means
    mean = float(unit.mean())
    half = _t(len(unit) - 1.0, 1 - (1 - level) / 2) * _sd(unit) / math.sqrt(len(unit))
    return Check(mean, mean - half, mean + half, level)


def _launch_means(v: np.ndarray, launch: np.ndarray) -> np.ndarray:
    _, inv = np.unique(launch, return_inverse=True)
    inv = inv.reshape(-1)
    return np.bincount(inv, v) / np.bincount(inv)


def _demeaned(v: np.ndarray, launch: np.ndarray) -> np.ndarray:
    _, inv = np.unique(launch, return_inverse=True)
    inv = inv.reshape(-1)
    return v - (np.bincount(inv, v) / np.bincount(inv))[inv]


def fit(d: np.ndarray, x: np.ndarray, launch: np.ndarray, robust: bool = False) -> Fit | None:
    """ANCOVA of block differences d on x (launch by launch): the delta at x = 0. One launch:
    d = delta + theta x + e, df n - 2. Several: theta from within the launches, the error
    term from the spread of the launches' adjusted means (the launch x arm interaction in
    it), df L - 1. `robust` (the primary row summarised its blocks stall-robustly): the
    adjusted blocks d - theta x are summarised as it does, by 20% trimmed means (Yuen), one
    degree of freedom fewer for theta. None: too few blocks, or x constant."""
    n, big_l = len(d), len(np.unique(launch))
    if n - big_l < 3:
        return None
    dt, xt = _demeaned(d, launch), _demeaned(x, launch)
    sxx, sdd = float(np.dot(xt, xt)), float(np.dot(dt, dt))
    if not (sxx > 0 and sdd > 0):
        return None
    theta = float(np.dot(xt, dt)) / sxx
    resid = dt - theta * xt
    removed = 1.0 - float(np.dot(resid, resid)) / sdd
    adjusted = d - theta * x
    if big_l == 1:
        s2 = float(np.dot(resid, resid)) / (n - 2)
        if robust:
            est, se_t, df_t = trimmed(adjusted)
            if se_t is not None and df_t is not None and df_t > 1:
                # theta is estimated too: its error, carried to x = 0, adds x-bar^2 var(theta),
                # as least squares' 1/n + x-bar^2/sxx does (a weak covariate's theta is loose:
                # with the probe, 1000 A/A trials gave 5.6% false positives, 5.8% without it).
                se_t = math.sqrt(se_t**2 + float(x.mean()) ** 2 * s2 / sxx)
                return Fit(est, se_t, df_t - 1.0, theta, removed, "block", se_t * math.sqrt(n), n)
        se = math.sqrt(s2 * (1 / n + float(x.mean()) ** 2 / sxx))
        return Fit(float(adjusted.mean()), se, n - 2.0, theta, removed, "block", math.sqrt(s2), n)
    _, inv = np.unique(launch, return_inverse=True)
    inv = inv.reshape(-1)
    m_l = (
        np.array([trimmed(adjusted[inv == j])[0] for j in range(big_l)])
        if robust
        else _launch_means(adjusted, launch)
    )
    sd = _sd(m_l)
    return Fit(
        float(m_l.mean()), sd / math.sqrt(big_l), big_l - 1.0, theta, removed, "launch", sd, big_l
    )


def adjust(
    d: np.ndarray,
    x: np.ndarray,
    a: np.ndarray | None,
    b: np.ndarray | None,
    launch: np.ndarray,
    share: float = 1.0,
    settle: bool = True,
    robust: bool = False,
    level: float = 1 - ALPHA,
) -> Adjustment | None:
    """The ANCOVA estimate from block differences (log scale, time order within each launch):
    d of the throughput, x of the covariate, a and b of the checked pair (None: the covariate
    is the speed probe, which no change touches, so no pair is checked and nothing widened);
    `share`: the larger of the pair's shares of the covariate (1 where it is one part);
    `level`: that of the covariate's own check. Each launch's settling blocks are cut as the
    primary row cuts them (MSER on d; not without `settle`). None: too few blocks for an
    interval. `robust`: see fit."""
    keep = np.ones(len(d), dtype=bool)
    if settle:
        for j in np.unique(launch):
            idx = np.flatnonzero(launch == j)
            keep[idx[: warmup_cut(d[idx], WARMUP_P, WARMUP_MARGIN)]] = False
    d, x, launch = d[keep], x[keep], launch[keep]
    found = fit(d, x, launch, robust)
    if found is None:
        return None
    contrast = None if a is None or b is None else _mean_check((a - b)[keep], launch, 1 - 2 * ALPHA)
    return Adjustment(
        found,
        len(d),
        _mean_check(x, launch, level),
        contrast,
        0.0 if contrast is None else abs(found.theta) * share * abs(contrast.mean),
        None,
    )


def _withdrawal(
    a: Adjustment, pair: tuple[str, str] | None, pair_first: bool = False
) -> Withdrawal | None:
    """Why the row is withdrawn; None: the assumption held. `pair_first`: the pair's reason
    before the covariate's where both checks failed (the probe over its twin, free of the
    machine's speed, says more than the probe's own delta)."""
    c = a.contrast
    outside = (
        None
        if c is None or max(abs(c.low), abs(c.high)) <= EQUIVALENCE_MARGIN
        else Withdrawal(c, pair, EQUIVALENCE_MARGIN)
    )
    if outside is not None and pair_first:
        return outside
    if a.covariate.moved():
        return Withdrawal(a.covariate)
    return outside


def _blocks(
    passes: pd.DataFrame, baseline: str, candidate: str, columns: list[str]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Block differences (candidate mean minus baseline mean of the log values) of each column,
    over the blocks where both arms have every column positive: (diffs[n, k], launch[n]),
    blocks in launch then block order."""
    frame = passes[passes["variant"].isin([baseline, candidate])]
    if frame.empty or any(c not in frame for c in columns) or frame["block"].isna().any():
        return None
    values = frame[columns].to_numpy(dtype=float)
    ok = np.all(np.isfinite(values) & (values > 0), axis=1)
    frame = frame[ok]
    logs = pd.DataFrame(np.log(values[ok]), columns=columns, index=frame.index)
    logs["launch"], logs["block"] = frame["launch"], frame["block"]
    logs["arm"] = np.where(frame["variant"] == candidate, "c", "b")
    means = logs.groupby(["launch", "block", "arm"], sort=True)[columns].mean().unstack("arm")
    if means.empty or "b" not in means.columns.get_level_values(1):
        return None
    diff = (means.xs("c", axis=1, level=1) - means.xs("b", axis=1, level=1)).dropna()
    if diff.empty:
        return None
    return diff[columns].to_numpy(), diff.index.get_level_values("launch").to_numpy()


# The speed probe's own check: its delta carries the whole machine's speed (it is as noisy as
# the primary row), so a 95% check would withdraw the row in 5% of A/As exactly where the speed
# moved the arms apart, and the primary row read instead is then significant about half the
# time (the row as read: 7.8% false positives, benchmarks/adjusted_stress.py --probe). At 99%
# that selection costs half a point; a change that slows the probe itself by much is still
# caught, and by little is the assumption the row states.
PROBE_CHECK_LEVEL = 0.99
PROBE_COLUMN = "probe_us_per_step"  # harness.results.metrics: the speed probe's time a step
PROBE_NAME = "speed probe"
# The probe over its twin (harness.engine.twin, the same loop beside it in another process),
# a pass's geometric mean of the pairs' clipped ratios: the machine's speed cancels in it.
TWIN_COLUMN = "probe_over_twin"
TWIN_NAME = "its twin in another process"

# An adjustment, the covariate's name, and the pair its check reads (None: the probe's).
_Found = tuple[Adjustment, str, tuple[str, str] | None]


def _carried(passes: pd.DataFrame, baseline: str, candidate: str, column: str) -> bool:
    """Whether every pass of both arms carries `column` (PROBE_COLUMN: the scenario's speed
    probe; TWIN_COLUMN: its twin beside it, harness.engine.twin)."""
    if column not in passes:
        return False
    arms = passes[passes["variant"].isin([baseline, candidate])]
    return bool(len(arms)) and bool((arms[column].fillna(0.0) > 0).all())


def _probe_fit(
    passes: pd.DataFrame, baseline: str, candidate: str, part: str | None, robust: bool
) -> _Found | None:
    """The adjustment by the speed probe, withdrawn where its own delta moved at
    PROBE_CHECK_LEVEL. Where its twin ran beside every probe (the same loop at the same moment
    in a process of its own, harness.engine.twin), the probe over its twin, in which the
    machine's speed cancels, is the pair checked: a change that slowed the probe itself (what
    it leaves in the worker's interpreter or core) moves it, and the row is widened by the bias
    that would cause, or withdrawn past the margin. Without the twin, nothing widens."""
    twinned = _carried(passes, baseline, candidate, TWIN_COLUMN)
    columns = ["output_throughput", PROBE_COLUMN, *([TWIN_COLUMN] if twinned else [])]
    found = _blocks(passes, baseline, candidate, columns)
    if found is None:
        return None
    diffs, launch = found
    ratio = diffs[:, 2] if twinned else None  # the pair: the probe over its twin, against 1
    flat = np.zeros(len(diffs)) if twinned else None
    adjusted = adjust(
        diffs[:, 0], diffs[:, 1], ratio, flat, launch, robust=robust, level=PROBE_CHECK_LEVEL
    )
    names = (PROBE_NAME, TWIN_NAME) if twinned else None
    return None if adjusted is None else (adjusted, PROBE_NAME, names)


def _parts_fit(
    passes: pd.DataFrame, baseline: str, candidate: str, part: str | None, robust: bool
) -> _Found | None:
    """The adjustment by the step parts the change leaves alone, with its pair checked."""
    parts, pair = covariate_of(part)
    cols = [PART_COLUMNS[p][0] for p in parts]
    if any(c not in passes for c in {*cols, *(PART_COLUMNS[p][0] for p in pair)}):
        return None
    frame = passes.assign(_covariate=passes[cols].sum(axis=1, min_count=len(cols)))
    columns = ["output_throughput", "_covariate", *(PART_COLUMNS[p][0] for p in pair)]
    found = _blocks(frame, baseline, candidate, columns)
    if found is None:
        return None
    diffs, launch = found
    base = frame[frame["variant"] == baseline]
    means = [float(base[PART_COLUMNS[p][0]].mean()) for p in pair]
    share = max(means) / sum(means) if len(parts) == 2 and sum(means) > 0 else 1.0
    adjusted = adjust(
        diffs[:, 0], diffs[:, 1], diffs[:, 2], diffs[:, 3], launch, share, robust=robust
    )
    if adjusted is None:
        return None
    names = (PART_COLUMNS[pair[0]][1], PART_COLUMNS[pair[1]][1])
    covariate = " + ".join(PART_COLUMNS[p][1] for p in parts) + " (time per step)"
    return adjusted, covariate, names


def adjusted_row(
    passes: pd.DataFrame,
    baseline: str,
    candidate: str,
    part: str | None,
    design: Design,
    robust: bool = False,
) -> MetricRow | None:
    """The speed-adjusted output-throughput row of `candidate` (its own part `part`), or None
    where there is nothing to adjust (launch-per-arm: no blocks; no step times). `robust`: the
    primary row summarised its blocks stall-robustly, and so does this one. A row whose
    assumption failed its check is kept, without a delta, its note saying why."""
    if design != "one-engine" or passes.empty:
        return None
    probed = _carried(passes, baseline, candidate, PROBE_COLUMN)
    found = (_probe_fit if probed else _parts_fit)(passes, baseline, candidate, part, robust)
    if found is None:
        return None
    adjusted, covariate, names = found
    adjusted = replace(adjusted, withdrawn=_withdrawal(adjusted, names, pair_first=probed))
    b = passes.loc[passes["variant"] == baseline, "output_throughput"].to_numpy(dtype=float)
    c = passes.loc[passes["variant"] == candidate, "output_throughput"].to_numpy(dtype=float)
    est = estimate_of(adjusted, b, c, robust)
    value = float(b.mean()) * (1.0 + est.delta) if math.isfinite(est.delta) else math.nan
    facts = SpeedAdjustment(
        covariate,
        part,
        adjusted.units,
        adjusted.fit.theta,
        adjusted.fit.removed,
        adjusted.widen,
        adjusted.withdrawn,
        probe=probed,
        twin=probed and names is not None,
        contrast=adjusted.contrast,
    )
    return MetricRow(KEY, LABEL, True, float(b.mean()), value, est, adjustment=facts)


def estimate_of(
    a: Adjustment, base: np.ndarray, cand: np.ndarray, robust: bool = False
) -> DeltaEstimate:
    """The row's DeltaEstimate: the fit with its widened interval, and a p-value and MDE
    consistent with it; no delta when withdrawn."""
    f = a.fit
    common = {
        "kind": "relative",
        "cv_baseline": coefficient_of_variation(base),
        "cv_candidate": coefficient_of_variation(cand),
        "noisy": False,
        "n_baseline": len(base),
        "n_candidate": len(cand),
        "design": "one-engine",
        "units": a.units,
        "df": f.df,
        "error_unit": f.error_unit,
        "error_sd": f.error_sd,
        "error_n": f.error_n,
    }
    if a.withdrawn is not None:
        return DeltaEstimate(
            delta=math.nan,
            ci_low=None,
            ci_high=None,
            p_value=None,
            test=None,
            significant=False,
            mde=None,
            note="withdrawn: its assumption failed its check",
            **common,  # type: ignore[arg-type]
        )
    low, high = a.interval()
    p = a.p_value()
    mde = (_t(f.df, 1 - ALPHA / 2) + _t(f.df, POWER)) * f.se + a.widen
    return DeltaEstimate(
        delta=math.expm1(f.est),
        ci_low=math.expm1(low),
        ci_high=math.expm1(high),
        p_value=p,
        test="ANCOVA on blocks, 20% trimmed (speed-adjusted)"
        if robust
        else "ANCOVA on blocks (speed-adjusted)",
        significant=p < ALPHA and (low > 0 or high < 0),
        mde=math.expm1(mde),
        se=f.se,
        robust=robust,
        **common,  # type: ignore[arg-type]
    )
