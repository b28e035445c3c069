"""Workload prompts: seeded random token ids, or prompts read from a local JSONL/ShareGPT file.

Pure (numpy + json): the same workload and seed give the same prompts in every variant's
worker, and workload_hash() lets the harness check that they did.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from harness.config.scenario import Workload
from harness.config.userfiles import require_regular_file
from harness.errors import ScenarioError

# A prompt is either token ids (exact lengths, no tokenizer needed) or text.
Prompt = list[int] | str

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


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {exc.start}: "
                            f"{exc.object[exc.start:exc.start + 1]!r})") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None


def _token_ids(value: list[object], where: str) -> list[int]:
    """Token ids exactly as written: integers only (no bools, floats or numeric strings)."""
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int):
            raise ScenarioError(f"{where}: prompt_token_ids[{i}] is not an integer "
                                f"({json.dumps(token)})")
        if token < 0:
            raise ScenarioError(f"{where}: prompt_token_ids[{i}] is negative ({token})")
    return [t for t in value if isinstance(t, int)]


def _read_jsonl(path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not JSON ({exc.msg})") from None
        if isinstance(item, dict) and isinstance(item.get("prompt"), str):
            if not item["prompt"].strip():
                raise ScenarioError(f"{where}: empty prompt")
            prompts.append(item["prompt"])
        elif isinstance(item, dict) and isinstance(item.get("prompt_token_ids"), list):
            if not item["prompt_token_ids"]:
                raise ScenarioError(f"{where}: empty prompt_token_ids")
            prompts.append(_token_ids(item["prompt_token_ids"], where))
        else:
            raise ScenarioError(
                f"{where}: expected an object with 'prompt' (text) or "
                "'prompt_token_ids' (list of ints)"
            )
    return prompts


def _read_sharegpt(path: Path) -> list[Prompt]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise ScenarioError(f"{path}: expected a JSON list of conversations")
    prompts: list[Prompt] = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") == "human" and turn.get("value"):
                prompts.append(str(turn["value"]))
                break
    return prompts


def load_prompts(workload: Workload, base_dir: Path, vocab_size: int | None) -> list[Prompt]:
    """The measured prompts of a workload (`base_dir` resolves relative file paths)."""
    if workload.kind == "random":
        if vocab_size is None:
            raise ScenarioError("workload.kind random needs the model's vocab_size")
        return random_prompts(workload.num_prompts, workload.input_len, vocab_size, workload.seed)
    assert workload.path is not None  # the scenario validator guarantees it
    path = Path(workload.path)
    if not path.is_absolute():
        path = base_dir / path
    # Every launch reads the prompts again and hashes them to prove each arm saw the same:
    # only a regular file reads to the same end each time (a FIFO gives its data once,
    # /dev/zero never ends).
    require_regular_file(path, f"workload.path: file not found: {path}",
                         f"workload.path: {path} {{problem}}; prompts must come from a "
                         "regular file, which every launch reads again to the same end")
    prompts = _read_jsonl(path) if workload.kind == "jsonl" else _read_sharegpt(path)
    if not prompts:
        what = ("no prompts" if workload.kind == "jsonl"
                else "no conversation with a non-empty human turn")
        raise ScenarioError(f"{path}: {what}")
    if vocab_size is not None:
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, list) and max(prompt) >= vocab_size:
                raise ScenarioError(f"{path}: prompt {i}: token id {max(prompt)} is outside the "
                                    f"model's vocabulary of {vocab_size}")
    if len(prompts) < workload.num_prompts:
        raise ScenarioError(
            f"workload.num_prompts: {workload.num_prompts} asked, {path} has {len(prompts)}"
        )
    return prompts[: workload.num_prompts]


def warmup_prompts(workload: Workload, count: int, vocab_size: int | None,
                   measured: list[Prompt]) -> list[Prompt]:
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


def model_vocab_size(model_dir: Path) -> int | None:
    """vocab_size from a local model folder's config.json, if it has one."""
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("vocab_size")
    return int(value) if isinstance(value, int) else None
