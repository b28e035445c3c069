"""Does a change-proof probe see the machine's speed? The speed-adjusted row takes the
machine's speed from the step parts a change leaves alone, and a change that slows all of them
alike is indistinguishable from a slower machine (docs/statistics.md, its blind spot). A probe
no change can touch would not have that blind spot, if it sees the speed as they do.

This runs the demo's engine (scenarios/cpu-medusa-proposer.yaml, one engine, precision off) as
an A/A, both arms carrying testkit.patches.speed_probe: two fixed kernels (a Python loop, a
small torch matmul) timed before every engine step in vLLM's worker. Each pass gets the mean
log time of each kernel over its steps. Then, on the block differences the estimate reads
(candidate mean minus baseline mean, per block, log scale) and on each pass's deviation from
its arm and block mean: the correlation of each covariate with the log output throughput, and
the share of the throughput's variance a regression on it removes (r²), for the step parts
(forward + rest per step, the row's covariate now), for each probe, for the two probes'
geometric mean, and for a regression on both probes.

    .venv/bin/python benchmarks/probe_covariate.py [--blocks 60] [--results-dir DIR]
        [--run DIR --probes DIR]   # read a run already made, with its probe files
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.run import load_run  # noqa: E402
from testkit.patches.speed_probe import DIR_ENV  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

PATCH = "testkit.patches.speed_probe:install"
COVARIATES = ("step_parts", "probe_loop", "probe_matmul", "probe_both")


def scenario(blocks: int, probes: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "scenarios" / "cpu-medusa-proposer.yaml").read_text()
    )
    data.pop("precision", None)
    data.update(name="probe-covariate", repeats=2 * blocks)
    data["env"] = {**data.get("env", {}), DIR_ENV: str(probes)}
    arm = {"patch": PATCH}  # vLLM's own proposer in both arms: an A/A
    data["variants"] = {"baseline": {"baseline": True, **arm}, "same": dict(arm)}
    return data


def read_probes(folder: Path) -> pd.DataFrame:
    """Every step's probe record: time, loop seconds, matmul seconds, process."""
    frames = []
    for path in sorted(folder.glob("probe-*.txt")):
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        frame = pd.DataFrame(rows, columns=["t", "loop_s", "matmul_s"]).astype(float)
        frames.append(frame.assign(pid=path.stem.removeprefix("probe-")))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def per_pass(passes: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """Each pass with its steps' mean log probe times (the steps inside its window)."""
    probes = probes.sort_values("t")
    t = probes["t"].to_numpy()
    loop, matmul = np.log(probes["loop_s"].to_numpy()), np.log(probes["matmul_s"].to_numpy())
    out = passes.copy()
    rows = []
    for start, length in zip(out["started_unix"], out["duration_s"], strict=True):
        lo, hi = np.searchsorted(t, start), np.searchsorted(t, start + length)
        found = hi > lo
        rows.append(
            (hi - lo, loop[lo:hi].mean(), matmul[lo:hi].mean()) if found else (0, np.nan, np.nan)
        )
    out[["probe_steps", "probe_loop", "probe_matmul"]] = rows
    out["probe_both"] = (out["probe_loop"] + out["probe_matmul"]) / 2  # the geometric mean
    out["step_parts"] = np.log(out["forward_ms_per_step"] + out["rest_ms_per_step"])
    out["y"] = np.log(out["output_throughput"])
    return out


def correlations(frame: pd.DataFrame, how: str) -> dict[str, dict[str, float]]:
    cols = ["y", *COVARIATES]
    if how == "blocks":
        arm = np.where(frame["variant"] == "baseline", "b", "c")
        means = frame.assign(arm=arm).groupby(["block", "arm"])[cols].mean().unstack("arm")
        data = (means.xs("c", axis=1, level=1) - means.xs("b", axis=1, level=1)).dropna()
    else:
        data = (frame[cols] - frame.groupby(["block", "variant"])[cols].transform("mean")).dropna()
    corr = data.corr()
    both = _r2(data["y"].to_numpy(), data[["probe_loop", "probe_matmul"]].to_numpy())
    return {
        c: {
            "r": round(float(corr.loc["y", c]), 3),
            "r2": round(float(corr.loc["y", c] ** 2), 3),
            "sd_pct": round(100 * float(data[c].std()), 2),
        }
        for c in COVARIATES
    } | {
        "y": {"sd_pct": round(100 * float(data["y"].std()), 2), "n": len(data)},
        "probes_regression": {"r2": round(both, 3)},
    }


def _r2(y: np.ndarray, x: np.ndarray) -> float:
    """The share of y's variance a least-squares fit on the columns of x (and a constant)
    removes."""
    design = np.column_stack([np.ones(len(y)), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(1 - np.var(y - design @ coef) / np.var(y))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=60)
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--run", type=Path, default=None)
    ap.add_argument("--probes", type=Path, default=None)
    args = ap.parse_args()
    if args.run is not None and args.probes is not None:
        run_dir, probes = args.run, args.probes
    else:
        results = args.results_dir or Path(tempfile.mkdtemp(prefix="probe-covariate-"))
        probes = results / "probes"
        probes.mkdir(parents=True, exist_ok=True)
        path = results / "probe-covariate.yaml"
        path.write_text(yaml.safe_dump(scenario(args.blocks, probes), sort_keys=False))
        done, found = run_scenario(path, results)
        if found is None:
            print(f"exit {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
            return 1
        run_dir = found
    passes = load_run(run_dir).passes
    frame = per_pass(passes, read_probes(probes))
    out = {
        "run": str(run_dir),
        "passes": len(frame),
        "median_probe_steps": float(frame["probe_steps"].median()),
        "median_loop_us": round(1e6 * float(np.exp(frame["probe_loop"].median())), 1),
        "median_matmul_us": round(1e6 * float(np.exp(frame["probe_matmul"].median())), 1),
        "median_pass_s": round(float(frame["duration_s"].median()), 4),
        "block_differences": correlations(frame, "blocks"),
        "pass_deviations": correlations(frame, "passes"),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
