"""The analysis's warm-up cut (stats.warmup_cut) counts a settling only where the cut blocks
differ from the rest by Welch's t, each side with its own spread: a few stalled blocks at the
start of a launch are heavy tails, not a settling, and cutting them left a rest whose variance
was too small (the precision stop on draft_per_forward)."""

from __future__ import annotations

import numpy as np

from harness.analysis.stats import WARMUP_MARGIN, WARMUP_P, warmup_cut, warmup_still_settling


def test_a_head_with_two_stalled_blocks_is_not_a_settling() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(0.0, 0.05, 40)
    d[:3] = [0.30, 0.01, 0.25]  # two stalled blocks among the first three
    # The rest's spread alone calls it a settling at 0.1%; each side's own does not.
    assert warmup_cut(d, WARMUP_P, WARMUP_MARGIN, own_spread=False) > 0
    assert warmup_cut(d, WARMUP_P, WARMUP_MARGIN) == 0


def test_a_real_settling_is_still_cut_twice_as_far() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(0.0, 0.02, 40)
    d[:8] += np.linspace(-0.30, -0.06, 8)  # the candidate 30% slower, settling over 8 blocks
    k = warmup_cut(d, WARMUP_P, WARMUP_MARGIN)
    assert k >= 12 and k <= 20
    assert k == warmup_cut(d, WARMUP_P, WARMUP_MARGIN, own_spread=False)


def test_the_workers_check_keeps_the_eager_test() -> None:
    """The worker's warm-up check errs towards warming longer (time, never validity): a noisy
    head that Welch's t does not call a settling still reaches the cap there."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.0, 0.05, 16)
    d[:8] += [0.30, -0.05, 0.25, 0.0, -0.1, 0.31, -0.05, 0.2]
    assert warmup_cut(d, 0.2) == 0  # each side its own spread: not clear enough
    assert warmup_cut(d, 0.2, own_spread=False) == 8  # the rest's: at the cap
    assert warmup_still_settling(d, 0.2)
