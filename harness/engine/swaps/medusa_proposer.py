"""The medusa-proposer installer (its record, what proves each choice:
harness.config.swaps.medusa_proposer):
swaps MedusaProposer.propose per pass between the pre-optimization `.tolist()` version (here)
and vLLM 0.32's own, and reports what the proposer returned."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from harness.config.swaps.medusa_proposer import PATH_TENSOR, PATH_TOLIST, PATH_UNKNOWN
from harness.engine.swaps import SwapContext


def propose_tolist(
    self: Any,
    num_speculative_tokens: int,
    target_hidden_states: Any,
    sampling_metadata: Any,
    slot_mappings: Any = None,  # unused, as in vLLM 0.32
) -> list[list[int]]:
    """The pre-optimization MedusaProposer.propose, on vLLM 0.32's signature.

    Per head argmax(...).tolist() (one device->host sync per head), then a Python transpose
    to [batch][head]. The runner accepts this list form (take_draft_token_ids handles both).
    """
    assert num_speculative_tokens == self.num_speculative_tokens
    blocks = self.model(target_hidden_states)
    logits = self.model.compute_logits(blocks)
    draft_tokens = [logit.argmax(dim=-1).tolist() for logit in logits]
    # Every head yields one id per request, so the rows are equally long.
    return [list(row) for row in zip(*draft_tokens, strict=True)]


def observe_drafts(drafts: Any) -> tuple[str, Callable[[], dict[str, Any]]]:
    """The code path a proposer's return value proves: host lists, or a tensor (and where);
    with what to report, as a callable: read once per pass, so that the tensor arm does not
    pay str(device) on every call (a profiled run found it cost that arm 15 µs a call,
    0.3% of the demo's pass, that the list arm did not pay)."""
    if isinstance(drafts, list):
        return PATH_TOLIST, lambda: {"returned": "list"}
    device = getattr(drafts, "device", None)
    if device is not None and hasattr(drafts, "shape"):
        return PATH_TENSOR, lambda: {"returned": "tensor", "device": str(device)}
    return PATH_UNKNOWN, lambda: {"returned": type(drafts).__name__}


def install(ctx: SwapContext) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    original = MedusaProposer.propose
    if not ctx.claim("MedusaProposer.propose", original):
        return False

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out: Any
        if ctx.active() == "baseline":
            out = propose_tolist(self, *args, **kwargs)
        else:
            out = original(self, *args, **kwargs)  # vLLM's own tensor-returning propose
        # The report says what the proposer returned, not which branch was taken.
        path, details = observe_drafts(out)
        ctx.hit(path, details)
        return out

    ctx.mark(propose)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010 (mypy refuses method assignment)
    ctx.logger.info(
        "specbench: MedusaProposer.propose switchable (baseline: %s, optimized: %s)",
        PATH_TOLIST,
        PATH_TENSOR,
    )
    return True
