"""Where a model-runner step's time goes, timed inside vLLM's worker processes.

Installed by the plugin when SPECBENCH_STEP_TIMES=1 (a run with a no-speculation arm): it wraps
four methods of vLLM 0.32's GPUModelRunner (the CPU runner inherits them) and adds up, in this
process, since it started:
- steps and step_s: execute_model + sample_tokens, one engine step (prefill or decode);
- forward_s: _model_forward, the target model's forward inside the step (with speculation,
  the verification forward over k + 1 tokens per request);
- draft_s: propose_draft_token_ids, the drafter's work inside the step.
The rest of a step (input preparation, logits, sampling or rejection, bookkeeping) is
step_s - forward_s - draft_s. The worker reads the totals through collective_rpc before and
after each measured pass (their difference is the pass's). On CUDA each timed call is
synchronized first, so host clocks measure the device's work; on a CPU nothing waits.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

# Totals of this process (one vLLM worker, one TP rank).
TOTALS: dict[str, float] = {"steps": 0.0, "step_s": 0.0, "forward_s": 0.0, "draft_s": 0.0}
# Which runner method adds to which total (execute_model and sample_tokens both to step_s).
TIMED = {"execute_model": "step_s", "sample_tokens": "step_s",
         "_model_forward": "forward_s", "propose_draft_token_ids": "draft_s"}

_installed = False


def _synchronizer() -> Callable[[], None]:
    import torch

    if torch.cuda.is_available():
        synchronize: Callable[[], None] = torch.cuda.synchronize
        return synchronize
    return lambda: None


def _timed(fn: Callable[..., Any], total: str, sync: Callable[[], None]) -> Callable[..., Any]:
    counts_step = fn.__name__ == "_model_forward"  # each step runs the target's forward once

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync()
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sync()
            TOTALS[total] += time.perf_counter() - t
            if counts_step:
                TOTALS["steps"] += 1
    wrapper.__specbench_step_timer__ = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap the runner's methods (once per process) and add the read-out method to vLLM's
    worker wrapper. Wraps whatever is there now, so a swap or overlay installed first keeps
    its code and is timed too."""
    global _installed
    if _installed:
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    from harness.wire.protocol import STEP_TIMES_RPC

    sync = _synchronizer()
    for name, total in TIMED.items():
        fn = getattr(GPUModelRunner, name)
        if not getattr(fn, "__specbench_step_timer__", False):
            setattr(GPUModelRunner, name, _timed(fn, total, sync))

    def step_times(self: Any) -> dict[str, float]:
        return dict(TOTALS)

    setattr(WorkerWrapperBase, STEP_TIMES_RPC, step_times)
    _installed = True
