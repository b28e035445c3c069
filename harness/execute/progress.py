"""Progress while a run is in flight: the worker leaves a small JSON note after each pass (its
stage, passes done of how many, requests, tokens/s); the parent reads it every second and
shows the launch in flight, with elapsed time and ETA: a live status line on a terminal (rich),
plain lines on stage changes and every 30 s otherwise, so CI logs stay readable. The same
notes feed the stall watchdog (StallWatch), and a stalled launch's stack dumps say where it is
stuck (parse_dump, stuck_thread).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import IO, Any

from harness.wire.progress import FINISHING
from harness.wire.spec import RunSpec

PLAIN_EVERY_S = 30.0


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def describe(
    run: RunSpec, total: int, elapsed: float, note: dict[str, Any] | None, now: float | None = None
) -> str:
    """'[2/3] optimized.r0: measuring pass 14/24, 448 requests, 1523 tok/s, 1m12s, ETA 40s'."""
    head = f"[{run.order + 1}/{total}] {run.run_key}"
    if note is None:
        return f"{head}: starting the engine, {_clock(elapsed)}"
    stage, done, expected = (
        note.get("stage", "?"),
        int(note.get("passes", 0)),
        int(note.get("expected", 0)),
    )
    if stage != "measuring" or done == 0:
        warm = int(note.get("warmup_passes") or 0) if stage == "warming up" else 0
        passes = f", {warm} pass{'es' if warm > 1 else ''} done" if warm else ""
        return f"{head}: {stage}{passes}, {_clock(elapsed)}"
    at_least = ">=" if note.get("at_least") else ""
    text = f"{head}: measuring pass {done}/{at_least}{expected}, {note.get('requests', 0)} requests"
    if note.get("tokens_per_s"):
        text += f", {note['tokens_per_s']:.0f} tok/s"
    text += f", {_clock(elapsed)}"
    since = note.get("measuring_since_unix")
    if since and done < expected:
        per_pass = ((now or float(note.get("updated_unix", time.time()))) - since) / done
        text += f", ETA {_clock(per_pass * (expected - done))}" + (" at least" if at_least else "")
    return text


class LaunchView:
    """The parent's view of the launch in flight (LocalExecutor calls tick every second)."""

    def __init__(
        self,
        total: int,
        stream: IO[str] | None = None,
        live: bool | None = None,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.plain_every_s = plain_every_s
        self._status: Any = None
        self._last_plain: tuple[str, str, float] | None = None  # run_key, stage, when

    def tick(self, run: RunSpec, elapsed: float, note: dict[str, Any] | None) -> None:
        text = describe(run, self.total, elapsed, note, time.time())
        if self.live:
            if self._status is None:
                from rich.console import Console

                self._status = Console(file=self.stream).status(text)
                self._status.start()
            else:
                self._status.update(text)
            return
        # The first measured pass is a change of its own: a note that only says "measuring"
        # (no pass done yet) is followed by the first with a pass count, whatever the timing.
        stage = (
            "starting"
            if note is None
            else str(note.get("stage")) + ("" if int(note.get("passes", 0)) else " (none done)")
        )
        last = self._last_plain
        now = time.monotonic()
        if last is None or last[:2] != (run.run_key, stage) or now - last[2] >= self.plain_every_s:
            print(f"specbench: {text}", file=self.stream, flush=True)
            self._last_plain = (run.run_key, stage, now)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


# --- the stall watchdog ---------------------------------------------------------------------
# A launch whose worker makes no progress for longer than these bounds is stalled: its stacks
# are dumped and it is ended at once, not at its timeout_s. A pass (measured, or of the checked
# warm-up) may take PASS_STALL_FACTOR times the median pass of its kind so far, and never less
# than PASS_STALL_FLOOR_S; the engine's start (imports, model load, compilation) and a warm-up
# with no pass done yet have fixed bounds of their own. After the engine's start, in any phase
# while passes remain, the engine's heartbeat (vLLM's worker processes, at most every second as
# steps end: harness.engine.steptimes.install_heartbeat) must not fall silent for longer than
# HEARTBEAT_STALL_FACTOR times its median step, and never less than HEARTBEAT_STALL_FLOOR_S,
# counted from the later of its last beat and the worker's last note (between passes no step
# runs). A launch without a heartbeat (its processes never beat) has the pass bounds alone.
# Module constants: tests shrink them (tests/faults/sitecustomize.py).
PASS_STALL_FACTOR = 10.0
PASS_STALL_FLOOR_S = 60.0
ENGINE_START_STALL_S = 1800.0
WARMUP_STALL_S = 900.0
HEARTBEAT_STALL_FACTOR = 10.0
HEARTBEAT_STALL_FLOOR_S = 60.0
QUIET_ENGINE = "no engine step ended"


@dataclass(frozen=True)
class Stall:
    """A launch that made no progress for longer than its bound."""

    phase: str  # "the engine start", "the warm-up", "measured pass 3", ...
    stuck_s: float
    bound_s: float
    passes: int  # measured passes done before it
    rule: str | None = None  # which sign of progress stopped (None: the phase's own bound)


def pass_bound(durations: list[float]) -> float:
    """How long a pass may take before it counts as stalled: max(N × the median pass so
    far, the floor)."""
    if not durations:
        return PASS_STALL_FLOOR_S
    return max(PASS_STALL_FACTOR * statistics.median(durations), PASS_STALL_FLOOR_S)


def heartbeat_bound(beat: dict[str, Any]) -> float:
    """How long the engine may go without ending a step: max(N × its median step, the
    floor)."""
    median = beat.get("median_step_s")
    steps = HEARTBEAT_STALL_FACTOR * float(median) if isinstance(median, int | float) else 0.0
    return max(steps, HEARTBEAT_STALL_FLOOR_S)


@dataclass
class PassClock:
    """The passes of one kind (measured, or the checked warm-up's) seen in the notes, and
    how long each took, from the notes' times."""

    done: int = 0
    last_unix: float | None = None
    durations: list[float] = field(default_factory=list)

    def seen(self, done: int, updated: float, since: float | None) -> None:
        """`done` passes by `updated`, the first of them started at `since`."""
        if done <= self.done or not updated:
            return
        start = self.last_unix or since
        if start:
            # Passes that finished between two ticks share the span evenly.
            self.durations += [(updated - float(start)) / (done - self.done)] * (done - self.done)
        self.done, self.last_unix = done, updated


class StallWatch:
    """The parent's stall rule for one launch, fed the worker's progress note (and the
    engine's heartbeat, where it beats) every tick."""

    def __init__(self, started_unix: float) -> None:
        self.started_unix = started_unix
        self.measured = PassClock()
        self.warm = PassClock()

    @property
    def durations(self) -> list[float]:
        """Each measured pass so far."""
        return self.measured.durations

    def _phase(self, note: dict[str, Any]) -> tuple[str, float, bool]:
        """(what the launch is doing, its bound, whether passes remain: the heartbeat rule
        holds) from a note."""
        if note.get("stage") == FINISHING:  # profiled passes and the engine's shutdown
            bound = pass_bound(self.measured.durations or self.warm.durations)
            return "the end of the launch", max(bound, WARMUP_STALL_S), False
        if note.get("stage") == "measuring" and int(note.get("passes", 0)) > 0:
            self.measured.seen(
                int(note.get("passes", 0)),
                float(note.get("updated_unix") or 0.0),
                note.get("measuring_since_unix"),
            )
            bound = pass_bound(self.measured.durations or self.warm.durations)
            if self.measured.done < int(note.get("expected", 0)) or note.get("at_least"):
                return f"measured pass {self.measured.done + 1}", bound, True
            # profiled passes and the engine's shutdown
            return "the end of the launch", max(bound, WARMUP_STALL_S), False
        self.warm.seen(
            int(note.get("warmup_passes") or 0),
            float(note.get("updated_unix") or 0.0),
            note.get("warmup_since_unix"),
        )
        if self.warm.done:
            return f"warm-up pass {self.warm.done + 1}", pass_bound(self.warm.durations), True
        return "the warm-up", WARMUP_STALL_S, True

    def check(
        self, note: dict[str, Any] | None, now_unix: float, beat: dict[str, Any] | None = None
    ) -> Stall | None:
        """The stall, if the launch has gone past the bound of what it is doing now, or its
        engine (`beat`: its last heartbeat, None where none came) stopped ending steps."""
        if note is None:
            stuck = now_unix - self.started_unix
            bound = ENGINE_START_STALL_S
            return Stall("the engine start", stuck, bound, 0) if stuck > bound else None
        phase, bound, passes_remain = self._phase(note)
        noted = float(note.get("updated_unix") or now_unix)
        stuck = now_unix - noted
        if stuck > bound:
            return Stall(phase, stuck, bound, self.measured.done)
        if beat is not None and passes_remain:
            quiet = now_unix - max(float(beat["unix"]), noted)
            bound = heartbeat_bound(beat)
            if quiet > bound:
                return Stall(phase, quiet, bound, self.measured.done, QUIET_ENGINE)
        return None


# --- where a stalled launch is stuck: Python's faulthandler dumps -----------------------------

THREAD_HEAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")
FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)')
# A thread whose innermost frame is here is waiting for work, not stuck in it.
IDLE_FILES = (
    "threading.py",
    "selectors.py",
    "queue.py",
    "socket.py",
    "ssl.py",
    "connection.py",
    "popen_fork.py",
    "synchronize.py",
    "lifeline.py",
)
IDLE_PARTS = ("/multiprocessing/", "/concurrent/futures/", "/asyncio/", "/zmq/")
IDLE_FUNCS = frozenset(
    {
        "wait",
        "select",
        "poll",
        "get",
        "recv",
        "recv_multipart",
        "accept",
        "_wait_for_tstate_lock",
        "_recv",
        "_recv_bytes",
        "readline",
    }
)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self) -> str:
        return f"{PurePath(self.file).name}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread of a faulthandler dump, innermost frame first."""

    pid: int
    current: bool
    frames: tuple[Frame, ...]

    @property
    def idle(self) -> bool:
        top = self.frames[0]
        return (
            PurePath(top.file).name in IDLE_FILES
            or top.func in IDLE_FUNCS
            or any(part in top.file for part in IDLE_PARTS)
        )


