"""Serve mode end to end on real vLLM OpenAI servers (tiny local models, CPU).

One session run of the EAGLE TP 2 serve scenario (one server hosting both arms, switched on
both TP ranks through the server's /collective_rpc) is shared by most assertions: a server
start costs 45-60 s here. A second run, one server per variant, adds variants whose server
refuses its arguments or some requests. A third, TP 1 scenario is interrupted with SIGINT
while its server is starting.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.compare import compare_run
from harness.present.tables import platform_line
from harness.results.metrics import passes_frame, requests_frame
from harness.results.run import load_run
from testkit.processes import (
    kill_once_engine_runs,
    processes_in,
    sessions_of,
    start_specbench,
    wait_gone,
)
from tests.conftest import ROOT, SCENARIOS
from tests.integration.test_offline_cpu import (
    CliRun,
    assert_per_request_acceptance_pools_to_the_counters,
    assert_tp2_switched_in_place,
    run_cli,
)

pytestmark = pytest.mark.integration

SERVE_SCENARIO = "cpu-eagle-tp2-argmax-serve.yaml"
PR_ROWS = (
    "Output throughput (tok/s)",
    "Total throughput (tok/s)",
    "Request throughput (req/s)",
    "Acceptance rate (%)",
    "Mean acceptance length",
    "Mean TPOT (ms)",
    "Mean ITL (ms)",
    "Mean TTFT (ms)",
    "Mean E2EL (ms)",
)


SLO_TTFT_MS = 150.0


def _scenario() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / SERVE_SCENARIO).read_text())
    return data


def _run_serve(tmp: Path, data: dict[str, Any], run_id: str) -> CliRun:
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # The scenario's prompt file is relative to the scenario: keep it resolvable.
    (tmp / "prompts").symlink_to(SCENARIOS / "prompts")
    return run_cli(path, tmp / "results", run_id)


@pytest.fixture(scope="session")
def serve_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """The shipped scenario (one-engine), 2 blocks instead of a precision target."""
    data = _scenario()
    data.pop("precision")
    data["repeats"] = 4
    # Objectives every request meets here (goodput = request throughput) and one that TTFT
    # under concurrency misses for some (checked against the per-request records).
    data["slo"] = {"tpot_ms": 10_000, "ttft_ms": SLO_TTFT_MS}
    data["metrics"] = {"percentiles": [50, 99, 99.9], "percentile_metrics": ["ttft", "itl"]}
    return _run_serve(tmp_path_factory.mktemp("serve"), data, "serve")


@pytest.fixture(scope="session")
def faults_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """One server per variant (engine changes cannot share one): the baseline and a server
    whose configuration vLLM refuses at start (a token budget per step below the batch, which
    no pre-flight check knows; it exits non-zero before /health). Requests refused by a
    server are tested against the fault server (test_faults.py): the way a real one could be
    made to refuse them (prompts beyond its context) is now refused before any launch."""
    data = _scenario()
    data.pop("precision")
    data["repeats"] = 2
    data["variants"] = {
        "baseline": data["variants"]["baseline"],
        "bad-config": {"engine": {"max_num_batched_tokens": 4}},
    }
    return _run_serve(tmp_path_factory.mktemp("serve-faults"), data, "faults")


def test_serve_run_prints_the_eagle_pr_rows(serve_run: CliRun, faults_run: CliRun) -> None:
    assert serve_run.returncode == 0, serve_run.stderr[-3000:]
    assert "Traceback" not in serve_run.stderr
    table = (serve_run.results.path / "table.md").read_text()
    for label in PR_ROWS:
        line = next(row for row in table.splitlines() if row.startswith(f"| {label} |"))
        baseline, candidate = line.split("|")[2:4]
        assert float(baseline) > 0 and float(candidate) > 0, line
    assert "Design: one-engine" in table
    assert "; prompts: the tokenizer's chat template; " in table  # jsonl text, as chat
    # The chosen latency percentiles (metrics:), each with its interval over the blocks, and
    # the same percentiles in the vllm-bench files.
    for label in ("Median ITL (ms)", "P99 ITL (ms)", "P99.9 ITL (ms)", "P99.9 TTFT (ms)"):
        line = next(row for row in table.splitlines() if row.startswith(f"| {label} |"))
        assert re.search(r"[-+]\d+\.\d+% \[[-+]\d+\.\d+, [-+]\d+\.\d+\]", line), line
    arm = json.loads((serve_run.results.path / "vllm-bench" / "local-argmax.json").read_text())
    assert arm["p99.9_itl_ms"] >= arm["p99_itl_ms"] >= arm["median_itl_ms"] > 0
    assert faults_run.returncode == 1, faults_run.stderr[-3000:]  # bad-config failed
    assert "Traceback" not in faults_run.stderr
    assert "FAILED bad-config" in faults_run.stdout
    summary = json.loads((faults_run.results.path / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["comparison"]["design"] == "launch-per-arm"


def test_goodput_and_slo_attainment_rows_are_vllms_definition(serve_run: CliRun) -> None:
    """vllm bench serve --goodput's good request, counted from the streamed records: each
    pass's goodput is its requests within the TTFT objective per second of the pass."""
    table = (serve_run.results.path / "table.md").read_text()
    assert "| Goodput (req/s) |" in table and "| SLO attainment (%) |" in table
    passes, requests = serve_run.results.passes, serve_run.results.requests
    good = (
        requests.assign(good=requests["ttft_ms"] <= SLO_TTFT_MS)
        .groupby(["run_key", "repeat"])["good"]
        .agg(["sum", "size"])
    )
    merged = passes.set_index(["run_key", "repeat"]).join(good)
    assert (merged["goodput"] - merged["sum"] / merged["duration_s"]).abs().max() < 1e-9
    assert (merged["slo_attainment"] - 100 * merged["sum"] / merged["size"]).abs().max() < 1e-9


