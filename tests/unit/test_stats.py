"""The statistics are validated on synthetic samples with known effects: intervals cover the
true delta about 95% of the time, and A/A comparisons rarely flag a difference."""

from __future__ import annotations

import numpy as np
import pytest

from harness.stats import coefficient_of_variation, pass_level_delta, request_level_delta

SEEDS = 400


@pytest.mark.parametrize("paired", [True, False])
def test_pass_level_interval_coverage(paired: bool) -> None:
    true_ratio = 1.01
    covered = 0
    for seed in range(SEEDS):
        rng = np.random.default_rng(seed)
        drift = rng.normal(0, 0.01, 4) if paired else 0.0  # shared per-position drift
        base = 1000 * np.exp(rng.normal(0, 0.01, 4) + drift)
        cand = 1000 * true_ratio * np.exp(rng.normal(0, 0.01, 4) + drift)
        est = pass_level_delta(base, cand, "relative", paired)
        assert est.ci_low is not None and est.ci_high is not None
        covered += est.ci_low <= true_ratio - 1 <= est.ci_high
    assert 0.92 <= covered / SEEDS <= 0.98


@pytest.mark.parametrize("paired", [True, False])
def test_pass_level_aa_false_positive_rate(paired: bool) -> None:
    n = 2000
    flagged = 0
    for seed in range(n):
        rng = np.random.default_rng(10_000 + seed)
        base = 500 * np.exp(rng.normal(0, 0.02, 5))
        cand = 500 * np.exp(rng.normal(0, 0.02, 5))
        flagged += pass_level_delta(base, cand, "relative", paired).significant
    # Nominal 5%; 2000 A/A trials put the estimate within about +-1% of the true rate.
    assert flagged / n <= 0.06


def test_pass_level_detects_a_real_effect() -> None:
    rng = np.random.default_rng(3)
    base = 1000 * np.exp(rng.normal(0, 0.003, 6))
    cand = 1010 * np.exp(rng.normal(0, 0.003, 6))
    est = pass_level_delta(base, cand, "relative", paired=False)
    assert est.significant and est.delta == pytest.approx(0.01, abs=0.004)
    assert est.mde is not None and est.mde < 0.01


def test_points_delta_for_rates() -> None:
    est = pass_level_delta(np.array([37.4, 37.5, 37.45]), np.array([37.0, 37.1, 37.05]),
                           "points", paired=True)
    assert est.kind == "points" and est.delta == pytest.approx(-0.4)


def test_one_pass_per_arm_has_no_interval() -> None:
    est = pass_level_delta(np.array([100.0]), np.array([101.0]), "relative", paired=True)
    assert est.ci_low is None and not est.significant
    assert est.note is not None and "one pass" in est.note


def test_request_level_coverage() -> None:
    true_ratio = 1.1
    covered = 0
    n = 150
    for seed in range(n):
        rng = np.random.default_rng(20_000 + seed)
        base = [rng.gamma(4.0, 10.0, 64) for _ in range(3)]
        cand = [rng.gamma(4.0, 10.0 * true_ratio, 64) for _ in range(3)]
        est = request_level_delta(base, cand, "mean", n_boot=400, seed=seed)
        assert est.ci_low is not None and est.ci_high is not None
        covered += est.ci_low <= true_ratio - 1 <= est.ci_high
    # percentile bootstrap of 3 passes is a little liberal; it must stay close to nominal
    assert covered / n >= 0.88


def test_request_level_aa_false_positive_rate() -> None:
    flagged = 0
    n = 150
    for seed in range(n):
        rng = np.random.default_rng(30_000 + seed)
        base = [rng.gamma(4.0, 10.0, 64) for _ in range(3)]
        cand = [rng.gamma(4.0, 10.0, 64) for _ in range(3)]
        flagged += request_level_delta(base, cand, "median", n_boot=400, seed=seed).significant
    assert flagged / n <= 0.07


def test_cv_and_noise_flag() -> None:
    assert coefficient_of_variation(np.array([1.0])) is None
    assert coefficient_of_variation(np.array([90.0, 110.0])) == pytest.approx(0.1414, abs=1e-3)
    est = pass_level_delta(np.array([90.0, 110.0]), np.array([100.0, 100.0]), "relative", False)
    assert est.noisy