def parse_dump(text: str, pid: int) -> list[ThreadStack]:
    """The threads of one process's faulthandler dump ('Current thread 0x...' / 'Thread
    0x...' blocks of 'File "...", line N in func' lines, innermost first); other lines of the
    log are skipped."""
    threads: list[ThreadStack] = []
    current: bool | None = None
    frames: list[Frame] = []

    def close() -> None:
        if current is not None and frames:
            threads.append(ThreadStack(pid, current, tuple(frames)))

    for line in text.splitlines():
        head = THREAD_HEAD.match(line)
        if head:
            close()
            current, frames = head.group(1) == "Current thread", []
            continue
        frame = FRAME.match(line)
        if frame and current is not None:
            frames.append(Frame(frame["file"], int(frame["line"]), frame["func"]))
        elif line.strip() and current is not None and frames:
            close()  # the dump ended: what follows is the process's own output
            current, frames = None, []
    close()
    return threads


def stuck_thread(threads: list[ThreadStack]) -> ThreadStack | None:
    """The most telling thread of a stalled launch: the first busy one (not waiting in
    threading, selectors, queues, sockets), else the first, dump order kept."""
    return next((t for t in threads if not t.idle), threads[0] if threads else None)


def describe_stall(stall: Stall, thread: ThreadStack | None) -> str:
    """One line: 'stuck for 62 s in `propose` (medusa_zero_drafts.py:12, pid 4242) during
    measured pass 2 (bound 60 s); ...'."""
    where = "no Python stack could be read"
    if thread is not None:
        top = thread.frames[0]
        where = f"in `{top.func}` ({top.where()}, pid {thread.pid})"
    rule = f"{stall.rule}, " if stall.rule else ""
    return (
        f"stalled: stuck for {stall.stuck_s:.0f} s {where} during {stall.phase} "
        f"({rule}bound {stall.bound_s:.0f} s); stacks of every process are in the log"
    )
