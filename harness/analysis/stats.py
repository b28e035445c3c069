"""Uncertainty for A/B deltas: the independent unit, its interval, test, noise and minimum
detectable effect (numpy/scipy), validated by A/A and coverage simulations in tests/unit.

Passes inside one engine launch share that launch's noise, so a pass is never the unit:
- launch-per-arm: each launch runs one arm; the unit is the launch (paired by round).
- one-engine: each launch hosts both arms in ABBA/BAAB blocks; the unit is the block difference,
  and with several launches the launch x arm interaction enters the error term.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import special as spsp

from harness.analysis.looks import ALPHA as ALPHA
from harness.analysis.looks import PLAN_EARLY_ALPHA as PLAN_EARLY_ALPHA
from harness.analysis.looks import PLAN_EARLY_TOTAL as PLAN_EARLY_TOTAL
from harness.analysis.looks import PLAN_FIRST_EARLY_LOOK as PLAN_FIRST_EARLY_LOOK
from harness.analysis.looks import plan_alpha as plan_alpha
from harness.analysis.looks import plan_rule as plan_rule
from harness.config.scenario import PRECISION_MIN_BLOCKS as PRECISION_MIN_BLOCKS

POWER = 0.8
NOISE_CV = 0.05  # an arm whose passes vary by more than 5% cannot resolve ~1% effects

# Precision on demand (one-engine, one launch): the worker (harness.engine.schedule) adds blocks
# of the plan's order, each oriented at random, and looks every PRECISION_LOOK_EVERY blocks once
# PRECISION_MIN_BLOCKS (and the planned blocks) exist, stopping when the MDE reaches the target
# (or, precision until: gates, when every gate can decide), at the scenario's
# precision.max_blocks, or when the budget has no room for another block. The rule reads only
# the sample variance, never the sign of the estimate, so the t interval at the stop keeps its
# coverage (Stein 1945; Chow & Robbins 1965) but for one effect: a stop selects a small
# variance, which a first look after too few blocks turns into false positives. Its rates,
# simulated through the shipped scheduler, are tests/unit/test_stats_stress.py's output and
# docs/statistics.md's table (no figure is copied here, where it would drift).
# PRECISION_MIN_BLOCKS lives with the scenario's precision settings (config.scenario), so
# `plan` can read it without this module's scipy.
PRECISION_LOOK_EVERY = 4

# Warm-up checked, not assumed (one-engine): the leading blocks of each launch whose difference
# between the arms is still settling are cut by MSER (White 1997: the cut k that minimises
# the squared standard error of the mean of what remains, sum((d - mean)^2) / (n - k)^2),
# looked for in the first half only: hitting that cap is named. A trend in the arms'
# difference that remains is tested (slope, t at 5%) and named.
WARMUP_MIN_BLOCKS = 8  # fewer blocks: no cut is looked for
WARMUP_CAP = 0.5  # of a launch's blocks
WARMUP_P = 0.001  # a cut counts only when the cut blocks differ from the rest this clearly
WARMUP_MARGIN = 2.0  # ... and then cuts as far again (MSER leaves a settling's tail)
# The worker's warm-up check (stopping early costs validity, late only time).
WARMUP_CHECK_P = 0.2
WARMUP_TREND_BLOCKS = 16  # a slow climb shows as a trend over about this many blocks
# Stalls: a pass whose value sits further from its (launch, arm) median than both a factor of
# 2 and 5 robust sds (1.4826 * MAD) of the log values. With stalls the block differences are
# summarised by a 20% trimmed mean with Yuen's (Tukey-McLaughlin) interval, unless one arm
# stalls significantly more than the other: that is the change's cost, reported, not trimmed.
STALL_FACTOR = math.log(2.0)
STALL_MADS = 5.0
TRIM = 0.2
# How clear a one-arm excess of stalls must be before the plain mean (the change's own cost)
# replaces the stall-robust summary. At 5% the rule fired by chance in A/A runs with stalls
# alike in both arms, and the plain mean it then chose was significant in 32 of 34 such runs:
# 7.3% A/A false positives at 1 stall in 20 passes over 120 blocks (the statistics audit, 1000
# trials). An excess at 5% is still named; the estimator switches only at this level. Through
# the shipped scheduler (tests/unit/test_stats_stress.py; 1 stall in 20 passes, 120 blocks):
# at 5%, 7.5% A/A (600 trials); at 1%, 4.8%, and stalls in the candidate alone still switch
# in 88 of 100 runs; at 0.1%, 4.5%, but only 55 of 100.
STALL_EXCESS_P = 0.01

# Values derived from identical integer counts (acceptance under greedy decoding) can still
# differ in their last bits: the mean of 12 passes of one float is not always that float (two
# real runs with the same counts stored 31.62939297124602 and 31.629392971246013). Where the
# counts themselves are not at hand (a stored summary, a metric without counts), two such
# values are the same when they agree to this relative tolerance: a million times float
# rounding (~1e-16 an operation), a thousand times below one token in a million changing.
EXACT_RTOL = 1e-9

Stat = Literal["mean", "median", "p99"]
DeltaKind = Literal["relative", "points"]
Design = Literal["one-engine", "launch-per-arm"]


@dataclass(frozen=True)
class VarianceComponents:
    """Standard deviations on the analysis scale (log for relative metrics, the unit for points)."""

    between_launches: float | None  # sd of (launch, arm) means around their arm's mean, pooled
    between_passes: float | None  # sd of passes within a launch and arm, pooled
    unit_sd: float | None  # sd of one unit's difference: a block, or a round (paired launches)
    launch_x_arm: float | None  # one-engine, >= 2 launches: sd of the launch x arm interaction


@dataclass(frozen=True)
class WarmupCut:
    """Leading blocks left out while the arms' difference was still settling (MSER)."""

    blocks: int


