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
from typing import Any

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
from harness.wire.progress import keep_pass, read_kept_passes
from harness.wire.protocol import PASSES_ENV
from harness.wire.records import PassRecord, RequestRecord
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


@pytest.mark.parametrize("elsewhere", [False, True], ids=["own log", "server log"])
def test_a_real_dump_is_read_and_the_busy_thread_named(tmp_path: Path, elsewhere: bool) -> None:
    """Read from whichever of the launch's logs the process writes to: a serve launch's
    server and engine processes write to the server log, not the worker's."""
    log = tmp_path / "worker.log"
    other = tmp_path / "other.log"
    other.write_text("some earlier lines\n")
    proc = _blocked(tmp_path, log)
    try:
        threads = local.dump_stacks(proc.pid, 0.0, [other, log] if elsewhere else [log])
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
    assert session_processes(started[0]) == []
    assert not [p for p in pids.read_text().split() if alive(int(p))]


# --- the warm-up's passes and the engine's heartbeat ---------------------------------------


def _warm(done: int, updated: float, since: float = 100.0) -> dict[str, object]:
    return {
        "stage": "warming up",
        "passes": 0,
        "expected": 6,
        "warmup_passes": done,
        "warmup_since_unix": since,
        "updated_unix": updated,
    }


def test_warm_up_passes_are_bounded_like_measured_ones() -> None:
    """Once a checked warm-up pass has ended, the next one may take max(N × the median
    warm-up pass, the floor), not the warm-up's fixed 15 min; the first measured pass is
    bounded by the warm-up passes' median while none of its own has ended."""
    watch = StallWatch(started_unix=0.0)
    floor = progress.PASS_STALL_FLOOR_S
    assert watch.check(_warm(0, 116.0), 116.0 + floor + 5) is None  # the fixed bound holds
    assert watch.check(_warm(2, 120.0, 116.0), 121.0) is None  # two passes of 2 s in one tick
    assert watch.warm.durations == [2.0, 2.0]
    assert watch.check(_warm(2, 120.0, 116.0), 120.0 + floor - 1) is None
    stall = watch.check(_warm(2, 120.0, 116.0), 120.0 + floor + 1)
    assert stall == Stall("warm-up pass 3", floor + 1, floor, 0)
    # Passes of 30 s: the bound is 10 × 30 s, and the first measured pass inherits it.
    slow = StallWatch(started_unix=0.0)
    slow.check(_warm(1, 130.0), 130.0)
    assert slow.check(_warm(1, 130.0), 130.0 + 299.0) is None
    measuring = {**_note("measuring", 0, updated=131.0), "warmup_passes": 1}
    assert slow.check(measuring, 131.0 + 299.0) is None
    stall = slow.check(measuring, 131.0 + 301.0)
    assert stall is not None and stall.phase == "warm-up pass 2" and stall.bound_s == 300.0


def test_a_silent_engine_is_a_stall_in_any_phase_after_its_start() -> None:
    """No engine step ended for max(N × the median step, the floor) since the later of the
    last beat and the worker's last note: a stall, in the warm-up's first pass (no median
    yet) as in a measured pass. Without a heartbeat only the pass bounds hold; after the last
    pass (shutdown runs no step) the heartbeat is not asked for."""
    floor = progress.HEARTBEAT_STALL_FLOOR_S
    warm = _warm(0, 100.0)
    beat = {"unix": 110.0, "steps": 40, "median_step_s": 0.01}
    watch = StallWatch(started_unix=0.0)
    assert watch.check(warm, 110.0 + floor - 1, beat) is None
    stall = watch.check(warm, 110.0 + floor + 2, beat)
    assert stall == Stall("the warm-up", floor + 2, floor, 0, progress.QUIET_ENGINE)
    assert watch.check(warm, 110.0 + floor + 2, None) is None  # no heartbeat: 15 min
    # A later note counts as progress (between passes no step runs).
    assert watch.check(_warm(0, 150.0), 110.0 + floor + 2, beat) is None
    # Slow steps widen the bound: 10 × 9 s.
    slow = {**beat, "median_step_s": 9.0}
    assert StallWatch(0.0).check(warm, 110.0 + 89.0, slow) is None
    assert StallWatch(0.0).check(warm, 110.0 + 91.0, slow) is not None
    # A measured pass: the heartbeat fires long before the pass bound would.
    measured = _note("measuring", 2, updated=200.0)
    stall = StallWatch(0.0).check(measured, 110.0 + 200.0, {**beat, "unix": 240.0})
    assert stall is not None and stall.rule == progress.QUIET_ENGINE
    assert stall.phase == "measured pass 3" and stall.stuck_s == pytest.approx(70.0)
    finishing = {**measured, "stage": "finishing"}
    assert StallWatch(0.0).check(finishing, 200.0 + 120.0, beat) is None
    line = describe_stall(stall, None)
    assert "during measured pass 3 (no engine step ended, bound 60 s)" in line


def test_the_heartbeat_beats_at_its_first_step_then_at_most_every_second() -> None:
    from harness.engine.steptimes import Heartbeat, beating

    now = [0.0]
    beats: list[tuple[int, float | None]] = []
    heart = Heartbeat(lambda steps, median: beats.append((steps, median)), 1.0, lambda: now[0])

    def step(seconds: float) -> None:
        now[0] += seconds

    timed = beating(step, heart)
    timed(0.25)
    assert beats == [(0, None)]  # the first start: this process runs the engine
    for _ in range(3):
        timed(0.25)
    assert beats == [(0, None), (4, 0.25)]  # a second after the first beat
    timed(0.5)
    timed(0.5)
    assert beats[-1] == (6, 0.25)  # the median of the last steps

    def fails() -> None:
        now[0] += 5.0
        raise RuntimeError("a step that raised")

    with pytest.raises(RuntimeError):
        beating(fails, heart)()
    assert len(beats) == 3  # no sign of life from a step that did not end


