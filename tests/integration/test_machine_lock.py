"""One benchmark at a time per machine, through `specbench run` with the fake
worker (no engine): while another process holds the machine's lock a run waits and says for
whom and since when, then runs; `--no-wait` refuses in one line before any run folder
exists; `--shared-machine` runs beside it and the table says so; a holder killed by SIGKILL
releases it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import ExitCode
from harness.execute.local import WORKER_MODULE_ENV
from testkit.scenarios import fault_scenario
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.engine_free]  # fake workers, no engine

HOLD = """
import sys, time
from harness.machine import machine
with machine("a test benchmark") as held:
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        WORKER_MODULE_ENV: "tests.fakes.worker",
        "FAKE_PID_DIR": str(tmp_path),
        "SPECBENCH_MACHINE_LOCK": str(tmp_path / "machine.lock"),
    }


def _holder(tmp_path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(seconds)],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _run(tmp_path: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    scenario = fault_scenario(tmp_path, {"a": "ok", "b": "ok"}, repeats=1)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(scenario),
            "--results-dir",
            str(tmp_path / "results"),
            "--run-id",
            run_id,
            "--rows",
            "all",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=300,
        check=False,
    )


def test_a_second_run_waits_for_the_first_then_runs(tmp_path: Path) -> None:
    # Held 8 s: the run's own start (Python, the plan, pre-flight) took 3 s under the unit
    # tier's load in a fresh-clone CI, which left it waiting 1 s of a 4 s hold.
    holder = _holder(tmp_path, 8.0)
    try:
        t = time.monotonic()
        run = _run(tmp_path, "waited")
        assert run.returncode == 0, run.stderr
        assert time.monotonic() - t >= 2.0
        line = next(x for x in run.stderr.splitlines() if "waiting for the machine" in x)
        assert f"a test benchmark (pid {holder.pid} on " in line and " since " in line
        manifest = json.loads((tmp_path / "results" / "waited" / "manifest.json").read_text())
        assert manifest["machine"]["waited_for"].startswith("a test benchmark")
        assert manifest["machine"]["waited_s"] >= 2.0 and not manifest["machine"]["shared"]
        assert "Machine: waited " in run.stdout
    finally:
        holder.wait(timeout=30)


def test_no_wait_refuses_before_any_folder_and_shared_runs_beside(tmp_path: Path) -> None:
    holder = _holder(tmp_path, 120.0)
    try:
        busy = _run(tmp_path, "busy", "--no-wait")
        assert busy.returncode == int(ExitCode.BUSY), busy.stderr
        [line] = busy.stderr.strip().splitlines()  # one line, nothing else
        assert (
            line.startswith(
                f"specbench: error: the machine is busy: a test benchmark (pid {holder.pid} on "
            )
            and "--shared-machine" in line
        )
        assert not (tmp_path / "results" / "busy").exists()
        shared = _run(tmp_path, "shared", "--shared-machine")
        assert shared.returncode == 0, shared.stderr
        assert "Machine: shared (--shared-machine)" in shared.stdout
        manifest = json.loads((tmp_path / "results" / "shared" / "manifest.json").read_text())
        assert manifest["machine"]["shared"] is True
        # A holder killed outright releases the machine: the next run does not wait.
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        after = _run(tmp_path, "after", "--no-wait")
        assert after.returncode == 0, after.stderr
        assert "waiting for the machine" not in after.stderr and "Machine:" not in after.stdout
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
