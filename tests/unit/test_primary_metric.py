"""The table's stars as one family: a scenario's primary metric tested alone
at 5%, the other noisy rows secondary (starred after the primary, Holm across them), the rule
said under the table; the gate's interval-judged metrics one family with a stated rate. The
family-wise rate is measured on A/A relabellings of a real stored run (testkit.permutation)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.analysis.compare import mark_family
from harness.analysis.comparison import Comparison, MetricRow
from harness.analysis.gate import FAMILY_RATE, judge
from harness.analysis.stats import DeltaEstimate, holm
from harness.config.scenario import (
    GateSpec,
    parse_scenario,
    scenario_hash,
    scenario_json_schema,
)
from harness.errors import ScenarioError
from harness.present.tables import render_gate_markdown, render_gate_terminal, render_terminal
from harness.results.run import load_run
from testkit.permutation import permute

ROOT = Path(__file__).resolve().parents[2]
REAL_RUN = ROOT / "results" / "fixtures" / "cpu-medusa-overlay-20-blocks"


def test_scenario_names_its_primary_metric(scenario_data: dict[str, Any]) -> None:
    assert parse_scenario(scenario_data).primary_metric == "output_throughput"
    scenario_data["primary_metric"] = "mean_tpot_ms"
    assert parse_scenario(scenario_data).primary_metric == "mean_tpot_ms"
    scenario_data["primary_metric"] = "output_throughput_typo"
    with pytest.raises(ScenarioError, match="primary_metric: unknown metric"):
        parse_scenario(scenario_data)
    scenario_data["primary_metric"] = "goodput"
    with pytest.raises(ScenarioError, match="primary_metric: goodput needs an slo"):
        parse_scenario(scenario_data)
    described = scenario_json_schema()["properties"]["primary_metric"]
    assert described["default"] == "output_throughput" and "5%" in described["description"]


def test_stored_runs_without_the_field_load_hash_and_render() -> None:
    """Manifests written before the field: the default, the same scenario hash (history
    matches runs by it), and a table that says its rule."""
    run = load_run(REAL_RUN)
    manifest = json.loads((REAL_RUN / "manifest.json").read_text())
    assert "primary_metric" not in manifest["scenario"]
    assert run.scenario.primary_metric == "output_throughput"
    assert scenario_hash(run.scenario) == manifest["scenario_hash"]
    from harness.analysis.compare import compare_run

    text = render_terminal(compare_run(run))
    assert "Stars: Output throughput (tok/s) is the primary metric, tested alone" in text
    assert "The other 11 noisy rows are secondary" in text and "Holm" in text
    assert "Exact rows (the same in every unit) are not tested" in text


def test_holm_adjusted_p_values() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([]) == []


def _row(key: str, p: float | None, exact: bool = False, delta: float = 0.01) -> MetricRow:
    est = DeltaEstimate(
        "relative",
        delta,
        None if exact else delta - 0.01,
        None if exact else delta + 0.01,
        None if exact else p,
        "paired t (blocks)",
        p is not None and p < 0.05 and not exact,
        None,
        None,
        None,
        False,
        20,
        20,
        exact=exact,
    )
    return MetricRow(key, key, True, 1.0, 1.0 + delta, est)


def test_secondary_rows_wait_for_the_primary_and_exact_rows_are_not_tested() -> None:
    rows = [
        _row("output_throughput", 0.20),
        _row("mean_tpot_ms", 0.001),
        _row("acceptance_rate", None, exact=True),
    ]
    mark_family(rows, "output_throughput")
    assert [r.role for r in rows] == ["primary", "secondary", "exact"]
    assert [r.star for r in rows] == [False, False, False]  # the primary is not significant
    assert rows[1].adjusted_p == pytest.approx(0.001)
    rows = [
        _row("output_throughput", 0.01),
        _row("mean_tpot_ms", 0.001),
        _row("mean_ttft_ms", 0.03),
        _row("p99_ttft_ms", 0.04),
    ]
    mark_family(rows, "output_throughput")
    # Holm across the three secondary rows: 0.003, 0.06, 0.06.
    assert [r.star for r in rows] == [True, True, False, False]


def test_aa_tables_of_a_real_run_star_at_most_six_and_a_half_percent() -> None:
    """200 block relabellings of a real 20-block run through the shipped comparison: each of
    its 12 noisy rows alone at 5% starred at least one in ~12% of the A/A tables (the rule
    before a primary metric); the family's stars in at most 6.5%."""
    found = permute(load_run(REAL_RUN), trials=200, seed=1)
    assert found.noisy_rows == 12
    assert found.any_alone / found.trials > 0.065  # what each row alone gave
    assert found.any_star / found.trials <= 0.065, found


