"""Do the two designs agree? The same swap measured in one engine (arms switched between passes)
and in separate launches per arm, one after the other on real vLLM.

    .venv/bin/python benchmarks/design_agreement.py [SCENARIO] [--rounds R] [--repeats N]

Runs SCENARIO as shipped (one-engine), then forced to launch-per-arm with R rounds of N passes
per launch (no precision target), and prints each design's output-throughput delta with its
95% interval, and whether they agree: the difference of the two log-scale estimates against a
Welch t critical value (Satterthwaite degrees of freedom from the two designs' own). A
benchmark to run and read, not a CI gate.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_run  # noqa: E402
from harness.analysis.stats import DeltaEstimate  # noqa: E402
from harness.results.run import load_run  # noqa: E402


def run(data: dict[str, Any], tmp: Path, run_id: str) -> tuple[DeltaEstimate, float]:
    path = tmp / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(path),
            "--results-dir",
            str(tmp),
            "--run-id",
            run_id,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"{run_id} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    comparison = compare_run(load_run(tmp / run_id))
    row = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    return row.estimate, time.perf_counter() - start


def describe(name: str, est: DeltaEstimate, wall: float) -> str:
    ci = (
        f"[{100 * est.ci_low:+.2f}%, {100 * est.ci_high:+.2f}%]"
        if est.ci_low is not None and est.ci_high is not None
        else "no interval"
    )
    mde = f" MDE ±{100 * est.mde:.2f}%" if est.mde is not None else ""
    return (
        f"{name}: {100 * est.delta:+.2f}% {ci}{mde} units={est.units} df={est.df} "
        f"({est.test}) wall={wall:.0f}s"
    )


def agreement(a: DeltaEstimate, b: DeltaEstimate, name_a: str, name_b: str) -> str:
    """Whether two estimates of one effect agree: the difference of their log-scale
    estimates against a Welch t critical value (Satterthwaite df from their own)."""
    if not (a.se and b.se and a.df and b.df):
        return "agreement: not estimable (an estimate has no standard error)"
    from scipy import stats as sps

    se = math.hypot(a.se, b.se)
    df = se**4 / (a.se**4 / a.df + b.se**4 / b.df)
    t = (math.log1p(a.delta) - math.log1p(b.delta)) / se
    crit = float(sps.t.ppf(0.975, df))
    inside = b.ci_low is not None and b.ci_high is not None and b.ci_low <= a.delta <= b.ci_high
    return (
        f"difference of the estimates: t = {t:+.2f} on {df:.1f} df (critical {crit:.2f}): "
        f"{'agree' if abs(t) < crit else 'DISAGREE'}; {name_a} estimate "
        f"{'inside' if inside else 'outside'} the {name_b} interval"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scenario", nargs="?", type=Path, default=ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    shared = yaml.safe_load(args.scenario.read_text())
    prompts = args.scenario.parent / "prompts"
    separate = {
        **shared,
        "design": "launch-per-arm",
        "rounds": args.rounds,
        "repeats": args.repeats,
    }
    separate.pop("precision", None)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        if prompts.is_dir():
            (tmp / "prompts").symlink_to(prompts)
        for name, data in (("one-engine", shared), ("launch-per-arm", separate)):
            est, wall = run(data, tmp, name)
            results[name] = est
            print(describe(name, est, wall), flush=True)
    print(
        agreement(results["one-engine"], results["launch-per-arm"], "one-engine", "launch-per-arm")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
