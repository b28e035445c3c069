"""Workload prompts: seeded random token ids, or prompts read from a local file (jsonl, ShareGPT,
Spec-Bench, SPEED-Bench: harness.config.datasets), each with its category where it has one.

Pure (numpy + json): the same workload and seed give the same prompts in every variant's
worker, and workload_hash() lets the harness check that they did. Also where a model's
config.json is read from (a local folder, or the local Hugging Face cache for a Hub id), and
its text settings (vocab_size, max_position_embeddings) whether at the top or in text_config.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.datasets import (
    Item,
    category_of,
    json_lines,
    read_spec_bench,
    read_speed_bench,
    read_text,
    speed_bench_file,
    stratified,
)
from harness.config.datasets import (
    Prompt as Prompt,
)
from harness.config.scenario import Workload
from harness.config.userfiles import require_regular_file
from harness.errors import ScenarioError

# Token ids below this are reserved for <unk>, <s>, </s> in the built-in tokenizer and are
# special in most real vocabularies; random prompts avoid them.
FIRST_RANDOM_TOKEN = 3


def random_prompts(num: int, input_len: int, vocab_size: int, seed: int) -> list[Prompt]:
    """`num` prompts of exactly `input_len` token ids drawn uniformly from the vocabulary."""
    if vocab_size <= FIRST_RANDOM_TOKEN:
        raise ScenarioError(f"model vocabulary of {vocab_size} is too small for random prompts")
    rng = np.random.default_rng(seed)
    ids = rng.integers(FIRST_RANDOM_TOKEN, vocab_size, size=(num, input_len))
    return [row.tolist() for row in ids]


def _token_ids(value: list[object], where: str) -> list[int]:
    """Token ids exactly as written: integers only (no bools, floats or numeric strings)."""
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int):
            raise ScenarioError(
                f"{where}: prompt_token_ids[{i}] is not an integer ({json.dumps(token)})"
            )
        if token < 0:
            raise ScenarioError(f"{where}: prompt_token_ids[{i}] is negative ({token})")
    return [t for t in value if isinstance(t, int)]


def _read_jsonl(path: Path) -> list[Item]:
    items: list[Item] = []
    for where, item in json_lines(path):
        if isinstance(item, dict) and isinstance(item.get("prompt"), str):
            if not item["prompt"].strip():
                raise ScenarioError(f"{where}: empty prompt")
            prompt: Prompt = item["prompt"]
        elif isinstance(item, dict) and isinstance(item.get("prompt_token_ids"), list):
            if not item["prompt_token_ids"]:
                raise ScenarioError(f"{where}: empty prompt_token_ids")
            prompt = _token_ids(item["prompt_token_ids"], where)
        else:
            raise ScenarioError(
                f"{where}: expected an object with 'prompt' (text) or "
                "'prompt_token_ids' (list of ints)"
            )
        items.append((prompt, category_of(item, where, False, "")))
    return items


def _read_sharegpt(path: Path) -> list[Item]:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise ScenarioError(f"{path}: expected a JSON list of conversations")
    prompts: list[Item] = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") == "human" and turn.get("value"):
                prompts.append((str(turn["value"]), None))
                break
    return prompts


def workload_file(workload: Workload, base_dir: Path) -> Path:
    """The file a file workload reads (speed_bench: <folder>/<subset>.jsonl)."""
    assert workload.path is not None  # the scenario validator guarantees it
    path = Path(workload.path)
    if not path.is_absolute():
        path = base_dir / path
    return speed_bench_file(path, workload.subset) if workload.kind == "speed_bench" else path


READERS = {
    "jsonl": _read_jsonl,
    "sharegpt": _read_sharegpt,
    "spec_bench": read_spec_bench,
    "speed_bench": read_speed_bench,
}


def load_workload(
    workload: Workload, base_dir: Path, vocab_size: int | None
) -> tuple[list[Prompt], list[str | None]]:
    """The measured prompts of a workload and each one's category (None where it has none);
    `base_dir` resolves relative file paths."""
    if workload.kind == "random":
        if vocab_size is None:
            raise ScenarioError(
                "workload.kind: random needs the model's vocab_size, from its "
                "config.json (a local folder, or the local Hugging Face cache "
                "for a Hub id); fetch the config or use a file workload"
            )
        prompts = random_prompts(
            workload.num_prompts, workload.input_len, vocab_size, workload.seed
        )
        return prompts, [None] * len(prompts)
    path = workload_file(workload, base_dir)
    # Every launch reads the prompts again and hashes them to prove each arm saw the same:
    # only a regular file reads to the same end each time (a FIFO gives its data once,
    # /dev/zero never ends).
    require_regular_file(
        path,
        f"workload.path: file not found: {path}",
        f"workload.path: {path} {{problem}}; prompts must come from a "
        "regular file, which every launch reads again to the same end",
    )
    items = READERS[workload.kind](path)
    if not items:
        what = (
            "no conversation with a non-empty human turn"
            if workload.kind == "sharegpt"
            else "no prompts"
        )
        raise ScenarioError(f"{path}: {what}")
    if workload.categories is not None:
        found = {c for _, c in items}
        missing = [c for c in workload.categories if c not in found]
        if missing:
            known = ", ".join(sorted(c for c in found if c is not None)) or "none"
            raise ScenarioError(
                f"workload.categories: {missing[0]!r} is not in {path} (its categories: {known})"
            )
        items = [item for item in items if item[1] in workload.categories]
    if vocab_size is not None:
        for i, (prompt, _) in enumerate(items):
            if isinstance(prompt, list) and max(prompt) >= vocab_size:
                raise ScenarioError(
                    f"{path}: prompt {i}: token id {max(prompt)} is outside the "
                    f"model's vocabulary of {vocab_size}"
                )
    if len(items) < workload.num_prompts:
        raise ScenarioError(
            f"workload.num_prompts: {workload.num_prompts} asked, {path} has {len(items)}"
            + (" in those categories" if workload.categories else "")
        )
    chosen = stratified(items, workload.num_prompts)
    return [p for p, _ in chosen], [c for _, c in chosen]


def load_prompts(workload: Workload, base_dir: Path, vocab_size: int | None) -> list[Prompt]:
    """The measured prompts of a workload (`base_dir` resolves relative file paths)."""
    return load_workload(workload, base_dir, vocab_size)[0]


def warmup_prompts(
    workload: Workload, count: int, vocab_size: int | None, measured: list[Prompt]
) -> list[Prompt]:
    """Warm-up prompts. Random workloads: fresh random prompts of the same length (another
    seed). File workloads: the measured prompts themselves, cycled, so the warm-up meets every
    prompt length the passes will (a first pass after 32-token warm-ups ran ~25% slow in serve
    mode); with the prefix cache off, as it is by default, that favours no pass."""
    if count == 0:
        return []
    if workload.kind == "random" and vocab_size is not None:
        return random_prompts(count, workload.input_len, vocab_size, workload.seed + 1_000_003)
    return [measured[i % len(measured)] for i in range(count)]


def workload_hash(prompts: list[Prompt]) -> str:
    """Stable hash of the prompts, to prove every arm saw the same requests."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(json.dumps(prompt, separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def looks_like_hub_id(name: str) -> bool:
    """Whether `name` reads as a Hugging Face Hub id ("org/model"), not a path."""
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and not name.endswith("/")


