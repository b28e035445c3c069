"""The stall watchdog: the rule (a pass past max(N × the median pass, a floor); the engine's
start and the warm-up with bounds of their own), the reading of faulthandler's dumps (from a
real process blocked in a known function), and a stalled launch ended with its place named
and no process left."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.execute import local, progress
from harness.execute.progress import (
    Stall,
    StallWatch,
    describe_stall,
    parse_dump,
    pass_bound,
    stuck_thread,
)
from harness.lifeline import session_processes
from testkit.processes import alive
from tests.conftest import ROOT


def _note(
    stage: str, passes: int, updated: float, since: float | None = 100.0, expected: int = 6
) -> dict[str, object]:
    return {
        "stage": stage,
        "passes": passes,
        "expected": expected,
        "at_least": False,
        "measuring_since_unix": since,
        "updated_unix": updated,
    }


def test_pass_bound_is_n_times_the_median_with_a_floor() -> None:
    assert pass_bound([]) == progress.PASS_STALL_FLOOR_S
    assert pass_bound([1.0, 2.0, 30.0]) == progress.PASS_STALL_FLOOR_S  # 10 × 2 s < 60 s
    assert pass_bound([9.0, 10.0, 11.0, 500.0]) == pytest.approx(progress.PASS_STALL_FACTOR * 10.5)


def test_each_phase_has_its_bound() -> None:
    watch = StallWatch(started_unix=0.0)
    start = progress.ENGINE_START_STALL_S
    assert watch.check(None, start - 1) is None
    assert watch.check(None, start + 1) == Stall("the engine start", start + 1, start, 0)
    warm = _note("warming up", 0, updated=50.0, since=None)
    assert watch.check(warm, 50.0 + progress.WARMUP_STALL_S - 1) is None
    stall = watch.check(warm, 50.0 + progress.WARMUP_STALL_S + 2)
    assert stall is not None and stall.phase == "the warm-up"


def test_a_pass_past_n_times_the_median_is_a_stall() -> None:
    watch = StallWatch(started_unix=0.0)
    # Passes of 20 s each (first since measuring began at 100): the bound is 10 × 20 s.
    assert watch.check(_note("measuring", 1, updated=120.0), 121.0) is None
    assert watch.check(_note("measuring", 3, updated=160.0), 161.0) is None  # 2 in one tick
    assert watch.durations == [20.0, 20.0, 20.0]
    assert watch.check(_note("measuring", 3, updated=160.0), 160.0 + 199.0) is None
    stall = watch.check(_note("measuring", 3, updated=160.0), 160.0 + 201.0)
    assert stall == Stall("measured pass 4", 201.0, 200.0, 3)
    # After the last pass (profiled passes, shutdown): the larger of the pass and warm-up bound.
    done = _note("measuring", 6, updated=220.0)
    assert watch.check(done, 220.0 + progress.WARMUP_STALL_S - 1) is None


# A process that blocks in a known function on its main thread, beside an idle thread.
BLOCKED = textwrap.dedent("""\
    import sys, threading, time
    from harness.lifeline import dump_stacks_on_signal
    dump_stacks_on_signal()
    idle = threading.Event()
    threading.Thread(target=idle.wait, name="idle", daemon=True).start()
    def blocked_in_here():
        print("ready", flush=True)
        while True:
            time.sleep(0.5)
    blocked_in_here()
""")


def _blocked(tmp_path: Path, log: Path) -> subprocess.Popen[bytes]:
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED)
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while b"ready" not in log.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc


def test_a_real_dump_is_read_and_the_busy_thread_named(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    proc = _blocked(tmp_path, log)
    try:
        threads = local.dump_stacks(proc.pid, 0.0, log)
    finally:
        proc.kill()
        proc.wait()
    text = log.read_text()
    assert "Current thread 0x" in text and "Thread 0x" in text
    parsed = parse_dump("noise before\n" + text + "\nnoise after\n", proc.pid)
    assert len(parsed) == len(threads) == 2
    idle = next(t for t in threads if t.idle)
    assert idle.frames[0].file.endswith("threading.py")
    thread = stuck_thread(threads)
    assert thread is not None and not thread.idle and thread.current
    top = thread.frames[0]
    assert (top.func, top.where()) == ("blocked_in_here", "blocked.py:9")
    assert [f.func for f in thread.frames] == ["blocked_in_here", "<module>"]
    line = describe_stall(Stall("measured pass 2", 61.4, 60.0, 1), thread)
    assert line.startswith(
        f"stalled: stuck for 61 s in `blocked_in_here` (blocked.py:9, "
        f"pid {proc.pid}) during measured pass 2 (bound 60 s)"
    )


def test_only_idle_threads_name_the_first_and_none_say_so() -> None:
    dump = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/x/vllm/engine.py", line 5 in run\n'
    )
    [thread] = parse_dump(dump, 7)
    assert thread.idle and stuck_thread([thread]) is thread
    assert stuck_thread([]) is None
    assert "no Python stack could be read" in describe_stall(Stall("the warm-up", 1, 1, 0), None)


WORKER = textwrap.dedent("""\
    import json, os, subprocess, sys, time
    from harness.lifeline import guard_process_group
    guard_process_group()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    now = time.time()
    note = {"stage": "measuring", "passes": 1, "expected": 4, "at_least": False,
            "measuring_since_unix": now - 0.2, "updated_unix": now}
    open(os.environ["NOTE"], "w").write(json.dumps(note))
    open(os.environ["PIDS"], "w").write(f"{os.getpid()} {child.pid}")
    def propose_forever():
        while True:
            time.sleep(0.5)
    propose_forever()
""")


def test_a_stalled_launch_is_ended_naming_where_it_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that finishes a pass, then blocks: ended at the pass floor, not the timeout,
    its stack in the log, the place named, nothing of its session left."""
    monkeypatch.setattr(progress, "PASS_STALL_FLOOR_S", 2.0)
    script, note, pids = tmp_path / "worker.py", tmp_path / "progress.json", tmp_path / "pids"
    script.write_text(WORKER)
    log = tmp_path / "w.log"
    watch = local.LaunchWatch(None, note, log, None)  # type: ignore[arg-type]
    env = {**os.environ, "NOTE": str(note), "PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    started: list[int] = []
    code, wall, timed_out = local.launch(
        [sys.executable, str(script)], env, log, 120, started.append, watch=watch
    )
    assert (code, timed_out) == (None, False) and wall < 30
    assert watch.error is not None and watch.error.startswith("stalled: stuck for ")
    assert "in `propose_forever` (worker.py:12, pid " in watch.error
    assert "during measured pass 2 (bound 2 s)" in watch.error
    assert "; 1 measured pass before it lost (the worker writes" in watch.error
    assert session_processes(started[0]) == []
    assert not [p for p in pids.read_text().split() if alive(int(p))]
