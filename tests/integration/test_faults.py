"""Fault injection through the worker seam: crashing, hanging and garbage-writing workers are
recorded as failed launches with their log tails, the other variant still completes, the CLI
exits non-zero, and no worker process (nor its children) outlives the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.engine.serve_worker import SERVER_MODULE_ENV
from harness.runner import WORKER_MODULE_ENV
from harness.store import load_results
from tests.conftest import ROOT
from tests.processes import alive, processes_in


def _scenario(tmp_path: Path, modes: dict[str, str], timeout_s: float = 60,
              repeats: int = 2) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    data: dict[str, Any] = {
        "name": "faults", "model": str(model), "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 4},
        "warmup": 0, "repeats": repeats, "timeout_s": timeout_s,
        "variants": {name: {"baseline": i == 0, "env": {"FAKE_MODE": mode}}
                     for i, (name, mode) in enumerate(modes.items())},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run_cli(tmp_path: Path, scenario: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, WORKER_MODULE_ENV: "tests.fakes.worker",
           "FAKE_PID_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir",
         str(tmp_path / "results"), "--run-id", "r"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)


def _pids(tmp_path: Path) -> list[int]:
    return [int(p) for f in tmp_path.glob("*.pids") for p in f.read_text().split()]


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [
        ("crash", "failed", "worker exited with code 17"),
        ("hang", "timeout", "worker exceeded timeout_s=3"),
        ("garbage", "failed", "worker wrote an unreadable result"),
        ("wrong-key", "failed", "worker answered for 'someone-else'"),
        ("short", "failed", "worker returned 0 passes, expected 2"),
    ],
)
def test_bad_worker_is_recorded_and_others_complete(tmp_path: Path, mode: str, status: str,
                                                    error: str) -> None:
    scenario = _scenario(tmp_path, {"good": "ok", "bad": mode}, timeout_s=3)
    result = _run_cli(tmp_path, scenario)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    results = load_results(tmp_path / "results" / "r")
    by_variant = {r.variant: r for r in results.runs}
    assert by_variant["good"].status == "ok"
    bad = by_variant["bad"]
    assert bad.status == status and bad.error is not None and error in bad.error
    if mode == "crash":
        assert bad.log_tail is not None and "engine core died" in bad.log_tail
    assert results.manifest["status"] == "failed"
    table = (results.path / "table.txt").read_text()
    assert "FAILED" in table and "FAILED bad" in table
    summary = json.loads((results.path / "summary.json").read_text())
    assert summary["comparison"]["candidates"][0]["status"] == "failed"
    time.sleep(0.2)
    assert not [p for p in _pids(tmp_path) if alive(p)]


def _start_with_a_hanging_worker(tmp_path: Path) -> subprocess.Popen[str]:
    """`specbench run` whose second launch hangs; returns once that worker is up."""
    scenario = _scenario(tmp_path, {"good": "ok", "stuck": "hang"}, timeout_s=300)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir",
         str(tmp_path / "results"), "--run-id", "r"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=_fake_env(tmp_path))
    deadline = time.monotonic() + 120
    while not (tmp_path / "stuck.r0.pids").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the hanging worker never started")
        time.sleep(0.1)
    return proc


def _fake_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, WORKER_MODULE_ENV: "tests.fakes.worker",
            "FAKE_PID_DIR": str(tmp_path)}


def test_sigint_leaves_partial_results_and_no_processes(tmp_path: Path) -> None:
    proc = _start_with_a_hanging_worker(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    results = load_results(tmp_path / "results" / "r")
    assert results.manifest["status"] == "interrupted"
    # The finished launch is kept; the one in flight is recorded as interrupted.
    assert [(r.run_key, r.status) for r in results.runs] == [("good.r0", "ok"),
                                                             ("stuck.r0", "interrupted")]
    assert results.runs[1].log_file == "logs/stuck.r0.log"
    time.sleep(0.2)
    assert not [p for p in _pids(tmp_path) if alive(p)]


def test_serve_failures_are_recorded_and_leave_no_process(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 100}))
    modes = {"good": "ok", "no-start": "exit", "errors": "error", "dies": "die"}
    data: dict[str, Any] = {
        "name": "serve-faults", "mode": "serve", "model": str(model), "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 8},
        "warmup": 0, "repeats": 2, "timeout_s": 60, "serve": {"startup_timeout_s": 30},
        "variants": {name: {"baseline": i == 0, "env": {"FAKE_SERVER_MODE": mode}}
                     for i, (name, mode) in enumerate(modes.items())},
    }
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, SERVER_MODULE_ENV: "tests.fakes.server"}
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir",
         str(tmp_path / "results"), "--run-id", "r"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    results = load_results(tmp_path / "results" / "r")
    by_variant = {r.variant: r for r in results.runs}
    good = by_variant["good"]
    assert good.status == "ok" and good.result is not None and len(good.result.passes) == 2
    assert all(r.chunk_tokens == [1] * 8 for p in good.result.passes for r in p.requests)

    no_start = by_variant["no-start"]
    assert no_start.status == "failed" and no_start.error is not None
    assert "vLLM server exited with code 3 before /health answered" in no_start.error
    assert no_start.log_tail is not None and "refusing to start" in no_start.log_tail

    errors = by_variant["errors"]
    assert errors.status == "failed" and errors.error is not None
    assert errors.error.startswith("8 of 8 requests failed (first: HTTP 500:")

    dies = by_variant["dies"]
    assert dies.status == "failed" and dies.error is not None and dies.result is not None
    assert dies.error.startswith("vLLM server died during pass 0 (exit code 9)")
    assert dies.result.server is not None and dies.result.server.died

    table = (results.path / "table.txt").read_text()
    assert all(f"FAILED {name}" in table for name in ("no-start", "errors", "dies"))
    sessions = {r.result.worker_pid for r in results.runs if r.result and r.result.worker_pid}
    assert len(sessions) == 4
    time.sleep(0.2)
    assert processes_in(sessions) == []


def test_sigkill_of_specbench_leaves_no_worker_behind(tmp_path: Path) -> None:
    """kill -9 of `specbench run` (no handler can run): the kernel tells the worker its
    parent died, and the worker ends its whole process group, its child included."""
    proc = _start_with_a_hanging_worker(tmp_path)
    try:
        pids = [int(p) for p in (tmp_path / "stuck.r0.pids").read_text().split()]
        assert all(alive(p) for p in pids)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in pids):
            assert time.monotonic() < deadline, f"left running: {[p for p in pids if alive(p)]}"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert load_results(tmp_path / "results" / "r").manifest["status"] == "running"
    # The next run in the same results folder says so and marks it abandoned.
    again = _scenario(tmp_path, {"good": "ok", "also": "ok"}, repeats=1)
    rerun = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(again), "--results-dir",
         str(tmp_path / "results"), "--run-id", "r2"],
        capture_output=True, text=True, cwd=ROOT, env=_fake_env(tmp_path), timeout=300,
        check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "found an abandoned run, now marked so: r (its specbench process" in rerun.stderr
    assert load_results(tmp_path / "results" / "r").manifest["status"] == "abandoned"
