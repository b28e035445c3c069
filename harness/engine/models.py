"""Built-in tiny models (harness.config.catalog.BUILTIN_MODELS): deterministic local builds,
no network.

Owns their recipes, cache folders (hash-named, built atomically under a file lock) and build CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.config.catalog import BUILTIN_MODELS, VOCAB_TWINS

# Bump on any change to how a model is built that the parameters below do not capture.
RECIPE_VERSION = "1"
BUILD_INFO = "specbench_build.json"
CACHE_ENV = "SPECBENCH_CACHE"


def _default_cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "specbench" / "models"


DEFAULT_CACHE_DIR: Path = _default_cache_dir()

TARGET = "tiny-llama"

# Build parameters, part of each folder's hash.
_TARGET_PARAMS: dict[str, Any] = {
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "unk_token_id": 0,
    # Random normal weights, norms at 1. Input embeddings larger than the rest make the next
    # token depend mostly, not only, on the current one: drafts can learn it, not trivially.
    "init_std": 0.02,
    "embed_std": 0.05,
    "seed": 1234,
}

# The target's own greedy continuations of random prompts, shared by every fitted draft.
_DATA_PARAMS: dict[str, Any] = {
    "seed": 2024,
    "num_prompts": 2048,
    "prompt_lens": [8, 16, 32, 48],
    "new_tokens": 64,
    "first_token_id": 3,  # prompts avoid <unk>, <s>, </s>
    "heldout_every": 8,  # every 8th prompt is held out to check for memorising
    "gen_batch": 256,
}

_MEDUSA_PARAMS: dict[str, Any] = {
    "num_heads": 3,
    "seed": 7,
    "steps": 300,
    "batch": 4096,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "eval_every": 50,  # keeps the step with the best held-out accuracy
    "data": _DATA_PARAMS,
}

_EAGLE_PARAMS: dict[str, Any] = {
    "seed": 11,
    "steps": 400,
    "batch_seqs": 32,
    "lr": 6e-3,
    "unroll": 3,  # train the way vLLM drafts 3 tokens: each step feeds on the previous output
    "ce_weights": [1.0, 0.5, 0.25],
    "feature_weight": 10.0,  # regressing the target's next hidden state matters most
    "fc_init_std": 0.02,
    "eval_every": 50,
    "data": _DATA_PARAMS,
}

# EAGLE-3: one layer over the target's residual stream at all three of its layer boundaries
# (the embedding, after layer 0, after layer 1: vLLM's aux layer ids 0..2; its default for a
# 2-layer target, (2, 1, -1), would hand over only two). Two heads of 64, a head size vLLM's
# CUDA attention backends take. It shares the target's embedding and lm_head (vocab 1024, no
# d2t map).
_EAGLE3_PARAMS: dict[str, Any] = {
    "seed": 13,
    "heads": 2,
    "aux_layer_ids": [0, 1, 2],
    # Sized for CI (about 0.7 s a step of 32 sequences on 2 idle cores): at batch 32 the
    # held-out step-1 acceptance was 0.49 at step 50, 0.55 at 100, 0.56 at 200.
    "steps": 100,
    "batch_seqs": 24,
    "lr": 6e-3,
    "unroll": 3,
    "ce_weights": [1.0, 0.5, 0.25],
    "feature_weight": 0.0,
    "fc_init_std": 0.02,
    "eval_every": 25,
    "data": _DATA_PARAMS,
}

# Draft model: a one-layer Llama with the target's tokenizer, two heads of 64.
_DRAFT_PARAMS: dict[str, Any] = {
    "seed": 17,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "init_std": 0.02,
    "steps": 150,
    "batch_seqs": 24,
    "lr": 3e-3,
    "draft_steps": 3,  # the acceptance the fit reports: 3 drafted tokens
    "eval_every": 50,
    "data": _DATA_PARAMS,
}

# MTP: vLLM's MTP drafts live in their target's checkpoint, so MTP needs a target whose
# architecture has them. tiny-mimo is tiny-llama as vLLM's MiMoForCausalLM (Qwen2 layers, q/k/v
# biases at zero: the same function, so the same greedy outputs) plus one MiMo MTP layer
# fitted to them. vLLM 0.32's mimo_mtp drafts one token per step.
_MTP_PARAMS: dict[str, Any] = {
    "seed": 19,
    "steps": 100,
    "batch_seqs": 24,
    "lr": 6e-3,
    "unroll": 1,
    "ce_weights": [1.0],
    "feature_weight": 0.0,
    "fc_init_std": 0.02,
    "eval_every": 50,
    "prefix": "model.mtp_layers.0.",
    "data": _DATA_PARAMS,
}

_PARAMS: dict[str, dict[str, Any]] = {
    TARGET: _TARGET_PARAMS,
    "tiny-mimo": _MTP_PARAMS,
    "tiny-llama-medusa": _MEDUSA_PARAMS,
    "tiny-llama-eagle": _EAGLE_PARAMS,
    "tiny-llama-eagle3": _EAGLE3_PARAMS,
    "tiny-llama-draft": _DRAFT_PARAMS,
}
_DEPENDS: dict[str, str | None] = {
    TARGET: None,
    "tiny-mimo": TARGET,
    "tiny-llama-medusa": TARGET,
    "tiny-llama-eagle": TARGET,
    "tiny-llama-eagle3": TARGET,
    "tiny-llama-draft": TARGET,
}
# Vocabulary twins (catalog.VOCAB_TWINS): built from the pair above by padding, no refit.
_PAD_OUTPUT_SCALE = 0.1  # extra tokens' lm_head rows: a tenth of init_std
for _tag, _size in VOCAB_TWINS.items():
    _PARAMS[f"tiny-llama-{_tag}"] = {
        "vocab_size": _size,
        "output_scale": _PAD_OUTPUT_SCALE,
        "seed": 4321,
    }
    _DEPENDS[f"tiny-llama-{_tag}"] = TARGET
    _PARAMS[f"tiny-llama-{_tag}-eagle"] = {"vocab_size": _size, "from": "tiny-llama-eagle"}
    _DEPENDS[f"tiny-llama-{_tag}-eagle"] = f"tiny-llama-{_tag}"


def _check(name: str) -> None:
    if name not in _PARAMS or name not in BUILTIN_MODELS:
        known = ", ".join(sorted(_PARAMS))
        raise ValueError(f"unknown built-in model {name!r} (known: {known})")


def _key(name: str) -> str:
    """Short hash of the recipe version, the parameters and (for drafts) the target's key."""
    _check(name)
    dep = _DEPENDS[name]
    payload = {
        "recipe": RECIPE_VERSION,
        "name": name,
        "params": _PARAMS[name],
        "target": _key(dep) if dep else None,
        # A twin built from another model changes with it.
        **({"from": _key(_PARAMS[name]["from"])} if "from" in _PARAMS[name] else {}),
    }
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def model_dir(name: str, cache_dir: Path | None = None) -> Path:
    """Folder where built-in model `name` lives (built or not)."""
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    return root / f"{name}-{_key(name)}"


