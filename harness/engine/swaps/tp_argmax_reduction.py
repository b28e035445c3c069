"""tp-argmax-reduction: the EAGLE PR's change. With speculative_config.use_local_argmax_reduction
each TP rank takes its local argmax and the ranks gather (max, index) pairs; without it they
all-gather full-vocab logits first. vLLM picks the path itself from the flag (V1 runner:
SpecDecodeBaseProposer._sample_draft_tokens; V2 runner: DraftModelSpeculator.sample_draft),
which it reads on every call: the installer sets it per call from the active choice, and
watches which LogitsProcessor primitive runs while a draft is sampled (get_top_tokens: local
argmax; _get_logits/_gather_logits: full logits)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from harness.engine.swaps import Swap, SwapContext

PATH_LOCAL_ARGMAX = "eagle.local_argmax"  # per-rank argmax, gather (max, index) pairs
PATH_ALLGATHER = "eagle.allgather_argmax"  # all-gather full-vocab logits (TP > 1)
PATH_FULL_TP1 = "eagle.full_logits_argmax"  # full logits, nothing to gather (TP 1)
PATH_UNOBSERVED = "eagle.unobserved"  # drafting ran but neither primitive was seen


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


SWAP = Swap(
    name="tp-argmax-reduction",
    choices={
        "baseline": "EAGLE draft argmax after an all-gather of full-vocab logits across TP "
        "ranks",
        "optimized": "speculative_config.use_local_argmax_reduction: local argmax per rank, "
        "gather (max, index) pairs only",
    },
    methods=("eagle", "eagle3"),
    # Written against vLLM 0.32's proposer and LogitsProcessor layout (the flag is 0.32's).
    vllm=">=0.32,<0.33",
    # At TP 1 the baseline has no all-gather to do, so its full-logits path counts too.
    proves={"baseline": frozenset({PATH_ALLGATHER, PATH_FULL_TP1}),
            "optimized": frozenset({PATH_LOCAL_ARGMAX})},
    forces={"baseline": {"use_local_argmax_reduction": False},
            "optimized": {"use_local_argmax_reduction": True}},
    install=install,
)
