"""Re-running a comparison until it is significant, with and without `gate --combine`: A/A
false-positive rates of the shipped comparison (`compare_run`) and the shipped combination
(`repeats.combined`, each run a launch) over stored runs written as `specbench run` writes them.

    .venv/bin/python benchmarks/combine_rerun.py [--trials 300] [--runs 5]

Each run is one simulated one-engine launch (testkit.stored.shared_launch: 30 A B B A
blocks, 2% pass noise, launches 8% apart in speed), arms identical. Policies, each stopping at
the first significant output-throughput row, at most `--runs` runs:
- one run: the first run alone;
- re-run: each run judged alone;
- combine after every run: the first run alone, then all runs so far combined.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis.compare import compare_run  # noqa: E402
from harness.analysis.repeats import combined  # noqa: E402
from harness.results.index import earlier_runs  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from testkit.stored import stored  # noqa: E402


def significant(comparison: object) -> bool:
    cand = comparison.candidates[0]  # type: ignore[attr-defined]
    row = next(r for r in cand.rows if r.key == "output_throughput")
    return bool(row.estimate.significant)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    one = rerun = combine = 0
    for trial in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            alone, together = [], []
            for k in range(args.runs):
                run_dir = stored(root, f"r{k}", 100.0 * (k + 1), trial * 100 + k, effect=0.0)
                run = load_run(run_dir)
                alone.append(significant(compare_run(run)))
                together.append(alone[0] if k == 0 else significant(
                    combined(run, [load_run(p) for p in earlier_runs(run)])[0]))
            one += alone[0]
            rerun += any(alone)
            combine += any(together)
    n = args.trials
    print(f"A/A, at most {args.runs} runs, {n} trials: one run {100 * one / n:.1f}%; re-run "
          f"until significant {100 * rerun / n:.1f}%; combine after every run until "
          f"significant {100 * combine / n:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