def is_built(name: str, cache_dir: Path | None = None) -> bool:
    return (model_dir(name, cache_dir) / BUILD_INFO).is_file()


def ensure_models(
    names: Iterable[str],
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
    *,
    force: bool = False,
) -> dict[str, Path]:
    """Build the named models that are missing (a draft's target first); name -> folder.

    With force, the named models (not their targets) are rebuilt even when present."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        _check(name)
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    root.mkdir(parents=True, exist_ok=True)
    order: list[str] = []
    for name in wanted:
        dep = _DEPENDS[name]
        if dep and dep not in order:
            order.append(dep)
        if name not in order:
            order.append(name)
    cache: dict[str, Any] = {}
    for name in order:
        _ensure_one(name, root, log, force and name in wanted, cache)
    return {name: model_dir(name, root) for name in wanted}


def _ensure_one(
    name: str, root: Path, log: Callable[[str], None], force: bool, cache: dict[str, Any]
) -> None:
    folder = model_dir(name, root)
    if not force and (folder / BUILD_INFO).is_file():
        return
    with _locked(root / f".{folder.name}.lock"):
        if not force and (folder / BUILD_INFO).is_file():
            log(f"{name}: built meanwhile by another process: {folder}")
            return
        for stale in root.glob(f".{folder.name}.*-*"):  # left by a build that was killed
            shutil.rmtree(stale, ignore_errors=True)
        log(f"{name}: building into {folder}")
        dep = _DEPENDS[name]
        start = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            stats = _BUILDERS[name](tmp, root, log, cache)
            seconds = time.perf_counter() - start
            info = {
                "name": name,
                "description": BUILTIN_MODELS[name],
                "recipe_version": RECIPE_VERSION,
                "key": _key(name),
                "params": _PARAMS[name],
                "target": str(model_dir(dep, root)) if dep else None,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "build_seconds": round(seconds, 2),
                "versions": _versions(),
                **stats,
            }
            (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
            _install(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"{name}: built in {seconds:.1f}s")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _install(tmp: Path, folder: Path) -> None:
    """Atomically put the finished build in place (replacing an old one under --force)."""
    if not folder.exists():
        tmp.replace(folder)
        return
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    folder.replace(old)
    tmp.replace(folder)
    shutil.rmtree(old, ignore_errors=True)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str] = {}
    for dist in ("torch", "transformers", "tokenizers", "safetensors"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    return found


# --------------------------------------------------------------------------- builders

Builder = Callable[[Path, Path, Callable[[str], None], dict[str, Any]], dict[str, Any]]


def _llama_config(num_layers: int, heads: int | None = None, kv_heads: int | None = None) -> Any:
    """The target's LlamaConfig; the drafts use the same with one layer (and their heads)."""
    from transformers import LlamaConfig

    p = _TARGET_PARAMS
    config = LlamaConfig(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=heads or p["num_attention_heads"],
        num_key_value_heads=kv_heads or p["num_key_value_heads"],
        max_position_embeddings=p["max_position_embeddings"],
        rms_norm_eps=p["rms_norm_eps"],
        rope_parameters={"rope_type": "default", "rope_theta": p["rope_theta"]},
        bos_token_id=p["bos_token_id"],
        eos_token_id=p["eos_token_id"],
        pad_token_id=None,
        tie_word_embeddings=False,
        initializer_range=p["init_std"],
        dtype="float32",
    )
    config.architectures = ["LlamaForCausalLM"]
    return config


