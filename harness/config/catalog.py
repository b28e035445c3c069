"""Names both sides agree on: built-in tiny models and swappable implementations.

Pure data, so the parent can validate a scenario without importing torch or vLLM.
"""

from __future__ import annotations

from harness.config.swaps import SWAPS

# Built-in tiny models, built deterministically by harness.engine.models on first use.
# name -> what it is (shown by `specbench models`).
BUILTIN_MODELS: dict[str, str] = {
    "tiny-llama": "Llama target (vocab 1024, hidden 128, 2 layers) with a WordLevel tokenizer",
    "tiny-llama-medusa": "3 Medusa heads fitted to tiny-llama's own greedy outputs",
    "tiny-llama-eagle": "EAGLE-1 one-layer draft fitted to tiny-llama's own greedy outputs",
    "tiny-llama-eagle3": (
        "EAGLE-3 one-layer head (2 heads of 64) over tiny-llama's 3 aux hidden states, fitted to "
        "its own greedy outputs"
    ),
    "tiny-llama-draft": (
        "one-layer Llama draft model (2 heads of 64, tiny-llama's tokenizer) distilled from "
        "tiny-llama's own greedy outputs"
    ),
    "tiny-mimo": (
        "tiny-llama as a MiMo target (Qwen2 layers, zero q/k/v biases: same outputs) with one "
        "MiMo MTP layer fitted to its greedy outputs"
    ),
}
# Large-vocabulary twins of the pair above, for work whose cost grows with the vocabulary (the
# EAGLE draft's full-vocab logits and their all-gather across TP ranks): tiny-llama padded to
# the size, the extra tokens' output rows scaled down so greedy outputs stay among the first
# 1024 tokens (prompts of the built-in words keep the drafts' acceptance), and the EAGLE draft
# unchanged but for its config (vLLM shares the target's embedding and lm_head with it).
VOCAB_TWINS: dict[str, int] = {"8k": 8192, "32k": 32768, "128k": 131072}
for _tag, _size in VOCAB_TWINS.items():
    BUILTIN_MODELS[f"tiny-llama-{_tag}"] = (
        f"tiny-llama with its vocabulary padded to {_size} (the extra tokens' output rows "
        "scaled down 10x: greedy outputs stay among the first 1024)"
    )
    BUILTIN_MODELS[f"tiny-llama-{_tag}-eagle"] = (
        f"tiny-llama-eagle for tiny-llama-{_tag} (same weights; embedding and lm_head shared)"
    )

# What the parent needs of each built-in model's config.json, so it can check prompts, context
# length and draft methods before any build (a test holds them to the built configs).
BUILTIN_CONFIGS: dict[str, dict[str, object]] = {
    "tiny-llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
    },
    "tiny-llama-medusa": {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "vocab_size": 1024,
        "num_heads": 3,
    },
    "tiny-llama-eagle": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
    },
    "tiny-llama-eagle3": {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "num_attention_heads": 2,
        "head_dim": 64,
        "draft_vocab_size": 1024,
        "target_hidden_size": 128,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
            "use_aux_hidden_state": True,
        },
    },
    "tiny-llama-draft": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "num_attention_heads": 2,
        "head_dim": 64,
    },
    "tiny-mimo": {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "num_nextn_predict_layers": 1,
    },
}
for _tag, _size in VOCAB_TWINS.items():
    BUILTIN_CONFIGS[f"tiny-llama-{_tag}"] = {**BUILTIN_CONFIGS["tiny-llama"], "vocab_size": _size}
    BUILTIN_CONFIGS[f"tiny-llama-{_tag}-eagle"] = {
        **BUILTIN_CONFIGS["tiny-llama-eagle"],
        "vocab_size": _size,
    }
# Speculative method -> the built-in target and draft that cover it, and the speculative_config
# that runs it (pure data: `specbench selftest` starts one engine per method the installed vLLM
# has; a row's draft, where it has one, goes into speculative_config's `model`). Medusa is gone
# from vLLM 0.33 on: check the method against the installed vLLM's SpeculativeConfig first.
METHOD_MODELS: dict[str, dict[str, object]] = {
    "ngram": {
        "target": "tiny-llama",
        "draft": None,
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        },
    },
    "medusa": {
        "target": "tiny-llama",
        "draft": "tiny-llama-medusa",
        "speculative_config": {"method": "medusa", "num_speculative_tokens": 3},
    },
    "eagle": {
        "target": "tiny-llama",
        "draft": "tiny-llama-eagle",
        "speculative_config": {"method": "eagle", "num_speculative_tokens": 3},
    },
    "eagle3": {
        "target": "tiny-llama",
        "draft": "tiny-llama-eagle3",
        "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    },
    "draft_model": {
        "target": "tiny-llama",
        "draft": "tiny-llama-draft",
        "speculative_config": {"method": "draft_model", "num_speculative_tokens": 3},
    },
    # MTP layers live in the target's own checkpoint: no separate draft. vLLM 0.32's mimo_mtp
    # drafts one token.
    "mtp": {
        "target": "tiny-mimo",
        "draft": None,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
    },
}

# The built-in targets' tokenizers are WordLevel over whitespace-split words: a text prompt has
# exactly one token per word (before special tokens).
BUILTIN_WORD_TOKENIZERS = {"tiny-llama", "tiny-mimo", *(f"tiny-llama-{tag}" for tag in VOCAB_TWINS)}

# Implementation swaps made active inside vLLM's worker processes by harness.engine.plugin, as
# their registry declares them (harness.config.swaps: one record per swap, pure data).
# name -> {choice -> description}. A variant selects one as "name:choice".
IMPLEMENTATIONS: dict[str, dict[str, str]] = {
    name: dict(swap.choices) for name, swap in SWAPS.items()
}
# Implementation choices that are (also) a speculative_config switch, and the speculative
# methods each swap applies to.
IMPLEMENTATION_CONFIG: dict[tuple[str, str], dict[str, object]] = {
    (name, choice): dict(keys)
    for name, swap in SWAPS.items()
    for choice, keys in swap.forces.items()
}
IMPLEMENTATION_METHODS: dict[str, tuple[str, ...]] = {
    name: swap.methods for name, swap in SWAPS.items()
}


def proof_parts(label: str) -> tuple[str, str]:
    """(implementation, choice) a report names for a proof label: 'name:choice' of a swap, or
    'patch:package.module:function' (reports say implementation 'patch', choice the path)."""
    if label.startswith("patch:"):
        return "patch", label.removeprefix("patch:")
    if label.startswith("overlay:"):
        return "overlay", label.removeprefix("overlay:")
    return parse_implementation(label)


def parse_implementation(value: str) -> tuple[str, str]:
    """Split "name:choice"; raise ValueError naming what is wrong."""
    name, sep, choice = value.partition(":")
    if not sep:
        raise ValueError(f"expected 'name:choice', got {value!r}")
    if name not in IMPLEMENTATIONS:
        known = ", ".join(sorted(IMPLEMENTATIONS))
        raise ValueError(f"unknown implementation {name!r} (known: {known})")
    if choice not in IMPLEMENTATIONS[name]:
        known = ", ".join(sorted(IMPLEMENTATIONS[name]))
        raise ValueError(f"unknown choice {choice!r} for {name!r} (known: {known})")
    return name, choice
