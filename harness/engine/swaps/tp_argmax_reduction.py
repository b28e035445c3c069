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


def _drafting_scope(
    original: Callable[..., Any], ctx: SwapContext, runner: str
) -> Callable[..., Any]:
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
        ctx.hit(
            probe.path(),
            {
                "runner": runner,
                "tp_size": probe.tp_size,
                "use_local_argmax_reduction": getattr(self, "use_local_argmax_reduction", None),
            },
        )
        return out

    return wrapper


def _draft_samplers(ctx: SwapContext) -> tuple[Any, Any]:
    """V1's proposer (0.32, 0.33) and V2's speculator (0.32 on): each where this vLLM has it
    and it imports (V2 needs Triton), else None; the runner vLLM builds calls one of them."""
    v1: Any = None
    v2: Any = None
    try:
        from vllm.v1.spec_decode import llm_base_proposer
    except Exception as exc:  # 0.34 has no V1 runner
        ctx.logger.debug("specbench: V1 proposer not importable: %s", exc)
    else:
        v1 = llm_base_proposer.SpecDecodeBaseProposer
    try:
        from vllm.v1.worker.gpu.spec_decode import speculator
    except Exception as exc:  # no Triton: the V1 runner is the one that runs
        ctx.logger.debug("specbench: model runner V2 speculator not importable: %s", exc)
    else:
        v2 = speculator.DraftModelSpeculator
    return v1, v2


def install(ctx: SwapContext) -> bool:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    v1, v2 = _draft_samplers(ctx)
    first = (v1, "_sample_draft_tokens") if v1 is not None else (v2, "sample_draft")
    if first[0] is None:
        raise RuntimeError(
            "neither V1's SpecDecodeBaseProposer nor V2's DraftModelSpeculator "
            "imports in this process"
        )
    if not ctx.claim(f"{first[0].__name__}.{first[1]}", getattr(*first)):
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

    for attr, fn in (
        ("get_top_tokens", get_top_tokens),
        ("_get_logits", _get_logits),
        ("_gather_logits", _gather_logits),
    ):
        ctx.mark(fn)
        setattr(LogitsProcessor, attr, fn)

    for cls, name, runner in ((v1, "_sample_draft_tokens", "v1"), (v2, "sample_draft", "v2")):
        if cls is None:
            continue
        scope = _drafting_scope(getattr(cls, name), ctx, runner)
        ctx.mark(scope)
        setattr(cls, name, scope)

    ctx.logger.info("specbench: watching EAGLE draft token selection (tp-argmax-reduction)")
    return True
