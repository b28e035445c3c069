"""Which lever reduces the demo's shared-speed noise on this machine: the demo as an A/A
(both arms vLLM's own proposer, one engine) under each lever in turn, one at a time, each
for the same measuring budget, with the machine and the launch's processes watched.

    .venv/bin/python benchmarks/noise_levers.py [--levers auto nobind both one long]
        [--budget-s 180] [--results-dir /tmp/noise-levers] [--out levers.json]

Levers:
- auto: vLLM's own OpenMP binding (VLLM_CPU_OMP_THREADS_BIND unset);
- nobind: no binding (`nobind`): the kernel places the OpenMP threads;
- both: both cores bound (`0-1`);
- one: one OpenMP thread on core 1 (`1`), leaving core 0 to the engine core, the front end
  and the machine's other work;
- long: vLLM's binding and 4x longer passes (64 prompts in place of 16).

A lever a scenario cannot set is left out: the engine core's busy loop (vLLM's shared-memory
queue readers spin on sched_yield for a second after each read, shm_broadcast.SpinCondition)
cannot be turned off; forced to 0 by a patch, each step then waits for the queue's idle
notification, and the demo ran at about 2 tokens/s.

Per lever, through the shipped code (`specbench run`, then compare_run as the report reads
it): passes and blocks measured, the median pass, the pass-to-pass sd of log throughput (each
pass's deviation from its arm and block mean) and its lag-1 autocorrelation, how the parts
move together (forward ~ rest of the step), the primary and the speed-adjusted rows'
half-widths, and both projected to 5 minutes of measuring (half-width x sqrt(measuring s /
300)), so that levers whose passes differ in length compare per minute. Watched every 0.5 s:
the machine's steal and other processes' share of CPU (benchmarks/noise_sources), each vLLM
process's CPU use (the engine core's busy polling), and how often the worker's threads move
between cores (/proc/<pid>/task/*/stat, field 39).
"""

from __future__ import annotations

import argparse
import json
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

from noise_sources import FIELDS, Sampler, per_pass  # noqa: E402

from harness.analysis.adjusted import KEY as ADJUSTED  # noqa: E402
from harness.analysis.compare import compare_run  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

BIND = "VLLM_CPU_OMP_THREADS_BIND"
# lever -> (environment, workload overrides)
LEVERS: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "auto": ({}, {}),
    "nobind": ({BIND: "nobind"}, {}),
    "both": ({BIND: "0-1"}, {}),
    "one": ({BIND: "1"}, {}),
    "long": ({}, {"num_prompts": 64}),
}


def scenario(lever: str, budget_s: float) -> dict[str, Any]:
    """The demo as an A/A under `lever`, measuring for its whole budget."""
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "scenarios" / "cpu-medusa-proposer.yaml").read_text()
    )
    env, workload = LEVERS[lever]
    data.update(name=f"lever-{lever}", env=env)
    data["workload"] = {**data["workload"], **workload}
    # Out of reach: the budget ends the run, so every lever measures as long.
    data["precision"] = {"mde": 0.0001, "budget_s": budget_s, "max_blocks": 100_000}
    # vLLM's own proposer in both arms (the demo's optimized one is vLLM 0.32's).
    data["variants"] = {"baseline": {"baseline": True}, "same": {}}
    return data


