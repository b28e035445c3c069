"""The speed-adjusted row on real vLLM: the demo's engine (scenarios/
cpu-medusa-proposer.yaml, one engine, its precision stop off) with
- aa: both arms the demo's optimized proposer (an A/A);
- wait50, wait150: a planted busy wait in every MedusaProposer.propose call
  (testkit.patches.medusa_wait): the adjusted row should hold the planted cost's size;
- forward150: a planted wait in every target forward (testkit.patches.forward_wait): the row's
  covariate moves, so it must be withdrawn;
- sweep: every proposer call writes 4 MB through a buffer (testkit.patches.cache_sweep), so the
  speed probe after it starts with the worker core's caches full of it: a change that reaches
  the probe itself, which its twin (another process, the other core) should see.
Each is run through `specbench run` and read as the report reads it (compare_run): the primary
output-throughput row, the adjusted row (a patch declares no part: adjusted as a drafter change
is, by the forward and the rest), and the prediction of a planted wait: -(wait x steps) / the
candidate's median pass time.

    .venv/bin/python benchmarks/adjusted_real.py [--which aa wait50 wait150 forward150]
        [--which ... sweep] [--blocks 40] [--probe] [--results-dir /tmp/adjusted-real]
        [--run DIR ...]

With --probe the scenario turns the speed probe on (speed_probe: true): the row is adjusted by
the probe instead of the step parts, so a wait in the forward should hold its size too; its
twin runs beside it (harness.engine.twin), and the same blocks are also read without it (the
probe checked only by its own delta).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.adjusted import (  # noqa: E402
    KEY,
    PROBE_COLUMN,
    TWIN_COLUMN,
    adjusted_row,
    declared_part,
)
from harness.analysis.compare import compare_run  # noqa: E402
from harness.present.adjusted import adjustment_note  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

KINDS = {
    "aa": None,
    "wait50": ("testkit.patches.medusa_wait:install", "SPECBENCH_PLANTED_WAIT_US", 50.0),
    "wait150": ("testkit.patches.medusa_wait:install", "SPECBENCH_PLANTED_WAIT_US", 150.0),
    "forward150": (
        "testkit.patches.forward_wait:install",
        "SPECBENCH_PLANTED_FORWARD_WAIT_US",
        150.0,
    ),
    "sweep": ("testkit.patches.cache_sweep:install", "SPECBENCH_PLANTED_SWEEP_KB", 4096.0),
}


def scenario(kind: str, blocks: int, probe: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "scenarios" / "cpu-medusa-proposer.yaml").read_text()
    )
    data.pop("precision", None)
    data.update(name=f"adjusted-{kind}", repeats=2 * blocks, speed_probe=probe)
    plant = KINDS[kind]
    if plant is None:
        data["variants"] = {
            "baseline": {"baseline": True, "implementation": "medusa-proposer:optimized"},
            "same": {"implementation": "medusa-proposer:optimized"},
        }
    else:
        patch, env, wait = plant
        data["env"] = {env: str(wait)}
        data["variants"] = {
            "baseline": {"baseline": True},
            "wait": {"patch": patch, "switchable": True},
        }
    return data


def run_one(kind: str, blocks: int, results: Path, probe: bool) -> Path | None:
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"adjusted-{kind}.yaml"
    path.write_text(yaml.safe_dump(scenario(kind, blocks, probe), sort_keys=False))
    done, run_dir = run_scenario(path, results)
    if run_dir is None:
        print(f"{kind}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
    return run_dir


def side_row(run: Any, cand: str, drop: str, part: str | None, robust: bool, label: str) -> None:
    """The same blocks' adjusted row read without the passes' `drop` column, printed."""
    row = adjusted_row(
        run.passes.drop(columns=[drop]), run.scenario.baseline, cand, part, "one-engine", robust
    )
    if row is None or row.adjustment is None:
        return
    e = row.estimate
    shown = (
        f"{100 * e.delta:+.2f}% [{100 * e.ci_low:+.2f}, {100 * e.ci_high:+.2f}]"
        if e.ci_low is not None and e.ci_high is not None
        else "no interval"
    )
    print(f"  {label}: {shown}; {adjustment_note(row.adjustment)}")


def read(run_dir: Path) -> None:
    run = load_run(run_dir)
    cand = run.scenario.candidates[0]
    passes = run.passes
    env = run.scenario.env
    wait_us = next((float(v) for k, v in env.items() if "WAIT" in k), 0.0)
    [result] = compare_run(run).candidates
    primary = next((r for r in result.rows if r.key == "output_throughput"), None)
    row = next((r for r in result.rows if r.key == KEY), None)
    c = passes[passes["variant"] == cand]
    # The candidate's typical (median) pass: a stalled pass's length is not the wait's.
    predicted = -wait_us * 1e-6 * float(c["steps"].median()) / float(c["duration_s"].median())
    print(f"{run_dir.name}: {len(passes) // 4} blocks; planted {wait_us:g} µs a call")
    for name, r in (("primary", primary), ("adjusted", row)):
        if r is None:
            print(f"  {name}: no row")
            continue
        e = r.estimate
        if e.ci_low is None or e.ci_high is None:
            print(f"  {name}: {adjustment_note(r.adjustment) if r.adjustment else e.note}")
            continue
        print(
            f"  {name}: {100 * e.delta:+.2f}% [{100 * e.ci_low:+.2f}, {100 * e.ci_high:+.2f}]"
            f" (±{50 * (e.ci_high - e.ci_low):.2f}%)"
        )
        if r.adjustment is not None:
            print(f"    {adjustment_note(r.adjustment)}")
    if wait_us:
        print(f"  predicted by the planted cost (wait x steps / pass): {100 * predicted:+.2f}%")
    robust = primary is not None and primary.estimate.robust
    if PROBE_COLUMN in passes:  # the same blocks adjusted by the step parts, for comparison
        part = declared_part(run.scenario.variants[cand].implementation)
        side_row(run, cand, PROBE_COLUMN, part, robust, "by the step parts instead")
    if TWIN_COLUMN in passes:  # the same blocks with the probe checked only by its own delta
        side_row(run, cand, TWIN_COLUMN, None, robust, "without the twin")
    if PROBE_COLUMN in passes:
        probe = passes.groupby("variant")[PROBE_COLUMN].median()
        print(
            "  speed probe, median µs a step: "
            + ", ".join(f"{k} {v:.1f}" for k, v in probe.items())
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--which", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--results-dir", type=Path, default=Path("/tmp/adjusted-real"))
    parser.add_argument("--run", type=Path, nargs="*", default=None)
    parser.add_argument("--probe", action="store_true", help="speed_probe: true")
    args = parser.parse_args()
    if args.run:
        for run_dir in args.run:
            read(run_dir)
        return 0
    for kind in args.which:
        found = run_one(kind, args.blocks, args.results_dir, args.probe)
        if found is not None:
            read(found)
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