def _gated(deltas: list[float], se: float = 0.01, df: float = 1000.0) -> Comparison:
    """A one-candidate comparison whose rows are output throughput and latencies with the
    given relative deltas, each with a t interval of `se` on the log scale."""
    from scipy import stats as sps

    from harness.analysis.comparison import CandidateResult

    t = float(sps.t.ppf(0.975, df))
    keys = ["output_throughput", "mean_tpot_ms", "mean_ttft_ms", "mean_e2el_ms"]
    rows = []
    for key, delta in zip(keys, deltas, strict=False):
        centre = math.log1p(delta)
        est = DeltaEstimate(
            "relative",
            delta,
            math.expm1(centre - t * se),
            math.expm1(centre + t * se),
            0.5,
            "paired t (blocks)",
            False,
            None,
            None,
            None,
            False,
            40,
            40,
            design="one-engine",
            units=40,
            df=df,
            se=se,
        )
        rows.append(MetricRow(key, key, key == "output_throughput", 1.0, 1.0 + delta, est))
    cand = CandidateResult("opt", "ok", rows=rows)
    return Comparison("r", "unit", "base", "ok", [], None, [cand], [], {}, design="one-engine")


SPEC = GateSpec(
    metrics={
        "output_throughput": 0.02,
        "mean_tpot_ms": 0.02,
        "mean_ttft_ms": 0.02,
        "mean_e2el_ms": 0.02,
    },
    output_parity=False,
    implementation_proof=False,
)


def test_gate_states_its_family_and_holds_a_regression_to_holm() -> None:
    # Output throughput 2.0 se past its tolerance (one-sided p ~0.023 < 2.5% alone), the
    # latencies well inside theirs: alone a REGRESSION, across 4 metrics not.
    edge = math.log1p(-0.02)
    comparison = _gated([math.expm1(edge - 0.02), 0.0, 0.0, 0.0])
    result = judge(comparison, SPEC)
    first = result.decisions[0]
    assert first.p_regression is not None and first.p_regression < FAMILY_RATE
    assert first.verdict == "INCONCLUSIVE" and "not across the 4 gated metrics" in first.reason
    assert "family: 4 gated metric check(s)" in result.family
    assert "Holm" in render_gate_terminal(result)
    assert "Holm" in render_gate_markdown(result, comparison)
    # Far past it (p ~ 1e-6): a REGRESSION across the family too.
    result = judge(_gated([math.expm1(edge - 0.05), 0.0, 0.0, 0.0]), SPEC)
    assert result.decisions[0].verdict == "REGRESSION" and result.verdict == "REGRESSION"
    assert json.loads(json.dumps(result.to_dict()))["family"] == result.family


def test_gate_false_regressions_at_the_tolerance_across_four_metrics() -> None:
    """Four gated metrics each exactly at its tolerance (independent noise): the gate says
    REGRESSION in at most FAMILY_RATE of 2000 trials (each alone at 2.5%: ~9.6% together)."""
    rng = np.random.default_rng(7)
    edge_hi, edge_lo = math.log1p(-0.02), math.log1p(0.02)
    regressions = 0
    trials = 2000
    for _ in range(trials):
        z = rng.standard_normal(4) * 0.01
        deltas = [math.expm1(edge_hi + z[0])] + [math.expm1(edge_lo + x) for x in z[1:]]
        regressions += judge(_gated(deltas), SPEC).verdict == "REGRESSION"
    assert regressions / trials <= FAMILY_RATE + 0.007  # 2000 trials: ~2 se of margin
