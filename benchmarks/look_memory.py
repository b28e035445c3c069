"""How much a long precision launch's worker grows per pass from specbench's own side, without
vLLM: the shipped measure_launch, slim (as the offline worker runs it), fed the real passes of
an earlier demo run (its work/<launch>/passes.jsonl, e.g. a soak's), looking every 4 blocks as
a precision run does, with a target out of reach so it runs to --blocks.

    .venv/bin/python benchmarks/look_memory.py RUN_DIR [--blocks 1000] [--arrow-strings]

Prints this process's RSS every 200 passes and its growth per pass after the first quarter
(the first looks' one-time allocations left out). --arrow-strings lets the looks use pandas 3's
Arrow strings (as before the slim look turned them off) to show what they cost. The proof the
looks judge reads each pass's own reports, replayed from the file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import harness.engine.schedule as schedule  # noqa: E402
from harness.wire.protocol import PASSES_ENV  # noqa: E402
from harness.wire.records import PassRecord, WorkerResult  # noqa: E402
from harness.wire.spec import RunSpec  # noqa: E402


@contextlib.contextmanager
def _as_pandas_has_it() -> Iterator[None]:
    yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--arrow-strings", action="store_true")
    args = parser.parse_args()
    work = next(args.run_dir.glob("work/*/spec.json")).parent
    run = RunSpec.model_validate(json.loads((work / "spec.json").read_text())["run"])
    entries = [json.loads(line) for line in (work / "passes.jsonl").read_text().splitlines()]
    by_arm: dict[str | None, list[dict[str, Any]]] = {}
    for e in entries:
        if not e["warmup"]:
            by_arm.setdefault(e["pass"]["arm"], []).append(e["pass"])
    assert run.precision is not None, "a precision run's launch"
    run = run.model_copy(
        update={
            "precision": run.precision.model_copy(
                update={"mde": 1e-6, "budget_s": 1e9, "max_blocks": args.blocks}
            )
        }
    )
    if args.arrow_strings:
        setattr(schedule, "_object_strings", _as_pandas_has_it)  # noqa: B010
    os.environ[PASSES_ENV] = str(Path(tempfile.mkdtemp()) / "passes.jsonl")
    proc, seen = psutil.Process(), []
    mine: dict[str, Any] = {}  # the pass's own reports, for the switch to hand back

    def measure(i: int, arm: str | None, block: int | None) -> PassRecord:
        own = by_arm[arm]
        entry = {**own[i % len(own)], "block": block, "repeat": i}
        mine.update(reports=entry["impl_reports"])
        if i % 200 == 0:
            seen.append((i, proc.memory_info().rss / 2**20))
        return PassRecord.model_validate(entry)

    def switch(choice: str | None) -> list[list[dict[str, Any]]]:
        return [mine.get("reports", [])] if choice is None else []

    result = WorkerResult(run_key=run.run_key, status="ok")
    schedule.measure_launch(run, measure, None, switch, None, 1, os.getpid(), result, slim=True)
    for i, rss in seen:
        print(f"pass {i:6d}: {rss:8.1f} MiB")
    (a, ra), (b, rb) = seen[len(seen) // 4], seen[-1]
    per_pass = 1024 * (rb - ra) / (b - a)
    print(f"{result.passes_in_file} passes; after pass {a}: {per_pass:.2f} KiB a pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
