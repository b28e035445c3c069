"""The built-in models' recipes and the method table, without building a model or starting vLLM:
the catalogue the parent reads (pure data), the cache keys of the models every golden file
depends on, and the fitting code on a few random sequences (torch, no files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.catalog import BUILTIN_CONFIGS, BUILTIN_MODELS, METHOD_MODELS
from harness.config.vllm_args import description
from harness.engine import models


def test_the_existing_models_keep_their_cache_keys() -> None:
    """The target and the first two drafts are what the golden files and every test ran on:
    new models must not change how they are built."""
    root = Path("/cache")
    assert models.model_dir("tiny-llama", root).name == "tiny-llama-b38ff1d3da"
    assert models.model_dir("tiny-llama-medusa", root).name == "tiny-llama-medusa-3a135fa69b"
    assert models.model_dir("tiny-llama-eagle", root).name == "tiny-llama-eagle-d1d602e53a"


@pytest.mark.parametrize("method", sorted(METHOD_MODELS))
def test_each_method_row_names_built_in_models_and_a_method_vllm_has(method: str) -> None:
    row = METHOD_MODELS[method]
    assert row["target"] in BUILTIN_MODELS
    assert row["draft"] is None or row["draft"] in BUILTIN_MODELS
    spec = row["speculative_config"]
    assert isinstance(spec, dict) and spec["method"] == method
    assert "model" not in spec  # the draft's built-in name goes there, resolved to its folder
    choices = description("0.32.0")["speculative_config"]["method"]["choices"]
    assert method in choices


@pytest.mark.parametrize("name", ["tiny-llama-eagle3", "tiny-llama-draft"])
def test_new_drafts_use_a_head_size_cuda_attention_takes(name: str) -> None:
    config = BUILTIN_CONFIGS[name]
    assert config["head_dim"] in (64, 128)
    assert int(config["num_attention_heads"]) * int(config["head_dim"]) == 128  # type: ignore[call-overload]


def test_eagle3_hands_over_every_layer_boundary_of_the_target() -> None:
    """vLLM's default aux layers for a 2-layer target, (2, 1, -1), give two hidden states,
    not three: the config names the three boundaries the target has (0, 1, 2)."""
    ids = BUILTIN_CONFIGS["tiny-llama-eagle3"]["eagle_config"]
    assert isinstance(ids, dict)
    assert ids["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert ids["eagle_aux_hidden_state_layer_ids"] == models._EAGLE3_PARAMS["aux_layer_ids"]


def test_unknown_model_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown built-in model 'tiny-nope'.*tiny-llama-eagle3"):
        models.model_dir("tiny-nope")


# --------------------------------------------------------------------------- the fits


def _data(seed: int = 0):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from harness.engine.fit import GreedyData, Group

    gen = torch.Generator().manual_seed(seed)
    vocab, hidden, layers = 64, 128, 2
    groups = []
    for prompt_len in (4, 8):
        tokens = torch.randint(3, vocab, (16, prompt_len + 8), generator=gen)
        hid = torch.randn(16, prompt_len + 8, hidden, generator=gen)
        aux = torch.randn(16, prompt_len + 8, (layers + 1) * hidden, generator=gen)
        heldout = torch.arange(16) % 4 == 0
        groups.append(Group(prompt_len, tokens, hid, heldout, aux))
    embed = torch.randn(vocab, hidden, generator=gen) * 0.05
    lm_head = torch.randn(vocab, hidden, generator=gen) * 0.02
    return GreedyData(groups, embed, lm_head, 0.0)


_FIT = {"steps": 2, "batch_seqs": 4, "lr": 1e-3, "eval_every": 2}


def test_eagle3_fit_is_deterministic_and_names_the_weights_vllm_loads() -> None:
    from harness.engine import fit

    params = {**models._EAGLE3_PARAMS, **_FIT}
    cfg = models._TARGET_PARAMS
    w1, stats = fit.fit_eagle3(_data(), cfg, {}, params, lambda _: None)
    w2, _ = fit.fit_eagle3(_data(), cfg, {}, params, lambda _: None)
    assert w1.keys() == w2.keys() and all(bool((w1[k] == w2[k]).all()) for k in w1)
    # Eagle3LlamaForCausalLM.load_weights adds `model.`; the fc reads 3 hidden states, the
    # layer's attention the embedding and the hidden state side by side (2 x 128).
    assert w1["fc.weight"].shape == (128, 3 * 128)
    assert w1["layers.0.self_attn.q_proj.weight"].shape == (2 * 64, 2 * 128)
    assert {"layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight", "norm.weight"} <= (
        w1.keys()
    )
    assert not any("embed_tokens" in k or "lm_head" in k for k in w1)  # shared with the target
    assert len(stats["heldout_accept_per_position"]) == params["unroll"]


def test_draft_model_acceptance_is_its_chained_teacher_forced_accuracy() -> None:
    from harness.engine import fit

    params = {**models._DRAFT_PARAMS, **_FIT, "steps": 2}
    config = models._llama_config(1, 2, 2)
    config.vocab_size = 64
    config.head_dim = 64
    model, stats = fit.fit_draft_model(_data(), config, params, lambda _: None)
    chain = stats["heldout_accept_per_position"]
    top1 = stats["heldout_top1_per_step"]
    assert len(chain) == params["draft_steps"]
    # Step s is accepted only when steps 0..s are right: never more often than step 0 alone.
    assert chain == sorted(chain, reverse=True) and chain[0] <= top1[0] + 1e-9
    assert model.config.num_hidden_layers == 1


def test_mtp_layer_is_named_as_mimo_checkpoints_name_it() -> None:
    """MiMoMTP.load_weights keeps `model.mtp_layers.{i}.*` and maps the decoder layer's names
    under `mtp_block`; Qwen2's attention has q/k/v biases, which the checkpoint must carry."""
    from harness.engine import fit

    params = {**models._MTP_PARAMS, **_FIT}
    weights, stats = fit.fit_mtp(_data(), models._TARGET_PARAMS, {}, params, lambda _: None)
    prefix = "model.mtp_layers.0."
    assert all(k.startswith(prefix) for k in weights)
    names = {k.removeprefix(prefix) for k in weights}
    assert {
        "input_proj.weight",
        "token_layernorm.weight",
        "hidden_layernorm.weight",
        "final_layernorm.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
        "self_attn.q_proj.bias",
        "mlp.down_proj.weight",
    } <= names
    assert weights[prefix + "input_proj.weight"].shape == (128, 2 * 128)
    assert len(stats["heldout_accept_per_position"]) == 1  # mimo_mtp drafts one token
