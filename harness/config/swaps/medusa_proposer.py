"""medusa-proposer: the Medusa PR's change. vLLM 0.32's MedusaProposer.propose returns one
stacked [batch, heads] tensor that stays on the device; the baseline is the pre-optimization
propose (per-head argmax(...).tolist(), a Python transpose, list[list[int]]). The report says
what the proposer returned, so it proves the choice from vLLM's side."""

from __future__ import annotations

from harness.config.platforms import Unsupported
from harness.config.swaps import Swap

PATH_TOLIST = "medusa.propose.tolist"
PATH_TENSOR = "medusa.propose.tensor"
PATH_UNKNOWN = "medusa.propose.unknown"  # returned neither a list nor a tensor


SWAP = Swap(
    name="medusa-proposer",
    choices={
        "baseline": "pre-optimization MedusaProposer.propose: per-head argmax(...).tolist(), "
        "Python transpose, returns list[list[int]] (GPU->CPU sync every step)",
        "optimized": "vLLM 0.32 MedusaProposer.propose: one stacked [batch, heads] tensor "
        "that stays on the device",
    },
    methods=("medusa",),
    # Written against vLLM 0.32's MedusaProposer.propose (its signature and return type).
    vllm=">=0.32,<0.33",
    proves={"baseline": frozenset({PATH_TOLIST}), "optimized": frozenset({PATH_TENSOR})},
    # The proposer's Python runs between the graphs V1 captures (after the target's forward),
    # so any graph mode is fine under V1.
    unsupported=(
        Unsupported(
            runner="V2",
            why="it patches V1's MedusaProposer; Model Runner "
            "V2 has no Medusa (vLLM falls back to V1 for it)",
        ),
    ),
    part="draft",  # the proposer, timed as the drafter's work (propose_draft_token_ids)
    # V1's GPUModelRunner.take_draft_token_ids, called by the engine core after the step,
    # synchronises on the copy event of the tensor's drafts (_get_draft_token_ids_cpu).
    part_leaves_out=(
        "the on-device proposer still waits for its drafts once per step, in "
        "take_draft_token_ids after the step, outside the timed draft: the row "
        "overstates the change; the throughput and latency rows include the wait"
    ),
)
