"""The stall watchdog on a real engine: a patch blocks vLLM's engine core for ever inside a
function during a measured pass; the launch is ended within seconds of the pass bound (not at
its timeout), its failure line names the function, file, line and process, the pass measured
before it is kept in its record, every process of the launch is gone, and the other launch
completes. And with the watchdog's own bounds: a switched drafter that blocks in the first
warm-up pass is found by the engine's silent heartbeat and ended within 90 s of the hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.results.run import load_run
from testkit.processes import processes_in, sessions_of
from tests.conftest import ROOT, SCENARIOS
from tests.faults import STALL_BOUNDS_ENV, fault_env
from tests.patches.hang_engine_core import HANG_AT_ENV
from tests.patches.hang_propose import HANG_STARTED_ENV

pytestmark = pytest.mark.integration


def _scenario(tmp_path: Path) -> Path:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.pop("precision")
    data.update(
        name="stall",
        repeats=3,
        warmup=4,
        variants={
            "baseline": {"baseline": True},
            # 4 warm-up requests, then passes of 4: request 9 opens measured pass 2.
            "hangs": {"patch": "tests.patches.hang_engine_core:install", "env": {HANG_AT_ENV: "9"}},
        },
    )
    data["workload"].update(num_prompts=4, max_tokens=16)
    path = tmp_path / "stall.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_worker_stuck_in_a_function_is_named_and_ended(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(_scenario(tmp_path)),
            "--results-dir",
            str(results),
            "--run-id",
            "r",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fault_env({STALL_BOUNDS_ENV: "PASS_STALL_FLOOR_S=5"}),
    )
    sessions: set[int] = set()
    try:
        # The run's own deadline starts with its first launch (the machine lock may hold it
        # back behind another benchmark).
        deadline, launched = time.monotonic() + 1800, False
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            sessions |= sessions_of(results)
            if sessions and not launched:
                deadline, launched = time.monotonic() + 600, True
            time.sleep(0.5)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr.split("hangs.r0")[-1]
    run = load_run(results / "r")
    by_variant = {r.variant: r for r in run.runs}
    assert by_variant["baseline"].status == "ok"
    stalled = by_variant["hangs"]
    assert stalled.status == "failed" and stalled.error is not None
    assert stalled.error.startswith("stalled: stuck for ")
    assert "in `hang` (hang_engine_core.py:18, pid " in stalled.error
    assert "during measured pass 2 (bound 5 s)" in stalled.error
    # The pass before the stall is kept, as it ended, in the failed launch's record.
    assert stalled.error.endswith(
        "; 1 measured pass before it kept in its record (in no interval: the launch failed)"
    )
    assert stalled.result is not None and stalled.result.status == "failed"
    [kept] = stalled.result.passes
    assert kept.repeat == 0 and len(kept.requests) == 4
    assert all(r.output_tokens == 16 for r in kept.requests)
    assert stalled.wall_s < 90  # the engine's start included; its timeout_s is 300
    line = next(x for x in stdout.splitlines() if "FAILED hangs" in x)
    print(f"{line}\nthe stalled launch's wall time: {stalled.wall_s:.1f} s")
    log = (results / "r" / "logs" / "hangs.r0.log").read_text()
    assert 'hang_engine_core.py", line 18 in hang' in log
    assert sessions and processes_in(sessions) == []


def _warm_up_hang_scenario(tmp_path: Path) -> Path:
    """Two launches (a sweep's two cells), each one engine for both arms; the patch's arm
    blocks in the drafter's propose at its first warm-up pass, in the first launch only."""
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.pop("precision")
    data.update(
        name="warm-up-stall",
        repeats=2,
        warmup=4,
        design="one-engine",
        variants={
            "baseline": {"baseline": True},
            "hangs": {"patch": "tests.patches.hang_propose:install", "switchable": True},
        },
        sweep={"linked": [{"batch_size": [4, 8]}]},
    )
    data["workload"].update(num_prompts=4, max_tokens=16)
    path = tmp_path / "warm-up-stall.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_switched_function_stuck_in_the_first_warm_up_pass_is_found_within_90_s(
    tmp_path: Path,
) -> None:
    """The held-out fault (it ended only when vLLM's engine core gave up, 378 s
    later): no pass has ended yet, so no pass bound applies; the engine's heartbeat stops
    with its step, and its silence (60 s) is the stall. The watchdog's bounds as shipped."""
    results, started = tmp_path / "results", tmp_path / "hang-started"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(_warm_up_hang_scenario(tmp_path)),
            "--results-dir",
            str(results),
            "--run-id",
            "r",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fault_env({}, {**os.environ, HANG_STARTED_ENV: str(started)}),
    )
    sessions: set[int] = set()
    hung: set[int] = set()  # the sessions of the launch that hangs
    ended_unix: float | None = None
    try:
        # The machine lock may hold the run back behind other benchmarks: the run's own
        # deadline starts with its first launch.
        deadline, launched = time.monotonic() + 1800, False
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            sessions |= sessions_of(results)
            if sessions and not launched:
                deadline, launched = time.monotonic() + 900, True
            if started.exists() and not hung:
                hung = sessions_of(results)
            if hung and ended_unix is None and processes_in(hung) == []:
                ended_unix = time.time()
            time.sleep(0.5)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    run = load_run(results / "r")
    by_cell = {r.cell: r for r in run.runs}
    stalled = next(r for r in run.runs if r.status != "ok")
    [other] = [r for cell, r in by_cell.items() if cell != stalled.cell]
    assert other.status == "ok" and other.result is not None and other.result.passes
    assert stalled.status == "failed" and stalled.error is not None
    assert stalled.error.startswith("stalled: stuck for ")
    assert "in `hang` (hang_propose.py:19, pid " in stalled.error
    assert "during the warm-up (no engine step ended, bound 60 s)" in stalled.error
    assert ended_unix is not None and hung
    found_s = ended_unix - float(started.read_text())
    line = next(x for x in stdout.splitlines() if x.startswith("FAILED"))
    print(f"{line}\nthe hang to its launch's end (every process gone): {found_s:.1f} s")
    assert found_s < 90
    log = (results / "r" / stalled.log_file).read_text() if stalled.log_file else ""
    assert 'hang_propose.py", line 19 in hang' in log
    assert sessions and processes_in(sessions) == []
