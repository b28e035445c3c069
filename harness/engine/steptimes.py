"""Where a model-runner step's time goes, timed inside vLLM's worker processes.

Installed by the plugin when SPECBENCH_STEP_TIMES=1 (a run with a no-speculation arm): it wraps
four methods of vLLM 0.32's V1 GPUModelRunner (the CPU runner inherits them) and adds up, in
this process, since it started:
- steps and step_s: execute_model + sample_tokens, one engine step (prefill or decode);
- forward_s: _model_forward, the target model's forward inside the step (with speculation,
  the verification forward over k + 1 tokens per request);
- draft_s: propose_draft_token_ids, the drafter's work inside the step.
The rest of a step (input preparation, logits, sampling or rejection, bookkeeping) is
step_s - forward_s - draft_s. The worker reads the totals through collective_rpc before and
after each measured pass (their difference is the pass's).

How a call is timed depends on the device. On a CPU the host clock is the device's: each call
is timed with perf_counter, nothing waits. On CUDA the host returns before the device's work
ends, and synchronising around every call (8 times a step) would serialise what async
scheduling overlaps, changing what is timed: instead a pair of CUDA events is recorded on the
current stream around each call, without waiting, and the pairs are read (one wait for the
last event) when the totals are asked for, between passes. Model Runner V2 has none of these
methods: the platform check refuses the step timer there (harness.config.platforms).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

# Totals of this process (one vLLM worker, one TP rank).
TOTALS: dict[str, float] = {"steps": 0.0, "step_s": 0.0, "forward_s": 0.0, "draft_s": 0.0}
# Which runner method adds to which total (execute_model and sample_tokens both to step_s).
TIMED = {"execute_model": "step_s", "sample_tokens": "step_s",
         "_model_forward": "forward_s", "propose_draft_token_ids": "draft_s"}

_installed = False


class Event(Protocol):
    """What the timer needs of torch.cuda.Event(enable_timing=True)."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...  # milliseconds, as CUDA gives it


class Clock:
    """Adds each timed call's duration to TOTALS."""

    def start(self) -> Any:
        return time.perf_counter()

    def stop(self, started: Any, total: str) -> None:
        TOTALS[total] += time.perf_counter() - started

    def settle(self) -> None:
        """Make TOTALS whole (the device clock's pending pairs read)."""


class EventClock(Clock):
    """Device time between events recorded on the current stream around each call, read only
    when the totals are asked for (settle): no wait inside a step."""

    def __init__(self, make_event: Callable[[], Event]) -> None:
        self.make_event = make_event
        self.pending: list[tuple[Event, Event, str]] = []

    def start(self) -> Any:
        event = self.make_event()
        event.record()
        return event

    def stop(self, started: Any, total: str) -> None:
        end = self.make_event()
        end.record()
        self.pending.append((started, end, total))

    def settle(self) -> None:
        if not self.pending:
            return
        self.pending[-1][1].synchronize()  # one stream: every earlier event is done too
        for begin, end, total in self.pending:
            TOTALS[total] += begin.elapsed_time(end) / 1000.0
        self.pending.clear()


def _clock() -> Clock:
    import torch

    if torch.cuda.is_available():
        return EventClock(lambda: torch.cuda.Event(enable_timing=True))
    return Clock()


def _timed(fn: Callable[..., Any], total: str, clock: Clock) -> Callable[..., Any]:
    counts_step = fn.__name__ == "_model_forward"  # each step runs the target's forward once

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = clock.start()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.stop(started, total)
            if counts_step:
                TOTALS["steps"] += 1
    wrapper.__specbench_step_timer__ = True  # type: ignore[attr-defined]
    return wrapper


def wrap(runner_class: type, clock: Clock) -> None:
    """Wrap the runner class's timed methods (once: a wrapped one is left as it is)."""
    for name, total in TIMED.items():
        fn = getattr(runner_class, name)
        if not getattr(fn, "__specbench_step_timer__", False):
            setattr(runner_class, name, _timed(fn, total, clock))


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

    clock = _clock()
    wrap(GPUModelRunner, clock)

    def step_times(self: Any) -> dict[str, float]:
        clock.settle()
        return dict(TOTALS)

    setattr(WorkerWrapperBase, STEP_TIMES_RPC, step_times)
    _installed = True
