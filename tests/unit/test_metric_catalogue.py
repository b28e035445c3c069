"""The metric catalogue (harness.config.metrics) is the one place metrics are declared: the
page docs/metrics.md is its rendering, and the scenario's validators accept exactly the roles
(gate, precision, primary) it gives each metric."""

from __future__ import annotations

import re
from typing import Any

import pytest

from harness.config.metrics import (
    ADJUSTED,
    METRICS,
    PRECISION_METRICS,
    PRIMARY_METRICS,
    SLO,
    SOURCES,
    metric_def,
)
from harness.config.scenario import GateSpec, Precision, parse_scenario
from harness.errors import ScenarioError
from harness.present.catalogue import catalogue_markdown
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "metrics.md"


def test_the_page_is_the_catalogue() -> None:
    text = PAGE.read_text()
    found = re.search(r"<!-- catalogue -->\n(.*)<!-- /catalogue -->", text, re.S)
    assert found is not None, "docs/metrics.md lost its catalogue markers"
    assert found.group(1) == catalogue_markdown(), (
        "docs/metrics.md differs from harness/config/metrics.py: paste catalogue_markdown()"
    )


def test_every_metric_says_where_it_comes_from_and_keys_are_unique() -> None:
    assert all(m.source in SOURCES for m in METRICS)
    keys = [m.key for m in METRICS]
    assert len(keys) == len(set(keys))
    assert all(metric_def(k) is m for k, m in zip(keys, METRICS, strict=True))


@pytest.mark.parametrize("metric", list(METRICS), ids=lambda m: m.key)
def test_a_gate_accepts_exactly_the_metrics_the_catalogue_lets_it(metric: Any) -> None:
    if metric.gate:
        assert metric.key in GateSpec(metrics={metric.key: 0.05}).metrics
    else:
        with pytest.raises(ValueError, match="unknown metric"):
            GateSpec(metrics={metric.key: 0.05})


@pytest.mark.parametrize("metric", list(METRICS), ids=lambda m: m.key)
def test_a_precision_run_targets_exactly_the_catalogues_rows(metric: Any) -> None:
    if metric.key in PRECISION_METRICS:
        assert Precision(mde=0.02, metric=metric.key).metric == metric.key
    else:
        with pytest.raises(ValueError, match="unknown metric"):
            Precision(mde=0.02, metric=metric.key)
    assert (metric.key in PRECISION_METRICS) == (metric.gate or metric.source == ADJUSTED)


@pytest.mark.parametrize("metric", list(METRICS), ids=lambda m: m.key)
def test_a_primary_metric_is_one_the_catalogue_marks(
    metric: Any, scenario_data: dict[str, Any]
) -> None:
    scenario_data["primary_metric"] = metric.key
    if metric.primary:
        assert metric.key in PRIMARY_METRICS
        if metric.source == SLO:  # needs the scenario's objectives
            return
        assert parse_scenario(scenario_data).primary_metric == metric.key
    else:
        with pytest.raises(ScenarioError, match="primary_metric"):
            parse_scenario(scenario_data)
