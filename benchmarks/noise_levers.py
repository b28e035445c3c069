"""Which lever lowers the demo's shared-speed noise on this machine: the demo as an A/A (both
arms the optimized proposer) run once per lever, each with the same measuring budget, on an
otherwise idle machine, one run at a time.

    .venv/bin/python benchmarks/noise_levers.py [--budget-s 150] [--levers auto,nobind,...]
        [--results-dir /tmp/levers] [--out levers.json]

Levers (vLLM's CPU worker binds its OpenMP threads by VLLM_CPU_OMP_THREADS_BIND):
  auto    vLLM's default binding;
  nobind  no binding (the OS places the threads);
  cpu1    the worker's threads on CPU 1 only (the engine core and front end keep CPU 0);
  cpus01  two threads, one on each CPU;
  long    the default binding, passes 4x longer (64 prompts in place of 16).

Per run it reads, besides the comparison (primary and speed-adjusted MDE, both as `specbench
report` reads them): the noise of each pass's parts around its (arm, block) mean (log sd of
the throughput, the verification forward per step and the time outside the steps, and the
forward~rest correlation that the adjustment lives on); every 0.2 s, the CPU each thread of
vLLM's processes last ran on (/proc/<pid>/task/<tid>/stat field 39: OpenMP thread placement,
and how often a busy thread moved) and each process's CPU time per second of wall (the engine
core's polling: a core that spins shows near 100% while the worker computes); and /proc/stat
(steal) through noise_sources.Sampler. Figures from one run per lever on a shared 2-core
machine: compare them as the table's spread allows, not as rankings.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from noise_sources import FIELDS, Sampler, per_pass  # noqa: E402

from harness.analysis.adjusted import KEY as ADJUSTED_KEY  # noqa: E402
from harness.analysis.compare import compare_run  # noqa: E402
from harness.results.run import load_run  # noqa: E402

DEMO = ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
LEVERS: dict[str, dict[str, Any]] = {
    "auto": {"env": {}},
    "nobind": {"env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}},
    "cpu1": {"env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}},
    "cpus01": {"env": {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}},
    "long": {"env": {}, "num_prompts": 64},
}


class Threads(threading.Thread):
    """Every `every` s, for each thread of vLLM's processes (named VLLM::...): the CPU it last
    ran on and its CPU time."""

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        self.rows: list[tuple[float, int, str, int, int, float]] = []  # t, pid, name, tid, cpu, s

    def run(self) -> None:
        tick = psutil.CLOCK_TICKS if hasattr(psutil, "CLOCK_TICKS") else 100
        while not self.done.is_set():
            now = time.time()
            for proc in psutil.process_iter(["name"]):
                name = proc.info["name"] or ""
                if not name.startswith("VLLM::"):
                    continue
                for task in Path(f"/proc/{proc.pid}/task").glob("*"):
                    try:
                        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    # after the name: field 3 is index 0; utime 14, stime 15, processor 39
                    cpu_s = (int(fields[11]) + int(fields[12])) / tick
                    self.rows.append((now, proc.pid, name, int(task.name), int(fields[36]), cpu_s))
            time.sleep(self.every)


def scenario_for(lever: str, budget_s: float, out: Path) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data = copy.deepcopy(data)
    data["name"] = f"levers-{lever}"
    for variant in data["variants"].values():
        variant["implementation"] = "medusa-proposer:optimized"  # an A/A
    data["precision"] = {"mde": 0.001, "budget_s": budget_s, "max_blocks": 100_000}
    if "num_prompts" in LEVERS[lever]:
        data["workload"]["num_prompts"] = LEVERS[lever]["num_prompts"]
    path = out / f"levers-{lever}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def placement(threads: pd.DataFrame, start: float, end: float) -> dict[str, Any]:
    """Over [start, end]: per process, CPU time per wall second; the busy threads (over 20% of
    a CPU), the CPUs they ran on and their moves per second."""
    window = threads[(threads["t"] >= start) & (threads["t"] <= end)]
    out: dict[str, Any] = {}
    for name, proc in window.groupby("name"):
        wall = proc["t"].max() - proc["t"].min()
        if wall <= 0:
            continue
        per_thread = proc.sort_values("t").groupby("tid")
        used = per_thread["cpu_s"].agg(lambda s: s.iloc[-1] - s.iloc[0])
        busy = used[used / wall > 0.2].index
        moves = sum(int((g["cpu"].diff().fillna(0) != 0).sum()) for t, g in per_thread if t in busy)
        out[str(name)] = {
            "cpu_per_s": round(float(used.sum() / wall), 3),
            "busy_threads": len(busy),
            "busy_cpus": sorted({int(c) for c in proc[proc["tid"].isin(busy)]["cpu"]}),
            "moves_per_s": round(moves / wall, 2),
        }
    return out


def measure(lever: str, budget_s: float, out: Path) -> dict[str, Any]:
    scenario = scenario_for(lever, budget_s, out)
    stat, threads = Sampler(), Threads()
    stat.start()
    threads.start()
    env = {**os.environ, **LEVERS[lever]["env"]}
    done = subprocess.run(
        [str(ROOT / ".venv/bin/specbench"), "run", str(scenario), "--results-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    stat.done.set()
    threads.done.set()
    stat.join()
    threads.join()
    line = next((x for x in done.stderr.splitlines() if x.startswith("specbench: results:")), None)
    if line is None:
        return {"lever": lever, "error": done.stderr[-1500:]}
    run = load_run(Path(line.split("results:", 1)[1].strip()))
    passes = run.passes
    comparison = compare_run(run)
    rows = {r.key: r.estimate for r in comparison.candidates[0].rows}
    logs = pd.DataFrame(
        {
            "throughput": np.log(passes["output_throughput"]),
            "forward": np.log(passes["forward_ms_per_step"]),
            "rest": np.log(passes["rest_ms_per_step"]),
            "outside": np.log(passes["outside_ms_per_pass"]),
        }
    )
    dev = logs - logs.groupby([passes["variant"], passes["block"]]).transform("mean")
    samples = pd.DataFrame(stat.rows, columns=["t", *FIELDS, "freq"])
    shares = per_pass(passes, samples)
    start = float(passes["started_unix"].min())
    end = float((passes["started_unix"] + passes["duration_s"]).max())
    tframe = pd.DataFrame(threads.rows, columns=["t", "pid", "name", "tid", "cpu", "cpu_s"])
    adjusted = rows.get(ADJUSTED_KEY)
    return {
        "lever": lever,
        "run": str(run.path),
        "passes": len(passes),
        "blocks": int(passes["block"].nunique()),
        "pass_s": round(float(passes["duration_s"].median()), 3),
        "primary_mde": rows["output_throughput"].mde,
        "adjusted_mde": adjusted.mde if adjusted is not None else None,
        "sd_throughput": float(dev["throughput"].std()),
        "sd_forward": float(dev["forward"].std()),
        "sd_outside": float(dev["outside"].std()),
        "forward_rest_corr": float(dev["forward"].corr(dev["rest"])),
        "steal_share": float(shares["steal_share"].mean()) if "steal_share" in shares else None,
        "foreign_cpu": float(passes["foreign_cpu"].mean()),
        "placement": placement(tframe, start, end),
    }


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--levers", default=",".join(LEVERS))
    parser.add_argument("--results-dir", type=Path, default=Path("/tmp/levers"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/levers.json"))
    args = parser.parse_args()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for lever in args.levers.split(","):
        t = time.time()
        got = measure(lever, args.budget_s, args.results_dir)
        got["wall_s"] = round(time.time() - t, 1)
        results.append(got)
        args.out.write_text(json.dumps(results, indent=1))
        if "error" in got:
            print(f"{lever}: failed: {got['error']}")
            continue
        print(
            f"{lever:7s} {got['blocks']:4d} blocks, pass {got['pass_s']:.2f}s: primary MDE "
            f"{pct(got['primary_mde'])}, adjusted {pct(got['adjusted_mde'])}; pass sd "
            f"throughput {pct(got['sd_throughput'])}, forward {pct(got['sd_forward'])}, "
            f"outside {pct(got['sd_outside'])}; forward~rest {got['forward_rest_corr']:+.2f}; "
            f"steal {pct(got['steal_share'])}, foreign cpu {got['foreign_cpu']:.1f}",
            flush=True,
        )
        for name, where in got["placement"].items():
            print(f"        {name}: {where}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
