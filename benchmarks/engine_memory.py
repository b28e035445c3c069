"""Whose memory grows: the demo's engine driven by a plain `LLM.generate` loop, with and
without what specbench adds to each pass, and the RSS of every process of the engine sampled
after every pass.

    .venv/bin/python benchmarks/engine_memory.py [--seconds 360] [--modes plain,specbench]

The one-hour soak (benchmarks/soak.py, docs/measurements.md) saw vLLM's engine core and worker
grow linearly while specbench's own worker stayed flat. This separates the two causes, one
mode at a time (never both at once), each in a fresh engine built from the demo's own launch
(the plan's RunSpec, the worker's prepare_launch: same engine arguments, same prompts):

- plain: vLLM alone. specbench's plugin is installed but inert (no launch environment),
  and each pass is `LLM.generate` over the demo's prompts, nothing else;
- traced: as plain, with Python's tracemalloc in every vLLM process (testkit.patches.
  memory_trace, installed by specbench's plugin as a variant's patch is): every minute each
  process writes the source lines whose allocations grew most, to the scratch folder's
  traces/ (its passes are slower: not timings);
- specbench: the launch environment of a one-engine run (step timer, heartbeat, the swap
  switchable per arm, the proof recorder), and each pass as the worker drives it: the arm
  switched in through collective_rpc, the spec-decode counters and step times read before and
  after, the reports collected by a second switch (A B B A blocks).

Per process: RSS at the start and end of the measured passes (median of the first and last
10 samples after --skip passes), the growth in percent, and the least-squares slope in KiB
per pass over the passes after the first third. Writes every sample as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.scenario import load_scenario  # noqa: E402
from harness.execute.local import device_env  # noqa: E402
from harness.plan.plan import expand_plan  # noqa: E402
from harness.wire.protocol import (  # noqa: E402
    HEARTBEAT_ENV,
    IMPL_ENV,
    IMPL_REPORT_DIR_ENV,
    PATCH_ENV,
    STEP_TIMES_ENV,
    SWITCH_RPC,
)
from testkit.patches import memory_trace  # noqa: E402

DEMO = ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
MODES = ("plain", "specbench", "traced")
TRACE = "testkit.patches.memory_trace:install"
EDGE = 10


def demo_run(scenario: Path) -> Any:
    """The demo's one-engine RunSpec, as `specbench run` plans it."""
    run = expand_plan(load_scenario(scenario), scenario_file=scenario).runs[0]
    assert run.design == "one-engine", run.design
    return run


def child_env(run: Any, mode: str, scratch: Path) -> dict[str, str]:
    env = {**os.environ, **device_env(run.device, 1, run.model_runner), **run.env}
    for key in (IMPL_ENV, IMPL_REPORT_DIR_ENV, STEP_TIMES_ENV, HEARTBEAT_ENV, PATCH_ENV):
        env.pop(key, None)
    if mode == "traced":
        (scratch / "reports").mkdir(exist_ok=True)
        env[IMPL_REPORT_DIR_ENV] = str(scratch / "reports")
        env[PATCH_ENV] = TRACE
        env[memory_trace.DIR_ENV] = str(scratch / "traces")
    if mode == "specbench":
        (scratch / "reports").mkdir(exist_ok=True)
        env[IMPL_REPORT_DIR_ENV] = str(scratch / "reports")
        env[HEARTBEAT_ENV] = str(scratch / "heartbeat")
        if run.implementation:
            env[IMPL_ENV] = run.implementation
        if run.step_times:
            env[STEP_TIMES_ENV] = "1"
    return env


def rss_of_tree() -> list[tuple[int, str, int]]:
    """(pid, name, rss) of this process and every process under it."""
    me = psutil.Process()
    out = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            out.append((proc.pid, proc.name(), proc.memory_info().rss))
        except psutil.Error:
            continue
    return out


