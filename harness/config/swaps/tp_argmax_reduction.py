"""tp-argmax-reduction: the EAGLE PR's change. With speculative_config.use_local_argmax_reduction
each TP rank takes its local argmax and the ranks gather (max, index) pairs; without it they
all-gather full-vocab logits first. vLLM picks the path itself from the flag (V1 runner:
SpecDecodeBaseProposer._sample_draft_tokens; V2 runner: DraftModelSpeculator.sample_draft),
which it reads on every call: the installer sets it per call from the active choice, and
watches which LogitsProcessor primitive runs while a draft is sampled (get_top_tokens: local
argmax; _get_logits/_gather_logits: full logits)."""

from __future__ import annotations

from harness.config.platforms import FULL_GRAPHS, Unsupported
from harness.config.swaps import Swap

PATH_LOCAL_ARGMAX = "eagle.local_argmax"  # per-rank argmax, gather (max, index) pairs
PATH_ALLGATHER = "eagle.allgather_argmax"  # all-gather full-vocab logits (TP > 1)
PATH_FULL_TP1 = "eagle.full_logits_argmax"  # full logits, nothing to gather (TP 1)
PATH_UNOBSERVED = "eagle.unobserved"  # drafting ran but neither primitive was seen


SWAP = Swap(
    name="tp-argmax-reduction",
    choices={
        "baseline": "EAGLE draft argmax after an all-gather of full-vocab logits across TP ranks",
        "optimized": "speculative_config.use_local_argmax_reduction: local argmax per rank, "
        "gather (max, index) pairs only",
    },
    methods=("eagle", "eagle3"),
    # Written against vLLM 0.32's proposer and LogitsProcessor layout (the flag is 0.32's);
    # V2's half (DraftModelSpeculator.sample_draft and its flag) is unchanged through 0.34
    # (checked against the source: harness.config.vllm_internals, runner V2); run here on 0.32.
    vllm=">=0.32,<0.35",
    # At TP 1 the baseline has no all-gather to do, so its full-logits path counts too.
    proves={
        "baseline": frozenset({PATH_ALLGATHER, PATH_FULL_TP1}),
        "optimized": frozenset({PATH_LOCAL_ARGMAX}),
    },
    forces={
        "baseline": {"use_local_argmax_reduction": False},
        "optimized": {"use_local_argmax_reduction": True},
    },
    # V1 samples the draft in Python after the draft model's (possibly captured) forward
    # (SpecDecodeBaseProposer.propose -> _sample_draft_tokens), so any graph mode is fine
    # there. V2 samples it inside the FULL graph it captures for draft decode (PIECEWISE is
    # not used for draft decodes: TargetDependentARSpeculator.init_cudagraph_manager), so under
    # a FULL mode each engine captures its own arm's path at start-up (launch-per-arm is fine)
    # and a switch between passes is not; eager and PIECEWISE run sample_draft every call.
    unsupported=(
        Unsupported(
            runner="V2",
            graphs=FULL_GRAPHS,
            switching=True,
            why="Model Runner V2 samples the draft "
            "(DraftModelSpeculator.sample_draft) inside the FULL CUDA graph "
            "it captures for draft decode: a switch between passes cannot "
            "change what the graph replays",
        ),
    ),
    part="draft",  # sampling the draft tokens, inside the drafter's propose
)
