"""Both CPU scenarios end to end through the CLI on real vLLM (tiny local models).

Each real run is started once per session and shared by many assertions: an engine start
costs about 35 s here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.compare import compare_results
from harness.metrics import passes_frame, requests_frame
from harness.records import SCHEMA_VERSION, ImplReport, WorkerResult
from harness.store import RunResults, load_results
from tests.conftest import ROOT, SCENARIOS

pytestmark = pytest.mark.integration


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    results: RunResults


def run_cli(scenario: Path, results_dir: Path, run_id: str) -> CliRun:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir",
         str(results_dir), "--run-id", run_id],
        capture_output=True, text=True, cwd=ROOT, timeout=1800, check=False,
        env={**os.environ},
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr,
                  load_results(results_dir / run_id))


@pytest.fixture(scope="session")
def medusa_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return run_cli(SCENARIOS / "cpu-medusa-proposer.yaml",
                   tmp_path_factory.mktemp("medusa"), "medusa")


@pytest.fixture(scope="session")
def eagle_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return run_cli(SCENARIOS / "cpu-eagle-tp2-argmax.yaml",
                   tmp_path_factory.mktemp("eagle"), "eagle")


def _scenario(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / name).read_text())
    return data


# --- the Medusa proposer scenario (TP 1) -------------------------------------------------


def test_medusa_cli_succeeds_and_prints_the_table(medusa_run: CliRun) -> None:
    assert medusa_run.returncode == 0, medusa_run.stderr[-3000:]
    assert "Traceback" not in medusa_run.stderr
    out = medusa_run.stdout
    for label in ("Output throughput (tok/s)", "Total throughput (tok/s)",
                  "Request throughput (req/s)", "Acceptance rate (%)", "Mean acceptance length",
                  "Mean TPOT (ms)", "Mean TTFT (ms)", "Mean E2EL (ms)",
                  "Acceptance at position 0 (%)", "Output parity vs baseline"):
        assert label in out
    assert out.lstrip().splitlines()[1].startswith("┌")
    path = medusa_run.results.path
    assert (path / "table.md").read_text().count("| Output throughput (tok/s) |") == 1
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["comparison"]["candidates"][0]["name"] == "optimized"


def test_medusa_every_request_completed_with_max_tokens(medusa_run: CliRun) -> None:
    scenario = _scenario("cpu-medusa-proposer.yaml")
    requests = requests_frame(medusa_run.results.runs)
    workload = scenario["workload"]
    per_variant = len(requests) / 2
    assert per_variant == workload["num_prompts"] * scenario["repeats"] * scenario["rounds"]
    assert requests["error"].isna().all()
    assert (requests["output_tokens"] == workload["max_tokens"]).all()  # ignore_eos
    assert (requests["prompt_tokens"] == workload["input_len"]).all()
    assert (requests["ttft_ms"] > 0).all() and (requests["e2el_ms"] >= requests["ttft_ms"]).all()


def test_medusa_drafts_accept_for_real(medusa_run: CliRun) -> None:
    passes = passes_frame(medusa_run.results.runs)
    assert (passes["num_accepted_tokens"] > 0).all()
    assert (passes["acceptance_rate"] > 0).all()
    # Medusa proposes num_speculative_tokens per draft step.
    assert (passes["num_draft_tokens"] == 3 * passes["num_drafts"]).all()
    assert (passes["num_accepted_tokens"] <= passes["num_draft_tokens"]).all()


def test_medusa_repeats_do_not_double_count_counters(medusa_run: CliRun) -> None:
    passes = passes_frame(medusa_run.results.runs)
    for _, arm in passes.groupby("run_key"):
        drafts = arm.sort_values("repeat")["num_draft_tokens"].to_numpy()
        assert len(drafts) == 3
        # Cumulative counters would grow ~2x and ~3x; per-pass deltas stay level.
        assert drafts.max() < 1.3 * drafts.min(), drafts
        first = arm.sort_values("repeat").iloc[0]
        # Each pass generates the same tokens: accepted tokens bounded by what was generated.
        assert first["num_accepted_tokens"] < first["output_tokens"]


def test_medusa_greedy_outputs_identical_between_proposers(medusa_run: CliRun) -> None:
    scenario = _scenario("cpu-medusa-proposer.yaml")
    comparison = compare_results(medusa_run.results)
    parity = comparison.candidates[0].parity
    assert parity is not None
    assert parity.compared == (scenario["workload"]["num_prompts"] * scenario["repeats"]
                               * scenario["rounds"])
    assert parity.fraction == 1.0 and parity.first_divergence is None


def launches_with_reports(run: CliRun, variant: str) -> list[tuple[WorkerResult, list[ImplReport]]]:
    """Every launch of `variant` with the implementation reports its vLLM processes wrote."""
    launches = []
    for record in run.results.runs:
        if record.variant == variant:
            assert record.result is not None, record.run_key
            launches.append((record.result, record.result.impl_reports))
    assert launches, f"no launch of {variant}"
    return launches


def test_medusa_manifest_shows_the_proposer_that_ran_in_the_worker(medusa_run: CliRun) -> None:
    for variant, path in (("baseline", "medusa.propose.tolist"),
                          ("optimized", "medusa.propose.tensor")):
        for result, reports in launches_with_reports(medusa_run, variant):
            assert reports, f"{variant}: no implementation report"
            assert {r.path for r in reports} == {path}
            assert all(r.matches_choice and (r.calls or 0) > 0 for r in reports)
            # Reported by vLLM's engine processes, not inferred in the harness's worker.
            assert all(r.pid != result.worker_pid for r in reports)
    assert compare_results(medusa_run.results).warnings == []


def test_medusa_manifest_fingerprint(medusa_run: CliRun) -> None:
    m = medusa_run.results.manifest
    fp = m["fingerprint"]
    assert m["schema_version"] == SCHEMA_VERSION and m["status"] == "complete"
    assert fp["vllm"] == "0.32.0" and fp["torch"].startswith("2.13.0")
    assert fp["cpu_count"] >= 1 and fp["compat_id"] and fp["scenario_hash"] == m["scenario_hash"]
    result = medusa_run.results.runs[0].result
    assert result is not None and result.engine_versions["vllm"] == "0.32.0"
    assert set(result.resolved_models) == {"tiny-llama", "tiny-llama-medusa"}


# --- the EAGLE TP 2 argmax scenario ------------------------------------------------------


def test_eagle_tp2_runs_and_accepts(eagle_run: CliRun) -> None:
    assert eagle_run.returncode == 0, eagle_run.stderr[-3000:]
    scenario = _scenario("cpu-eagle-tp2-argmax.yaml")
    passes = passes_frame(eagle_run.results.runs)
    assert len(passes) == 2 * scenario["repeats"] * scenario["rounds"]
    assert (passes["num_accepted_tokens"] > 0).all()
    requests = requests_frame(eagle_run.results.runs)
    assert (requests["output_tokens"] == 32).all() and requests["error"].isna().all()


def test_eagle_tp2_each_rank_ran_its_argmax_path(eagle_run: CliRun) -> None:
    for variant, path in (("baseline", "eagle.allgather_argmax"),
                          ("local-argmax", "eagle.local_argmax")):
        for _, reports in launches_with_reports(eagle_run, variant):
            assert sorted(r.tp_rank for r in reports) == [0, 1]
            assert {r.path for r in reports} == {path}
            assert all(r.matches_choice for r in reports)


def test_eagle_local_argmax_matches_allgather_outputs(eagle_run: CliRun) -> None:
    parity = compare_results(eagle_run.results).candidates[0].parity
    assert parity is not None and parity.fraction == 1.0


# --- a deliberately broken variant -------------------------------------------------------


def test_broken_variant_is_recorded_while_the_other_completes(tmp_path: Path) -> None:
    data = _scenario("cpu-medusa-proposer.yaml")
    data["name"] = "broken-variant"
    data["repeats"] = 1
    data["workload"].update(num_prompts=4, max_tokens=16)
    data["variants"] = {
        "baseline": {"baseline": True},
        # A real engine failure: vLLM refuses a draft length it cannot have.
        "broken": {"speculative_config": {"num_speculative_tokens": 0}},
    }
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run = run_cli(path, tmp_path / "results", "broken")
    assert run.returncode == 1
    assert "Traceback" not in run.stderr.split("specbench: [2/2]")[-1]
    by_variant = {r.variant: r for r in run.results.runs}
    assert by_variant["baseline"].status == "ok"
    broken = by_variant["broken"]
    assert broken.status == "failed" and broken.error and broken.log_tail
    assert broken.exit_code not in (0, None)
    assert "FAILED" in run.stdout and "FAILED broken" in run.stdout
    assert run.results.manifest["status"] == "failed"
