"""What a worker tells its parent while a launch is in flight, through files the parent reads
every tick: the progress note after each pass (stage, passes done of how many, requests,
tokens/s; PROGRESS_ENV, replaced atomically), each finished pass itself (PASSES_ENV, one JSON
line appended and fsync'd per pass, so a launch that never writes its result keeps them), and
the engine's heartbeat (HEARTBEAT_ENV, rewritten by vLLM's worker processes as steps end).
harness.execute.progress shows the note and watches for stalls."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.wire.protocol import HEARTBEAT_ENV, PASSES_ENV, PROGRESS_ENV
from harness.wire.records import PassRecord

# The note's stage once every pass is measured: profiled passes and the engine's shutdown.
FINISHING = "finishing"


def _replace(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (a per-process temporary file, then a rename: several
    processes may write the same file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_progress(
    stage: str,
    passes: list[PassRecord],
    expected: int,
    at_least: bool,
    measuring_since: float | None,
    warmup_passes: int = 0,
    warmup_since: float | None = None,
    told: PassTally | None = None,
) -> None:
    """Worker side: the note PROGRESS_ENV names (never raises: progress is not a result).
    `passes`: the measured passes so far; `warmup_passes`: the checked warm-up's passes done
    since `warmup_since` (one-engine launches; the stall watchdog bounds them as passes);
    `told`: the passes, requests and last tokens/s counted as each pass ended, in place of
    `passes` (a worker that keeps its passes on disk only)."""
    target = os.environ.get(PROGRESS_ENV)
    if not target:
        return
    if told is None:
        told = PassTally()
        for p in passes:
            told.add(p)
    data = {
        "stage": stage,
        "passes": told.passes,
        "expected": expected,
        "at_least": at_least,
        "requests": told.requests,
        "tokens_per_s": told.tokens_per_s,
        "measuring_since_unix": measuring_since,
        "warmup_passes": warmup_passes,
        "warmup_since_unix": warmup_since,
        "updated_unix": time.time(),
    }
    with contextlib.suppress(OSError):
        _replace(Path(target), json.dumps(data))


class PassTally:
    """What the progress note says of the measured passes, counted once per pass as it ends:
    the passes and requests so far and the last pass's output tokens per second."""

    def __init__(self) -> None:
        self.passes = self.requests = 0
        self.tokens_per_s: float | None = None

    def add(self, record: PassRecord) -> None:
        self.passes += 1
        self.requests += len(record.requests)
        tokens = sum(r.output_tokens for r in record.requests)
        self.tokens_per_s = tokens / record.duration_s if record.duration_s > 0 else None


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- each pass as it finishes ------------------------------------------------------------------


def keep_pass(record: PassRecord, warmup: bool = False) -> bool:
    """Worker side: append `record` as one line to the file PASSES_ENV names, in one write,
    fsync'd before the next pass starts. A kill mid-write leaves at most a torn last line,
    which read_kept_passes skips. Never raises; says whether the line is on disk (where it is
    not, the result must still carry the whole pass)."""
    target = os.environ.get(PASSES_ENV)
    if not target:
        return False
    line = json.dumps({"warmup": warmup, "pass": record.model_dump(mode="json")}) + "\n"
    data = line.encode()
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def read_kept_passes(path: Path) -> tuple[list[PassRecord], list[PassRecord], int]:
    """Parent side: the passes a worker kept (keep_pass), as (measured, warm-up, lines that
    could not be read: a torn last line, or damage)."""
    measured: list[PassRecord] = []
    warm: list[PassRecord] = []
    bad = 0
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError:
        return measured, warm, bad
    for raw in lines:
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            record = PassRecord.model_validate(entry["pass"])
        except (ValueError, KeyError, TypeError, ValidationError):
            bad += 1
            continue
        (warm if entry.get("warmup") else measured).append(record)
    return measured, warm, bad


# --- the engine's heartbeat ------------------------------------------------------------------


def write_heartbeat(steps: int, median_step_s: float | None) -> None:
    """vLLM's side: the engine's sign of life, HEARTBEAT_ENV's file rewritten (never raises:
    called from inside an engine step)."""
    target = os.environ.get(HEARTBEAT_ENV)
    if not target:
        return
    data = {
        "unix": time.time(),
        "steps": steps,
        "median_step_s": median_step_s,
        "pid": os.getpid(),
    }
    with contextlib.suppress(OSError):
        _replace(Path(target), json.dumps(data))


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """Parent side: the last heartbeat, or None where no engine process has written one."""
    data = read_progress(path)
    return data if data is not None and isinstance(data.get("unix"), int | float) else None
