"""The progress note a worker leaves after each pass (stage, passes done of how many,
requests, tokens/s), written atomically to the file PROGRESS_ENV names, and read back by the
parent (harness.execute.progress shows it)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from harness.wire.protocol import PROGRESS_ENV
from harness.wire.records import PassRecord


def write_progress(
    stage: str,
    passes: list[PassRecord],
    expected: int,
    at_least: bool,
    measuring_since: float | None,
) -> None:
    """Worker side: the note PROGRESS_ENV names (never raises: progress is not a result)."""
    target = os.environ.get(PROGRESS_ENV)
    if not target:
        return
    last = passes[-1] if passes else None
    tokens = (
        sum(r.output_tokens for r in last.requests) / last.duration_s
        if last is not None and last.duration_s > 0
        else None
    )
    data = {
        "stage": stage,
        "passes": len(passes),
        "expected": expected,
        "at_least": at_least,
        "requests": sum(len(p.requests) for p in passes),
        "tokens_per_s": tokens,
        "measuring_since_unix": measuring_since,
        "updated_unix": time.time(),
    }
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
