"""Writing a file so that no reader ever sees half of it: into a temporary beside it, then a
rename. The one way every stage (the runner, the workers, vLLM's processes, the reports)
writes a file another process may read."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed onto `path` when the block ends
    without an error, removed when it does not (a full disk keeps no half-written file). The
    temporary's name starts with "." and ends in ".tmp", so no reader that globs for the
    final suffix (records, reports: "*.json") ever picks one up; writers that infer a format
    from the suffix must be told it (matplotlib's format=)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(
    path: Path, data: Any, indent: int | None = 1, sort_keys: bool = False
) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")
