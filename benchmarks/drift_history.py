"""Does the history tell a slow drift from a step? The shipped detection
(harness.analysis.history.build_series: change points as jumps on top of a linear trend, and
each segment's slope tested for a drift) on simulated histories with this machine's noise
(testkit/simulate.py History: each run a one-engine launch of 40 balanced blocks through the
shipped scheduler and statistics), the candidate's delta drifting linearly over 30 runs with no
step, a 5% step 3 runs before the end, and no change at all.

    .venv/bin/python benchmarks/drift_history.py [--trials 300]

Prints, per row: the share of histories whose deltas name a commit (any change point), the
share that report a drift and its median size, and, for the step, the share found within one
run of where it landed. Pure CPU simulation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.simulate import History, detection  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    args = parser.parse_args()
    rows = [
        ("no change, 30 runs", History(runs=30)),
        *[
            (f"drift {100 * d:+.0f}% over 30 runs", History(runs=30, trend=math.log1p(d)))
            for d in (-0.01, -0.02, -0.04)
        ],
        ("step -5% at run 20, 3 after", History(runs=23, step=math.log1p(-0.05), at=20)),
    ]
    print(f"{args.trials} simulated histories per row (deltas)")
    print(
        f"{'history':<30} {'names a commit':>14} {'found':>7} {'drift reported':>15} "
        f"{'drift size':>10}"
    )
    start = time.perf_counter()
    for seed, (label, h) in enumerate(rows):
        d = detection(h, args.trials, seed=100 + seed, series="delta")
        found = f"{100 * d.detected:.1f}%" if h.at is not None else "—"
        size = "—" if math.isnan(d.median_drift) else f"{100 * d.median_drift:+.2f}%"
        print(
            f"{label:<30} {100 * (1 - d.quiet):>13.1f}% {found:>7} "
            f"{100 * d.drifted:>14.1f}% {size:>10}",
            flush=True,
        )
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
