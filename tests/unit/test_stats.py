"""The statistics are validated on synthetic runs with the real machine's noise structure: noise
shared by a launch's passes, pass noise, slow AR(1) noise, a warm-up climb and drift. Intervals
must cover a known effect 93-97% of the time and A/A comparisons must flag 3-7% of the time."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as sps

from harness.analysis.stats import (
    ALPHA,
    DeltaEstimate,
    DeltaKind,
    Design,
    PlainMean,
    arm_delta,
    blocks_needed,
    coefficient_of_variation,
    precision_reached,
)

TRIALS = 2000  # a 5% rate is then measured within about +-1% (2 binomial sd)
EFFECT = 0.01
# Slow noise and drift inside a launch, as seen on the machine: AR(1) with rho 0.6 whose
# innovations are half the pass noise, a warm-up climb of up to 5% fading over ~2 passes, and a
# linear drift of up to +-2% over the launch.
RHO, AR_FRACTION, CLIMB, CLIMB_PASSES, DRIFT = 0.6, 0.5, 0.05, 2.0, 0.02
ABBA = np.array([False, True, True, False])


@dataclass(frozen=True)
class Runs:
    """`trials` simulated runs of one shape: per-pass values and layout, one row per trial."""

    design: Design
    values: np.ndarray  # (trials, passes)
    candidate: np.ndarray  # (trials, passes)
    launch: np.ndarray
    round_: np.ndarray
    block: np.ndarray

    def estimate(
        self, i: int, passes: int | None = None, kind: DeltaKind = "relative"
    ) -> DeltaEstimate:
        s = slice(0, passes)
        return arm_delta(
            self.values[i, s],
            self.candidate[i, s],
            self.launch[s],
            self.round_[s],
            self.block[s],
            kind,
            self.design,
        )

    def estimates(self) -> list[DeltaEstimate]:
        return [self.estimate(i) for i in range(len(self.values))]


def _launch_noise(
    rng: np.random.Generator,
    trials: int,
    launches: int,
    passes: int,
    sigma_l: float,
    sigma_p: float | np.ndarray,
) -> np.ndarray:
    """Log noise of every pass, (trials, launches, passes): the launch's own offset, pass noise,
    AR(1), warm-up climb and linear drift."""
    sp = np.broadcast_to(np.asarray(sigma_p, dtype=float).reshape(-1, 1, 1), (trials, 1, 1))
    shape = (trials, launches, passes)
    innovations = rng.normal(0.0, 1.0, shape) * (AR_FRACTION * sp)
    slow = np.empty(shape)
    slow[..., 0] = innovations[..., 0] / math.sqrt(1 - RHO**2)  # start in the stationary state
    for k in range(1, passes):
        slow[..., k] = RHO * slow[..., k - 1] + innovations[..., k]
    index = np.arange(passes)
    climb = rng.uniform(0.0, CLIMB, (trials, launches, 1)) * np.exp(-index / CLIMB_PASSES)
    drift = rng.uniform(-DRIFT, DRIFT, (trials, launches, 1)) * index / max(passes - 1, 1)
    noise: np.ndarray = (
        rng.normal(0.0, sigma_l, (trials, launches, 1))
        + rng.normal(0.0, 1.0, shape) * sp
        + slow
        - climb
        + drift
    )
    return noise


def launch_per_arm_runs(
    seed: int,
    rounds: int,
    passes: int,
    sigma_l: float,
    sigma_p: float,
    effect: float,
    trials: int = TRIALS,
) -> Runs:
    """Round r launches baseline then candidate (candidate first in odd rounds: ABBA)."""
    rng = np.random.default_rng(seed)
    y = _launch_noise(rng, trials, 2 * rounds, passes, sigma_l, sigma_p)
    cand_launch = np.array(
        [(r % 2 == 1) != second for r in range(rounds) for second in (False, True)]
    )
    y += math.log1p(effect) * cand_launch[None, :, None]
    launch = np.repeat(np.arange(2 * rounds), passes)
    cand = np.broadcast_to(np.repeat(cand_launch, passes), (trials, len(launch)))
    return Runs(
        "launch-per-arm",
        1000 * np.exp(y.reshape(trials, -1)),
        cand,
        launch,
        launch // 2,
        np.zeros_like(launch),
    )


def one_engine_runs(
    seed: int,
    launches: int,
    blocks: int,
    sigma_l: float,
    sigma_p: float | np.ndarray,
    effect: float,
    interaction: float = 0.0,
    trials: int = TRIALS,
) -> Runs:
    """Both arms in each launch, in ABBA or BAAB blocks (drawn per launch, kept for all its
    blocks so that the warm-up contrast never cancels between neighbouring blocks)."""
    rng = np.random.default_rng(seed)
    y = _launch_noise(rng, trials, launches, 4 * blocks, sigma_l, sigma_p)
    flip = rng.integers(0, 2, (trials, launches, 1)).astype(bool)
    cand = np.tile(ABBA, blocks)[None, None, :] ^ flip
    # The launch x arm interaction: this launch's arm effect differs from the others'.
    arm_effect = math.log1p(effect) + rng.normal(0.0, interaction, (trials, launches, 1))
    y += arm_effect * cand
    launch = np.repeat(np.arange(launches), 4 * blocks)
    block = np.tile(np.repeat(np.arange(blocks), 4), launches)
    return Runs(
        "one-engine",
        1000 * np.exp(y.reshape(trials, -1)),
        cand.reshape(trials, -1),
        launch,
        launch,
        block,
    )


def false_positive_rate(ests: list[DeltaEstimate]) -> float:
    return float(np.mean([e.significant for e in ests]))


def coverage(ests: list[DeltaEstimate], effect: float) -> float:
    return float(
        np.mean(
            [
                e.ci_low is not None and e.ci_high is not None and e.ci_low <= effect <= e.ci_high
                for e in ests
            ]
        )
    )


# Shipped shapes. The t statistic is scale-free on the log scale, so only the ratios of the
# noise sources matter. Launch-per-arm: launch noise dominant (3%/1%, the reported failure), pass
# noise only (0/5%) and no pass noise (5%/0: launch noise, warm-up and drift). One-engine: launch
# noise cancels exactly inside a block, so sigma_l is kept at 5% and sigma_p spans 1% (warm-up
# and drift largest against pass noise: the hardest case) to 5%. The full 4x4 grid (0, 1, 3, 5%)
# was run offline with the same simulator and stayed in band; below 1% pass noise a 5% warm-up
# climb dominates one-engine blocks and A/A creeps up to ~7%.
SHAPES = [
    ("launch-per-arm", 2, 3, 0.03, 0.01),
    ("launch-per-arm", 2, 3, 0.0, 0.05),
    ("launch-per-arm", 2, 3, 0.05, 0.0),
    ("launch-per-arm", 3, 3, 0.03, 0.01),
    ("launch-per-arm", 3, 3, 0.0, 0.05),
    ("launch-per-arm", 4, 2, 0.03, 0.01),
    ("launch-per-arm", 4, 2, 0.05, 0.0),
    ("launch-per-arm", 2, 5, 0.03, 0.01),
    ("launch-per-arm", 2, 5, 0.0, 0.05),
    ("one-engine", 1, 12, 0.05, 0.01),
    ("one-engine", 1, 12, 0.05, 0.05),
    ("one-engine", 1, 40, 0.05, 0.01),
    ("one-engine", 1, 60, 0.05, 0.03),
    ("one-engine", 2, 30, 0.05, 0.01),
    ("one-engine", 2, 30, 0.05, 0.05),
    ("one-engine", 3, 20, 0.05, 0.01),
    ("one-engine", 3, 20, 0.05, 0.03),
]


def _runs(
    design: str, launches: int, size: int, sigma_l: float, sigma_p: float, effect: float, seed: int
) -> Runs:
    if design == "launch-per-arm":
        return launch_per_arm_runs(seed, launches, size, sigma_l, sigma_p, effect)
    return one_engine_runs(seed, launches, size, sigma_l, sigma_p, effect)


@pytest.mark.parametrize(("design", "launches", "size", "sigma_l", "sigma_p"), SHAPES)
def test_aa_false_positives_and_coverage(
    design: str, launches: int, size: int, sigma_l: float, sigma_p: float
) -> None:
    seed = launches * 1000 + size * 10 + int(sigma_p * 100)
    aa = _runs(design, launches, size, sigma_l, sigma_p, 0.0, seed).estimates()
    assert 0.03 <= false_positive_rate(aa) <= 0.07
    ests = _runs(design, launches, size, sigma_l, sigma_p, EFFECT, seed + 1).estimates()
    assert 0.93 <= coverage(ests, EFFECT) <= 0.97
    # Degrees of freedom come from the independent units, never from passes (one-engine, one
    # launch: fewer when a warm-up cut left leading blocks out, which this noise seldom asks).
    expected_df = {
        "launch-per-arm": launches - 1,
        "one-engine": size - 1 if launches == 1 else launches - 1,
    }[design]
    dfs = [e.df for e in ests]
    assert max(d or 0 for d in dfs) == expected_df
    assert sum(d == expected_df for d in dfs) >= 0.97 * len(dfs)


def test_passes_as_units_was_the_bug() -> None:
    """2 rounds x 3 passes, 3% launch noise: pairing passes by (round, pass) as if they were
    independent flags about a third of A/A runs; the launch as the unit stays nominal."""
    runs = launch_per_arm_runs(77, 2, 3, 0.03, 0.01, 0.0)
    y = np.log(runs.values).reshape(TRIALS, 2, 2, 3)  # trial, round, launch in round, pass
    cand_first = runs.candidate[0].reshape(2, 2, 3)[:, 0, 0]
    diff = np.where(
        cand_first[None, :, None], y[:, :, 0] - y[:, :, 1], y[:, :, 1] - y[:, :, 0]
    ).reshape(TRIALS, -1)
    t = diff.mean(1) / (diff.std(1, ddof=1) / math.sqrt(6))
    old_fp = float(np.mean(2 * sps.t.sf(np.abs(t), 5) < ALPHA))
    assert old_fp > 0.20
    assert 0.03 <= false_positive_rate(runs.estimates()) <= 0.07


def test_interaction_enters_the_error_term() -> None:
    """Two launches whose arm effects differ (1% sd): launch means carry the error and keep
    coverage; the within-launch block spread alone would under-cover badly."""
    ests = one_engine_runs(91, 2, 30, 0.03, 0.01, EFFECT, interaction=0.01).estimates()
    assert 0.93 <= coverage(ests, EFFECT) <= 0.97
    within = []
    for e in ests:
        assert e.components is not None and e.components.unit_sd is not None
        half = sps.t.ppf(0.975, 58) * e.components.unit_sd / math.sqrt(60)
        within.append(abs(math.log1p(e.delta) - math.log1p(EFFECT)) <= half)
    assert float(np.mean(within)) < 0.85
    # The method-of-moments tau^2 is unbiased before truncation at 0: its mean lands near 1%^2.
    tau2 = [(e.components.launch_x_arm or 0.0) ** 2 for e in ests if e.components is not None]
    assert 0.7e-4 < float(np.mean(tau2)) < 1.4e-4


# The precision stopping rule is simulated through the shipped scheduler
# (schedule.drive_shared_launch) in tests/unit/test_stats_stress.py, not through a copy here.


def test_blocks_needed_matches_the_mde_of_arm_delta() -> None:
    runs = one_engine_runs(8, 1, 30, 0.03, 0.02, 0.0, trials=50)
    for i in range(50):
        est = runs.estimate(i)
        assert est.mde is not None and est.components is not None
        sd = est.components.unit_sd
        assert sd is not None
        # 30 blocks is the smallest count reaching this run's own MDE with this run's spread.
        assert blocks_needed(sd, est.mde * (1 + 1e-9), "relative") == 30
        assert blocks_needed(sd, est.mde * (1 - 1e-3), "relative") == 31
    # Planned from the pilots' spread, fresh runs of that size reach the target about half the
    # time (each run's MDE comes from its own sample spread).
    sd_pilot = float(
        np.median([e.components.unit_sd for e in runs.estimates() if e.components is not None])
    )
    n = blocks_needed(sd_pilot, 0.02, "relative")
    assert n is not None and 10 <= n <= 40
    planned = one_engine_runs(9, 1, n, 0.03, 0.02, 0.0, trials=400).estimates()
    reached = np.mean([precision_reached(e, 0.02) for e in planned])
    assert 0.3 <= reached <= 0.8
    assert blocks_needed(0.02, 0.001, "relative", max_units=100) is None
    assert blocks_needed(0.5, 0.2, "points") == blocks_needed(0.05, 0.02, "points")


def _one_engine_layout(blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cand = np.tile(ABBA, blocks)
    return cand, np.zeros(4 * blocks, dtype=int), np.repeat(np.arange(blocks), 4)


def test_relative_delta_and_interval_share_one_centre() -> None:
    rng = np.random.default_rng(1)
    cand, launch, block = _one_engine_layout(10)
    values = 1000 * np.exp(rng.normal(0.0, 0.2, 40) + 0.05 * cand)  # wide: means would differ
    est = arm_delta(values, cand, launch, launch, block, "relative", "one-engine")
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low < est.delta < est.ci_high
    mid = (math.log1p(est.ci_low) + math.log1p(est.ci_high)) / 2
    assert est.delta == pytest.approx(math.expm1(mid), rel=1e-12)
    ratio_of_means = values[cand].mean() / values[~cand].mean() - 1
    assert abs(ratio_of_means - est.delta) > 1e-3  # not the old ratio of arithmetic means


@pytest.mark.parametrize(
    ("design", "diff"), [("one-engine", 0.0), ("one-engine", 0.02), ("launch-per-arm", 0.0)]
)
def test_zero_spread_gives_no_interval(design: Design, diff: float) -> None:
    """Acceptance identical in every pass: no p = 0 and no zero-width 'significant' interval."""
    if design == "one-engine":
        cand, launch, block = _one_engine_layout(8)
        rnd = launch
    else:
        cand = np.tile(np.repeat([False, True], 3), 3)
        launch = np.repeat(np.arange(6), 3)
        rnd, block = launch // 2, np.zeros(18, dtype=int)
    values = np.where(cand, 0.6 + diff, 0.6)
    est = arm_delta(values, cand, launch, rnd, block, "points", design)
    assert est.ci_low is None and est.p_value is None and not est.significant
    assert est.note == "no spread between units: no interval" and est.no_spread
    assert est.delta == pytest.approx(diff)


def test_one_launch_per_arm_gives_no_interval() -> None:
    runs = launch_per_arm_runs(3, 1, 5, 0.03, 0.01, 0.05, trials=20)
    for est in runs.estimates():
        assert est.ci_low is None and est.p_value is None and est.mde is None
        assert not est.significant and math.isfinite(est.delta)  # a point estimate only
        assert est.note == "one launch per arm: not estimable (add rounds)"


def test_missing_launch_falls_back_to_welch_on_launches() -> None:
    runs = launch_per_arm_runs(4, 3, 3, 0.03, 0.01, 0.0, trials=1)
    values = runs.values[0].copy()
    values[runs.launch == 5] = np.nan  # round 2 lost a launch: rounds no longer pair up
    est = arm_delta(
        values,
        runs.candidate[0],
        runs.launch,
        runs.round_,
        runs.block,
        "relative",
        "launch-per-arm",
    )
    assert est.test == "Welch t (launches)" and est.units == 5
    assert est.df is not None and 1 <= est.df <= 3  # launches, not the 15 passes
    assert est.n_baseline + est.n_candidate == 15


def test_incomplete_blocks_are_dropped_and_counted() -> None:
    rng = np.random.default_rng(2)
    cand, launch, block = _one_engine_layout(6)
    values = 100 * np.exp(rng.normal(0.0, 0.01, 24))
    values[(block == 2) & cand] = np.nan
    values[(block == 4) & ~cand] = np.nan
    values[20] = np.nan  # block 5 keeps one pass of that arm: still complete
    est = arm_delta(values, cand, launch, launch, block, "relative", "one-engine")
    assert est.dropped_units == 2 and est.units == 4 and est.df == 3
    assert est.n_baseline + est.n_candidate == 15
    assert est.note == "one launch: launch x arm interaction not sampled"


def test_components_recover_the_noise_sources() -> None:
    """200 rounds x 4 passes of 3% launch and 1% pass noise (nothing else)."""
    rng = np.random.default_rng(6)
    launch = np.repeat(np.arange(400), 4)
    cand = launch % 2 == 1
    y = rng.normal(0.0, 0.03, 400)[launch] + rng.normal(0.0, 0.01, 1600)
    est = arm_delta(np.exp(y), cand, launch, launch // 2, launch, "relative", "launch-per-arm")
    c = est.components
    assert c is not None and c.between_launches is not None and c.between_passes is not None
    # A launch mean also carries its passes' noise: sqrt(3%^2 + 1%^2 / 4).
    assert c.between_launches == pytest.approx(math.sqrt(0.03**2 + 0.01**2 / 4), rel=0.1)
    assert c.between_passes == pytest.approx(0.01, rel=0.1)
    assert c.unit_sd == pytest.approx(math.sqrt(2 * (0.03**2 + 0.01**2 / 4)), rel=0.1)
    assert c.launch_x_arm is None and est.df == 199 and est.test == "paired t (launches)"


def test_relative_needs_positive_values_and_inputs_must_align() -> None:
    cand, launch, block = _one_engine_layout(3)
    values = np.linspace(-1, -0.1, 12)
    est = arm_delta(values, cand, launch, launch, block, "relative", "one-engine")
    assert est.ci_low is None and est.note == "relative delta needs positive values"
    with pytest.raises(ValueError, match="length"):
        arm_delta(values[:5], cand, launch, launch, block, "relative", "one-engine")


def test_a_pass_at_zero_drops_its_block_not_the_metric() -> None:
    """One pass that produced nothing (throughput 0) used to void the whole metric (NaN, no
    interval: a precision run could never stop on target); it is now left out like a missing
    pass (its block keeps the arm's other pass of the A B B A)."""
    rng = np.random.default_rng(4)
    cand, launch, block = _one_engine_layout(40)
    values = np.exp(7 + 0.01 * cand + rng.normal(0, 0.02, len(cand)))
    values[17] = 0.0
    est = arm_delta(values, cand, launch, launch, block, "relative", "one-engine")
    assert est.ci_low is not None and est.mde is not None
    assert est.units == 40 and est.n_baseline + est.n_candidate == 159
    assert est.note is not None and "1 pass(es) at zero left out" in est.note


def test_cv_and_noise_flag() -> None:
    assert coefficient_of_variation(np.array([1.0])) is None
    assert coefficient_of_variation(np.array([90.0, 110.0])) == pytest.approx(0.1414, abs=1e-3)
    cand, launch, block = _one_engine_layout(2)
    values = np.where(cand, 100.0, np.tile([90.0, 0, 0, 110.0], 2))
    est = arm_delta(values, cand, launch, launch, block, "relative", "one-engine")
    assert est.noisy and est.cv_candidate == 0.0


def test_a_discrete_metric_off_in_one_block_is_not_called_exact() -> None:
    """Steps per pass: 53 in every pass but one candidate pass of 52. The stall rule calls
    that pass a stall; trimmed away, only zero differences were left, and the row read "same
    in every unit" under arms of 53.0 and 52.975 (a real Medusa run in CI). The plain mean
    keeps the difference, with an interval."""
    blocks = 20
    arm = np.tile([False, True, True, False], blocks)
    values = np.full(arm.size, 53.0)
    values[np.flatnonzero(arm)[7]] = 52.0
    block = np.repeat(np.arange(blocks), 4)
    zeros = np.zeros(arm.size, dtype=np.int64)
    est = arm_delta(values, arm, zeros, zeros, block, "relative", "one-engine")
    assert not est.known_exactly and est.delta < 0
    assert est.ci_low is not None and est.ci_high is not None and est.ci_low < est.delta
    assert not est.robust
    assert PlainMean() in est.findings
    # Equal in every pass, it stays known exactly.
    same = arm_delta(np.full(arm.size, 53.0), arm, zeros, zeros, block, "relative", "one-engine")
    assert same.known_exactly and same.ci_low is None
