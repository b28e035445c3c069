"""Latency percentiles as vLLM names them: `metrics.percentiles` and
`metrics.percentile_metrics` in the scenario add rows (with their intervals) to the table and
keys to the vllm-bench files; the default adds median and P99 ITL to the seed rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest

from harness.analysis.compare import Arms, compare_records
from harness.analysis.comparison import Comparison
from harness.api import compare, load_run
from harness.config.latency import LATENCY_METRICS, LatencyMetric
from harness.config.scenario import parse_scenario, scenario_hash
from harness.errors import ScenarioError
from harness.present.vllm_bench import run_results
from harness.results.metrics import DEFAULT_PERCENTILES, metric_def, passes_frame
from harness.wire.records import PassRecord
from testkit.factory import request, run, stored_run

CHOSEN = {"percentiles": [50, 90, 99, 99.9], "percentile_metrics": ["ttft", "itl"]}


def test_the_scenario_names_percentiles_as_vllm_does(scenario_data: dict[str, Any]) -> None:
    plain = parse_scenario(scenario_data, "s.yaml")
    assert plain.metrics.keys() == [
        f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("median", "p99")
    ]
    assert DEFAULT_PERCENTILES == ("median_itl_ms", "p99_itl_ms")
    chosen = parse_scenario({**scenario_data, "metrics": CHOSEN}, "s.yaml")
    assert chosen.metrics.keys() == [
        "median_ttft_ms",
        "p90_ttft_ms",
        "p99_ttft_ms",
        "p99.9_ttft_ms",
        "median_itl_ms",
        "p90_itl_ms",
        "p99_itl_ms",
        "p99.9_itl_ms",
    ]
    # What is reported is not what is measured: the history keeps one series.
    assert scenario_hash(chosen) == scenario_hash(plain)
    label = metric_def("p99.9_itl_ms")
    assert label is not None and label.label == "P99.9 ITL (ms)" and not label.higher_is_better
    assert metric_def("p50_itl_ms") is None  # vLLM's median is median_itl_ms
    assert get_args(LatencyMetric) == LATENCY_METRICS


@pytest.mark.parametrize(
    ("metrics", "gates", "says"),
    [
        ({"percentiles": [0, 99]}, None, "metrics.percentiles"),
        ({"percentiles": [99, 99]}, None, "percentiles repeat"),
        ({"percentile_metrics": ["itl", "queue"]}, None, "metrics.percentile_metrics"),
        (
            None,
            {"p99.9_itl_ms": 0.05},
            "gates.metrics.p99.9_itl_ms: not reported; add 99.9 to "
            "metrics.percentiles and itl to metrics.percentile_metrics",
        ),
    ],
)
def test_bad_percentiles_get_one_line_naming_the_field(
    scenario_data: dict[str, Any],
    metrics: dict[str, Any] | None,
    gates: dict[str, float] | None,
    says: str,
) -> None:
    data = {
        **scenario_data,
        **({"metrics": metrics} if metrics else {}),
        **({"gates": {"metrics": gates}} if gates else {}),
    }
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    assert says in str(err.value) and "\n" not in str(err.value)
    if gates:  # chosen, the same gate is valid
        parse_scenario({**data, "metrics": CHOSEN}, "s.yaml")


def _records() -> list[Any]:
    """One engine, 8 blocks of base opt opt base; opt's gaps between tokens 20% longer."""
    rng = np.random.default_rng(1)
    passes: list[PassRecord] = []
    for block in range(8):
        for arm in ("base", "opt", "opt", "base"):
            slow = 1.2 if arm == "opt" else 1.0
            gaps = [list(rng.lognormal(np.log(0.02 * slow), 0.3, 20)) for _ in range(4)]
            reqs = [
                request(i, 0.1 * slow, 0.1 * slow + sum(g), output_tokens=21, itl_s=g)
                for i, g in enumerate(gaps)
            ]
            passes.append(
                PassRecord(
                    repeat=len(passes),
                    started_unix=0.0,
                    duration_s=1.0,
                    requests=reqs,
                    spec_decode=None,
                    workload_hash="w",
                    arm=arm,
                    block=block,
                )
            )
    return [run("base+opt", 0, 0, passes)]


def test_chosen_percentiles_are_rows_with_intervals_after_the_seed_rows() -> None:
    records = _records()
    chosen = parse_scenario(
        {
            "name": "u",
            "model": "tiny-llama",
            "batch_size": 2,
            "workload": {"num_prompts": 4, "max_tokens": 21},
            "variants": {"base": {"baseline": True}, "opt": {}},
            "metrics": CHOSEN,
        },
        "s.yaml",
    )
    frame = passes_frame(records, percentiles=chosen.metrics.keys())
    arms = Arms("base", ["opt"], design="one-engine")
    rows = compare_records(records, arms, "r", "u", frame).candidates[0].rows
    keys = [r.key for r in rows]
    assert keys[keys.index("p99_e2el_ms") + 1 :][:6] == [
        "p90_ttft_ms",
        "p99.9_ttft_ms",
        "median_itl_ms",
        "p90_itl_ms",
        "p99_itl_ms",
        "p99.9_itl_ms",
    ]
    for key in ("p99.9_itl_ms", "median_itl_ms"):
        row = next(r for r in rows if r.key == key)
        e = row.estimate
        assert e.ci_low is not None and e.ci_high is not None and e.ci_low < e.delta < e.ci_high
        assert 0.1 < e.delta < 0.3  # the candidate's gaps are 20% longer
    # Unchosen, the default still reports median and P99 ITL.
    plain = compare_records(records, arms, "r", "u").candidates[0].rows
    assert {"median_itl_ms", "p99_itl_ms"} <= {r.key for r in plain}
    assert "p99.9_itl_ms" not in {r.key for r in plain}


def test_a_stored_run_reports_and_writes_the_chosen_percentiles(tmp_path: Path) -> None:
    run_dir = stored_run(
        tmp_path,
        "pct",
        _records(),
        {},
        {"base": {"baseline": True}, "opt": {}},
        scenario={"metrics": CHOSEN},
    )
    stored = load_run(run_dir)
    comparison = compare(stored)
    assert isinstance(comparison, Comparison)
    assert "P99.9 ITL (ms)" in {r.label for r in comparison.candidates[0].rows}
    files = run_results(stored, comparison)
    assert {"p90_ttft_ms", "p99.9_itl_ms", "p50_itl_ms", "median_itl_ms"} <= set(files["opt"])
    assert "p99_tpot_ms" not in files["opt"]  # tpot was not chosen, as with vllm bench serve
    assert files["opt"]["specbench"]["percentiles"] == [50, 90, 99, 99.9]