def hub_cache_dir() -> str | None:
    """The Hugging Face cache folder the environment names now (HF_HUB_CACHE, else
    HF_HOME/hub); None: huggingface_hub's own default."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.environ[var]
    home = os.environ.get("HF_HOME")
    return str(Path(home).expanduser() / "hub") if home else None


def hub_cache_text() -> str:
    """The cache folder hub_cached_config looks in, for messages."""
    found = hub_cache_dir()
    if found is None:
        try:
            from huggingface_hub import constants
        except ImportError:
            return "the Hugging Face cache (huggingface_hub is not installed)"
        found = str(constants.HF_HUB_CACHE)
    return found


def hub_cached_config(name: str) -> Path | None:
    """config.json of Hub model `name` where the local Hugging Face cache already holds it
    (HF_HUB_CACHE / HF_HOME honoured; nothing is downloaded), else None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(name, "config.json", cache_dir=hub_cache_dir())
    return Path(found) if isinstance(found, str) else None


def model_setting(config: dict[str, Any] | None, key: str) -> int | None:
    """An integer setting of a model's language model: at the top of its config.json, else
    under text_config (multimodal configs such as Llama 4 nest vocab_size and
    max_position_embeddings there)."""
    for where in (config or {}, (config or {}).get("text_config")):
        value = where.get(key) if isinstance(where, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def model_config_file(name: str) -> Path | None:
    """A model's config.json: in its local folder, else (a Hub id) in the local Hugging Face
    cache; None where neither has one."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path / "config.json" if (path / "config.json").is_file() else None
    return hub_cached_config(name) if looks_like_hub_id(name) else None


def model_vocab_size(name: str) -> int | None:
    """vocab_size from a model's config.json (model_config_file), if it gives one."""
    config = model_config_file(name)
    if config is None:
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    return model_setting(data if isinstance(data, dict) else None, "vocab_size")
