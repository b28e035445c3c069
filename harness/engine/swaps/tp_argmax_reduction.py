"""The tp-argmax-reduction installer (its record, what proves each choice:
harness.config.swaps.tp_argmax_reduction):
sets use_local_argmax_reduction per call from the active choice and
watches which LogitsProcessor primitive runs while a draft is sampled."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from harness.config.swaps.tp_argmax_reduction import (
    PATH_ALLGATHER,
    PATH_FULL_TP1,
    PATH_LOCAL_ARGMAX,
    PATH_UNOBSERVED,
)
from harness.engine.swaps import SwapContext


class _Probe:
    """What the LogitsProcessor primitives saw during one draft-sampling call."""

    __slots__ = ("full_gather", "full_logits", "local_argmax", "tp_size")

    def __init__(self) -> None:
        self.local_argmax = False
        self.full_logits = False
        self.full_gather = False
        self.tp_size: int | None = None

    def path(self) -> str:
        if self.local_argmax and not self.full_logits:
            return PATH_LOCAL_ARGMAX
        if self.full_gather:
            return PATH_ALLGATHER
        if self.full_logits:
            return PATH_FULL_TP1
        return PATH_UNOBSERVED


_scope = threading.local()


def _current_probe() -> _Probe | None:
    probe = getattr(_scope, "probe", None)
    return probe if isinstance(probe, _Probe) else None


def _drafting_scope(original: Callable[..., Any], ctx: SwapContext,
                    runner: str) -> Callable[..., Any]:
    """Wrap a draft-sampling method so the primitives it calls are attributed to drafting,
    and apply the active choice to the flag vLLM reads on this call."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hasattr(self, "use_local_argmax_reduction"):
            self.use_local_argmax_reduction = ctx.active() == "optimized"
        probe = _Probe()
        outer = getattr(_scope, "probe", None)
        _scope.probe = probe
        try:
            out = original(self, *args, **kwargs)
        finally:
            _scope.probe = outer
        ctx.hit(probe.path(), {
            "runner": runner,
            "tp_size": probe.tp_size,
            "use_local_argmax_reduction": getattr(self, "use_local_argmax_reduction", None),
        })
        return out

    return wrapper


def install(ctx: SwapContext) -> bool:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    if not ctx.claim("SpecDecodeBaseProposer._sample_draft_tokens",
                     SpecDecodeBaseProposer._sample_draft_tokens):
        return False
    orig_top = LogitsProcessor.get_top_tokens
    orig_get = LogitsProcessor._get_logits
    orig_gather = LogitsProcessor._gather_logits

    @functools.wraps(orig_top)
    def get_top_tokens(self: Any, lm_head: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.local_argmax = True
            probe.tp_size = getattr(lm_head, "tp_size", None)
        return orig_top(self, lm_head, *args, **kwargs)

    @functools.wraps(orig_get)
    def _get_logits(self: Any, hidden_states: Any, lm_head: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.full_logits = True
            probe.tp_size = getattr(lm_head, "tp_size", None)
        return orig_get(self, hidden_states, lm_head, *args, **kwargs)

    @functools.wraps(orig_gather)
    def _gather_logits(self: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.full_gather = True
        return orig_gather(self, *args, **kwargs)

    for attr, fn in (("get_top_tokens", get_top_tokens), ("_get_logits", _get_logits),
                     ("_gather_logits", _gather_logits)):
        ctx.mark(fn)
        setattr(LogitsProcessor, attr, fn)

    v1_scope = _drafting_scope(SpecDecodeBaseProposer._sample_draft_tokens, ctx, "v1")
    ctx.mark(v1_scope)
    setattr(SpecDecodeBaseProposer, "_sample_draft_tokens", v1_scope)  # noqa: B010

    # Model Runner V2 (CUDA with Triton) drafts through its own speculator; absent or
    # unimportable on some platforms, where the V1 runner is the one that runs.
    try:
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
    except Exception as exc:
        ctx.logger.debug("specbench: model runner V2 speculator not importable: %s", exc)
    else:
        v2_scope = _drafting_scope(DraftModelSpeculator.sample_draft, ctx, "v2")
        ctx.mark(v2_scope)
        setattr(DraftModelSpeculator, "sample_draft", v2_scope)  # noqa: B010

    ctx.logger.info("specbench: watching EAGLE draft token selection (tp-argmax-reduction)")
    return True
