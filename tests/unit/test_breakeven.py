"""The break-even interval is checked the way every interval here is: on simulated sweeps whose
cells are one-engine launches with the machine's noise structure (launch offsets, pass noise,
AR(1) noise, warm-up climb, drift; tests/unit/test_stats.py), run through
harness.analysis.stats like a real cell, then through harness.analysis.breakeven. Its interval
must cover the true crossing about 95%
of the time, and a candidate that wins everywhere must rarely be given a crossing inside the
grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.breakeven import AxisPoint, break_even, choose_scale, describe
from tests.unit.test_stats import one_engine_runs

GRID = [1, 2, 4, 8, 16, 32, 64]
TRIALS = 400


def _sweeps(effects: list[float], blocks: int, sigma_p: float, seed: int) -> list[list[AxisPoint]]:
    """TRIALS simulated sweeps: per cell, a one-engine launch of `blocks` ABBA blocks whose
    candidate effect is that cell's; each cell's estimate as harness.analysis.stats gives it."""
    per_cell = [
        one_engine_runs(seed + i, 1, blocks, 0.05, sigma_p, effect, trials=TRIALS)
        for i, effect in enumerate(effects)
    ]
    sweeps = []
    for t in range(TRIALS):
        points = []
        for x, runs in zip(GRID, per_cell, strict=True):
            est = runs.estimate(t)
            points.append(AxisPoint(x, math.log1p(est.delta), est.se, est.df))
        sweeps.append(points)
    return sweeps


def _covers(low: float | None, high: float | None, truth: float) -> bool:
    return low is not None and high is not None and low <= truth <= high


@pytest.mark.parametrize(
    ("slope", "x0", "sigma_p"),
    [
        (0.01, 10.0, 0.02),  # +-2% over the grid, crossing between cells
        (0.01, 4.0, 0.03),  # crossing on a grid value, noisier passes
        (0.02, 20.0, 0.03),  # a steeper effect
        (0.005, 8.0, 0.02),  # a shallow one: +-1% over the grid, near each cell's noise
    ],
)
def test_interval_covers_the_true_crossing(slope: float, x0: float, sigma_p: float) -> None:
    """True log-delta linear in log(batch size), crossing zero at x0."""
    effects = [math.expm1(slope * (math.log(x) - math.log(x0))) for x in GRID]
    sweeps = _sweeps(effects, 12, sigma_p, seed=int(x0 * 100 + sigma_p * 1000))
    found = [break_even(points, draws=1000, seed=i) for i, points in enumerate(sweeps)]
    coverage = np.mean([_covers(c.ci_low, c.ci_high, x0) for c in found])
    assert 0.93 <= coverage <= 0.98, coverage
    # Misses fall on both sides: the estimate is not pulled one way.
    low = np.mean([c.ci_low is not None and c.ci_low > x0 for c in found])
    high = np.mean([c.ci_high is not None and c.ci_high < x0 for c in found])
    assert max(low, high) < 0.045, (low, high)
    assert np.mean([c.direction == "rising" for c in found]) > 0.95


def test_curved_effect_still_covered() -> None:
    """A delta that is not linear in log(x) (a fixed cost against one growing with batch):
    interpolation between neighbours is only locally linear; coverage must hold roughly."""
    effects = [0.03 * (1 - 6.0 / (x + 2.0)) for x in GRID]  # crosses at x = 4
    sweeps = _sweeps(effects, 12, 0.02, seed=77)
    found = [break_even(points, draws=1000, seed=i) for i, points in enumerate(sweeps)]
    coverage = np.mean([_covers(c.ci_low, c.ci_high, 4.0) for c in found])
    assert 0.90 <= coverage <= 0.99, coverage


def test_winning_everywhere_rarely_gets_a_crossing_inside() -> None:
    """A candidate 1.5% ahead at every batch size: the interval must almost never lie wholly
    inside the grid (that would claim a break-even that is not there)."""
    sweeps = _sweeps([0.015] * len(GRID), 12, 0.02, seed=5)
    found = [break_even(points, draws=1000, seed=i) for i, points in enumerate(sweeps)]
    inside = np.mean(
        [
            c.ci_low is not None
            and c.ci_high is not None
            and math.isfinite(c.ci_low)
            and math.isfinite(c.ci_high)
            for c in found
        ]
    )
    assert inside <= 0.05, inside


def test_open_ends_and_sentences() -> None:
    rising = [
        AxisPoint(x, v, 0.002, 11) for x, v in [(1, -0.03), (4, -0.01), (16, 0.012), (64, 0.03)]
    ]
    c = break_even(rising)
    assert c.estimate is not None and 4 < c.estimate < 16 and c.direction == "rising"
    assert c.scale == "log" and c.inside > 0.99
    text = describe(c, "batch_size", "local-argmax", "Output throughput", True)
    assert "local-argmax wins on Output throughput from batch_size ≈" in text
    # For a lower-is-better metric the same rise means the candidate loses from there on.
    assert "up to batch_size" in describe(c, "batch_size", "x", "TPOT", False)
    ahead = [AxisPoint(x, 0.05, 0.002, 11) for x in (1, 4, 16)]
    c = break_even(ahead)
    assert c.estimate is None and c.sign == 1
    assert c.ci_low == -math.inf or c.ci_high == math.inf
    assert "no crossing within the grid" in describe(c, "batch_size", "x", "Output", True)
    assert "is ahead everywhere" in describe(c, "batch_size", "x", "Output", True)
    # A cell without a standard error: the crossing, but no interval.
    c = break_even([AxisPoint(1, -0.01, None, None), AxisPoint(8, 0.01, 0.001, 5)])
    assert c.estimate is not None and c.ci_low is None
    assert "no interval" in describe(c, "b", "x", "Output", True)
    with pytest.raises(ValueError, match="at least 2 cells"):
        break_even([AxisPoint(1, 0.0, 0.1, 3)])


def test_scale_choice() -> None:
    assert choose_scale([1, 2, 4, 8]) == "log"
    assert choose_scale([10, 12, 14]) == "linear"
    assert choose_scale([0, 4, 8]) == "linear"
    assert choose_scale([10, 12], "log") == "log"