@dataclass(frozen=True)
class WarmupCapped:
    """A launch's warm-up cut hit its cap (WARMUP_CAP of its blocks): the arms' difference
    settles late or drifts through the launch."""

    cut: int
    blocks: int


@dataclass(frozen=True)
class Trend:
    """The arms' difference still trends after the warm-up (slope per 10 blocks on the
    analysis scale, and its p-value)."""

    per_10_blocks: float
    p: float


@dataclass(frozen=True)
class Stalls:
    """Stalled passes (far from their arm's median) per arm; `more`, the arm that stalls
    more, at one-arm-excess p-value `excess_p`; `robust`: the blocks were summarised
    stall-robustly (20% trimmed, Yuen), which leaves the stalls' cost out, else the excess
    is the change's own cost, kept in the estimate."""

    baseline: int
    candidate: int
    more: str  # "baseline" or "candidate"
    excess_p: float
    robust: bool


@dataclass(frozen=True)
class PlainMean:
    """A few blocks differ from the rest, which are all equal: every block kept and
    summarised by the plain mean (cutting or trimming them would leave no spread)."""


# What the data showed beyond noise (harness.present.tables words each).
Finding = WarmupCut | WarmupCapped | Trend | Stalls | PlainMean


@dataclass(frozen=True)
class DeltaEstimate:
    """A candidate-vs-baseline delta with its uncertainty. Relative deltas are fractions
    (0.01 = +1%), point deltas are in the metric's own unit. `units`: blocks (one-engine),
    rounds (paired launches) or launches (unpaired); `df` comes from those units, never from
    passes (one-engine with several launches: from the launches)."""

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
    design: str | None = None
    units: int = 0
    df: float | None = None
    se: float | None = None  # standard error on the analysis scale
    components: VarianceComponents | None = None
    dropped_units: int = 0
    # What the interval's error term is made of: `error_n` units of `error_unit` ("block",
    # "round" or "launch") whose differences have sd `error_sd` (se = error_sd / sqrt(n)), so
    # advice on "more units" and forecasts add the units that actually narrow the interval.
    error_unit: str | None = None
    error_sd: float | None = None
    error_n: int = 0
    # What the data showed beyond noise, for the notes under the table: a warm-up cut, a
    # trend left in the arms' difference, stalled passes per arm.
    findings: tuple[Finding, ...] = ()
    warmup_blocks: int = 0  # leading blocks (per launch, summed) left out as warm-up
    stalls: tuple[int, int] = (0, 0)  # stalled passes: (baseline, candidate)
    robust: bool = False  # the stall-robust (20% trimmed, Yuen) estimator was used
    # Decided from integer counts identical in every pass of each arm (acceptance under
    # greedy decoding: harness.analysis.compare): the delta is the values' own difference.
    exact: bool = False
    # The two-sided error rate the interval, the test and the MDE are at: ALPHA for one run;
    # runs_alpha(runs) when `runs` (> 1) runs are combined (anytime-valid across re-runs).
    alpha: float = ALPHA
    runs: int = 1
    # Every unit showed the same difference (acceptance equal in every pass): no interval,
    # and the delta is known exactly.
    no_spread: bool = False

    @property
    def known_exactly(self) -> bool:
        """Identical in every unit, or in every pass of both arms (a count that greedy
        decoding makes deterministic, e.g. acceptance): the delta has no uncertainty, even
        where the design gives no interval (one launch per arm). Without counts, 'identical'
        is up to EXACT_RTOL (a mean of equal values may round apart)."""
        if self.exact or self.no_spread:
            return True
        return (
            self.n_baseline > 0
            and self.n_candidate > 0
            and math.isfinite(self.delta)
            and all(
                cv is not None and cv <= EXACT_RTOL for cv in (self.cv_baseline, self.cv_candidate)
            )
        )


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order: a test is significant at
    family-wise rate alpha where its adjusted p-value is below alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def same_exact(a: float, b: float, scale: float = 0.0) -> bool:
    """Two values derived from the same integer counts, up to rounding: they differ by at
    most EXACT_RTOL of the larger magnitude, or of `scale` (a difference of values that
    large: a delta in points between rates near 30 may round to 1e-15, not 0)."""
    return abs(a - b) <= EXACT_RTOL * max(abs(a), abs(b), scale)


