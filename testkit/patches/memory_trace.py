"""Where a vLLM process's memory grows (benchmarks/engine_memory.py --modes traced): Python's
tracemalloc started in every process of the launch as the plugin installs this patch, and a
thread that every SPECBENCH_MEMORY_TRACE_EVERY_S seconds (default 60) writes the lines whose
allocations grew most since its first snapshot to SPECBENCH_MEMORY_TRACE_DIR/<process>-<pid>.txt,
each with the frames that led to it. The first snapshot is taken one period after the start,
past the engine's build and warm-up. tracemalloc slows the traced processes: their passes
are not timings. Patches nothing (nothing to prove), and says so (ctx.hit) once."""

from __future__ import annotations

import linecache
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

DIR_ENV = "SPECBENCH_MEMORY_TRACE_DIR"
EVERY_ENV = "SPECBENCH_MEMORY_TRACE_EVERY_S"
TOP = 12
FRAMES = 6


def _name() -> str:
    try:
        return Path(f"/proc/{os.getpid()}/comm").read_text().strip().replace(":", "")
    except OSError:
        return "process"


def _snapshot() -> tracemalloc.Snapshot:
    """Every allocation traced, less the tracer's own (its thread, tracemalloc, linecache)."""
    mine = [__file__, tracemalloc.__file__, linecache.__file__]
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, path, all_frames=True) for path in mine]
    )


def _watch(folder: Path, every_s: float) -> None:
    time.sleep(every_s)
    out = folder / f"{_name()}-{os.getpid()}.txt"  # named once vLLM has titled the process
    first = _snapshot()
    started = time.time()
    while True:
        time.sleep(every_s)
        now = _snapshot()
        stats = now.compare_to(first, "traceback")
        lines = [f"# {_name()} pid {os.getpid()}: {time.time() - started:.0f} s after the first"]
        grown = sum(t.size for t in now.traces) - sum(t.size for t in first.traces)
        lines.append(f"# Python allocations grew {grown / 1024:+.1f} KiB in all")
        for stat in stats[:TOP]:
            lines.append(f"{stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks")
            lines += [f"    {frame}" for frame in stat.traceback.format()[-2 * FRAMES :]]
        tmp = out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(out)


def install(ctx: Any) -> bool:
    folder = os.environ.get(DIR_ENV, "").strip()
    if not folder or tracemalloc.is_tracing():
        return False
    tracemalloc.start(FRAMES)
    Path(folder).mkdir(parents=True, exist_ok=True)
    every = float(os.environ.get(EVERY_ENV, "60"))
    threading.Thread(target=_watch, args=(Path(folder), every), daemon=True).start()
    ctx.hit("memory.trace", {"folder": folder})
    return True
