"""A planted cost of known size in the proposer (validation): MedusaProposer.propose
busy-waits SPECBENCH_PLANTED_WAIT_US microseconds (default 50) after its own work, on every
call while the arm is active. Switchable (reads ctx.active() per call), so a baseline and this
arm share one engine; every call is reported (ctx.hit), so the proof counts them.

A busy wait rather than a sleep: a sleep's wake-up on Linux overshoots by tens of
microseconds, more than the cost it plants."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

WAIT_ENV = "SPECBENCH_PLANTED_WAIT_US"


def install(ctx: Any) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    original = MedusaProposer.propose
    if not ctx.claim("MedusaProposer.propose", original):
        return False
    wait_s = float(os.environ.get(WAIT_ENV, "50")) / 1e6

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = original(self, *args, **kwargs)
        if ctx.active() != "on":  # switchable: the baseline's passes in a shared engine
            return drafts
        end = time.perf_counter() + wait_s
        while time.perf_counter() < end:
            pass
        ctx.hit("medusa.propose.wait", {"wait_us": wait_s * 1e6})
        return drafts

    ctx.mark(propose)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010
    return True
