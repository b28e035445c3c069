"""Progress while a run is in flight: the worker leaves a small JSON note after each pass (its
stage, passes done of how many, requests, tokens/s); the parent reads it every second and
shows the launch in flight, with elapsed time and ETA: a live status line on a terminal (rich),
plain lines on stage changes and every 30 s otherwise, so CI logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from harness.wire.spec import RunSpec

PLAIN_EVERY_S = 30.0


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def describe(run: RunSpec, total: int, elapsed: float, note: dict[str, Any] | None,
             now: float | None = None) -> str:
    """'[2/3] optimized.r0: measuring pass 14/24, 448 requests, 1523 tok/s, 1m12s, ETA 40s'."""
    head = f"[{run.order + 1}/{total}] {run.run_key}"
    if note is None:
        return f"{head}: starting the engine, {_clock(elapsed)}"
    stage, done, expected = note.get("stage", "?"), int(note.get("passes", 0)), \
        int(note.get("expected", 0))
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
        text += f", ETA {_clock(per_pass * (expected - done))}" + (" at least" if at_least
                                                                    else "")
    return text


class LaunchView:
    """The parent's view of the launch in flight (LocalExecutor calls tick every second)."""

    def __init__(self, total: int, stream: IO[str] | None = None, live: bool | None = None,
                 plain_every_s: float = PLAIN_EVERY_S) -> None:
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
        stage = "starting" if note is None else str(note.get("stage")) + (
            "" if int(note.get("passes", 0)) else " (none done)")
        last = self._last_plain
        now = time.monotonic()
        if last is None or last[:2] != (run.run_key, stage) or now - last[2] >= \
                self.plain_every_s:
            print(f"specbench: {text}", file=self.stream, flush=True)
            self._last_plain = (run.run_key, stage, now)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
