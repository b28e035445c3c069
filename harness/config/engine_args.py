"""A variant's engine arguments (the LLM(...) keywords), read from its scenario: what the plan
launches and what the comparison reads back (draft tokens, tensor-parallel size)."""

from __future__ import annotations

from typing import Any

from harness.config.catalog import IMPLEMENTATION_CONFIG, parse_implementation
from harness.config.scenario import Scenario


def engine_args_for(scenario: Scenario, variant_name: str) -> dict[str, Any]:
    """The LLM(...) keywords of one variant: common settings, then the variant's overrides."""
    variant = scenario.variants[variant_name]
    args: dict[str, Any] = {
        "model": scenario.model,
        "dtype": scenario.dtype,
        "tensor_parallel_size": scenario.tensor_parallel_size,
        "max_num_seqs": scenario.batch_size,
        "seed": scenario.workload.seed,
        # Needed for per-request timestamps and the spec-decode counters.
        "disable_log_stats": False,
        # Every pass replays the same prompts: with the prefix cache on, passes after the
        # first would skip prefill and measure something else. Scenarios may turn it back on.
        "enable_prefix_caching": False,
    }
    if scenario.max_model_len is not None:
        args["max_model_len"] = scenario.max_model_len
    args.update(scenario.engine)
    args.update(variant.engine)

    if scenario.draft is not None and variant.speculation:
        spec: dict[str, Any] = {
            "method": scenario.draft.method,
            "num_speculative_tokens": scenario.draft.num_speculative_tokens,
        }
        if scenario.draft.model is not None:
            spec["model"] = scenario.draft.model
        spec.update(scenario.draft.config)
        spec.update(variant.speculative_config)
        if variant.implementation is not None:
            # The scenario validator already refused overrides that contradict these.
            spec.update(IMPLEMENTATION_CONFIG.get(parse_implementation(variant.implementation), {}))
        args["speculative_config"] = spec
        # Per-request acceptance (vLLM refuses the flag without speculation, so only here);
        # the same scheduler event as the aggregate counters.
        args.setdefault("per_request_spec_decode_metrics", "summary")
    return args
