"""Does an overlay measure what the hand-written swap measures? Seed 000's change as a diff
(scenarios/cpu-medusa-overlay.yaml: the pre-PR propose overlaid next to the installed one) and
as the built-in medusa-proposer swap (scenarios/cpu-medusa-proposer.yaml), each run as shipped
(one engine, until MDE 2% or 290 s), one after the other on real vLLM.

    .venv/bin/python benchmarks/overlay_agreement.py [--runs N]

Prints each run's output-throughput delta with its interval, MDE and wall time, and whether the
two agree (the test benchmarks/design_agreement.py uses for designs). A benchmark to run and
read, not a CI gate: never run it beside another benchmark.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from design_agreement import agreement, describe, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="pairs of runs (alternating)")
    args = parser.parse_args()
    scenarios = {
        "overlay": ROOT / "scenarios" / "cpu-medusa-overlay.yaml",
        "swap": ROOT / "scenarios" / "cpu-medusa-proposer.yaml",
    }
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        for i in range(args.runs):
            found = {}
            for name, path in scenarios.items() if i % 2 == 0 else reversed(scenarios.items()):
                data = yaml.safe_load(path.read_text())
                for variant in data["variants"].values():  # the scenario's folder, not tmp's
                    if "diff" in variant:
                        variant["diff"] = str(path.parent / variant["diff"])
                est, wall = run(data, tmp, f"{name}-{i}")
                found[name] = est
                print(describe(f"{name} (run {i + 1})", est, wall), flush=True)
            print(agreement(found["overlay"], found["swap"], "overlay", "swap"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
