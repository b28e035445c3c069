"""How much does an effect differ from one engine launch to the next? The launch x arm
interaction of a shipped one-engine scenario, measured on real vLLM: the scenario run as L
launches (rounds) of B blocks each, no precision target.

    .venv/bin/python benchmarks/interaction.py SCENARIO [--launches 6] [--blocks 40]
        [--set key=value ...]

Prints each launch's output-throughput delta with its standard error, the pooled estimate
(t over launch means, df = L - 1, as specbench's own interval for several launches), the
within-launch block sd, and the interaction's sd (method of moments, as stats._one_engine)
with a 95% interval from the chi-square interval of the launch means' variance (Graybill;
its lower end clipped at 0). --set changes scenario fields (model=tiny-llama-32k,
draft.model=..., batch_size=8). A benchmark to run and read on an idle machine, alone.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_run  # noqa: E402
from harness.config.sweep import set_path  # noqa: E402
from harness.present.tables import finding_line  # noqa: E402
from harness.results.metrics import passes_frame  # noqa: E402
from harness.results.run import load_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--launches", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--set", dest="changes", action="append", default=[])
    parser.add_argument("--keep", type=Path, help="keep the run folder here")
    args = parser.parse_args()
    data = yaml.safe_load(args.scenario.read_text())
    data.pop("precision", None)
    data.update(rounds=args.launches, repeats=2 * args.blocks, design="one-engine")
    for change in args.changes:
        key, _, value = change.partition("=")
        set_path(data, key, yaml.safe_load(value))
    for variant in data["variants"].values():
        if "diff" in variant:
            variant["diff"] = str((args.scenario.parent / variant["diff"]).resolve())
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep or scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        if (args.scenario.parent / "prompts").is_dir() and not (tmp / "prompts").exists():
            (tmp / "prompts").symlink_to((args.scenario.parent / "prompts").resolve())
        path = tmp / "interaction.yaml"
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
                "interaction",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        results = load_run(tmp / "interaction")
        comparison = compare_run(results)
        cand = comparison.candidates[0]
        row = next(r for r in cand.rows if r.key == "output_throughput")
        passes = passes_frame(results.runs)
        per_launch = []
        for _launch, frame in passes.groupby("launch"):
            frame = frame.sort_values("repeat")
            y = np.log(frame["output_throughput"].to_numpy())
            arm = (frame["variant"] == cand.name).to_numpy()
            blocks = frame["block"].to_numpy()
            d = np.array(
                [
                    y[(blocks == b) & arm].mean() - y[(blocks == b) & ~arm].mean()
                    for b in np.unique(blocks)
                ]
            )
            per_launch.append(
                (
                    float(d.mean()),
                    float(d.std(ddof=1) / math.sqrt(len(d))),
                    float(d.std(ddof=1)),
                    len(d),
                )
            )
        m = np.array([p[0] for p in per_launch])
        within = math.sqrt(float(np.mean([p[2] ** 2 for p in per_launch])))
        n_b = float(np.mean([p[3] for p in per_launch]))
        big_l = len(m)
        s2 = float(m.var(ddof=1))
        from scipy import stats as sps

        tau2 = s2 - within**2 / n_b
        lo = (big_l - 1) * s2 / float(sps.chi2.ppf(0.975, big_l - 1)) - within**2 / n_b
        hi = (big_l - 1) * s2 / float(sps.chi2.ppf(0.025, big_l - 1)) - within**2 / n_b
        est = row.estimate
        out = {
            "scenario": str(args.scenario),
            "changes": args.changes,
            "launches": big_l,
            "blocks_per_launch": n_b,
            "wall_s": round(wall),
            "per_launch_delta_pct": [round(100 * math.expm1(p[0]), 2) for p in per_launch],
            "per_launch_se_pct": [round(100 * p[1], 2) for p in per_launch],
            "pooled_pct": round(100 * est.delta, 2),
            "pooled_ci_pct": [
                round(100 * (est.ci_low or math.nan), 2),
                round(100 * (est.ci_high or math.nan), 2),
            ],
            "pooled_mde_pct": round(100 * (est.mde or math.nan), 2),
            "df": est.df,
            "within_block_sd_pct": round(100 * within, 2),
            "interaction_sd_pct": round(100 * math.sqrt(max(tau2, 0.0)), 2),
            "interaction_sd_ci_pct": [
                round(100 * math.sqrt(max(lo, 0.0)), 2),
                round(100 * math.sqrt(max(hi, 0.0)), 2),
            ],
            "findings": [finding_line(f) for f in est.findings],
        }
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
