"""Follow one stored run's data from its records to its table, as `specbench report` (and the
end of `run`) does, and count the work done twice: how often the run folder is loaded, the
scenario parsed, the per-pass frame built and the comparison computed, and how often each
harness module is entered from another one (a module entered again is a place the path climbs
back to). Works on this layout and, for a before/after figure, on the flat one before it
(`--root` a checkout of that commit).

    .venv/bin/python benchmarks/one_pass_trace.py [--root CHECKOUT] [--fixture NAME]

Counted with a profile hook on code objects, so it holds however modules import each other.
No engine: the fixtures are small stored runs from real CPU runs.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

# (stage, candidates as module:function, first that exists wins)
WORK = {
    "run folder loaded": ["harness.results.run:load_run", "harness.store:load_results"],
    "scenario parsed": [
        "harness.config.scenario:parse_scenario",
        "harness.scenario:parse_scenario",
    ],
    "pass frame built": ["harness.results.metrics:passes_frame", "harness.metrics:passes_frame"],
    "comparison computed": [
        "harness.analysis.compare:compare_records",
        "harness.compare:compare_records",
    ],
    "sweep grid expanded": ["harness.config.sweep:Sweep.steps", "harness.scenario:Sweep.steps"],
}


ROOT: Path = Path(__file__).resolve().parents[1]


def _resolve(spec: str) -> Any | None:
    """module:qualname, if that module exists in the checkout traced."""
    module, _, name = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError:
        return None
    if not str(Path(obj.__file__).resolve()).startswith(str(ROOT.resolve())):
        return None  # found elsewhere (an installed copy), not in the checkout traced
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def trace(fixture: Path) -> tuple[Counter[str], Counter[str], int]:
    """Work counts, module entries, and steps (calls that cross from one module to another)."""
    codes = {}
    for label, specs in WORK.items():
        fn = next((f for f in map(_resolve, specs) if f is not None), None)
        if fn is not None:
            codes[fn.__code__] = label
    work: Counter[str] = Counter(dict.fromkeys(codes.values(), 0))
    entries: Counter[str] = Counter()
    steps = 0

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal steps
        if event != "call":
            return
        label = codes.get(frame.f_code)
        if label is not None:
            work[label] += 1
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith("harness.") and callee != caller and caller.startswith("harness"):
            entries[callee] += 1
            steps += 1

    main = _resolve("harness.cli:main")
    assert main is not None, "harness.cli:main is not in the checkout traced"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / fixture.name
        shutil.copytree(fixture, run_dir)
        sys.setprofile(hook)
        try:
            code = main(["report", str(run_dir)])
        finally:
            sys.setprofile(None)
    assert code == 0, code
    return work, entries, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="The checkout whose harness to trace (default: this one).",
    )
    parser.add_argument(
        "--fixture",
        default="cpu-medusa-small",
        help="A run under results/fixtures (cpu-eagle-tp2-sweep-small: a sweep).",
    )
    args = parser.parse_args()
    global ROOT
    ROOT = args.root
    sys.path.insert(0, str(args.root))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        work, entries, steps = trace(args.root / "results" / "fixtures" / args.fixture)
    print(f"specbench report {args.fixture} ({args.root}):")
    for label, count in work.items():
        print(f"  {label:<22} {count}")
    again = sum(n - 1 for n in entries.values())
    print(
        f"  {steps} calls cross modules; {len(entries)} modules entered; "
        f"{again} re-entries into a module already entered"
    )
    for module, count in entries.most_common(6):
        print(f"    {module:<40} entered {count} times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
