"""A variant's own implementation, installed by import path: Medusa proposes token 0 at every
position. Its effect is visible in behaviour (almost no draft token is accepted, while greedy
outputs stay identical, as speculative decoding guarantees) and in every engine process's
report (ctx.hit with what it observed). Switchable: it reads ctx.active() on every call, so
a baseline and this variant can share one engine."""

from __future__ import annotations

import functools
from typing import Any


def install(ctx: Any) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    original = MedusaProposer.propose
    if not ctx.claim("MedusaProposer.propose", original):
        return False

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = original(self, *args, **kwargs)
        if ctx.active() != "on":  # switchable: the baseline's passes in a shared engine
            return drafts
        zeros = drafts * 0
        ctx.hit("medusa.propose.zeros", {"shape": list(zeros.shape)})
        return zeros

    ctx.mark(propose)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010
    return True


def broken(ctx: Any) -> None:
    """A patch whose author got something wrong."""
    raise ValueError("this patch does not know vLLM 0.32's layout")
