"""Where an engine start goes, per process: the demo's engine (the plan's RunSpec, the worker's
prepare_launch) built with `LLM(**engine_args)` several times, each in a fresh process, with
vLLM's log lines stamped to the millisecond (VLLM_LOGGING_CONFIG_PATH) and each of its
processes' creation time read back (psutil).

    .venv/bin/python benchmarks/engine_start.py [--starts 3] [--setups mp inproc]

Setups:
- mp: as specbench launches it (vLLM's engine core and worker in their own spawned processes);
- fork: as mp, but vLLM's processes forked from the front end with its imports done (vLLM's
  CPU platform forces `spawn`; the child puts `fork` back after it): what forked engine
  processes would save;
- inproc: one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, distributed_executor_backend "uni"),
  what a test suite would save by building its engines without spawned processes.

Segments (median over the starts, seconds): the front end's imports (torch, vLLM); from
`LLM(...)` to the engine core's process existing; each spawned process's own start (its
creation to its first log line: the interpreter, its imports); model build (vLLM's
"Initializing model" and "Loading weights"); KV profiling, the KV cache and the warm-up (vLLM's
"init engine ... took"); the rest until `LLM(...)` returns. The integration tier builds about
30 engines (docs/measurements.md), so each second of a start is about half a minute of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

from engine_memory import DEMO, child_env, demo_run  # noqa: E402

SETUPS = ("mp", "fork", "inproc")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"f": {"format": "@@ %(created).3f %(process)d %(message)s"}},
    "handlers": {
        "h": {"class": "logging.StreamHandler", "formatter": "f", "stream": "ext://sys.stdout"}
    },
    "loggers": {"vllm": {"handlers": ["h"], "level": "DEBUG", "propagate": False}},
}
EVENTS = {
    "model_init": re.compile(r"Initializing model took ([\d.]+) seconds"),
    "weights": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "init_engine": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)"
    ),
}


def child(setup: str) -> None:
    """One engine start, its milestones printed as `## name unix` lines."""
    t0 = time.time()
    from harness.engine import worker
    from harness.wire.records import Timings, WorkerResult

    run = demo_run(DEMO)
    result = WorkerResult(run_key=run.run_key, status="failed", timings=Timings())
    engine_args, _, _, _ = worker.prepare_launch(run, DEMO.parent, None, result)
    if setup == "inproc":
        engine_args["distributed_executor_backend"] = "uni"
    t1 = time.time()
    import torch  # noqa: F401
    import vllm

    t2 = time.time()
    if setup == "fork":
        from vllm.platforms.cpu import CpuPlatform

        update = CpuPlatform.check_and_update_config.__func__

        def forked(cls: Any, vllm_config: Any) -> None:
            update(cls, vllm_config)
            os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

        CpuPlatform.check_and_update_config = classmethod(forked)
    llm = vllm.LLM(**engine_args)
    t3 = time.time()
    procs = {p.pid: (p.name(), p.create_time()) for p in psutil.Process().children(recursive=True)}
    print(f"## begin {t0}\n## imports_from {t1}\n## imports_done {t2}\n## llm_done {t3}")
    print("## procs " + json.dumps(procs), flush=True)
    del llm
    os._exit(0)


def one_start(setup: str, scratch: Path) -> dict[str, float]:
    run = demo_run(DEMO)
    env = child_env(run, "plain", scratch)
    config = scratch / "logging.json"
    config.write_text(json.dumps(LOGGING))
    env["VLLM_LOGGING_CONFIG_PATH"] = str(config)
    if setup == "inproc":
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    done = subprocess.run(
        [sys.executable, __file__, "--child", setup],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    marks: dict[str, float] = {}
    procs: dict[str, list[Any]] = {}
    first_log: dict[int, float] = {}
    events: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if line.startswith("## procs "):
            procs = json.loads(line[len("## procs ") :])
        elif line.startswith("## "):
            name, value = line[3:].split()
            marks[name] = float(value)
        elif line.startswith("@@ "):
            _, stamp, pid, message = line.split(" ", 3)
            first_log.setdefault(int(pid), float(stamp))
            for key, pattern in EVENTS.items():
                found = pattern.search(message)
                if found:
                    events[key] = events.get(key, 0.0) + float(found.group(1))
    if "llm_done" not in marks:
        raise SystemExit(f"{setup}: the engine did not start:\n{done.stderr[-2000:]}")
    out = {
        "front end imports": marks["imports_done"] - marks["imports_from"],
        "LLM(...) total": marks["llm_done"] - marks["imports_done"],
    }
    core = [(int(pid), c) for pid, (name, c) in procs.items() if "EngineCore" in name]
    if core:
        core_pid, created = core[0]
        out["LLM(...) to the engine core's process"] = created - marks["imports_done"]
        out["engine core: spawn and imports"] = first_log.get(core_pid, created) - created
    workers = [(int(pid), c) for pid, (name, c) in procs.items() if "Worker" in name]
    if workers:
        worker_pid, created = workers[0]
        out["worker: spawn and imports"] = first_log.get(worker_pid, created) - created
    out["model build (init + weights)"] = events.get("model_init", 0.0) + events.get("weights", 0.0)
    out["KV profiling, KV cache, warm-up"] = events.get("init_engine", float("nan"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--setups", nargs="+", default=list(SETUPS), choices=SETUPS)
    parser.add_argument("--child", choices=SETUPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="engine-start-"))
    for setup in args.setups:
        starts = [one_start(setup, scratch) for _ in range(args.starts)]
        print(f"{setup}: {args.starts} starts (median, min-max seconds)")
        for key in starts[0]:
            values = [s[key] for s in starts if key in s]
            print(
                f"  {key:40s} {statistics.median(values):6.2f}  "
                f"({min(values):.2f}-{max(values):.2f})"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
