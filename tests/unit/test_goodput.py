"""Goodput and SLO attainment (the scenario's slo:): vLLM's definition on hand-made requests,
the rows a run with an slo gets (with intervals, on the design's unit), and scenario hashes
unchanged for scenarios without one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.compare import compare_run
from harness.config.scenario import SLO, parse_scenario, scenario_hash
from harness.errors import ScenarioError
from harness.results.metrics import meets_slo, passes_frame
from harness.results.run import load_run
from harness.results.store import save_run_record
from harness.wire.manifest import Manifest
from harness.wire.records import PassRecord, RequestRecord, RunRecord, WorkerResult
from testkit.stored import SCENARIO, shared_launch
from tests.conftest import ROOT


def req(ttft: float, e2el: float, tokens: int = 5, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        index=0,
        prompt_tokens=4,
        output_tokens=tokens,
        ttft_s=ttft,
        e2el_s=e2el,
        finish_reason="length",
        output_token_ids=[],
        error=error,
    )


def test_a_good_request_is_vllms() -> None:
    slo = SLO(ttft_ms=100, tpot_ms=10)
    assert meets_slo(req(0.099, 0.135), slo)  # TTFT 99 ms, TPOT 9 ms: both within
    assert not meets_slo(req(0.1001, 0.135), slo)
    assert not meets_slo(req(0.05, 0.1), slo)  # TPOT 12.5 ms
    assert meets_slo(req(0.05, 5.0, tokens=1), slo)  # one token: TPOT counts as 0
    assert not meets_slo(req(0.05, 0.06, error="boom"), slo)
    assert meets_slo(req(0.05, 9.0), SLO(ttft_ms=60))  # only what is given is checked
    assert not meets_slo(req(0.05, 9.0), SLO(e2el_ms=8000))


def test_goodput_and_attainment_per_pass() -> None:
    requests = [req(0.05, 0.09), req(0.05, 0.09), req(0.2, 0.3), req(0.05, 0.06, error="x")]
    p = PassRecord(
        repeat=0,
        started_unix=0.0,
        duration_s=2.0,
        requests=requests,
        spec_decode=None,
        workload_hash="w",
    )
    run = RunRecord(
        run_key="a.r0",
        variant="a",
        round=0,
        order=0,
        status="ok",
        wall_s=1.0,
        result=WorkerResult(run_key="a.r0", status="ok", passes=[p]),
    )
    frame = passes_frame([run], SLO(ttft_ms=100))
    assert frame["goodput"].iloc[0] == pytest.approx(1.0)  # 2 good requests / 2 s
    assert frame["slo_attainment"].iloc[0] == pytest.approx(50.0)  # 2 of 4
    assert "goodput" not in passes_frame([run]).columns


def test_a_run_with_an_slo_gets_the_rows_with_intervals(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    # Each request's TTFT is 1 ms and its E2EL the pass's duration (~10 ms): an E2EL objective
    # of 10 ms lets b, 5% slower, miss it in more passes than a.
    Manifest.model_validate(
        {
            "run_id": "r",
            "status": "complete",
            "created_unix": 1.0,
            "scenario_hash": "h",
            "scenario": {**SCENARIO, "slo": {"e2el_ms": 10.3}},
            "fingerprint": {},
            "plan": {"design": "one-engine"},
        }
    ).save(run_dir)
    save_run_record(run_dir, shared_launch(0, 30, math.log(0.95), np.random.default_rng(2), 0.0))
    run = load_run(run_dir)
    (cand,) = compare_run(run).candidates
    rows = {r.key: r for r in cand.rows}
    goodput, attained = rows["goodput"], rows["slo_attainment"]
    assert goodput.label == "Goodput (req/s)" and attained.label == "SLO attainment (%)"
    assert attained.estimate.kind == "points"
    assert attained.candidate < attained.baseline
    for row in (goodput, attained):
        assert row.estimate.ci_low is not None and row.estimate.ci_high is not None
        assert row.estimate.ci_low < row.estimate.delta < row.estimate.ci_high


def test_an_slo_is_checked_and_leaves_other_hashes_alone() -> None:
    with pytest.raises(ScenarioError, match="slo"):
        parse_scenario({**SCENARIO, "slo": {}})
    with pytest.raises(ScenarioError, match="slo.ttft_ms"):
        parse_scenario({**SCENARIO, "slo": {"ttft_ms": -1}})
    # Unset, slo is not in the hash, nor is a variant's speculation: true: the scenario hashes
    # as it did before those fields existed (the golden value: specbench a12195d on this
    # fixture's scenario), so earlier runs of it stay the same comparison.
    manifest = json.loads(
        (ROOT / "results" / "fixtures" / "cpu-medusa-small" / "manifest.json").read_text()
    )
    plain = parse_scenario(manifest["scenario"])
    assert scenario_hash(plain) == "45afd2f7e8d96c13"
    off = {
        **manifest["scenario"],
        "variants": {**manifest["scenario"]["variants"], "nospec": {"speculative_config": "none"}},
    }
    assert scenario_hash(parse_scenario(off)) != scenario_hash(plain)
    with_slo = parse_scenario({**manifest["scenario"], "slo": {"ttft_ms": 50}})
    assert scenario_hash(with_slo) != scenario_hash(plain)
