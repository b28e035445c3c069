"""What does a bisect say when the range holds more than one step, or a step at the edge of
what it can see? The shipped Bisector (its search, verdicts, re-measuring and the check for
further steps beside a culprit) with its one seam, `observe`, answered by the simulated noise
of testkit/bisection.py (Simulated: a 2% threshold) or by benchmarks/bisect_cost.py's
cost model of the real 8-commit bisect (CostModel: a 5% threshold, 80 s per arm, engine starts
and passes timed as on this CPU).

    .venv/bin/python benchmarks/bisect_two_steps.py [--trials 400] [--check-beside 3]

Rows:
- two culprits, -2.5% and -5%, at two distinct commits of 1..7 drawn at random (either order),
  in the cost model, checking beside the culprit (--check-beside): how often both are
  reported (the second at least as a step with its interval in its part) and both named to
  the commit, and the wall time;
- -1% at commit 3 and -4% at commit 6 of 8 (Simulated): commit 6 named, commit 3 named, and
  how often the report calls any commit "the same as good";
- a single -5% culprit of 8 (Simulated) and the cost model's planted -6.5% at 5 of 7: right,
  wrong, a second culprit named where there is none;
- a step of exactly half the threshold (-1% at a 2% threshold, a culprit drawn at random):
  "no commit differs" (a single look allows 2.5%).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.present.bisect import render_outcome  # noqa: E402
from testkit.bisection import CostModel, Simulated, named, planted, reported  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument(
        "--check-beside",
        type=int,
        default=3,
        help="runs per round of checks beside a culprit (specbench bisect "
        "--check-beside), for the two-culprit row",
    )
    args = parser.parse_args()
    trials = args.trials
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        rng = np.random.default_rng(31)
        both = told = 0
        wall_list, run_list = [], []
        for _ in range(trials):
            a, b = (int(x) for x in rng.choice(np.arange(1, 8), 2, replace=False))
            model = planted(CostModel, {a: -0.025, b: -0.05})(
                7, b, -0.05, rng, tmp, 3, check_runs=args.check_beside
            )
            out = model.run()
            both += named(out) == {a, b}
            told += reported(out, a, b)
            wall_list.append(model.wall_s / 60)
            run_list.append(model.runs)
        walls = float(np.median(wall_list))
        print(
            f"two culprits -2.5% and -5% (cost model, 8 commits, --check-beside "
            f"{args.check_beside}, {trials} trials): both reported (the second as a step "
            f"with its interval in its part, at least) {100 * told / trials:.1f}%, both "
            f"named to the commit {100 * both / trials:.1f}%; wall median {walls:.1f} min, p90 "
            f"{np.percentile(wall_list, 90):.1f}; runs median {np.median(run_list):.0f}, "
            f"max {max(run_list)}",
            flush=True,
        )

        six = three = same = 0
        for _ in range(trials):
            sim = planted(Simulated, {3: -0.01, 6: -0.04})(8, 6, -0.04, rng, tmp)
            out = sim.run()
            found = named(out)
            six += 6 in found
            three += 3 in found
            same += "same as good" in render_outcome(out)
        print(
            f"-1% at 3 and -4% at 6 (Simulated, 8 commits, {trials} trials): 6 named "
            f"{100 * six / trials:.1f}%, 3 named {100 * three / trials:.1f}%, "
            f"'same as good' printed {100 * same / trials:.1f}%",
            flush=True,
        )

        makers: list[tuple[str, Callable[[int], Simulated]]] = [
            (
                "single -5% culprit (Simulated, 8 commits)",
                lambda c: Simulated(8, c, -0.05, rng, tmp),
            ),
            (
                "planted -6.5% at 5 of 7 (cost model)",
                lambda c: CostModel(7, c, -0.065, rng, tmp, 3),
            ),
        ]
        for label, make in makers:
            right = wrong = extra = 0
            for _ in range(trials):
                culprit = 5 if "cost" in label else int(rng.integers(1, 9))
                out = make(culprit).run()
                found = named(out)
                right += out.verdict == "CULPRIT" and out.culprit == culprit
                wrong += out.verdict == "CULPRIT" and out.culprit != culprit
                extra += bool(found - {culprit})
            print(
                f"{label}, {trials} trials: right {100 * right / trials:.1f}%, wrong "
                f"{100 * wrong / trials:.1f}%, a commit named that has no step "
                f"{100 * extra / trials:.1f}%",
                flush=True,
            )

        none = 0
        for _ in range(trials):
            out = Simulated(8, int(rng.integers(1, 9)), -0.01, rng, tmp).run()
            none += out.verdict == "NO CHANGE"
        print(
            f"a -1% step at a 2% threshold (Simulated, 8 commits, {trials} trials): 'no "
            f"commit differs' {100 * none / trials:.1f}%",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
