"""The stall watchdog on a real engine: a patch blocks vLLM's engine core for ever inside a
function during a measured pass; the launch is ended within seconds of the pass bound (not at
its timeout), its failure line names the function, file, line and process, every process of
the launch is gone, and the other launch completes."""

from __future__ import annotations

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
        deadline = time.monotonic() + 600
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            sessions |= sessions_of(results)
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
    assert stalled.status == "timeout" and stalled.error is not None
    assert stalled.error.startswith("stalled: stuck for ")
    assert "in `hang` (hang_engine_core.py:18, pid " in stalled.error
    assert "during measured pass 2 (bound 5 s)" in stalled.error
    assert stalled.wall_s < 90  # the engine's start included; its timeout_s is 300
    line = next(x for x in stdout.splitlines() if "FAILED hangs" in x)
    print(f"{line}\nthe stalled launch's wall time: {stalled.wall_s:.1f} s")
    log = (results / "r" / "logs" / "hangs.r0.log").read_text()
    assert 'hang_engine_core.py", line 18 in hang' in log
    assert sessions and processes_in(sessions) == []