# --- the passes of a launch that never wrote its result ----------------------------------


def _pass(i: int, arm: str | None = None) -> PassRecord:
    request = RequestRecord(
        index=0,
        prompt_tokens=8,
        output_tokens=16,
        ttft_s=0.01,
        e2el_s=0.1,
        finish_reason="length",
        output_token_ids=[1] * 16,
    )
    return PassRecord(
        repeat=i,
        started_unix=1000.0 + i,
        duration_s=0.5,
        requests=[request],
        spec_decode=None,
        workload_hash="w",
        arm=arm,
    )


def test_kept_passes_survive_a_torn_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "passes.jsonl"
    keep_pass(_pass(0), warmup=True)  # no PASSES_ENV: nothing
    assert not kept.exists()
    monkeypatch.setenv(PASSES_ENV, str(kept))
    keep_pass(_pass(0), warmup=True)
    keep_pass(_pass(0))
    keep_pass(_pass(1))
    with kept.open("ab") as f:  # a kill in the middle of the next write
        f.write(b'{"warmup": false, "pass": {"repeat": 2, "start')
    measured, warm, bad = read_kept_passes(kept)
    assert [p.repeat for p in measured] == [0, 1] and [p.repeat for p in warm] == [0]
    assert measured[1] == _pass(1) and bad == 1
    assert read_kept_passes(tmp_path / "none.jsonl") == ([], [], 0)


# A worker that keeps two measured passes through the product's own writers, then blocks
# (or, with CRASH set, exits without a result).
KEEPING_WORKER = textwrap.dedent("""\
    import os, sys, time
    from harness.lifeline import guard_process_group
    guard_process_group()
    from pathlib import Path
    from harness.engine.schedule import PassLog
    from harness.wire.protocol import WorkerSpec; from harness.wire.records import WorkerResult
    from tests.unit.test_stall import _pass
    spec = WorkerSpec.model_validate_json(Path(sys.argv[sys.argv.index("--spec") + 1]).read_text())
    told = PassLog(spec.run, WorkerResult(run_key=spec.run.run_key, status="failed"))
    told.warming()
    for i in range(2):
        told.measuring()
        told.measured_pass(_pass(i))
    if os.environ.get("CRASH"):
        sys.exit(3)
    def measure_forever():
        while True:
            time.sleep(0.5)
    measure_forever()
""")


@pytest.mark.parametrize("crash", [False, True], ids=["stalled", "crashed"])
def test_a_launch_without_a_result_keeps_its_passes_out_of_every_interval(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scenario_data: dict[str, Any],
    crash: bool,
) -> None:
    """A stalled (killed) or crashed worker writes no result: its record is failed, with the
    passes it kept as each ended and the stall line, and analysis leaves them out."""
    from harness.config.scenario import parse_scenario
    from harness.plan.plan import expand_plan
    from harness.results.metrics import passes_frame

    monkeypatch.setattr(progress, "PASS_STALL_FLOOR_S", 2.0)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if crash:
        monkeypatch.setenv("CRASH", "1")
    run = expand_plan(parse_scenario(scenario_data)).runs[0]
    script = tmp_path / "worker.py"
    script.write_text(KEEPING_WORKER)
    record = local.run_one(run, tmp_path / "run", tmp_path, None, [sys.executable, str(script)])
    assert record.status == "failed" and record.error is not None
    if crash:
        assert record.error.startswith("worker exited with code 3; worker wrote no result; ")
    else:
        assert record.error.startswith("stalled: stuck for ")
        assert "in `measure_forever` (worker.py:18, pid " in record.error
        assert "during measured pass 3 (bound 2 s)" in record.error
        assert record.wall_s < 60
    assert record.error.endswith(
        "; 2 measured passes before it kept in its record (in no interval: the launch failed)"
    )
    assert record.result is not None and record.result.status == "failed"
    assert record.result.passes == [_pass(0), _pass(1)]
    assert passes_frame([record]).empty
    ok = record.model_copy(update={"status": "ok"})  # the same passes in a good launch count
    assert len(passes_frame([ok])) == 2


def test_a_launch_its_worker_refused_keeps_its_warm_up_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_data: dict[str, Any]
) -> None:
    """A worker that ended its launch itself (a refused proof in the warm-up) said why in its
    own line: the warm-up passes it kept join the record, and the line stays its own."""
    from harness.config.scenario import parse_scenario
    from harness.plan.plan import expand_plan
    from harness.wire.records import WorkerResult

    run = expand_plan(parse_scenario(scenario_data)).runs[0]
    kept = tmp_path / "passes.jsonl"
    monkeypatch.setenv(PASSES_ENV, str(kept))
    for i in range(2):
        keep_pass(_pass(i), warmup=True)
    refused = WorkerResult(run_key=run.run_key, status="failed", error="ProofRefused: ...")
    result, words = local.with_kept_passes(run, refused, kept)
    assert words == "" and result is not None and result.error == "ProofRefused: ..."
    assert [p.repeat for p in result.warmup_passes] == [0, 1] and result.passes == []
    # With no result at all (a stall in the warm-up), the line says what was kept.
    result, words = local.with_kept_passes(run, None, kept)
    assert words.startswith("0 measured passes and 2 warm-up passes before it kept")
