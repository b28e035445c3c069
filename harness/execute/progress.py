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
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, Any

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
        return f"{head}: {stage}, {_clock(elapsed)}"
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
# are dumped and it is ended at once, not at its timeout_s. A measured pass may take
# PASS_STALL_FACTOR times the median pass so far, and never less than PASS_STALL_FLOOR_S; the
# engine's start (imports, model load, compilation) and the warm-up have fixed bounds of
# their own. Module constants: tests shrink them (tests/faults/sitecustomize.py).
PASS_STALL_FACTOR = 10.0
PASS_STALL_FLOOR_S = 60.0
ENGINE_START_STALL_S = 1800.0
WARMUP_STALL_S = 900.0


@dataclass(frozen=True)
class Stall:
    """A launch that made no progress for longer than its bound."""

    phase: str  # "the engine start", "the warm-up", "measured pass 3", ...
    stuck_s: float
    bound_s: float
    passes: int  # measured passes done before it


def pass_bound(durations: list[float]) -> float:
    """How long a measured pass may take before it counts as stalled: max(N × the median
    pass so far, the floor)."""
    if not durations:
        return PASS_STALL_FLOOR_S
    return max(PASS_STALL_FACTOR * statistics.median(durations), PASS_STALL_FLOOR_S)


class StallWatch:
    """The parent's stall rule for one launch, fed the worker's progress note every tick."""

    def __init__(self, started_unix: float) -> None:
        self.started_unix = started_unix
        self.durations: list[float] = []  # each measured pass, from the notes' times
        self._done = 0
        self._last_unix: float | None = None

    def _passes_seen(self, note: dict[str, Any]) -> None:
        done = int(note.get("passes", 0))
        updated = float(note.get("updated_unix") or 0.0)
        if done <= self._done or not updated:
            return
        since = self._last_unix or note.get("measuring_since_unix")
        if since:
            # Passes that finished between two ticks share the span evenly.
            self.durations += [(updated - float(since)) / (done - self._done)] * (done - self._done)
        self._done, self._last_unix = done, updated

    def check(self, note: dict[str, Any] | None, now_unix: float) -> Stall | None:
        """The stall, if the launch has gone past the bound of what it is doing now."""
        if note is None:
            phase, since, bound = "the engine start", self.started_unix, ENGINE_START_STALL_S
        elif note.get("stage") == "measuring" and int(note.get("passes", 0)) > 0:
            self._passes_seen(note)
            since = float(note.get("updated_unix") or now_unix)
            expected = int(note.get("expected", 0))
            if self._done < expected or note.get("at_least"):
                phase, bound = f"measured pass {self._done + 1}", pass_bound(self.durations)
            else:  # profiled passes and the engine's shutdown
                phase, bound = (
                    "the end of the launch",
                    max(pass_bound(self.durations), WARMUP_STALL_S),
                )
        else:
            phase = "the warm-up"
            since, bound = float(note.get("updated_unix") or now_unix), WARMUP_STALL_S
        stuck = now_unix - since
        return Stall(phase, stuck, bound, self._done) if stuck > bound else None


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
    return (
        f"stalled: stuck for {stall.stuck_s:.0f} s {where} during {stall.phase} "
        f"(bound {stall.bound_s:.0f} s); stacks of every process are in the log"
    )
