"""The statistics under the stresses this machine really has, simulated through the shipped
scheduler (schedule.drive_shared_launch: the checked warm-up, the balanced blocks, the
precision stop) and the shipped estimator (stats.arm_delta): an arm that warms up slowly,
stalled passes, early precision stops. Each cell's trial count is in its parameters; the
figures the README quotes are these cells' output (run with -s to print them)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from harness.analysis.stats import ALPHA, PRECISION_MIN_BLOCKS, DeltaEstimate, Stalls
from harness.config.scenario import Precision
from harness.wire.records import PassRecord
from harness.wire.spec import ArmSpec
from testkit.simulate import Launch, Noise, rates, simulate

EFFECT = math.log(1.01)


def _stalls(est: DeltaEstimate, robust: bool | None = None) -> list[Stalls]:
    """The estimate's stall findings (only the stall-robust ones, or only the others)."""
    return [
        f for f in est.findings if isinstance(f, Stalls) and (robust is None or f.robust == robust)
    ]


def report(name: str, trials: int, found: tuple[float, float, float]) -> None:
    print(
        f"\n{name} ({trials} trials): significant {100 * found[0]:.1f}%, coverage "
        f"{100 * found[1]:.1f}%, median MDE {100 * found[2]:.2f}%"
    )


def test_simulated_passes_are_what_validation_would_make() -> None:
    """The simulator builds its records without validation (for speed): each is the record
    validating its fields gives, so the shipped code reads the same thing."""
    launch = Launch(Noise(), np.random.default_rng(0))
    for arm in (
        ArmSpec(variant="base", baseline=True, implementation=None),
        ArmSpec(variant="opt", baseline=False, implementation=None),
    ):
        record = launch.measure(3, arm, 1)
        again = PassRecord.model_validate(record.model_dump())
        assert again == record and type(again.requests[0]) is type(record.requests[0])
        assert record.model_fields_set >= {"repeat", "duration_s", "requests", "arm", "block"}


@pytest.mark.parametrize("blocks", [40, 120])
def test_clean_one_engine_with_ar1_pass_noise(blocks: int) -> None:
    trials = 500
    aa = rates(simulate(Noise(), blocks, trials, seed=blocks), 0.0)
    plus = rates(simulate(Noise(effect=EFFECT), blocks, trials, seed=blocks + 1), EFFECT)
    report(f"clean A/A, {blocks} blocks", trials, aa)
    report(f"clean +1%, {blocks} blocks", trials, plus)
    assert 0.03 <= aa[0] <= 0.065 and plus[1] >= 0.93


# (passes the candidate takes to recover from 10% slower, shape: 1 linear, 2 convex)
WARMUPS = [(40, 1.0), (10, 1.0), (60, 1.0), (40, 2.0)]
# Findings, not passes: a 60-pass climb is 30 blocks, longer than a 16-block run and three
# quarters of a 40-block one; the warm-up check often stops before its end (a 0.33% per block
# slope is hard to see in 16 blocks of this noise) and what is left biases the short runs:
# 20% and 8.8% A/A false positives (400 trials; 6.0% at 120 blocks) with the blocks' fixed
# A B B A / B A A B order, whose alternation made neighbouring block differences correlate
# negatively (a slightly long interval); with each block's orientation drawn at random,
# 28.5% and 9.0%, coverage of +1% 84.0% and 84.5% (200 trials each). A precision run warms
# until no trend shows at p < 0.8 (schedule.PRECISION_WARMUP_P), which keeps it in band.
LIMITS = {(60, 1.0, 16): 0.30, (60, 1.0, 40): 0.16}


@pytest.mark.parametrize("blocks", [16, 40, 120])
@pytest.mark.parametrize(("length", "shape"), WARMUPS)
def test_an_arm_that_warms_up_slowly_does_not_bias_the_delta(
    blocks: int, length: int, shape: float
) -> None:
    """The issue's case (10% slower over its first 40 passes) gave 36% / 19% / 11% A/A false
    positives at 16 / 40 / 120 blocks with one warm-up per arm; now each arm warms until the
    arms' difference has settled (schedule.warm_until_settled) and the analysis cuts what
    still settles (stats.warmup_cut)."""
    # The case gets 800 trials at the sizes it names (at 400 its A/A rate came out
    # 8.2% in one draw and 2.8% in the next: 5.5% over both); the other shapes 200 each.
    trials = 800 if (length, shape) == (40, 1.0) and blocks > 16 else 200
    noise = Noise(warm_amp=0.10, warm_len=length, warm_shape=shape)
    results = simulate(noise, blocks, trials, seed=blocks * 7 + length)
    aa = rates(results, 0.0)
    plus_noise = Noise(warm_amp=0.10, warm_len=length, warm_shape=shape, effect=EFFECT)
    plus = rates(simulate(plus_noise, blocks, trials, seed=blocks * 7 + length + 1), EFFECT)
    warm = [w.blocks for _, w, _ in results]
    capped = sum(w.capped for _, w, _ in results)
    report(
        f"warm-up {length} passes shape {shape:g}, {blocks} blocks (warm-up blocks median "
        f"{np.median(warm):.0f}, max {max(warm)}, capped {capped})",
        trials,
        aa,
    )
    report("  ... +1%", trials, plus)
    limit = LIMITS.get((length, shape, blocks), 0.065)
    assert aa[0] <= limit and plus[1] >= 0.93 - (limit - 0.065)
    assert capped <= 0.1 * trials


