"""A planted change that reaches the speed probe itself (validation): MedusaProposer.propose,
after its own work, writes SPECBENCH_PLANTED_SWEEP_KB kilobytes (default 4096) through a
buffer of that size on every call while the arm is active, so the worker's core starts the next
step, and the probe before it, with its caches full of that buffer. The probe's twin runs in
another process on the other core (harness.engine.twin), which the sweep leaves alone, so the
probe over its twin should move with this arm and the speed-adjusted row be widened or
withdrawn. Switchable (reads ctx.active() per call), so a baseline and this arm share one
engine; every call is reported (ctx.hit), so the proof counts them."""

from __future__ import annotations

import functools
import os
from typing import Any

SWEEP_ENV = "SPECBENCH_PLANTED_SWEEP_KB"


def install(ctx: Any) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    original = MedusaProposer.propose
    if not ctx.claim("MedusaProposer.propose", original):
        return False
    size = int(float(os.environ.get(SWEEP_ENV, "4096")) * 1024)
    buffer, fill = bytearray(size), bytes(size)

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = original(self, *args, **kwargs)
        if ctx.active() != "on":  # switchable: the baseline's passes in a shared engine
            return drafts
        buffer[:] = fill  # a memcpy of `size` bytes: the core's caches hold this buffer now
        ctx.hit("medusa.propose.sweep", {"kb": size // 1024})
        return drafts

    ctx.mark(propose)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010
    return True