def test_serve_per_request_acceptance_pools_to_the_counters(serve_run: CliRun) -> None:
    """In serve mode the per-request metrics ride on the final usage chunk."""
    assert_per_request_acceptance_pools_to_the_counters(serve_run)


def test_every_streamed_request_is_complete(serve_run: CliRun) -> None:
    scenario = _scenario()
    prompts = (SCENARIOS / scenario["workload"]["path"]).read_text().splitlines()
    good = [r for r in serve_run.results.runs if r.status == "ok"]
    assert [r.status for r in good] == ["ok"]
    frame = requests_frame(good)
    assert len(frame) == 8 * scenario["workload"]["num_prompts"]  # 2 blocks of A B B A
    assert frame["error"].isna().all()
    assert (frame["output_tokens"] == scenario["workload"]["max_tokens"]).all()
    for run in good:
        assert run.result is not None
        for p in run.result.passes:
            for r in p.requests:
                # usage, the chunks and the token ids all agree; one gap between two chunks
                assert r.chunk_tokens is not None and r.itl_s is not None
                assert sum(r.chunk_tokens) == r.output_tokens == len(r.output_token_ids)
                assert len(r.itl_s) == len(r.chunk_tokens) - 1
                assert r.ttft_s is not None and r.e2el_s is not None
                assert 0 < r.ttft_s <= r.e2el_s
                # usage's prompt tokens: one per word in the built-in tokenizer, no BOS
                words = len(json.loads(prompts[r.index])["prompt"].split())
                assert r.prompt_tokens == words
    assert (frame["tokens_per_chunk"] > 1).any(), "no chunk carried an accepted draft token"


def test_counters_are_per_pass_deltas_that_match_the_stream(serve_run: CliRun) -> None:
    good = [r for r in serve_run.results.runs if r.status == "ok"]
    passes = passes_frame(good)
    assert (passes["num_accepted_tokens"] > 0).all()
    assert (passes["num_draft_tokens"] == 3 * passes["num_drafts"]).all()
    drafts = passes.sort_values("repeat")["num_drafts"].to_numpy()
    assert len(drafts) == 8
    # Cumulative counters would grow 2x, 3x, ...; per-pass deltas stay level.
    assert drafts.max() < 1.3 * drafts.min(), drafts
    for run in good:
        assert run.result is not None
        for p in run.result.passes:
            assert p.spec_decode is not None
            chunks = sum(len(r.chunk_tokens or []) for r in p.requests)
            # One chunk per prefill plus at most one per verify step (the server may merge
            # steps into one chunk, never split one).
            assert chunks <= len(p.requests) + p.spec_decode.num_drafts


def test_serve_switch_ran_both_paths_in_both_tp_ranks(serve_run: CliRun) -> None:
    """One server: each pass's reports, fetched through /collective_rpc right after it, come
    from the same two TP worker processes and show the path of the pass's arm."""
    assert_tp2_switched_in_place(serve_run)
    comparison = compare_run(serve_run.results)
    parity = {c.name: c.parity for c in comparison.candidates}
    local = parity["local-argmax"]
    assert local is not None and local.fraction == 1.0
    # The server's two TP ranks reported one platform (V1, no CUDA graphs, on this CPU).
    good = [r for r in serve_run.results.runs if r.status == "ok"]
    assert good and all(
        r.result is not None
        and r.result.platform is not None
        and r.result.platform.runner == "V1"
        and r.result.platform.cudagraph_mode == "NONE"
        for r in good
    )
    platform = platform_line(comparison)
    assert platform is not None and platform.startswith("runner V1")