def coefficient_of_variation(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    mean = float(values.mean()) if len(values) >= 2 else 0.0
    return None if mean == 0 else _sd(values, mean) / abs(mean)


def _sd(values: np.ndarray, mean: float | None = None) -> float:
    """Sample standard deviation (ddof 1) without np.std's overhead: simulations call it a lot."""
    mean = float(values.mean()) if mean is None else mean
    return math.sqrt(float(np.dot(values - mean, values - mean)) / (len(values) - 1))


def _significant(p: float | None, low: float | None, high: float | None) -> bool:
    """Both the test and the interval must agree: conservative on purpose."""
    if p is None or low is None or high is None:
        return False
    return p < ALPHA and (low > 0 or high < 0)


# Re-running and combining (gate --combine after every run): the first run's own verdict is
# today's fixed-sample test at ALPHA; every later look (2, 3, ... runs combined, however many)
# spends a share of RUNS_ALPHA, alpha_k = RUNS_ALPHA / (k (k - 1)), which sums to RUNS_ALPHA
# over k = 2, 3, ... (an alpha-spending sequence for unboundedly many looks; Bonferroni over
# the looks, so valid whatever their correlation and whenever one stops). The whole policy
# "combine after every run until significant" is then false-positive at most
# ALPHA + RUNS_ALPHA = 6%, for any number of runs. Measured: benchmarks/combine_rerun.py.
RUNS_ALPHA = 0.01


def runs_alpha(runs: int, planned: int | None = None) -> float:
    """Two-sided error rate of the interval over `runs` combined runs: ALPHA for one run,
    RUNS_ALPHA / (runs (runs - 1)) for the runs-th look of a sequence of re-runs; with a
    plan of `planned` runs, its look's (plan_alpha)."""
    if planned is not None:
        return plan_alpha(runs, planned)
    if runs <= 1:
        return ALPHA
    return RUNS_ALPHA / (runs * (runs - 1))


def across_runs(
    est: DeltaEstimate, runs: int, alpha: float | None = None, planned: int | None = None
) -> DeltaEstimate:
    """`est` (an estimate over `runs` combined runs) with its interval, test and MDE at
    runs_alpha(runs, planned): anytime-valid across re-runs, or the look of a planned
    series. The p-value is adjusted to the ALPHA scale (raw p * ALPHA / alpha, at most 1),
    so every downstream 5% rule (stars, Holm, the gate's one-sided 2.5%) applies unchanged.
    One unplanned run, or no interval: unchanged. `alpha`: another error rate for this look
    (benchmarks compare spending rules with it)."""
    if (
        (runs <= 1 and planned is None and alpha is None)
        or est.se is None
        or est.df is None
        or est.p_value is None
        or est.ci_low is None
        or not est.se > 0
    ):
        return est
    alpha = runs_alpha(runs, planned) if alpha is None else alpha
    if alpha <= 0:  # a look of a plan that gives no verdict
        return replace(
            est,
            ci_low=None,
            ci_high=None,
            p_value=1.0,
            mde=None,
            alpha=0.0,
            runs=runs,
            significant=False,
            note=f"no verdict before run {PLAN_FIRST_EARLY_LOOK} of the plan",
        )
    relative = est.kind == "relative"
    centre = math.log1p(est.delta) if relative else est.delta
    t_crit = _t(est.df, 1 - alpha / 2)
    low, high = centre - t_crit * est.se, centre + t_crit * est.se
    mde = (t_crit + _t(est.df, POWER)) * est.se
    if relative:
        low, high, mde = math.expm1(low), math.expm1(high), math.expm1(mde)
    p = min(1.0, est.p_value * ALPHA / alpha)
    return replace(
        est,
        ci_low=low,
        ci_high=high,
        p_value=p,
        mde=mde,
        alpha=alpha,
        runs=runs,
        significant=_significant(p, low, high),
    )


def runs_estimate(
    deltas: list[float], kind: DeltaKind, planned: int | None = None
) -> DeltaEstimate | None:
    """The runs of one comparison combined from their stored deltas, each run one unit (a t
    over runs, df = runs - 1, so the interaction between runs and arms is in the error term;
    relative deltas on the log scale), its interval anytime-valid across re-runs (across_runs
    at runs_alpha(runs)), or with a plan of `planned` runs the plan's look (its first
    `planned` runs at most: no later look is valid): what `history` prints for a comparison
    run several times. None with fewer than 2 finite deltas (one run keeps its own
    fixed-sample interval) or no spread."""
    relative = kind == "relative"
    finite = [d for d in deltas if math.isfinite(d) and (d > -1 or not relative)]
    finite = finite if planned is None else finite[:planned]
    x = np.log1p(np.asarray(finite, dtype=float)) if relative else np.asarray(finite, dtype=float)
    n = len(x)
    if n < 2:
        return None
    centre, sd = float(x.mean()), _sd(x)
    if not sd > 1e-12 * max(1.0, float(np.max(np.abs(x)))):
        return None
    se, df = sd / math.sqrt(n), n - 1.0
    t_crit = _t(df, 1 - ALPHA / 2)
    low, high = centre - t_crit * se, centre + t_crit * se
    p = float(2 * spsp.stdtr(df, -abs(centre / se)))
    mde = _mde_scale(df) * se
    if relative:
        low, high, mde = math.expm1(low), math.expm1(high), math.expm1(mde)
    est = DeltaEstimate(
        kind,
        math.expm1(centre) if relative else centre,
        low,
        high,
        p,
        "t (runs)",
        _significant(p, low, high),
        mde,
        None,
        None,
        False,
        0,
        0,
        design="runs",
        units=n,
        df=df,
        se=se,
        error_unit="run",
        error_sd=sd,
        error_n=n,
    )
    return across_runs(est, n, planned=planned)


def runs_phrase(runs: int, planned: int | None = None) -> str:
    """What a combined interval is, for the output: which interval, how many looks."""
    if planned is not None:
        look = min(runs, planned)
        alpha = plan_alpha(look, planned)
        which = f"look {look} of {planned} planned (planned_runs)"
        if alpha <= 0:
            return f"{which}, no verdict yet ({plan_rule(planned)})"
        last = ", the last" if look == planned else ""
        return (
            f"{which}, {100 * (1 - alpha):.2f}% interval{last} ({plan_rule(planned)}; the "
            f"plan's verdict is false-positive at most {100 * ALPHA:g}% wherever it stops)"
        )
    if runs <= 1:
        return "fixed-sample 95% interval (one run, one look)"
    return (
        f"anytime-valid across re-runs: look {runs} of any number, "
        f"{100 * (1 - runs_alpha(runs)):.2f}% interval (the first run's own verdict at "
        f"{100 * ALPHA:g}%, every later combination together {100 * RUNS_ALPHA:g}%)"
    )


def _t(df: float, q: float) -> float:
    # scipy.special rather than scipy.stats: the simulations call this millions of times.
    return float(spsp.stdtrit(df, q))


def _mde_scale(df: float) -> float:
    """Multiple of the standard error detectable at 80% power, alpha 0.05 two-sided."""
    return _t(df, 1 - ALPHA / 2) + _t(df, POWER)


def blocks_needed(
    unit_sd: float, target_mde: float, kind: DeltaKind, max_units: int = 100_000
) -> int | None:
    """Fewest independent units (blocks of one launch, or paired rounds: df = n - 1) whose MDE
    is within `target_mde` (delta scale: 0.02 = 2% for relative); None beyond `max_units`."""
    target = math.log1p(target_mde) if kind == "relative" else target_mde
    if not (math.isfinite(unit_sd) and unit_sd >= 0 and target > 0):
        return None

    def ok(n: int) -> bool:
        return _mde_scale(n - 1) * unit_sd / math.sqrt(n) <= target

    if not ok(max_units):
        return None
    low, high = 2, max_units  # the MDE falls with n: bisect for the first n that reaches it
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low


def units_for_halfwidth(
    unit_sd: float,
    halfwidth: float,
    max_units: int = 100_000,
    alpha: Callable[[int], float] | None = None,
) -> int | None:
    """The smallest number of units whose 95% t interval (df = n - 1) is at most `halfwidth`
    wide on each side, on the analysis scale; None when out of reach. `alpha`: the interval's
    error rate at n units where it is not ALPHA (runs combined: a later look spends less)."""
    if not (unit_sd > 0 and halfwidth > 0):
        return None

    def half(n: int) -> float:
        level = ALPHA if alpha is None else alpha(n)
        return _t(n - 1.0, 1 - level / 2) * unit_sd / math.sqrt(n)

    lo, hi = 2, max_units
    if half(hi) > halfwidth:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if half(mid) <= halfwidth:
            hi = mid
        else:
            lo = mid + 1
    return lo


def precision_reached(est: DeltaEstimate, target_mde: float, min_df: float = 0.0) -> bool:
    """The precision-on-demand stopping test: the MDE alone decides, never the estimate, once
    the estimate has `min_df` degrees of freedom. A stop selects a small sample variance, and
    the fewer its degrees of freedom the more that selection biases it: the scheduler asks for
    the first look's (PRECISION_MIN_BLOCKS - 1) whatever the estimator, so a stall-robust
    (20% trimmed, Yuen) summary, whose df are 60% of its blocks', waits for blocks enough.
    At a 2% target with 1 stall in 20 passes in either arm, stopping on blocks alone gave 7.20%
    A/A false positives (2000 trials; tests/unit/test_stats_stress.py)."""
    return est.mde is not None and est.mde <= target_mde and (est.df is None or est.df >= min_df)


@dataclass(frozen=True)
class _Fit:
    """The unit-level analysis of one design, on the analysis scale."""

    est: float
    se: float | None  # None: no interval
    df: float | None
    units: int
    unit_sd: float | None
    test: str | None
    note: str | None
    launch_x_arm: float | None = None
    error_unit: str | None = None  # what se is made of: error_sd / sqrt(error_n)
    error_sd: float | None = None
    error_n: int = 0
    trimmed: bool = False  # 20% trimmed means (Yuen), not means


def _pooled_sd(ss: float, df: float) -> float | None:
    return math.sqrt(ss / df) if df > 0 else None


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each (a, b) pair among the distinct pairs (sorted by a), and that pair's a."""
    if len(a) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    b0 = b - b.min()
    uniq, inverse = np.unique((a - a.min()) * (b0.max() + 1) + b0, return_inverse=True)
    return inverse.reshape(-1), uniq // (b0.max() + 1) + a.min()


def warmup_cut(
    d: np.ndarray, p_value: float = 0.001, margin: float = 1.0, own_spread: bool = True
) -> int:
    """MSER's truncation of a launch's block differences (in time order): how many leading
    blocks to leave out, at most WARMUP_CAP of them; 0 below WARMUP_MIN_BLOCKS.

    The cut counts only where the cut blocks differ from the rest at `p_value`, by Welch's t
    where the cut blocks spread more than the rest (each side its own spread), else by the
    rest's spread for both (`own_spread`=False: always the rest's, the eager test the
    worker's warm-up check uses, where a false alarm only warms longer). With the
    rest's spread alone, a head holding a stalled block or two (a part of the step 1.4x slow
    now and then: heavy tails, not a settling) passed at 0.1%, and MSER, which picks the cut
    that leaves the smallest spread, then left a rest whose variance was too small: in
    precision runs stopped on draft_per_forward (benchmarks/component_stress.py) the cut
    fired in 4.8% of A/A runs and 17% of those were significant (600 trials)."""
    n = len(d)
    if n < WARMUP_MIN_BLOCKS:
        return 0
    tail = d[::-1]
    m = np.arange(1, n + 1, dtype=float)  # length of the kept tail
    total, squares = np.cumsum(tail), np.cumsum(tail * tail)
    score = (squares - total * total / m) / (m * m)
    keep = np.arange(n - int(WARMUP_CAP * n), n + 1)  # tails the cap allows (k <= cap)
    k = int(n - keep[np.argmin(score[keep - 1])])
    if k == 0:
        return 0
    # MSER cuts something from pure noise too, and a cut chosen where the early blocks look
    # extreme narrows the interval of the rest: only a settling the data show clearly counts.
    head, rest = d[:k], d[k:]
    s_rest = _sd(rest)
    if not s_rest > 0:
        return k
    # The head's own spread only where it is the larger: two or three quiet blocks would
    # otherwise pass by their own small sample spread (a false cut on clean data).
    if own_spread and k >= 2 and _sd(head) > s_rest:
        v_head, v_rest = _sd(head) ** 2 / k, s_rest**2 / (n - k)
        se = math.sqrt(v_head + v_rest)
        df = (v_head + v_rest) ** 2 / (v_head**2 / (k - 1) + v_rest**2 / (n - k - 1))
    else:
        se, df = s_rest * math.sqrt(1 / k + 1 / (n - k)), n - k - 1.0
    t = (float(head.mean()) - float(rest.mean())) / se
    if float(2 * spsp.stdtr(df, -abs(t))) >= p_value:
        return 0
    # MSER stops where the settling's tail is small against one block's noise, but that
    # tail still biases the mean of many blocks: cut as far again (within the cap).
    return min(int(WARMUP_CAP * n), int(math.ceil(margin * k)))


def warmup_still_settling(d: np.ndarray, p_value: float = WARMUP_CHECK_P, confirm: int = 0) -> bool:
    """The worker's warm-up rule on the block differences so far (at least 8): still settling
    while the cut warmup_cut finds reaches its cap (the settling is not yet behind the first
    half), or while the last 16 blocks still trend (slope, t at `p_value`). Looser
    tests than the analysis's cut: warming too long costs time, never validity (the blocks
    measured after it are new data).

    `confirm` (blocks): settled only when the last 16 blocks were also free of a trend at
    least this many blocks earlier. A noisy climb looks flat over 16 blocks now and then; two
    flat windows `confirm` apart rarely both fall inside it. Precision runs use it: they stop
    after as few as 20 measured blocks, which a tail left in them biases most."""
    n = len(d)
    if n < WARMUP_MIN_BLOCKS:
        return False
    if warmup_cut(d, p_value, own_spread=False) >= int(WARMUP_CAP * n):
        return True
    # A slow climb is too gentle for any cut to see early: its trend over the recent half is.
    if _trending(d, p_value):
        return True
    return confirm > 0 and all(
        _trending(d[:m], p_value) for m in range(WARMUP_TREND_BLOCKS, n - confirm + 1)
    )


def _trending(d: np.ndarray, p_value: float) -> bool:
    """The last WARMUP_TREND_BLOCKS block differences trend (two-sided p below `p_value`);
    False with fewer."""
    if len(d) < WARMUP_TREND_BLOCKS:
        return False
    recent = _trend(d[-WARMUP_TREND_BLOCKS:])
    return recent is not None and recent[1] < p_value


def _trend(d: np.ndarray) -> tuple[float, float] | None:
    """Slope per block of d over its order, and its two-sided p (None: too few blocks)."""
    n = len(d)
    if n < 6:
        return None
    x = np.arange(n, dtype=float) - (n - 1) / 2
    slope = float(np.dot(x, d - d.mean()) / np.dot(x, x))
    resid = d - d.mean() - slope * x
    s2 = float(np.dot(resid, resid)) / (n - 2)
    if not s2 > 0:
        return None
    t = slope / math.sqrt(s2 / float(np.dot(x, x)))
    return slope, float(2 * spsp.stdtr(n - 2, -abs(t)))


def stalled(y: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """Passes (log values) far from their (launch, arm) cell's median: see STALL_MADS."""
    out = np.zeros(len(y), dtype=bool)
    for c in np.unique(cell):
        idx = cell == c
        if idx.sum() < 8:
            continue
        med = float(np.median(y[idx]))
        mad = 1.4826 * float(np.median(np.abs(y[idx] - med)))
        out[idx] = np.abs(y[idx] - med) > max(STALL_FACTOR, STALL_MADS * mad)
    return out


def _one_arm_excess(stalls: tuple[int, int], n_base: int, n_cand: int) -> float:
    """Two-sided binomial p that the stalls split between the arms as their passes do."""
    from scipy.stats import binomtest

    k = stalls[0] + stalls[1]
    return float(binomtest(stalls[1], k, n_cand / (n_base + n_cand)).pvalue) if k else 1.0


def trimmed(d: np.ndarray) -> tuple[float, float | None, float | None]:
    """20% trimmed mean of d, with Yuen's standard error (winsorised sd / ((1 - 2g) sqrt n))
    and df = n - 2g - 1; (mean, None, None) when too few values."""
    n = len(d)
    g = int(math.floor(TRIM * n))
    if n - 2 * g < 2:
        return float(d.mean()), None, None
    x = np.sort(d)
    mean = float(x[g : n - g].mean())
    w = np.clip(x, x[g], x[n - g - 1])
    se = _sd(w) / ((1 - 2 * g / n) * math.sqrt(n))
    return mean, se, float(n - 2 * g - 1)


def _launch_per_arm(cell_arm: np.ndarray, cell_round: np.ndarray, cell_mean: np.ndarray) -> _Fit:
    """The launch is the unit: compare launch means, paired by round when the rounds match."""
    lb, lc = cell_mean[~cell_arm], cell_mean[cell_arm]
    rb, rc = cell_round[~cell_arm], cell_round[cell_arm]
    rounds = sorted(set(rb.tolist()))
    if rounds == sorted(set(rc.tolist())) and len(rounds) >= 2:
        d = np.array([lc[rc == r].mean() - lb[rb == r].mean() for r in rounds])
        sd = _sd(d)
        return _Fit(
            float(d.mean()),
            sd / math.sqrt(len(d)),
            len(d) - 1.0,
            len(d),
            sd,
            "paired t (launches)",
            None,
            None,
            "round",
            sd,
            len(d),
        )
    est = float(lc.mean() - lb.mean())
    if len(lb) < 2 or len(lc) < 2:
        return _Fit(
            est,
            None,
            None,
            len(cell_mean),
            None,
            None,
            "one launch per arm: not estimable (add rounds)",
        )
    vb, vc = _sd(lb) ** 2, _sd(lc) ** 2
    se = math.sqrt(vb / len(lb) + vc / len(lc))
    denom = (vb / len(lb)) ** 2 / (len(lb) - 1) + (vc / len(lc)) ** 2 / (len(lc) - 1)
    df = se**4 / denom if denom > 0 else len(lb) + len(lc) - 2.0  # Welch-Satterthwaite
    # A round's difference is one baseline launch against one candidate launch: with R
    # launches per arm, se = sqrt(vb + vc) / sqrt(R), so the error's units are rounds.
    per_arm = min(len(lb), len(lc))
    return _Fit(
        est,
        se,
        df,
        len(cell_mean),
        math.sqrt(vb + vc),
        "Welch t (launches)",
        None,
        None,
        "round",
        se * math.sqrt(per_arm),
        per_arm,
    )


def _one_engine(
    d: np.ndarray, launch_of_block: np.ndarray, robust: bool = False, settle: bool = True
) -> tuple[_Fit, list[Finding], int]:
    """The block difference is the unit; with several launches their means carry the error.
    Each launch's leading blocks still settling are cut first (warmup_cut; not without
    `settle`). `robust`: 20% trimmed means (Yuen) instead of means. Returns the fit, findings
    and blocks cut."""
    launches, inv = np.unique(launch_of_block, return_inverse=True)
    inv = inv.reshape(-1)
    findings: list[Finding] = []
    keep = np.ones(len(d), dtype=bool)
    cut = 0
    for j in range(len(launches)):
        idx = np.flatnonzero(inv == j)
        k = warmup_cut(d[idx], WARMUP_P, WARMUP_MARGIN) if settle else 0
        keep[idx[:k]] = False
        cut += k
        if k and k >= int(WARMUP_CAP * len(idx)):
            findings.append(WarmupCapped(k, len(idx)))
    if cut:
        findings.insert(0, WarmupCut(cut))
    d, inv = d[keep], inv[keep]
    for j in range(len(launches)):
        found = _trend(d[inv == j])
        if found is not None and found[1] < ALPHA:
            findings.append(Trend(10 * found[0], found[1]))
            break
    n, big_l = len(d), len(launches)
    if big_l == 1:
        note = "one launch: launch x arm interaction not sampled"
        if n < 2:
            return (
                _Fit(
                    float(d.mean()), None, None, n, None, None, "fewer than 2 blocks: no interval"
                ),
                findings,
                cut,
            )
        sd = _sd(d)
        if robust:
            est, se, df = trimmed(d)
            if se is not None and df is not None:
                return (
                    _Fit(
                        est,
                        se,
                        df,
                        n,
                        sd,
                        "Yuen 20% trimmed (blocks)",
                        note,
                        None,
                        "block",
                        se * math.sqrt(n),
                        n,
                        trimmed=True,
                    ),
                    findings,
                    cut,
                )
        return (
            _Fit(
                float(d.mean()),
                sd / math.sqrt(n),
                n - 1.0,
                n,
                sd,
                "paired t (blocks)",
                note,
                None,
                "block",
                sd,
                n,
            ),
            findings,
            cut,
        )
    n_l = np.bincount(inv, minlength=big_l).astype(float)
    m_l = np.bincount(inv, d, minlength=big_l) / n_l
    sd_w = _pooled_sd(float(np.sum((d - m_l[inv]) ** 2)), float(n - big_l))
    tau = None
    if sd_w is not None:
        # Method of moments for the interaction variance (unbalanced one-way random effects).
        grand = float(np.sum(n_l * m_l)) / n
        ms_b = float(np.sum(n_l * (m_l - grand) ** 2)) / (big_l - 1)
        n0 = (n - float(np.sum(n_l**2)) / n) / (big_l - 1)
        tau = math.sqrt(max(0.0, (ms_b - sd_w**2) / n0))
    if robust:
        m_l = np.array([trimmed(d[inv == j])[0] for j in range(big_l)])
    # A launch mean carries its blocks' noise plus its launch x arm interaction, so the spread
    # of launch means is the random-effects error term whatever the interaction's size (df
    # L - 1). An F pretest (p < 0.10) falling back to the within-launch term was simulated: with
    # 2 launches it covers only 79-86% when the interaction is 1-3x a launch mean's block noise.
    s_l = _sd(m_l)
    test = "t (launch trimmed means of blocks)" if robust else "t (launch means of blocks)"
    return (
        _Fit(
            float(m_l.mean()),
            s_l / math.sqrt(big_l),
            big_l - 1.0,
            n,
            sd_w,
            test,
            "launch x arm interaction: error term from launches",
            tau,
            "launch",
            s_l,
            big_l,
            trimmed=robust,
        ),
        findings,
        cut,
    )


def arm_delta(
    values: np.ndarray,
    candidate: np.ndarray,
    launch: np.ndarray,
    round_: np.ndarray,
    block: np.ndarray,
    kind: DeltaKind,
    design: Design,
) -> DeltaEstimate:
    """Delta of a per-pass metric between the arms. Arrays hold one entry per pass: its value
    (NaN = missing), whether it is a candidate pass, its launch id, its round (pairs launches in
    launch-per-arm) and its ABBA block within the launch (one-engine)."""
    values = np.asarray(values, dtype=float)
    cand = np.asarray(candidate, dtype=bool)
    ids = [np.asarray(a).astype(np.int64) for a in (launch, round_, block)]
    if any(len(a) != len(values) for a in (cand, *ids)):
        raise ValueError("arm_delta: per-pass arrays differ in length")
    lid, rnd, blk = ids
    used = np.isfinite(values)
    # A relative delta lives on logs: a pass at zero (a stalled pass that produced nothing)
    # is left out like a missing one, dropping its block, instead of voiding the metric.
    nonpositive = int(np.sum(used & (values <= 0))) if kind == "relative" else 0
    if nonpositive:
        used &= values > 0
    dropped = 0
    binv, block_launch = _pairs(lid, blk)
    if design == "one-engine":
        # A block with an arm missing (passes discarded upstream) has no difference: drop it.
        k = len(block_launch)
        complete = (np.bincount(binv[used & ~cand], minlength=k) > 0) & (
            np.bincount(binv[used & cand], minlength=k) > 0
        )
        dropped = int(np.sum(~complete))
        used &= complete[binv]
    nb, nc = int(np.sum(used & ~cand)), int(np.sum(used & cand))
    cv_b = coefficient_of_variation(values[used & ~cand])
    cv_c = coefficient_of_variation(values[used & cand])
    noisy = any(cv is not None and cv > NOISE_CV for cv in (cv_b, cv_c))
    relative = kind == "relative"

    def no_interval(
        delta: float,
        note: str,
        fit: _Fit | None = None,
        components: VarianceComponents | None = None,
    ) -> DeltaEstimate:
        return DeltaEstimate(
            kind,
            delta,
            None,
            None,
            None,
            None,
            False,
            None,
            cv_b,
            cv_c,
            noisy,
            nb,
            nc,
            note,
            design,
            fit.units if fit else 0,
            fit.df if fit else None,
            0.0 if fit and fit.se is not None else None,
            components,
            dropped,
        )

    if nb == 0 or nc == 0:
        return no_interval(
            math.nan, "no data" if not nonpositive else "relative delta needs positive values"
        )
    # Relative deltas live on log values: ratios become differences, and the point estimate and
    # the interval are both expm1 of the same log-scale numbers.
    y = np.log(values[used]) if relative else values[used]
    arm, lid, rnd = cand[used], lid[used], rnd[used]

    # (launch, arm) cells: their means and the pass-to-pass spread inside them.
    cinv, _ = _pairs(lid, arm.astype(np.int64))
    cell_n = np.bincount(cinv).astype(float)
    cell_mean = np.bincount(cinv, y) / cell_n
    cell_arm = np.zeros(len(cell_n), dtype=bool)
    cell_arm[cinv] = arm
    between_passes = _pooled_sd(
        float(np.sum((y - cell_mean[cinv]) ** 2)), float(np.sum(cell_n - 1))
    )
    # Launch means around their arm's mean, pooled over the two arms.
    arm_mean = np.bincount(cell_arm, cell_mean) / np.bincount(cell_arm)
    spread = cell_mean - arm_mean[cell_arm.view(np.int8)]
    between_launches = _pooled_sd(float(np.dot(spread, spread)), len(cell_mean) - 2.0)

    # Stalls per arm; with any (and no one-arm excess), the stall-robust estimator.
    # (rates in points have no "slower": stalls are looked for on relative metrics only)
    stall = stalled(y, cinv) if relative else np.zeros(len(y), dtype=bool)
    stalls = (int(np.sum(stall & ~arm)), int(np.sum(stall & arm)))
    findings: list[Finding] = []
    robust = False
    if sum(stalls):
        excess = _one_arm_excess(stalls, int(np.sum(~arm)), int(np.sum(arm)))
        robust = excess >= STALL_EXCESS_P
        more = "candidate" if stalls[1] * np.sum(~arm) > stalls[0] * np.sum(arm) else "baseline"
        findings.append(Stalls(stalls[0], stalls[1], more, excess, robust))
    cut = 0
    if design == "launch-per-arm":
        cell_round = np.zeros(len(cell_n), dtype=np.int64)
        cell_round[cinv] = rnd  # a launch belongs to one round
        fit = _launch_per_arm(cell_arm, cell_round, cell_mean)
    else:
        # Block differences: candidate mean minus baseline mean of each complete block.
        kept = np.unique(binv[used])
        bi = np.searchsorted(kept, binv[used])
        d = np.bincount(bi, np.where(arm, y, 0.0)) / np.bincount(bi, arm) - np.bincount(
            bi, np.where(arm, 0.0, y)
        ) / np.bincount(bi, ~arm)
        fit, found, cut = _one_engine(d, block_launch[kept], robust)
        tol = 1e-12 * float(np.max(np.abs(y)))
        if fit.se is not None and not fit.se > tol and float(np.ptp(d)) > tol:
            # A discrete metric (steps per pass) equal in all blocks but a few: the warm-up cut
            # or the stall trimming left only equal differences, and "no spread" would print
            # the arms' different values as the same in every unit (seen on a real Medusa
            # run: 53.0 against 52.975 steps). Every block, plain mean, keeps them.
            fit, found, cut = _one_engine(d, block_launch[kept], False, settle=False)
            robust = False
            findings = [f for f in findings if not (isinstance(f, Stalls) and f.robust)]
            findings.append(PlainMean())
        findings += found
    components = VarianceComponents(between_launches, between_passes, fit.unit_sd, fit.launch_x_arm)
    delta = math.expm1(fit.est) if relative else fit.est
    if nonpositive:
        left_out = f"{nonpositive} pass(es) at zero left out"
        fit = replace(fit, note=f"{fit.note}; {left_out}" if fit.note else left_out)
    if fit.se is None or fit.df is None:
        return no_interval(delta, fit.note or "no interval", fit, components)
    # Identical units (acceptance equal in every pass): a zero-width interval would claim a
    # certainty the data do not have, so none at all. The tolerance absorbs rounding in means.
    if not fit.se > 1e-12 * float(np.max(np.abs(y))):
        return replace(
            no_interval(delta, "no spread between units: no interval", fit, components),
            no_spread=True,
        )
    t_crit = _t(fit.df, 1 - ALPHA / 2)
    low, high = fit.est - t_crit * fit.se, fit.est + t_crit * fit.se
    p = float(2 * spsp.stdtr(fit.df, -abs(fit.est / fit.se)))
    mde = _mde_scale(fit.df) * fit.se
    if relative:
        low, high, mde = math.expm1(low), math.expm1(high), math.expm1(mde)
    return DeltaEstimate(
        kind,
        delta,
        low,
        high,
        p,
        fit.test,
        _significant(p, low, high),
        mde,
        cv_b,
        cv_c,
        noisy,
        nb,
        nc,
        fit.note,
        design,
        fit.units,
        fit.df,
        fit.se,
        components,
        dropped,
        fit.error_unit,
        fit.error_sd,
        fit.error_n,
        tuple(findings),
        cut,
        stalls,
        robust and fit.trimmed,
    )
