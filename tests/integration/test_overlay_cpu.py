"""A developer's own change, as a diff, overlaid in one real vLLM engine on this CPU: seed 000's
pre-PR Medusa propose against the installed one, the EAGLE argmax branch at TP 2 on both
ranks, and a change off the scenario's path (refused before measuring, named). Each engine
starts once and is shared by the assertions on it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.compare import compare_run
from harness.errors import ExitCode
from tests.conftest import SCENARIOS
from tests.integration.test_offline_cpu import CliRun, run_cli

pytestmark = pytest.mark.integration

DIFFS = SCENARIOS / "diffs"
PROPOSE = "vllm.v1.spec_decode.medusa:MedusaProposer.propose"
GREEDY = "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer._greedy_sample"


def shipped(name: str, tmp: Path, run_id: str, **changes: Any) -> CliRun:
    """A shipped overlay scenario, its diffs made absolute, some fields changed."""
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / name).read_text())
    data.pop("precision", None)
    data.update(changes)
    for variant in data["variants"].values():
        if "diff" in variant:
            variant["diff"] = str((SCENARIOS / variant["diff"]).resolve())
    path = tmp / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_cli(path, tmp / "results", run_id)


@pytest.fixture(scope="module")
def medusa_overlay(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return shipped(
        "cpu-medusa-overlay.yaml",
        tmp_path_factory.mktemp("ov-medusa"),
        "ov-medusa",
        repeats=4,
        warmup=8,
    )


def overlay_reports(run: CliRun) -> list[tuple[str, list[Any]]]:
    """(arm, its overlay reports) of every pass."""
    out = []
    for record in run.results.runs:
        assert record.result is not None
        for p in record.result.passes:
            assert p.arm is not None
            out.append((p.arm, [r for r in p.impl_reports or [] if r.implementation == "overlay"]))
    return out


def test_seed_000_as_a_diff_runs_both_proposers_in_one_engine(medusa_overlay: CliRun) -> None:
    run = medusa_overlay
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.results.runs) == 1  # one engine hosted both arms
    passes = overlay_reports(run)
    assert len(passes) == 8
    for arm, reports in passes:
        assert reports, f"a {arm} pass has no overlay report"
        for r in reports:
            # Per pass and process: the overlaid function ran, under this pass's arm, and
            # what it returned is the version's own: the diff's list, the installed tensor.
            assert r.choice == arm
            assert r.paths.get(PROPOSE, 0) > 0
            assert r.details["overlaid"] == [PROPOSE]
            returned = r.details["returned MedusaProposer.propose"]
            assert returned == ("list" if arm == "baseline" else "Tensor"), (arm, returned)


def test_seed_000_overlay_keeps_outputs_and_says_what_ran(medusa_overlay: CliRun) -> None:
    run = medusa_overlay
    comparison = compare_run(run.results)
    (cand,) = comparison.candidates
    assert cand.parity is not None and cand.parity.identical == cand.parity.compared > 0
    assert not comparison.unproven and not comparison.discarded
    table = (run.results.path / "table.md").read_text()
    diff = DIFFS / "medusa-propose-tolist.diff"
    sha = hashlib.sha256(diff.read_bytes()).hexdigest()
    assert (
        f"baseline: overlay: 1 function (MedusaProposer.propose) from "
        f"medusa-propose-tolist.diff (sha256 {sha[:12]})"
    ) in table
    assert f"workers ran: overlay:optimized -> {PROPOSE}" in table
    # The record keeps the change's identity and the classification.
    manifest = json.loads((run.results.path / "manifest.json").read_text())
    overlay = manifest["plan"]["runs"][0]["overlay"]
    assert overlay["arms"][0]["change"]["sha256"] == sha
    assert manifest["plan"]["overlays"]["baseline"] == [
        "vllm/v1/spec_decode/medusa.py: MedusaProposer.propose: body changed"
    ]


def test_a_change_off_the_scenarios_path_is_refused_before_measuring_naming_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The EAGLE proposer's _greedy_sample never runs in a Medusa engine: the check after the
    # warm-up says so before the first measured block, not after the run.
    run = shipped(
        "cpu-medusa-overlay.yaml",
        tmp_path_factory.mktemp("ov-off"),
        "ov-off",
        repeats=2,
        warmup=4,
        variants={
            "baseline": {"baseline": True},
            "branch": {"diff": str(DIFFS / "eagle-local-argmax.diff")},
        },
    )
    assert run.returncode == ExitCode.RUN_FAILED, run.stderr[-3000:]
    assert (
        "overlay refused before the first measured block: overlay ran 0 times: "
        "SpecDecodeBaseProposer._greedy_sample (vllm.v1.spec_decode.llm_base_proposer): "
        "your change is not on this scenario's path"
    ) in " ".join(run.stdout.split())
    (record,) = run.results.runs
    assert record.result is not None and record.result.passes == []


def test_eagle_argmax_branch_at_tp2_is_proven_on_both_ranks(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = shipped(
        "cpu-eagle-tp2-overlay.yaml",
        tmp_path_factory.mktemp("ov-eagle"),
        "ov-eagle",
        repeats=2,
        warmup=4,
        engine={"enforce_eager": True},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    passes = overlay_reports(run)
    assert {arm for arm, _ in passes} == {"baseline", "local-argmax"}
    for arm, reports in passes:
        ranks = {r.tp_rank: r for r in reports}
        assert set(ranks) == {0, 1}, (arm, ranks)
        for r in ranks.values():
            assert r.choice == arm and r.paths.get(GREEDY, 0) > 0
    comparison = compare_run(run.results)
    (cand,) = comparison.candidates
    assert cand.parity is not None and cand.parity.identical == cand.parity.compared
