"""How well does specbench's change-point detection see a step in a benchmark's history? The
shipped detection (harness.analysis.history.build_series: E-Divisive means with Otava's
t-test) on simulated histories with this machine's noise (testkit/simulate.py: each run a
one-engine launch of 40 balanced blocks through the shipped scheduler and statistics, pass
noise 6% AR(1), launch x arm interaction sd 0.5%, launches 8% apart in speed), steps of 1%,
2% and 5% planted at run 20.

    .venv/bin/python benchmarks/changepoints.py [--trials 200] [--runs 30]

Prints, per series (one-engine deltas; the candidate arm's absolute value, with and without a
machine drift) and step: the share of histories where the step is found within one run of
where it landed, with the whole history after it and with only 3 runs after it; false alarms
per 100 runs; and the share of step-free histories with no alarm at all. Pure CPU simulation,
about a minute per 200 histories of each row.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.simulate import History, detection  # noqa: E402

AT = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    rows = [
        ("deltas", "delta", 0.0, [0.0, -0.01, -0.02, -0.05]),
        ("values", "value", 0.0, [0.0, -0.05, -0.10, -0.20]),
        ("values, drift 2%/run", "value", 0.02, [0.0, -0.10, -0.20]),
    ]
    print(f"{args.trials} simulated histories of {args.runs} runs per row, step at run {AT}")
    print(
        f"{'series':<22} {'step':>6} {'found (all after)':>18} {'found (3 after)':>16} "
        f"{'false / 100 runs':>17} {'no alarm':>9} {'size seen':>10}"
    )
    start = time.perf_counter()
    for label, series, drift, steps in rows:
        for step in steps:
            base = History(
                runs=args.runs, step=math.log1p(step), at=AT if step else None, drift_sd=drift
            )
            full = detection(base, args.trials, seed=1, series=series)
            early = (
                detection(replace(base, runs=AT + 3), args.trials, seed=2, series=series)
                if step
                else None
            )
            size = "—" if math.isnan(full.median_step) else f"{100 * full.median_step:+.2f}%"
            print(
                f"{label:<22} {100 * step:>5.0f}% "
                f"{'—' if not step else f'{100 * full.detected:.1f}%':>18} "
                f"{'—' if early is None else f'{100 * early.detected:.1f}%':>16} "
                f"{full.false_per_100:>17.2f} {100 * full.quiet:>8.1f}% "
                f"{size:>10}",
                flush=True,
            )
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