def test_without_the_checked_warm_up_the_same_arm_biases_the_delta() -> None:
    """The stress is real: warmed once per arm (the old worker), a 16-block run measures the
    slow arm's climb, which no cut of its own blocks can remove."""
    found = rates(
        simulate(Noise(warm_amp=0.10, warm_len=40), 16, 300, seed=3, checked_warmup=False), 0.0
    )
    report("warm-up 40 passes, unchecked, 16 blocks", 300, found)
    assert found[0] > 0.5


@pytest.mark.parametrize("blocks", [40, 120])
def test_stalls_keep_coverage_and_most_of_the_precision(blocks: int) -> None:
    """1 pass in 50 three times slower, in either arm: detected, counted per arm, and
    summarised stall-robustly (20% trimmed, Yuen) -- MDE within 1.3x of clean data. 1000
    trials at 40 blocks: at 500 the +1% cell's coverage, about 94.9% (3000 trials, seeds 1001
    and 2002, before and after the warm-up cut's Welch rule alike), read 92.8% on one seed."""
    trials = 1000 if blocks == 40 else 800
    stalls = Noise(stall_every=50)
    aa_results = simulate(stalls, blocks, trials, seed=blocks * 3)
    aa = rates(aa_results, 0.0)
    plus = rates(
        simulate(Noise(stall_every=50, effect=EFFECT), blocks, trials, seed=blocks * 3 + 1), EFFECT
    )
    clean = rates(simulate(Noise(), blocks, trials, seed=blocks * 3 + 2), 0.0)
    report(f"stalls 1/50, {blocks} blocks", trials, aa)
    report("  ... +1%", trials, plus)
    print(f"  MDE with stalls / clean: {aa[2] / clean[2]:.2f}")
    assert 0.03 <= aa[0] <= 0.065 and plus[1] >= 0.93
    assert aa[2] <= 1.3 * clean[2]
    flagged = [e for e, _, _ in aa_results if sum(e.stalls)]
    assert len(flagged) > 0.8 * trials and all(
        e.robust for e in flagged if not any(_stalls(e, robust=False))
    )
    assert all(any(_stalls(e)) for e in flagged)


def test_stalls_alike_in_both_arms_do_not_switch_the_estimator_by_chance() -> None:
    """1 stall in 20 passes in either arm, 120 blocks: the one-arm-excess test fired by chance
    at 5% and the plain mean it chose was then significant almost every time (A/A 7.3% in the
    audit's 1000 trials; 7.5% in 600 here). It now switches at p < STALL_EXCESS_P only; an
    excess at 5% is still named."""
    trials = 400
    results = simulate(Noise(stall_every=20), 120, trials, seed=77)
    aa = rates(results, 0.0)
    report("stalls 1/20 in either arm, 120 blocks", trials, aa)
    assert 0.03 <= aa[0] <= 0.065 and aa[1] >= 0.93
    named = [e for e, _, _ in results if any(f.excess_p < ALPHA for f in _stalls(e, robust=True))]
    assert named and all(e.robust for e in named)  # chance excesses: named, still trimmed


def test_a_one_arm_stall_excess_is_reported_not_trimmed() -> None:
    """Stalls in the candidate only are the change's cost: kept in the estimate and named."""
    results = simulate(Noise(stall_every=20, stall_arm="opt"), 120, 100, seed=9)
    named = [e for e, _, _ in results if any(_stalls(e, robust=False))]
    assert len(named) > 80
    assert all(not e.robust and e.stalls[1] > e.stalls[0] for e in named)
    # Kept: the mean includes the stalls' cost (about 1/20 of passes 3x slower: ~ -5%).
    assert float(np.median([e.delta for e in named])) < -0.02


