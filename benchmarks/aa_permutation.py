"""Family-wise false positives of an A/A table, from a real run: the stored one-engine run's arm
labels swapped in whole blocks (each block with probability 1/2), N times, each relabelled run
pushed through the shipped comparison (testkit.permutation: compare_scenario, as compare_run
calls it), counting how often each noisy row is significant alone (the rule before a primary
metric) and how often the table carries at least one star (the rule it prints under it).

    .venv/bin/python benchmarks/aa_permutation.py [RUN] [--trials 1000] [--seed 0]

RUN defaults to results/fixtures/cpu-medusa-overlay-20-blocks (a real CPU Medusa run, one
engine, 20 blocks, 12 noisy rows). Target: at least one starred row in at most 6.5% of tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.run import load_run  # noqa: E402
from testkit.permutation import permute  # noqa: E402

TARGET = 0.065


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "run",
        nargs="?",
        type=Path,
        default=ROOT / "results" / "fixtures" / "cpu-medusa-overlay-20-blocks",
    )
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run = load_run(args.run)
    found = permute(run, args.trials, args.seed)
    n = found.trials
    print(
        f"{run.run_id}: {run.scenario.primary_metric} primary, {found.noisy_rows} noisy rows, "
        f"{n} block relabellings\n"
    )
    print("| row | significant alone | starred |\n|---|---|---|")
    for label, alone in found.alone.items():
        print(f"| {label} | {100 * alone / n:.1f}% | {100 * found.starred[label] / n:.1f}% |")
    mean = found.rows_when_any / found.any_star if found.any_star else 0.0
    print(
        f"\nAt least one noisy row significant alone (each row at 5%): "
        f"{100 * found.any_alone / n:.1f}% ({n})"
    )
    print(
        f"At least one starred row (the table's rule): {100 * found.any_star / n:.1f}% ({n}); "
        f"{mean:.1f} starred rows on average when any"
    )
    return 0 if found.any_star / n <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
