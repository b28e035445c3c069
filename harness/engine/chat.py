"""Dataset prompts rendered as chat, as `vllm bench serve` renders them
(vllm/benchmarks/datasets: CustomDataset.sample and the others, unless --skip-chat-template):
the tokenizer's chat template over one user message, with the generation prompt, as text;
`chat_template_kwargs` passed through. Token-id prompts (random workloads, jsonl
prompt_token_ids) are sent as they are, as vLLM's random dataset does. The tokenizer is
vLLM's own (`vllm.tokenizers.get_tokenizer`, what `vllm bench serve` loads)."""

from __future__ import annotations

from typing import Any

from harness.config.datasets import Prompt
from harness.config.scenario import Workload

RAW_OFF = "raw (chat_template: false)"
RAW_NONE = "raw (the tokenizer has no chat template)"
RAW_IDS = "token ids, no template"
TEMPLATED = "the tokenizer's chat template"


def render(
    workload: Workload, engine_args: dict[str, Any], prompts: list[Prompt]
) -> tuple[list[Prompt], str]:
    """The prompts as they will be sent, and one phrase saying how they were formed (the
    table's Setup line)."""
    if not any(isinstance(p, str) for p in prompts):
        return prompts, RAW_IDS
    if not workload.chat_template:
        return prompts, RAW_OFF
    from vllm.tokenizers import get_tokenizer

    tokenizer: Any = get_tokenizer(
        engine_args.get("tokenizer") or engine_args["model"],
        tokenizer_mode=engine_args.get("tokenizer_mode", "auto"),
        trust_remote_code=bool(engine_args.get("trust_remote_code", False)),
    )
    if not getattr(tokenizer, "chat_template", None):
        return prompts, RAW_NONE
    kwargs = workload.chat_template_kwargs or {}
    out: list[Prompt] = [
        p
        if not isinstance(p, str)
        else str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}],
                add_generation_prompt=True,
                tokenize=False,
                **kwargs,
            )
        )
        for p in prompts
    ]
    return out, TEMPLATED + (
        f" ({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})" if kwargs else ""
    )
