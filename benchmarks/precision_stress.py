"""The precision run (stop at a target MDE) under the realistic stresses, at 2% and 1%
targets: A/A false positives of the shipped scheduler and estimator (testkit.simulate:
schedule.drive_shared_launch with its checked warm-up and precision stop, stats.arm_delta), on
3% AR(1) pass noise: clean; the candidate 10% slower over its first 60 passes; 1 pass
in 20 stalling three times slower in either arm alike. Coverage of +1% is 1 - the A/A
rate of the same draws (see benchmarks/periodic_disturbance.py for why).

    .venv/bin/python benchmarks/precision_stress.py [--trials 2000] [--seed 101] [--mde 0.02 0.01]
                                                    [--stress clean warm-up stalls]

Prints one markdown row per cell: the A/A rate with its trial count, the coverage, the median
blocks run and the median warm-up blocks. About 0.15 s a trial at a 1% target on this CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config.scenario import Precision  # noqa: E402
from testkit.simulate import Noise, rates, simulate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument("--mde", type=float, nargs="+", default=[0.02, 0.01])
    parser.add_argument(
        "--stress",
        nargs="+",
        choices=["clean", "warm-up", "stalls"],
        default=["clean", "warm-up", "stalls"],
        help="the cells to run (default: all three)",
    )
    args = parser.parse_args()
    print(
        "| target MDE | stress | A/A significant | coverage of +1% | median blocks | "
        "median warm-up blocks | trials |\n|---|---|---|---|---|---|---|"
    )
    for mde in args.mde:
        for label, noise in (
            ("clean", Noise(sigma_p=0.03)),
            ("warm-up: 10% slower over 60 passes", Noise(sigma_p=0.03, warm_amp=0.10, warm_len=60)),
            ("stalls: 1 pass in 20 in either arm", Noise(sigma_p=0.03, stall_every=20)),
        ):
            if label.split(":")[0] not in args.stress:
                continue
            results = simulate(
                noise, 12, args.trials, seed=args.seed, precision=Precision(mde=mde, budget_s=10**6)
            )
            aa, cover, _ = rates(results, 0.0)
            print(
                f"| {100 * mde:.0f}% | {label} | {100 * aa:.2f}% | {100 * cover:.2f}% | "
                f"{np.median([b for _, _, b in results]):.0f} | "
                f"{np.median([w.blocks for _, w, _ in results]):.0f} | {args.trials} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