def child(scenario: Path, mode: str, seconds: float, out: Path) -> None:
    """Build the engine, warm up, loop passes for `seconds`, one JSON line per pass."""
    from harness.engine import worker
    from harness.wire.records import Timings, WorkerResult

    run = demo_run(scenario)
    result = WorkerResult(run_key=run.run_key, status="failed", timings=Timings())
    engine_args, prompts, warm, _ = worker.prepare_launch(run, scenario.parent, None, result)
    from vllm import LLM, SamplingParams

    llm: Any = LLM(**engine_args)
    w = run.workload
    params = SamplingParams(max_tokens=w.max_tokens, ignore_eos=w.ignore_eos, temperature=0.0)
    engine_prompts = [worker.to_engine_prompt(p) for p in prompts]
    llm.generate([worker.to_engine_prompt(p) for p in warm], params, use_tqdm=False)
    arms = [a.switch_to for a in run.arms]
    order = [0, 1, 1, 0]
    started = time.time()
    n = 0
    with out.open("w") as f:
        while time.time() - started < seconds:
            if mode == "specbench":
                llm.collective_rpc(SWITCH_RPC, args=(arms[order[n % 4] % len(arms)] or "",))
                before = (worker.read_counters(llm), worker.read_step_times(llm))
            t = time.perf_counter()
            llm.generate(engine_prompts, params, use_tqdm=False)
            duration = time.perf_counter() - t
            if mode == "specbench":
                after = (worker.read_counters(llm), worker.read_step_times(llm))
                worker.counter_delta(before[0], after[0])
                worker.step_delta(before[1], after[1])
                llm.collective_rpc(SWITCH_RPC, args=("",))
            n += 1
            row = {
                "pass": n,
                "t": round(time.time() - started, 2),
                "s": round(duration, 4),
                "rss": [[pid, name, rss] for pid, name, rss in rss_of_tree()],
            }
            f.write(json.dumps(row) + "\n")
            f.flush()
    os._exit(0)  # the engine processes die with the session the parent ends


def slope(x: list[float], y: list[float]) -> float:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum(
        (a - mx) ** 2 for a in x
    )


def summarise(mode: str, rows: list[dict[str, Any]], skip: int) -> list[dict[str, Any]]:
    """Per process: start and end RSS after `skip` passes, growth, slope per pass."""
    kept = [r for r in rows if r["pass"] > skip]
    series: dict[str, list[tuple[int, int]]] = {}
    for r in kept:
        for pid, name, rss in r["rss"]:
            series.setdefault(f"{name} {pid}", []).append((r["pass"], rss))
    out = []
    for name, points in sorted(series.items()):
        if len(points) < 3 * EDGE:
            continue
        first = statistics.median(v for _, v in points[:EDGE])
        last = statistics.median(v for _, v in points[-EDGE:])
        tail = points[len(points) // 3 :]
        per_pass = slope([p for p, _ in tail], [v for _, v in tail])
        out.append(
            {
                "mode": mode,
                "process": name,
                "passes": f"{points[0][0]}-{points[-1][0]}",
                "start_mib": round(first / 2**20, 1),
                "end_mib": round(last / 2**20, 1),
                "growth_pct": round(100 * (last / first - 1), 2),
                "kib_per_pass": round(per_pass / 1024, 2),
            }
        )
    return out


def run_mode(scenario: Path, mode: str, seconds: float, scratch: Path) -> list[dict[str, Any]]:
    run = demo_run(scenario)
    out = scratch / f"{mode}.jsonl"
    log = (scratch / f"{mode}.log").open("w")
    cmd = [sys.executable, __file__, "--child", mode, "--seconds", str(seconds)]
    cmd += ["--scenario", str(scenario), "--samples", str(out)]
    proc = subprocess.Popen(
        cmd,
        env=child_env(run, mode, scratch),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=seconds + 600)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    if not out.exists():
        raise SystemExit(f"{mode}: no samples; see {scratch / (mode + '.log')}")
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=360.0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--skip", type=int, default=100, help="passes left out as warm-up")
    parser.add_argument("--scenario", type=Path, default=DEMO)
    parser.add_argument("--out", type=Path, default=None, help="every sample, as JSON")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.scenario.resolve(), args.child, args.seconds, args.samples)
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="engine-memory-"))
    rows: dict[str, list[dict[str, Any]]] = {}
    table = []
    for mode in args.modes.split(","):
        rows[mode] = run_mode(args.scenario.resolve(), mode, args.seconds, scratch)
        passes = len(rows[mode])
        pace = statistics.median(r["s"] for r in rows[mode])
        print(f"{mode}: {passes} passes, median pass {pace * 1000:.0f} ms", flush=True)
        if mode == "traced":
            print(f"traced: each process's growth by source line in {scratch / 'traces'}")
        table += summarise(mode, rows[mode], args.skip)
    import pandas as pd

    print(pd.DataFrame(table).to_string(index=False))
    if args.out:
        args.out.write_text(json.dumps({"summary": table, "samples": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