def test_server_logs_are_kept_and_servers_stopped_cleanly(
    serve_run: CliRun, faults_run: CliRun
) -> None:
    runs = serve_run.results.runs + faults_run.results.runs
    for run in runs:
        assert run.server_log_file is not None
        folder = serve_run if run in serve_run.results.runs else faults_run
        assert (folder.results.path / run.server_log_file).is_file()
        if run.status == "ok":
            assert run.result is not None and run.result.server is not None
            server = run.result.server
            assert server.url.startswith("http://127.0.0.1:") and not server.died
            assert server.exit_code == 0  # SIGTERM: vLLM shut its engine down cleanly
            assert server.healthy_after_s is not None and server.healthy_after_s > 0
    worker_sessions = {
        r.result.worker_pid
        for r in runs
        if r.result is not None and r.result.worker_pid is not None
    }
    assert len(worker_sessions) == 3
    assert processes_in(worker_sessions) == []


def test_server_with_a_bad_argument_is_a_failed_launch(faults_run: CliRun) -> None:
    bad = next(r for r in faults_run.results.runs if r.variant == "bad-config")
    assert bad.status == "failed" and bad.error is not None
    assert "vLLM server exited with code" in bad.error and "before /health" in bad.error
    assert bad.log_tail is not None and "max_num_batched_tokens (4)" in bad.log_tail
    assert bad.result is not None and bad.result.server is not None
    assert "--max-num-batched-tokens" in bad.result.server.command


def _tp1_scenario(tmp_path: Path, name: str) -> Path:
    """The serve scenario at TP 1, eager, one short pass: a quick server to interrupt."""
    data = _scenario()
    data.pop("precision")
    data.update(name=name, tensor_parallel_size=1, repeats=1, warmup=0)
    data["engine"] = {"enforce_eager": True}
    (tmp_path / "prompts").symlink_to(SCENARIOS / "prompts")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_sigint_stops_the_server_and_keeps_partial_results(tmp_path: Path) -> None:
    path = _tp1_scenario(tmp_path, "serve-sigint")
    results = tmp_path / "results"
    proc = start_specbench(
        "run",
        str(path),
        "--results-dir",
        str(results),
        "--run-id",
        "r",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        # Interrupt once vLLM's engine core exists: the hardest moment to leave nothing behind.
        sessions: set[int] = set()
        while not any("EngineCor" in p for p in processes_in(sessions)):  # comm: 15 chars
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server's engine never started"
            time.sleep(0.5)
            sessions |= sessions_of(results)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_in(sessions) == []
    loaded = load_run(results / "r")
    assert loaded.manifest["status"] == "interrupted"
    assert [(r.run_key, r.status) for r in loaded.runs] == [
        ("baseline+local-argmax.r0", "interrupted")
    ]
    record = loaded.runs[0]
    assert record.server_log_file is not None
    assert (loaded.path / record.server_log_file).read_text().strip()
    report = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(loaded.path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert "Traceback" not in report.stderr
    assert "interrupted" in (report.stdout + report.stderr)


def test_request_rate_arrivals_are_vllms_seeded_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals come from vLLM's own get_request (imported in the worker, hence here), seeded:
    every variant gets the same schedule. Sleeps are recorded instead of slept."""
    import asyncio

    from harness.engine.serve_worker import vllm_arrivals

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")  # as device_env sets it for the worker
    from harness.config.scenario import ServeSettings

    def schedule(load: ServeSettings, seed: int) -> list[float]:
        waits: list[float] = []

        async def record(delay: float, *_args: object) -> None:
            waits.append(delay)

        async def collect() -> list[int]:
            return [i async for i in vllm_arrivals(50, load, seed)]

        with monkeypatch.context() as patch:
            patch.setattr(asyncio, "sleep", record)
            assert asyncio.run(collect()) == list(range(50))
        return waits

    poisson = ServeSettings(request_rate=100.0)
    first = schedule(poisson, seed=3)
    assert first == pytest.approx(schedule(poisson, seed=3), abs=2e-3)  # same seed, same times
    assert first != pytest.approx(schedule(poisson, seed=4), abs=2e-3)
    # vLLM rescales the gaps so that n requests span n / rate seconds.
    assert max(first) == pytest.approx(50 / 100.0, abs=0.01)
    gaps = [b - a for a, b in zip(first[:-1], first[1:], strict=True)]
    even = ServeSettings(request_rate=100.0, burstiness=1000.0)
    even_times = schedule(even, seed=3)
    even_gaps = [b - a for a, b in zip(even_times[:-1], even_times[1:], strict=True)]
    spread = max(gaps) - min(gaps)
    assert max(even_gaps) - min(even_gaps) < spread / 5  # high burstiness: nearly even gaps


def test_sigkill_of_specbench_stops_the_server_and_its_engine(tmp_path: Path) -> None:
    """kill -9 of `specbench run` while the server's engine core starts: the API server, its
    engine core and the worker are all gone within seconds (PR_SET_PDEATHSIG on the worker,
    which ends its whole process group)."""
    path = _tp1_scenario(tmp_path, "serve-sigkill")
    wait_gone(kill_once_engine_runs(path, tmp_path / "results"))