def thread_cpus(pid: int) -> dict[int, int]:
    """The core each thread of `pid` last ran on (field 39 of its stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        out[int(task.name)] = int(fields[36])  # field 39, counted after the command name
    return out


class Watch(threading.Thread):
    """Every `every` s: each vLLM process's CPU time and its threads' cores."""

    def __init__(self, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        self.rows: list[dict[str, Any]] = []

    def run(self) -> None:
        while not self.done.is_set():
            now = time.time()
            for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
                name = proc.info["name"] or ""
                if "harness.engine.worker" in (proc.info["cmdline"] or []):
                    name = "front end (specbench worker)"
                elif not name.startswith("VLLM::"):
                    continue
                times = proc.info["cpu_times"]
                if times is None:
                    continue
                self.rows.append(
                    {
                        "t": now,
                        "pid": proc.pid,
                        "name": name,
                        "cpu_s": times.user + times.system,
                        "threads": thread_cpus(proc.pid),
                    }
                )
            time.sleep(self.every)


def process_use(rows: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """Per vLLM process over [start, end]: CPU seconds per second, and thread moves between
    cores per second (a thread seen on another core than at the sample before)."""
    out: dict[str, Any] = {}
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if start <= r["t"] <= end:
            by_pid.setdefault(r["pid"], []).append(r)
    for mine in by_pid.values():
        if len(mine) < 2:
            continue
        span = mine[-1]["t"] - mine[0]["t"]
        moves = sum(
            1
            for a, b in zip(mine, mine[1:], strict=False)
            for tid, cpu in b["threads"].items()
            if tid in a["threads"] and a["threads"][tid] != cpu
        )
        out[mine[0]["name"]] = {
            "cpu_per_s": round((mine[-1]["cpu_s"] - mine[0]["cpu_s"]) / span, 2),
            "thread_moves_per_s": round(moves / span, 2),
        }
    return out


def run_lever(lever: str, budget_s: float, results: Path) -> dict[str, Any]:
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"lever-{lever}.yaml"
    path.write_text(yaml.safe_dump(scenario(lever, budget_s), sort_keys=False))
    sampler, watch = Sampler(), Watch()
    sampler.start()
    watch.start()
    done, run_dir = run_scenario(path, results)
    sampler.done.set()
    watch.done.set()
    sampler.join()
    watch.join()
    if run_dir is None:
        return {"lever": lever, "error": done.stderr[-1500:]}
    samples = pd.DataFrame(sampler.rows, columns=["t", *FIELDS, "freq"])
    return read(lever, run_dir, samples, watch.rows)


def half_width(row: Any) -> float | None:
    e = row.estimate if row is not None else None
    if e is None or e.ci_low is None or e.ci_high is None:
        return None
    return float(50 * (e.ci_high - e.ci_low))


def read(
    lever: str, run_dir: Path, samples: pd.DataFrame, procs: list[dict[str, Any]]
) -> dict[str, Any]:
    run = load_run(run_dir)
    passes = run.passes
    if passes.empty:
        failed = [r.error for r in run.runs if r.error]
        return {"lever": lever, "run": str(run_dir), "error": "; ".join(failed) or "no passes"}
    [result] = compare_run(run).candidates
    rows = {r.key: r for r in result.rows}
    group = [passes["variant"], passes["block"]]
    logs = pd.DataFrame(
        {
            "tput": np.log(passes["output_throughput"]),
            "forward": np.log(passes["forward_ms_per_step"]),
            "rest": np.log(passes["rest_ms_per_step"]),
        }
    )
    dev = logs - logs.groupby(group).transform("mean")
    ordered = np.log(passes.sort_values("started_unix")["output_throughput"])
    measure_s = float(passes["duration_s"].sum())
    start = float(passes["started_unix"].min())
    end = float((passes["started_unix"] + passes["duration_s"]).max())
    shares = per_pass(passes, samples)
    scale = (measure_s / 300.0) ** 0.5
    primary, adjusted = half_width(rows.get("output_throughput")), half_width(rows.get(ADJUSTED))
    return {
        "lever": lever,
        "env": LEVERS[lever][0],
        "run": str(run_dir),
        "passes": len(passes),
        "blocks": int(passes["block"].max() + 1),
        "measure_s": round(measure_s, 1),
        "median_pass_s": round(float(passes["duration_s"].median()), 3),
        "pass_sd_pct": round(100 * float(dev["tput"].std()), 2),
        "lag1": round(float(ordered.autocorr(1)), 2),
        "forward_rest_corr": round(float(dev["forward"].corr(dev["rest"])), 2),
        "primary_hw_pct": primary,
        "adjusted_hw_pct": adjusted,
        "primary_hw_5min_pct": None if primary is None else round(primary * scale, 2),
        "adjusted_hw_5min_pct": None if adjusted is None else round(adjusted * scale, 2),
        "steal_pct": round(100 * float(shares["steal_share"].mean()), 2),
        "foreign_cpu_pct": round(100 * float(passes["foreign_cpu"].mean()), 1),
        "processes": process_use(procs, start, end),
    }


def show(found: list[dict[str, Any]]) -> None:
    for f in found:
        if "error" in f:
            print(f"{f['lever']}: failed\n{f['error']}")
            continue
        use = "; ".join(
            f"{k} {v['cpu_per_s']} CPU-s/s, {v['thread_moves_per_s']} moves/s"
            for k, v in f["processes"].items()
        )
        print(
            f"{f['lever']:7s} {f['blocks']:4d} blocks  pass {f['median_pass_s']:.3f} s  "
            f"sd {f['pass_sd_pct']:.2f}%  lag1 {f['lag1']:+.2f}  fwd~rest "
            f"{f['forward_rest_corr']:+.2f}  primary ±{f['primary_hw_pct']:.2f}% "
            f"(5 min ±{f['primary_hw_5min_pct']:.2f}%)  adjusted "
            + (
                "n/a"
                if f["adjusted_hw_pct"] is None
                else f"±{f['adjusted_hw_pct']:.2f}% (5 min ±{f['adjusted_hw_5min_pct']:.2f}%)"
            )
            + f"  steal {f['steal_pct']:.2f}%  other work {f['foreign_cpu_pct']:.1f}%"
        )
        print(f"        {use}")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=list(LEVERS))
    parser.add_argument("--budget-s", type=float, default=180.0)
    parser.add_argument("--results-dir", type=Path, default=Path("/tmp/noise-levers"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    found = []
    for lever in args.levers:
        found.append(run_lever(lever, args.budget_s, args.results_dir))
        show(found[-1:])
    if args.out:
        args.out.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
