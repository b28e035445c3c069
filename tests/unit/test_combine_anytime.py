"""gate --combine's interval is anytime-valid across re-runs: the k-th combination spends
RUNS_ALPHA / (k (k - 1)), so combining after every run until significant stays near 5%
(benchmarks/combine_rerun.py); a single run keeps the fixed-sample 95% interval."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats as sps

from harness.analysis.compare import compare_run
from harness.analysis.repeats import combined
from harness.analysis.stats import (
    ALPHA,
    RUNS_ALPHA,
    across_runs,
    runs_alpha,
    units_for_halfwidth,
)
from harness.cli import main
from harness.present.tables import warnings_of
from harness.results.index import earlier_runs
from harness.results.run import load_run
from harness.workflow import gate_run
from testkit.stored import stored


def test_the_spending_sums_to_its_budget_over_any_number_of_runs() -> None:
    assert runs_alpha(1) == ALPHA
    assert math.fsum(runs_alpha(k) for k in range(2, 100_000)) < RUNS_ALPHA
    assert runs_alpha(2) == pytest.approx(RUNS_ALPHA / 2)
    assert ALPHA + RUNS_ALPHA <= 0.065  # the whole re-run policy's bound
    # The gate's "about N more would decide" counts the later looks' smaller alpha.
    fixed = units_for_halfwidth(0.01, 0.005)
    looked = units_for_halfwidth(0.01, 0.005, alpha=lambda n: runs_alpha(3 + max(0, n - 3)))
    assert fixed is not None and looked is not None and looked > 3 * fixed


def test_a_combination_of_runs_is_wider_by_the_spending_factor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        stored(tmp_path, f"r{i}", 100.0 * (i + 1), 40 + i, effect=0.0)
    run = load_run(tmp_path / "r2")
    comparison, runs = combined(run, [load_run(p) for p in earlier_runs(run)])
    est = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput").estimate
    assert runs == 3 and est.runs == 3 and est.df == 2.0
    assert est.alpha == pytest.approx(RUNS_ALPHA / 6)
    assert est.se is not None and est.ci_low is not None and est.ci_high is not None
    half = (math.log1p(est.ci_high) - math.log1p(est.ci_low)) / 2
    # t at 1 - 0.01/12 with 2 df is 24.5 standard errors; the fixed 95% interval's 4.30.
    assert half / est.se == pytest.approx(sps.t.ppf(1 - est.alpha / 2, 2), rel=1e-9)
    assert half / est.se > 5 * sps.t.ppf(0.975, 2)
    raw_p = 2 * sps.t.cdf(-abs(math.log1p(est.delta)) / est.se, 2)
    assert est.p_value == pytest.approx(min(1.0, raw_p * ALPHA / est.alpha))
    assert any(
        "anytime-valid across re-runs: look 3 of any number" in w for w in warnings_of(comparison)
    )
    _, result = gate_run(tmp_path / "r2", combine=True)
    assert "look 3 of any number" in result.family
    main(["gate", str(tmp_path / "r2"), "--combine"])
    assert "anytime-valid across re-runs" in capsys.readouterr().out


def test_one_run_keeps_the_fixed_interval(tmp_path: Path) -> None:
    run = load_run(stored(tmp_path, "r0", 100.0, 7, effect=0.0))
    est = next(
        r for r in compare_run(run).candidates[0].rows if r.key == "output_throughput"
    ).estimate
    assert est.runs == 1 and est.alpha == ALPHA
    assert across_runs(est, 1) is est
    assert est.se is not None and est.df is not None
    assert est.ci_high is not None and est.ci_low is not None
    half = (math.log1p(est.ci_high) - math.log1p(est.ci_low)) / 2
    assert half / est.se == pytest.approx(sps.t.ppf(0.975, est.df), rel=1e-9)
