"""The v2-draft-handoff installer (its record, what proves each choice:
harness.config.swaps.v2_draft_handoff): wraps Model Runner V2's
DraftTokensHandler.set_draft_tokens; the baseline copies every step's drafts to the host there
(a blocking copy: the device->host sync the Medusa PR removed from V1), the optimized choice
runs vLLM's own, and each call reports whether the drafts went to the host."""

from __future__ import annotations

import functools
from typing import Any

from harness.config.swaps.v2_draft_handoff import PATH_DEVICE, PATH_HOST
from harness.engine.swaps import SwapContext


def host_copy(handler: Any, input_batch: Any, draft_tokens: Any) -> None:
    """set_draft_tokens with the structured-output path forced, synchronously: the drafts
    copied to the host now (get_draft_tokens then hands them to the scheduler as lists)."""
    handler.req_ids = input_batch.req_ids
    handler.num_draft_tokens = draft_tokens.shape[1]
    handler.draft_tokens_np = draft_tokens.to("cpu").numpy()


def install(ctx: SwapContext) -> bool:
    from vllm.v1.worker.gpu.spec_decode.utils import DraftTokensHandler

    original = DraftTokensHandler.set_draft_tokens
    if not ctx.claim("DraftTokensHandler.set_draft_tokens", original):
        return False

    @functools.wraps(original)
    def set_draft_tokens(self: Any, input_batch: Any, draft_tokens: Any) -> None:
        if ctx.active() == "baseline":
            host_copy(self, input_batch, draft_tokens)
        else:
            original(self, input_batch, draft_tokens)
        # What the handler holds now, not which branch ran: host arrays, or nothing.
        ctx.hit(PATH_HOST if self.draft_tokens_np is not None else PATH_DEVICE)

    ctx.mark(set_draft_tokens)
    setattr(DraftTokensHandler, "set_draft_tokens", set_draft_tokens)  # noqa: B010
    ctx.logger.info(
        "specbench: DraftTokensHandler.set_draft_tokens switchable (baseline: %s, optimized: %s)",
        PATH_HOST,
        PATH_DEVICE,
    )
    return True