def _build_target(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    p = _TARGET_PARAMS
    config = _llama_config(int(p["num_hidden_layers"]))
    model = LlamaForCausalLM(config)
    # Fill every tensor from our own generator, in name order, so the weights do not depend on
    # how a transformers version initialises modules.
    gen = torch.Generator().manual_seed(int(p["seed"]))
    with torch.no_grad():
        for pname, tensor in sorted(model.state_dict().items()):
            if pname.endswith("norm.weight"):
                tensor.fill_(1.0)
            elif pname.endswith("embed_tokens.weight"):
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * float(p["embed_std"]))
            else:
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * float(p["init_std"]))
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    _write_tokenizer(out, p)
    log(f"  {TARGET}: {sum(t.numel() for t in model.parameters())} parameters")
    return {"seed": p["seed"]}


def _write_tokenizer(out: Path, p: dict[str, Any]) -> None:
    """WordLevel tokenizer: <unk> <s> </s> then w3..w{vocab-1}; whitespace pre-tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {"<unk>": p["unk_token_id"], "<s>": p["bos_token_id"], "</s>": p["eos_token_id"]}
    vocab = dict(specials)
    for i in range(len(specials), int(p["vocab_size"])):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=int(p["max_position_embeddings"]),
        clean_up_tokenization_spaces=False,
    )
    # Minimal chat template so the OpenAI chat endpoint works too.
    wrapped.chat_template = "{% for message in messages %}{{ message['content'] }} {% endfor %}"
    wrapped.save_pretrained(str(out))


def _greedy(root: Path, log: Callable[[str], None], cache: dict[str, Any]) -> Any:
    """The target's greedy data, generated once per process and shared by both drafts."""
    from harness.engine import fit

    key = f"greedy:{model_dir(TARGET, root)}:{json.dumps(_DATA_PARAMS, sort_keys=True)}"
    if key not in cache:
        cache[key] = fit.greedy_data(model_dir(TARGET, root), _DATA_PARAMS, log)
    return cache[key]


