"""Fault-injecting stand-in for harness.engine.worker (selected with SPECBENCH_WORKER_MODULE).

Each variant picks its behaviour with the FAKE_MODE environment variable (set in the
scenario's variant env): ok, crash, hang, garbage, wrong-key, short, fill (writes beside its
result until the disk is full, then exits), orphan (hangs like 'hang' but without the worker's
guard: it outlives a killed parent, as a process that lost its death signal would), watchdog
(hangs without the death signal but with the guard: only its parent watchdog can end it),
stubborn (like 'ok', but its child ignores SIGTERM, writing <run_key>.sigterm in FAKE_PID_DIR
when one arrives: the runner's group kill then waits its grace period before SIGKILL).
'ok' writes
a small well-formed result so the healthy arm of a fault test has something to report; real
measurements only ever come from harness.engine.worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.lifeline import guard_process_group


def _forget_parent() -> None:
    """Clear the death signal the runner asked for (PR_SET_PDEATHSIG = 1, signal 0)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)


def main() -> int:
    mode = os.environ.get("FAKE_MODE", "ok")
    if mode in ("orphan", "watchdog"):
        _forget_parent()
    if mode != "orphan":
        guard_process_group()  # as the real worker does
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spec = json.loads(args.spec.read_text())
    run = spec["run"]
    pid_dir = os.environ.get("FAKE_PID_DIR")
    # Like vLLM's engine core: a child process in the worker's process group.
    child_code = "import time; time.sleep(600)"
    if mode == "stubborn":
        marker = str(Path(pid_dir or ".", f"{run['run_key']}.sigterm"))
        child_code = (
            "import pathlib, signal\nsignal.signal(signal.SIGTERM, lambda *_: "
            f"pathlib.Path({marker!r}).write_text('x'))\nprint('ready', flush=True)\n"
            f"{child_code}"
        )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code], stdout=subprocess.PIPE if mode == "stubborn" else None
    )
    if child.stdout is not None:
        child.stdout.readline()  # its SIGTERM handler is in place before this worker ends
    if pid_dir:
        Path(pid_dir, f"{run['run_key']}.pids").write_text(f"{os.getpid()} {child.pid}")
    print(f"fake worker {run['run_key']} mode={mode}", flush=True)
    if mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: engine core died", flush=True)
        os._exit(17)
    if mode in ("hang", "orphan", "watchdog"):
        time.sleep(600)
    if mode == "fill":
        with (args.out.parent / "filler").open("wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError as exc:
                print(f"fake worker: {exc}", flush=True)
        child.kill()
        return 1
    if mode == "garbage":
        args.out.write_text("{not json")
        return 0
    passes = (
        []
        if mode == "short"
        else [
            {
                "repeat": r,
                "started_unix": time.time(),
                "duration_s": 1.0 + 0.01 * r,
                "requests": [
                    {
                        "index": i,
                        "prompt_tokens": 4,
                        "output_tokens": 4,
                        "ttft_s": 0.01,
                        "e2el_s": 0.05,
                        "finish_reason": "length",
                        "output_token_ids": [1, 2, 3, i],
                    }
                    for i in range(4)
                ],
                "spec_decode": None,
                "workload_hash": "fake",
            }
            for r in range(run["repeats"])
        ]
    )
    key = "someone-else" if mode == "wrong-key" else run["run_key"]
    # Which interpreter ran it, as the real worker reports what it imported.
    versions = {"python": sys.executable, "wrapped": os.environ.get("FAKE_WRAPPED", "no")}
    args.out.write_text(
        json.dumps({"run_key": key, "status": "ok", "passes": passes, "engine_versions": versions})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
