"""A planted cost of known size in the proposer, read back from the draft row (the draft row's
validation): the Medusa demo's engine with testkit.patches.medusa_wait switched per pass (a
busy wait of --wait-us in every MedusaProposer.propose call, one call per engine step), run
through `specbench run`, then the draft row's delta as the table gives it (relative, on the
blocks) and as added time per call: the mean over blocks of the arms' difference in draft time
per step (µs), with its t interval, beside the other parts' rows, which should not move.

    .venv/bin/python benchmarks/planted_wait.py [--wait-us 50] [--blocks 40]
        [--threads-bind 0] [--results-dir /tmp/planted]

--threads-bind sets VLLM_CPU_OMP_THREADS_BIND (e.g. 0: one OpenMP thread on core 0; default:
vLLM's own, both cores). One engine, about 1.5 minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_run  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

ROWS = ("draft_ms_per_step", "forward_ms_per_step", "rest_ms_per_step", "outside_ms_per_pass")


def scenario(wait_us: float, blocks: int, threads_bind: str | None) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "scenarios" / "cpu-medusa-proposer.yaml").read_text()
    )
    data.pop("precision", None)
    data.update(
        name="planted-wait",
        repeats=2 * blocks,
        env={
            "SPECBENCH_PLANTED_WAIT_US": str(wait_us),
            **({"VLLM_CPU_OMP_THREADS_BIND": threads_bind} if threads_bind else {}),
        },
        variants={
            "baseline": {"baseline": True},
            "wait": {"patch": "testkit.patches.medusa_wait:install", "switchable": True},
        },
    )
    return data


def additive_us(passes: pd.DataFrame) -> tuple[float, float, float, int]:
    """Mean over blocks of (wait - baseline) draft time per step, µs, with its 95% t interval."""
    by_block = passes.groupby(["block", "variant"])["draft_ms_per_step"].mean().unstack()
    diff = 1000.0 * (by_block["wait"] - by_block["baseline"]).dropna().to_numpy()
    n = diff.size
    half = stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n)
    return float(diff.mean()), float(diff.mean() - half), float(diff.mean() + half), n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait-us", type=float, default=50.0)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--threads-bind", default=None)
    parser.add_argument("--results-dir", type=Path, default=Path("/tmp/planted"))
    parser.add_argument(
        "--run", type=Path, default=None, help="read this run folder instead of running one"
    )
    args = parser.parse_args()
    run_dir = args.run
    if run_dir is None:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        path = args.results_dir / "planted-wait.yaml"
        path.write_text(
            yaml.safe_dump(scenario(args.wait_us, args.blocks, args.threads_bind), sort_keys=False)
        )
        done, ran = run_scenario(path, args.results_dir)
        if done.returncode != 0 or ran is None:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode or 1
        run_dir = ran
    run = load_run(run_dir)
    comparison = compare_run(run)
    [cand] = comparison.candidates
    env = run.scenario.env
    print(
        f"run {run_dir.name}: {comparison.design}, "
        f"{env.get('VLLM_CPU_OMP_THREADS_BIND', 'default')} OpenMP binding"
    )
    for key in ROWS:
        row = next(r for r in cand.rows if r.key == key)
        e = row.estimate
        assert e.ci_low is not None and e.ci_high is not None, row.label
        print(
            f"  {row.label}: {row.baseline:.4g} -> {row.candidate:.4g}, "
            f"{100 * e.delta:+.1f}% [{100 * e.ci_low:+.1f}, {100 * e.ci_high:+.1f}]"
        )
    mean, low, high, n = additive_us(run.passes)
    print(
        f"  added draft time per call (one call per step), mean of {n} block differences: "
        f"{mean:.1f} µs [{low:.1f}, {high:.1f}] (planted: the wait of "
        f"{env.get('SPECBENCH_PLANTED_WAIT_US', '50')} µs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
