"""Hangs on real engines, planted through the variant patch seam (tests/patches): vLLM's API
server stops answering during a measured pass (its event loop blocked), and TP rank 1 blocks
before a collective at TP 2 while rank 0 waits in it. Each is found by the stall watchdog within
seconds of its pass bound (shrunk here to 5 s), named in the failure line, every process of the
launch ends, the passes measured before it are kept, and the other variant's launch completes.
Two engine starts per fault (a module fixture, shared by the checks of that fault): slow tier.
A serve launch's stacks are read from its server log too (its API server and engine write
there), so the line names the front end's frame.

Measured 5 December 2026 on this 2-core machine shared with other helpers' engines.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.results.run import load_run
from harness.wire.progress import read_progress
from testkit.processes import processes_in, sessions_of, start_specbench
from tests.conftest import SCENARIOS
from tests.faults import STALL_BOUNDS_ENV, fault_env
from tests.patches.hang_serve_front_end import HANG_AT_ENV
from tests.patches.stuck_collective import TRIGGER_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BOUND_S = 5


@dataclass
class Hung:
    """A run whose "hangs" launch hung: the stored run and that launch's record."""

    run: Any
    launch: Any


def _run(tmp_path: Path, data: dict[str, Any], trigger: Path | None = None) -> Hung:
    """`specbench run` of `data` with the pass bound at BOUND_S; `trigger`: created once a
    launch has measured 2 passes. Returns the stored run and stderr, after checking that every
    process the launch started is gone."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    results = tmp_path / "results"
    proc = start_specbench(
        "run", str(path), "--results-dir", str(results), "--run-id", "r",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=fault_env({STALL_BOUNDS_ENV: f"PASS_STALL_FLOOR_S={BOUND_S}"}),
    )  # fmt: skip
    sessions: set[int] = set()
    try:
        deadline = time.monotonic() + 1200  # waits included for the machine lock
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            sessions |= sessions_of(results)
            if trigger is not None and not trigger.exists():
                for note in (results / "r" / "work").glob("hangs.*/progress.json"):
                    got = read_progress(note) or {}
                    if got.get("stage") == "measuring" and int(got.get("passes", 0)) >= 2:
                        trigger.touch()
            time.sleep(0.2)
        _, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    assert sessions and processes_in(sessions) == []
    run = load_run(results / "r")
    by_variant = {r.variant: r for r in run.runs}
    assert by_variant["baseline"].status == "ok"  # the other launch goes on
    return Hung(run, by_variant["hangs"])


@pytest.fixture(scope="module")
def serve_hang(tmp_path_factory: pytest.TempPathFactory) -> Hung:
    """The TP 1 serve scenario; the second server blocks its event loop at request 17."""
    tmp_path = tmp_path_factory.mktemp("serve-hang")
    data: dict[str, Any] = yaml.safe_load(
        (SCENARIOS / "cpu-eagle-tp2-argmax-serve.yaml").read_text()
    )
    data.pop("precision")
    data.update(name="serve-hang", tensor_parallel_size=1, repeats=4, warmup=0)
    data["engine"] = {"enforce_eager": True}
    data["workload"].update(num_prompts=8, max_tokens=16)
    # A server per variant (a patch and a swap do not mix); passes of 8 requests, no warm-up:
    # request 17 opens the hanging server's third measured pass.
    data["variants"] = {
        "baseline": {"baseline": True},
        "hangs": {
            "patch": "tests.patches.hang_serve_front_end:install",
            "env": {HANG_AT_ENV: "17"},
        },
    }
    (tmp_path / "prompts").symlink_to(SCENARIOS / "prompts")
    return _run(tmp_path, data)


def test_a_serve_front_end_that_stops_answering_is_a_stall(serve_hang: Hung) -> None:
    launch = serve_hang.launch
    assert launch.status in ("failed", "timeout") and launch.error is not None
    assert launch.error.startswith("stalled: stuck for "), launch.error
    assert "during measured pass 3 (bound " in launch.error, launch.error
    assert launch.result is not None and [p.repeat for p in launch.result.passes] == [0, 1]
    assert launch.server_log_file is not None
    server_log = (serve_hang.run.path / launch.server_log_file).read_text()
    assert 'hang_serve_front_end.py", line 20 in hang' in server_log  # its stacks were dumped
    print(f"{launch.error}\nwall {launch.wall_s:.1f} s (engine start included)")


def test_a_serve_front_end_that_stops_answering_is_named(serve_hang: Hung) -> None:
    assert "in `hang` (hang_serve_front_end.py:20, pid " in str(serve_hang.launch.error)


@pytest.fixture(scope="module")
def stuck_collective(tmp_path_factory: pytest.TempPathFactory) -> Hung:
    """The EAGLE TP 2 scenario, eager; rank 1 of the second launch blocks before its next
    collective once that launch has measured 2 passes."""
    tmp_path = tmp_path_factory.mktemp("stuck-collective")
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-eagle-tp2-argmax.yaml").read_text())
    data.update(name="stuck-collective", rounds=1, repeats=6, warmup=8, step_times=False)
    data["engine"] = {"enforce_eager": True}
    data["workload"].update(num_prompts=4, max_tokens=16)
    trigger = tmp_path / "stick"
    data["variants"] = {
        "baseline": {"baseline": True},
        "hangs": {
            "patch": "tests.patches.stuck_collective:install",
            "env": {TRIGGER_ENV: str(trigger)},
        },
    }
    return _run(tmp_path, data, trigger)


def test_a_stuck_collective_at_tp2_is_a_stall(stuck_collective: Hung) -> None:
    launch = stuck_collective.launch
    assert launch.status in ("failed", "timeout") and launch.error is not None
    assert launch.error.startswith("stalled: stuck for "), launch.error
    assert launch.result is not None and len(launch.result.passes) >= 2
    log = (stuck_collective.run.path / str(launch.log_file)).read_text()
    assert 'stuck_collective.py", line 20 in stuck' in log  # rank 1's stacks were dumped
    print(f"{launch.error}\nwall {launch.wall_s:.1f} s, {len(launch.result.passes)} passes kept")