@pytest.mark.parametrize("period", [8 / 3, 8.0])
def test_a_periodic_disturbance_stays_noise(period: float) -> None:
    """A 1.5% sine on 3% pass noise, at the periods that lined up with the fixed A B B A /
    B A A B order (its arm contrast has an 8-pass period with odd harmonics): 13.2% and 52.9%
    A/A false positives at a 2% precision target before (the audit's 1000 trials). With each
    block's orientation drawn at random the disturbance enters every block with a random sign.
    The band [3%, 6.5%] is the benchmark's, at 1000 trials a period over periods 2-40
    (benchmarks/periodic_disturbance.py: 4.4-6.2%, docs/statistics.md). 400 trials measure a
    5% rate to +-2.2% (2 sd), so here the check is the binomial 99% region of a 5% rate at 400
    trials, [2.2%, 7.8%]: it fails the old order's 13% and 53% at once, and does not fail an
    in-band rate by chance (these seeds give 7.0% and 2.8% at 400 trials; the benchmark's
    1000 trials, 5.1% and 5.1%)."""
    trials = 400
    precision = Precision(mde=0.02, budget_s=10**6)
    noise = Noise(sigma_p=0.03, period=period, period_amp=0.015)
    seed = 17 + int(3 * period)
    aa = rates(simulate(noise, 12, trials, seed=seed, precision=precision), 0.0)
    report(f"precision 2%, 1.5% sine of period {period:.3g} passes", trials, aa)
    assert 0.022 <= aa[0] <= 0.078 and aa[1] >= 0.93 - 0.028
    # The effect shifts the candidate's level and nothing decided reads the level: the
    # interval shifts with it, so coverage of +1% is 1 - the A/A rate of the same draws (what
    # the benchmark relies on), checked on the first 100 draws, by count.
    few = 100
    aa_few = rates(simulate(noise, 12, few, seed=seed, precision=precision), 0.0)
    plus = rates(
        simulate(replace(noise, effect=EFFECT), 12, few, seed=seed, precision=precision), EFFECT
    )
    assert round(plus[1] * few) == few - round(aa_few[0] * few)


def test_a_slow_warm_up_stays_in_band_in_a_precision_run() -> None:
    """A 10% climb over the candidate's first 60 passes at a 2% precision target: the statistics
    audit found 16.5% A/A false positives and 81% coverage (1000 / 500 trials), most of them
    without a finding: the run stops as soon as its interval is narrow, on the climb's tail.
    A precision run now warms until no trend shows at p < 0.8 (PRECISION_WARMUP_P), confirmed
    4 blocks earlier (PRECISION_WARMUP_CONFIRM: without it 7.85% in 2000 trials of another
    seed, benchmarks/precision_stress.py)."""
    trials = 500
    precision = Precision(mde=0.02, budget_s=10**6)
    noise = Noise(sigma_p=0.03, warm_amp=0.10, warm_len=60)
    results = simulate(noise, 12, trials, seed=5, precision=precision)
    aa = rates(results, 0.0)
    plus = rates(
        simulate(replace(noise, effect=EFFECT), 12, trials, seed=5, precision=precision), EFFECT
    )
    warm = [w.blocks for _, w, _ in results]
    report(
        f"precision 2%, warm-up 60 passes (warm-up blocks median {np.median(warm):.0f})", trials, aa
    )
    assert 0.03 <= aa[0] <= 0.065 and plus[1] >= 0.93


def test_stalls_alike_in_both_arms_stay_in_band_in_a_precision_run() -> None:
    """1 stall in 20 passes in either arm at a 2% precision target: the stall-robust (Yuen)
    summary keeps only 60% of its blocks, and a stop after 20-28 blocks selected a small
    trimmed variance on 11-16 degrees of freedom: 7.20% A/A false positives (2000 trials,
    benchmarks/precision_stress.py). The stop now also needs the estimate's own degrees of
    freedom to reach the minimum look's (stats.precision_reached)."""
    trials = 500
    precision = Precision(mde=0.02, budget_s=10**6)
    results = simulate(
        Noise(sigma_p=0.03, stall_every=20), 12, trials, seed=21, precision=precision
    )
    aa = rates(results, 0.0)
    report("precision 2%, stalls 1/20 in either arm", trials, aa)
    robust = [e for e, _, _ in results if e.robust]
    assert len(robust) > trials // 2
    assert all(e.df is not None and e.df >= PRECISION_MIN_BLOCKS - 1 for e in robust)
    assert 0.03 <= aa[0] <= 0.065


@pytest.mark.parametrize("effect", [0.0, EFFECT])
def test_precision_stops_early_without_losing_coverage(effect: float) -> None:
    """Pass noise 3%, target MDE 2%: most runs stop at the first look. With the first look
    after 12 blocks this gave 7.0% A/A false positives and 93.0% coverage; after 20, in
    band."""
    trials = 400
    results = simulate(
        Noise(sigma_p=0.03, effect=effect),
        12,
        trials,
        seed=11,
        precision=Precision(mde=0.02, budget_s=10**6),
    )
    found = rates(results, effect)
    stops = [b for _, _, b in results]
    report(
        f"precision 2%, pass noise 3%, effect {100 * math.expm1(effect):+.0f}% (stops "
        f"{min(stops)}-{max(stops)} blocks)",
        trials,
        found,
    )
    assert all(e.mde is not None and e.mde <= 0.02 for e, _, _ in results)
    if effect == 0.0:
        assert 0.03 <= found[0] <= 0.065
    else:
        assert found[1] >= 0.93
