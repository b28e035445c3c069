"""Progress while a run is in flight: the worker leaves a small JSON note after each pass (its
stage, passes done of how many, requests, tokens/s); the parent reads it every second and
shows the launch in flight, with elapsed time and ETA: a live status line on a terminal (rich),
plain lines on stage changes and every 30 s otherwise, so CI logs stay readable.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from harness.execute.protocol import PROGRESS_ENV
from harness.plan.plan import RunSpec
from harness.results.records import PassRecord

PLAIN_EVERY_S = 30.0


def write_progress(stage: str, passes: list[PassRecord], expected: int, at_least: bool,
                   measuring_since: float | None) -> None:
    """Worker side: the note PROGRESS_ENV names (never raises: progress is not a result)."""
    target = os.environ.get(PROGRESS_ENV)
    if not target:
        return
    last = passes[-1] if passes else None
    tokens = (sum(r.output_tokens for r in last.requests) / last.duration_s
              if last is not None and last.duration_s > 0 else None)
    data = {"stage": stage, "passes": len(passes), "expected": expected, "at_least": at_least,
            "requests": sum(len(p.requests) for p in passes), "tokens_per_s": tokens,
            "measuring_since_unix": measuring_since, "updated_unix": time.time()}
    with contextlib.suppress(OSError):
        path = Path(target)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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
        stage = "starting" if note is None else str(note.get("stage"))
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