def _build_medusa(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    from safetensors.torch import save_file

    from harness.engine import fit

    p = _MEDUSA_PARAMS
    data = _greedy(root, log, cache)
    start = time.perf_counter()
    weights, stats = fit.fit_medusa(data, p, log)
    fit_s = time.perf_counter() - start
    config = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": _TARGET_PARAMS["hidden_size"],
        "vocab_size": _TARGET_PARAMS["vocab_size"],
        "num_heads": p["num_heads"],
        "num_hidden_layers": 1,
        "dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {
        "seed": p["seed"],
        "fit": {**stats, "data_seconds": round(data.seconds, 2), "fit_seconds": round(fit_s, 2)},
    }


def _target_last_layer(root: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    last = f"model.layers.{int(_TARGET_PARAMS['num_hidden_layers']) - 1}."
    weights = load_file(str(model_dir(TARGET, root) / "model.safetensors"))
    return {k[len(last) :]: v for k, v in weights.items() if k.startswith(last)}


def _build_eagle(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    from safetensors.torch import save_file

    from harness.engine import fit

    p = _EAGLE_PARAMS
    data = _greedy(root, log, cache)
    start = time.perf_counter()
    weights, stats = fit.fit_eagle(data, _TARGET_PARAMS, _target_last_layer(root), p, log)
    fit_s = time.perf_counter() - start
    # vLLM maps LlamaForCausalLM to EagleLlamaForCausalLM under method "eagle".
    config = _llama_config(1)
    config.save_pretrained(str(out))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {
        "seed": p["seed"],
        "fit": {**stats, "data_seconds": round(data.seconds, 2), "fit_seconds": round(fit_s, 2)},
    }


def _build_eagle3(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    from safetensors.torch import save_file

    from harness.engine import fit

    p = _EAGLE3_PARAMS
    data = _greedy(root, log, cache)
    start = time.perf_counter()
    weights, stats = fit.fit_eagle3(data, _TARGET_PARAMS, _target_last_layer(root), p, log)
    fit_s = time.perf_counter() - start
    heads = int(p["heads"])
    config = _llama_config(1, heads, heads)
    # vLLM's registry maps LlamaForCausalLMEagle3 to Eagle3LlamaForCausalLM; the aux layer ids
    # tell the target which hidden states to hand over (read from eagle_config).
    config.architectures = ["LlamaForCausalLMEagle3"]
    config.head_dim = int(_TARGET_PARAMS["hidden_size"]) // heads
    config.draft_vocab_size = _TARGET_PARAMS["vocab_size"]
    config.target_hidden_size = _TARGET_PARAMS["hidden_size"]
    config.eagle_config = {
        "eagle_aux_hidden_state_layer_ids": list(p["aux_layer_ids"]),
        "use_aux_hidden_state": True,
    }
    config.save_pretrained(str(out))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {
        "seed": p["seed"],
        "fit": {**stats, "data_seconds": round(data.seconds, 2), "fit_seconds": round(fit_s, 2)},
    }


def _build_draft(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    from harness.engine import fit

    p = _DRAFT_PARAMS
    data = _greedy(root, log, cache)
    config = _llama_config(
        int(p["num_hidden_layers"]), int(p["num_attention_heads"]), int(p["num_key_value_heads"])
    )
    config.head_dim = int(_TARGET_PARAMS["hidden_size"]) // int(p["num_attention_heads"])
    start = time.perf_counter()
    model, stats = fit.fit_draft_model(data, config, p, log)
    fit_s = time.perf_counter() - start
    model.save_pretrained(str(out), safe_serialization=True)
    _write_tokenizer(out, _TARGET_PARAMS)  # the target's tokenizer: same vocabulary
    return {
        "seed": p["seed"],
        "fit": {**stats, "data_seconds": round(data.seconds, 2), "fit_seconds": round(fit_s, 2)},
    }


def _build_mimo(
    out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config

    from harness.engine import fit

    p = _MTP_PARAMS
    t = _TARGET_PARAMS
    data = _greedy(root, log, cache)
    start = time.perf_counter()
    mtp, stats = fit.fit_mtp(data, t, _target_last_layer(root), p, log)
    fit_s = time.perf_counter() - start
    weights = load_file(str(model_dir(TARGET, root) / "model.safetensors"))
    head_dim = int(t["hidden_size"]) // int(t["num_attention_heads"])
    for layer in range(int(t["num_hidden_layers"])):
        for proj, heads in (
            ("q_proj", t["num_attention_heads"]),
            ("k_proj", t["num_key_value_heads"]),
            ("v_proj", t["num_key_value_heads"]),
        ):
            weights[f"model.layers.{layer}.self_attn.{proj}.bias"] = torch.zeros(
                int(heads) * head_dim
            )
    weights.update(mtp)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = Qwen2Config(
        vocab_size=t["vocab_size"],
        hidden_size=t["hidden_size"],
        intermediate_size=t["intermediate_size"],
        num_hidden_layers=t["num_hidden_layers"],
        num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=t["num_key_value_heads"],
        max_position_embeddings=t["max_position_embeddings"],
        rms_norm_eps=t["rms_norm_eps"],
        rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"]},
        bos_token_id=t["bos_token_id"],
        eos_token_id=t["eos_token_id"],
        tie_word_embeddings=False,
        use_sliding_window=False,
        dtype="float32",
    )
    # vLLM keys MiMo's MTP on the architecture (MiMoForCausalLM) and this count.
    config.architectures = ["MiMoForCausalLM"]
    config.num_nextn_predict_layers = 1
    config.save_pretrained(str(out))
    _write_tokenizer(out, t)
    return {
        "seed": p["seed"],
        "fit": {**stats, "data_seconds": round(data.seconds, 2), "fit_seconds": round(fit_s, 2)},
    }


def _build_padded_target(size: int) -> Builder:
    def build(
        out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
    ) -> dict[str, Any]:
        import torch
        from safetensors.torch import load_file, save_file

        p = _PARAMS[f"tiny-llama-{_tag_of(size)}"]
        source = model_dir(TARGET, root)
        weights = load_file(str(source / "model.safetensors"))
        gen = torch.Generator().manual_seed(int(p["seed"]))
        for name, std in (
            ("model.embed_tokens.weight", _TARGET_PARAMS["embed_std"]),
            ("lm_head.weight", _TARGET_PARAMS["init_std"] * p["output_scale"]),
        ):
            have = weights[name]
            extra = torch.randn((size - have.shape[0], have.shape[1]), generator=gen) * std
            weights[name] = torch.cat([have, extra]).contiguous()
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        config = json.loads((source / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**config, "vocab_size": size}, indent=2))
        _write_tokenizer(out, {**_TARGET_PARAMS, "vocab_size": size})
        log(f"  tiny-llama-{_tag_of(size)}: vocabulary {size}")
        return {"seed": p["seed"]}

    return build


def _build_padded_eagle(size: int) -> Builder:
    def build(
        out: Path, root: Path, log: Callable[[str], None], cache: dict[str, Any]
    ) -> dict[str, Any]:
        _ensure_one("tiny-llama-eagle", root, log, False, cache)
        source = model_dir("tiny-llama-eagle", root)
        shutil.copy2(source / "model.safetensors", out / "model.safetensors")
        config = json.loads((source / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**config, "vocab_size": size}, indent=2))
        return {"from": str(source)}

    return build


def _tag_of(size: int) -> str:
    return next(tag for tag, s in VOCAB_TWINS.items() if s == size)


_BUILDERS: dict[str, Builder] = {
    TARGET: _build_target,
    "tiny-llama-medusa": _build_medusa,
    "tiny-llama-eagle": _build_eagle,
    "tiny-llama-eagle3": _build_eagle3,
    "tiny-llama-draft": _build_draft,
    "tiny-mimo": _build_mimo,
    **{f"tiny-llama-{tag}": _build_padded_target(size) for tag, size in VOCAB_TWINS.items()},
    **{f"tiny-llama-{tag}-eagle": _build_padded_eagle(size) for tag, size in VOCAB_TWINS.items()},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.engine.models",
        description="Build the built-in tiny models that are missing; print {name: folder} JSON.",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"models to build (default: all of {', '.join(BUILTIN_MODELS)})",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help=f"cache folder (default: {DEFAULT_CACHE_DIR})"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    names: list[str] = args.names or list(BUILTIN_MODELS)
    try:
        for name in names:
            _check(name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    folders = ensure_models(
        names, args.cache_dir, log=lambda m: print(m, file=sys.stderr, flush=True), force=args.force
    )
    print(json.dumps({name: str(path) for name, path in folders.items()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
