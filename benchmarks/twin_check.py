"""The speed probe's twin outside vLLM: does the probe over its twin cancel the machine's speed,
and what moves both? A torch workload stands in for an engine step (12 matmuls of 256 x 256 on
two threads); before each step the shipped probe runs (harness.engine.steptimes.probe_loop)
with its shipped twin beside it (harness.engine.twin.Twin). Passes of 40 steps in A B B A
blocks; the B arm ends each step with 20 small single-thread matmuls (8 x 8), a change that
leaves the machine in another state at the probe's moment without touching the probe.

    .venv/bin/python benchmarks/twin_check.py [--passes 240]

Prints the per-pass spread of the probe, the twin, their ratio and the step; how much of their
pass-to-pass changes they share; and each one's B - A delta over the blocks (95%).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.engine.steptimes import probe_loop  # noqa: E402
from harness.engine.twin import Twin  # noqa: E402

STEPS = 40  # a pass


def run(passes: int) -> list[tuple[float, float, float, bool]]:
    """Per pass: (probe s, twin s, step s, the B arm)."""
    import time

    import torch

    torch.set_num_threads(2)
    a, b, c = torch.randn(256, 256), torch.randn(256, 256), torch.randn(8, 8)
    twin, out = Twin(), []
    try:
        for i in range(passes):
            arm_b = i % 4 in (1, 2)
            own = theirs = step = 0.0
            for _ in range(STEPS):
                assert twin.start(), "the twin did not answer"
                own += probe_loop()
                started = time.perf_counter()
                for _ in range(12):
                    a @ b
                if arm_b:
                    for _ in range(20):
                        c @ c
                step += time.perf_counter() - started
                theirs += sum(twin.collect(wait=True))
            out.append((own, theirs, step, arm_b))
    finally:
        twin.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=240)
    args = parser.parse_args()
    rows = run(args.passes - args.passes % 4)
    logs = {
        "probe": [math.log(r[0]) for r in rows],
        "twin": [math.log(r[1]) for r in rows],
        "probe / twin": [math.log(r[0] / r[1]) for r in rows],
        "step": [math.log(r[2]) for r in rows],
    }
    change = {k: [v[i + 1] - v[i] for i in range(len(v) - 1)] for k, v in logs.items()}
    print(f"{len(rows)} passes of {STEPS} steps; per pass, log sd (pass-to-pass change sd):")
    for k, v in logs.items():
        moves = statistics.pstdev(change[k])
        print(f"  {k:13s} {100 * statistics.pstdev(v):.2f}% ({100 * moves:.2f}%)")
    r = statistics.correlation(change["probe"], change["twin"])
    print(f"  the probe's and the twin's pass-to-pass changes correlate {r:.2f}")
    print("B - A over the A B B A blocks (95%):")
    for k, v in logs.items():
        blocks = [(v[i + 1] + v[i + 2] - v[i] - v[i + 3]) / 2 for i in range(0, len(v), 4)]
        half = 1.96 * statistics.stdev(blocks) / math.sqrt(len(blocks))
        mean = statistics.fmean(blocks)
        print(f"  {k:13s} {100 * mean:+.2f}% ±{100 * half:.2f}% ({len(blocks)} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
