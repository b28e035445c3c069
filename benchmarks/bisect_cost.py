"""What does a bisect over 8 commits cost, and how often does it name the right commit, when
each run costs what it costs on this CPU? The shipped Bisector (its search, verdicts, retries
and precision targets) with its one seam, `observe`, answered by a cost model fitted to the
four engine runs of the real 8-commit bisects of December 2026 (benchmarks/bisect_commits.py,
README): an engine start of 35 s plus 5 s of specbench around it, 0.62 s per arm per block,
the precision stopping rule's looks (from 20 blocks, every 4) until the output-throughput MDE
reaches the target or the budget (80 s per arm, engine start included) is spent, an MDE of
c / sqrt(blocks) with c drawn per run from 27-33% plus 2.5 points per arm beyond two (the
real runs: c = 31% with 3 arms, 30% with 4, 38-42% with 5: the more arms, the further apart
in time a block's paired passes), and a launch x arm interaction of 0.3% that precision
cannot remove; the candidates of one run share good's passes (testkit/bisection.py). Each
commit has the whole step or none of it. The wall time includes the check for a further step
beside the culprit when --check-beside asks for it.

    .venv/bin/python benchmarks/bisect_cost.py [--trials 300] [--step -0.065] [--check-beside N]

Prints, per number of commits measured beside good in one run (--points), the right-culprit
rate and the median and 90th percentile of the simulated wall time, for the benchmark's
planted commit (5 of 7) and for a culprit drawn uniformly. A simulation, not a measurement:
the real runs are what the README quotes; this says how far from them the tail may lie.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.bisection import CostModel  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument(
        "--step",
        type=float,
        default=-0.065,
        help="the planted step (the real benchmark measured -6%% to -7.5%%)",
    )
    parser.add_argument(
        "--check-beside",
        type=int,
        default=3,
        help="runs per round of checks beside the culprit (specbench bisect "
        "--check-beside, default 3 as there; 0 checks nothing)",
    )
    args = parser.parse_args()
    n = 7
    print(
        f"{n + 1} commits, a {100 * args.step:+.1f}% step, --check-beside {args.check_beside}, "
        f"{args.trials} simulated bisects per row"
    )
    print(
        f"{'points':>6}  {'culprit':>9}  {'right':>6}  {'median min':>10}  {'p90 min':>7}  "
        f"{'runs':>4}  {'parts left open':>15}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for points in (1, 2, 3):
            for fixed in (5, None):
                rng = np.random.default_rng(7)
                walls, runs, right, open_parts = [], [], 0, 0
                for _ in range(args.trials):
                    culprit = fixed or int(rng.integers(1, n + 1))
                    model = CostModel(
                        n, culprit, args.step, rng, Path(tmp), points, check_runs=args.check_beside
                    )
                    out = model.run()
                    open_parts += any(c.verdict not in ("STEP", "NONE") for c in out.changes)
                    walls.append(model.wall_s / 60)
                    runs.append(model.runs)
                    right += out.verdict == "CULPRIT" and out.culprit == culprit
                print(
                    f"{points:>6}  {'5' if fixed else 'uniform':>9}  "
                    f"{right / args.trials:>6.3f}  {np.median(walls):>10.1f}  "
                    f"{np.percentile(walls, 90):>7.1f}  {np.median(runs):>4.0f}  "
                    f"{open_parts / args.trials:>15.3f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
