"""A planted cost in the verification forward (withdrawal check): the target model's
forward (LlamaForCausalLM.forward, run inside the model runner's _model_forward, which the step
timer times as the forward) busy-waits SPECBENCH_PLANTED_FORWARD_WAIT_US microseconds (default
150) on every call while the arm is active. Switchable, every call reported (ctx.hit), as
testkit.patches.medusa_wait. The speed-adjusted row, whose covariate is the forward, must be
withdrawn for it."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

WAIT_ENV = "SPECBENCH_PLANTED_FORWARD_WAIT_US"


def install(ctx: Any) -> bool:
    from vllm.model_executor.models.llama import LlamaForCausalLM

    original = LlamaForCausalLM.forward
    if not ctx.claim("LlamaForCausalLM.forward", original):
        return False
    wait_s = float(os.environ.get(WAIT_ENV, "150")) / 1e6

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if ctx.active() != "on":  # switchable: the baseline's passes in a shared engine
            return out
        end = time.perf_counter() + wait_s
        while time.perf_counter() < end:
            pass
        ctx.hit("llama.forward.wait", {"wait_us": wait_s * 1e6})
        return out

    ctx.mark(forward)
    setattr(LlamaForCausalLM, "forward", forward)  # noqa: B010
    return True
