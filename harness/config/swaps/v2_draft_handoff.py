"""v2-draft-handoff: seed 000's mechanism on Model Runner V2. The Medusa PR kept drafts on the
device instead of `.tolist()` every step; V2 does that by design: its DraftTokensHandler
(vllm/v1/worker/gpu/spec_decode/utils.py) keeps the drafts on the device and hands the
scheduler placeholders, copying them to the host (and syncing before the scheduler reads them)
only when the batch has structured-output requests. The baseline forces that copy and sync on
every step, as a V1-style host handoff would; the optimized choice is vLLM's own. Eager host
code around the drafter, so one engine hosts both, switched per pass. The report says whether
the step's drafts went to the host, from what the handler holds after the call."""

from __future__ import annotations

from harness.config.platforms import Unsupported
from harness.config.swaps import Swap

PATH_HOST = "v2.drafts.host_copy"  # drafts copied to the host, the scheduler reads them
PATH_DEVICE = "v2.drafts.device"  # drafts stay on the device, placeholders for the scheduler


SWAP = Swap(
    name="v2-draft-handoff",
    choices={
        "baseline": "every step's drafts copied to the host and synced before the scheduler "
        "reads them (DraftTokensHandler with the structured-output path forced)",
        "optimized": "Model Runner V2's default: drafts stay on the device, the scheduler "
        "gets placeholders (no copy, no sync)",
    },
    # The methods V2 drafts for through DraftTokensHandler (every V2 speculator).
    methods=("eagle", "eagle3", "mtp", "draft_model", "ngram", "ngram_gpu", "dflash", "dspark"),
    # Written against 0.32's handler (req_ids, num_draft_tokens, draft_tokens_np), unchanged
    # in 0.33; 0.34 rewrote it (drafts per request, _draft_tokens_by_req).
    vllm=">=0.32,<0.34",
    proves={"baseline": frozenset({PATH_HOST}), "optimized": frozenset({PATH_DEVICE})},
    unsupported=(
        Unsupported(
            runner="V1",
            why="it patches Model Runner V2's "
            "DraftTokensHandler; V1 hands drafts over in its own runner",
        ),
    ),
    part="rest",  # set_draft_tokens runs in sample_tokens, after the drafter returns
)
