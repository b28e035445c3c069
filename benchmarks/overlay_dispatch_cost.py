"""What an overlay's dispatcher costs: the time one dispatched call adds (the shipped dispatcher
and its call counter, harness.engine.impls.install_overlay, against calling the function
directly), times the calls per pass a real run made, against the pass's time.

    .venv/bin/python benchmarks/overlay_dispatch_cost.py --from RUN_DIR [--calls N]

RUN_DIR is a stored overlay run (e.g. of scenarios/cpu-medusa-overlay.yaml): its per-pass
reports give each vLLM process's calls of every overlaid function in that pass. Prints the
added time per call (median of 9 timings of N calls) and the share of each pass's time it
comes to (median and max over passes): the issue's target is at most 0.3%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.run import load_run  # noqa: E402

MODULE = "specbench_dispatch_bench"
SOURCE = textwrap.dedent("""
    class Proposer:
        def propose(self, x, y=None):
            return x
""")


def per_call_overhead(calls: int) -> tuple[float, float]:
    """(seconds added per dispatched call, seconds of the direct call), medians of 9."""
    from harness.engine import impls

    tmp = Path(tempfile.mkdtemp())
    (tmp / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(tmp))
    import importlib

    module = importlib.import_module(MODULE)
    direct = module.Proposer()
    original = module.Proposer.propose
    spec = {
        "arms": [
            {
                "variant": "a",
                "change": None,
                "code": [
                    {
                        "module": MODULE,
                        "owner": "Proposer",
                        "name": "propose",
                        "kind": "function",
                        "source": "    def propose(self, x, y=None):\n        return x\n",
                        "line": 3,
                        "file": f"{MODULE}.py",
                        "future": [],
                    }
                ],
            },
            {"variant": "b", "change": None, "code": []},
        ],
        "functions": [f"{MODULE}:Proposer.propose"],
        "active": "a",
        "vllm_location": str(tmp),
    }
    path = tmp / "overlay.json"
    path.write_text(json.dumps(spec))
    assert impls.install_overlay(str(path))
    dispatched = module.Proposer.propose
    assert dispatched is not original

    def timed(fn: object) -> float:
        t = time.perf_counter()
        for _ in range(calls):
            fn(direct, 1)  # type: ignore[operator]
        return (time.perf_counter() - t) / calls

    base = [timed(original) for _ in range(9)]
    over = [timed(dispatched) for _ in range(9)]
    return statistics.median(over) - statistics.median(base), statistics.median(base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="run", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    added, direct = per_call_overhead(args.calls)
    print(
        f"dispatcher: +{added * 1e9:.0f} ns per call (direct call {direct * 1e9:.0f} ns; "
        f"median of 9 x {args.calls} calls)"
    )
    results = load_run(args.run)
    shares = []
    per_pass_calls = []
    for run in results.runs:
        for p in run.result.passes if run.result else []:
            # The busiest process's calls: processes run side by side (TP ranks).
            calls = max(
                (
                    sum(r.paths.values())
                    for r in p.impl_reports or []
                    if r.implementation == "overlay"
                ),
                default=0,
            )
            if calls and p.duration_s > 0:
                per_pass_calls.append(calls)
                shares.append(added * calls / p.duration_s)
    if not shares:
        print(f"{args.run}: no overlay calls in its passes")
        return 1
    print(
        f"{args.run.name}: {len(shares)} passes, {statistics.median(per_pass_calls):.0f} "
        f"dispatched calls per pass per process (median)"
    )
    print(
        f"dispatcher cost: {100 * statistics.median(shares):.4f}% of pass time (median), "
        f"{100 * max(shares):.4f}% (max); target <= 0.3%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
