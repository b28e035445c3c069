"""A probe of the machine's speed, timed beside every engine step (measurement, not a change):
before each call of vLLM's worker's execute_model, two fixed kernels no change to vLLM can
touch are timed, a pure-Python loop (the shipped probe's) and a small torch matmul, and each
step's (unix time, loop seconds, matmul seconds) is appended to
SPECBENCH_PROBE_DIR/probe-<pid>.txt. (The shipped probe, speed_probe: true, is the loop alone:
the matmul moved with the demo's change, docs/measurements.md.)
benchmarks/probe_covariate.py reads them back per pass: whether a change-proof covariate
sees the machine's speed as the step parts do. Reported (ctx.hit) on every call, so the
proof counts it; carried by every arm, so it is installed in the shared engine."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from harness.engine.steptimes import probe_loop  # the shipped probe's loop (speed_probe: true)

DIR_ENV = "SPECBENCH_PROBE_DIR"
MATMUL = 48  # side of the torch matmul's square matrices


def install(ctx: Any) -> bool:
    import torch
    from vllm.v1.worker.gpu_worker import Worker

    original = Worker.execute_model
    if not ctx.claim("Worker.execute_model", original):
        return False
    folder = Path(os.environ.get(DIR_ENV, "/tmp/specbench-probe"))
    folder.mkdir(parents=True, exist_ok=True)
    out = (folder / f"probe-{os.getpid()}.txt").open("a", buffering=1)
    a = torch.ones(MATMUL, MATMUL)

    @functools.wraps(original)
    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        now = time.time()
        loop_s = probe_loop()
        t = time.perf_counter()
        torch.mm(a, a)
        matmul_s = time.perf_counter() - t
        out.write(f"{now:.6f} {loop_s:.9f} {matmul_s:.9f}\n")
        ctx.hit("speed.probe", None)
        return original(self, *args, **kwargs)

    ctx.mark(execute_model)
    setattr(Worker, "execute_model", execute_model)  # noqa: B010
    return True
