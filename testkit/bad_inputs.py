"""Bad input, case by case: workload files (FILES) and scenarios (CASES) that specbench must
refuse before any engine starts, each with the exit code and the fragment of its one-line
error. Checked by tests/unit/test_preflight.py; timed by benchmarks/ending_a_run.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml


def _jsonl(lines: list[Any]) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


# (file contents, workload kind, fragment of the one-line error)
FILES: list[tuple[str, bytes, str, str]] = [
    ("malformed-line", _jsonl([{"prompt": "w5 w6"}, "{not json"]), "jsonl", ".jsonl:2: not JSON"),
    (
        "string-token-ids",
        _jsonl([{"prompt_token_ids": ["5", 6]}]),
        "jsonl",
        '.jsonl:1: prompt_token_ids[0] is not an integer ("5")',
    ),
    (
        "float-token-ids",
        _jsonl([{"prompt_token_ids": [5.7, 6]}]),
        "jsonl",
        "prompt_token_ids[0] is not an integer (5.7)",
    ),
    (
        "out-of-vocabulary",
        _jsonl([{"prompt_token_ids": [5, 99999]}]),
        "jsonl",
        "token id 99999 is outside the model's vocabulary of 1024",
    ),
    ("empty-file", b"", "jsonl", ": no prompts"),
    ("empty-prompt", _jsonl([{"prompt": "  "}]), "jsonl", ".jsonl:1: empty prompt"),
    ("empty-ids", _jsonl([{"prompt_token_ids": []}]), "jsonl", ".jsonl:1: empty prompt_token_ids"),
    ("not-utf8", b'{"prompt": "w5 \xff\xfe"}\n', "jsonl", "not UTF-8 text"),
    (
        "sharegpt-no-turns",
        json.dumps([{"conversations": [{"from": "gpt", "value": "hi"}]}]).encode(),
        "sharegpt",
        "no conversation with a non-empty human turn",
    ),
    # vLLM's SpecBench raises a raw KeyError on a row without a category.
    (
        "spec-bench-no-category",
        _jsonl([{"turns": ["w5 w6"]}]),
        "spec_bench",
        ".jsonl:1: no 'category' (Spec-Bench gives every prompt one",
    ),
    (
        "spec-bench-no-turns",
        _jsonl([{"category": "qa", "prompt": "w5"}]),
        "spec_bench",
        ".jsonl:1: expected an object with 'turns', a list of strings",
    ),
    (
        "speed-bench-no-messages",
        _jsonl([{"category": "qa", "turns": ["w5"]}]),
        "speed_bench",
        ".jsonl:1: expected an object with 'messages'",
    ),
    (
        "category-not-a-string",
        _jsonl([{"prompt": "w5", "category": 3}]),
        "jsonl",
        ".jsonl:1: 'category' must be a non-empty string, got 3",
    ),
]


def _folder(
    tmp_path: Path, name: str, config: dict[str, Any] | str | None, weights: bool = True
) -> str:
    """A local model folder: config.json (a mapping, raw text, or none) and a weights file."""
    path = tmp_path / name
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    return str(path)


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
}


def _unswapped(data: dict[str, Any], tmp_path: Path) -> None:
    """Variants that differ by an environment variable, not a Medusa swap (other methods)."""
    data["variants"] = {"base": {"baseline": True}, "other": {"env": {"X": "1"}}}


def _set(path: str, value: Any) -> Any:
    """A mutator setting a dotted path of the scenario mapping."""

    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value(tmp_path) if callable(value) else value

    return mutate


def _both(*mutators: Any) -> Any:
    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        for m in mutators:
            m(data, tmp_path)

    return mutate


def _written_twice(line: str, after: str | None = None) -> Any:
    """A mutator returning the scenario's text with `line` added after the line `after` (or at
    the end): a key written twice, which YAML alone resolves silently to its second value.
    (MINIMAL as written: batch_size on line 4, workload.max_tokens on 12, variants.opt's
    implementation on 18, the last.)"""

    def mutate(data: dict[str, Any], tmp_path: Path) -> str:
        text: str = yaml.safe_dump(data, sort_keys=False)
        if after is None:
            return f"{text}{line}\n"
        assert after in text.splitlines()
        return text.replace(f"{after}\n", f"{after}\n{line}\n", 1)

    return mutate


def _workload_at(path: Any) -> Any:
    """A mutator pointing workload.path at `path(tmp_path)`."""

    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        data["workload"] = {
            "kind": "jsonl",
            "path": str(path(tmp_path)),
            "num_prompts": 2,
            "max_tokens": 8,
        }

    return mutate


def _folder_at(tmp_path: Path) -> Path:
    (tmp_path / "prompts.jsonl").mkdir()
    return tmp_path / "prompts.jsonl"


def _fifo_at(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "prompts.jsonl")  # no writer: opening it to read would wait for ever
    return tmp_path / "prompts.jsonl"


# 40 x 40: 1600 cells, past the default limit of 1000 (a linked group counts once).
BIG_GRID = {"axes": {"batch_size": list(range(1, 41)), "workload.seed": list(range(40))}}
BIG_LINKED = {
    "axes": {"workload.seed": list(range(100))},
    "linked": [{"batch_size": list(range(1, 12)), "workload.max_tokens": [8] * 11}],
}


def _long_text_prompts(data: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "long.jsonl").write_text(json.dumps({"prompt": " ".join(["w5"] * 600)}) + "\n")
    data["max_model_len"] = 512
    data["workload"] = {"kind": "jsonl", "path": "long.jsonl", "num_prompts": 1, "max_tokens": 16}


# (id, mutation, exit code, fragment of the one line, command)
CASES: list[tuple[str, Any, int, str, str]] = [
    (
        "engine-unknown-key",
        _set("engine", {"zz": 3}),
        2,
        "engine.zz: not an argument of vLLM 0.32.0's EngineArgs",
        "run",
    ),
    (
        "engine-unknown-key-plan",
        _set("engine", {"zz": 3}),
        2,
        "engine.zz: not an argument of vLLM",
        "plan",
    ),
    (
        "engine-wrong-type",
        _set("engine", {"enforce_eager": "maybe-not"}),
        2,
        "engine.enforce_eager: expected true or false, got 'maybe-not'",
        "run",
    ),
    (
        "engine-wrong-type-plan",
        _set("engine", {"enforce_eager": "maybe-not"}),
        2,
        "engine.enforce_eager: expected true or false",
        "plan",
    ),
    (
        "engine-owned-key",
        _set("engine", {"speculative_config": {}}),
        2,
        "engine.speculative_config: set draft",
        "run",
    ),
    (
        "engine-out-of-range",
        _set("engine", {"max_model_len": 8}),
        2,
        "engine.max_model_len: 8 is out of range (>= 16)",
        "run",
    ),
    ("dtype", _set("dtype", "bf16"), 2, "dtype: 'bf16' is not one vLLM 0.32.0 accepts", "run"),
    (
        "variant-engine-typo",
        _set("variants.opt.engine", {"enforce_eagr": True}),
        2,
        "variants.opt.engine.enforce_eagr: not an argument of vLLM 0.32.0's EngineArgs; did you "
        "mean 'enforce_eager'?",
        "run",
    ),
    (
        "variant-dtype",
        _set("variants.opt.engine", {"dtype": "float8"}),
        2,
        "variants.opt.engine.dtype: 'float8' is not one vLLM",
        "run",
    ),
    (
        "variant-tp-beyond-cores",
        _set("variants.opt.engine", {"tensor_parallel_size": 64}),
        3,
        "tensor_parallel_size: 64 (variant opt) needs 64 CPU cores",
        "run",
    ),
    (
        "draft-config-unknown",
        _set("draft.config", {"prompt_lookup_maxx": 3}),
        2,
        "draft.config.prompt_lookup_maxx: not an argument of vLLM 0.32.0's SpeculativeConfig",
        "run",
    ),
    (
        "draft-config-internal",
        _set("draft.config", {"target_model_config": {}}),
        2,
        "draft.config.target_model_config: vLLM fills this",
        "run",
    ),
    (
        "draft-config-type",
        _set("draft.config", {"disable_padded_drafter_batch": "no"}),
        2,
        "draft.config.disable_padded_drafter_batch: expected true or false",
        "run",
    ),
    (
        "variant-spec-type",
        _set("variants.opt.speculative_config", {"num_speculative_tokens": "3"}),
        2,
        "variants.opt.speculative_config.num_speculative_tokens: expected an integer",
        "run",
    ),
    (
        "variant-spec-range",
        _set("variants.opt.speculative_config", {"num_speculative_tokens": 0}),
        2,
        "variants.opt.speculative_config.num_speculative_tokens: 0 is out of range",
        "run",
    ),
    (
        "model-no-config",
        _set("model", lambda t: _folder(t, "m", None)),
        2,
        "has no config.json, so it is not a model folder vLLM can load",
        "run",
    ),
    (
        "model-config-not-json",
        _set("model", lambda t: _folder(t, "m", "{oops")),
        2,
        "config.json is not readable JSON",
        "run",
    ),
    (
        "model-no-weights",
        _set("model", lambda t: _folder(t, "m", LLAMA, weights=False)),
        2,
        "has no weights (*.safetensors",
        "run",
    ),
    (
        "model-no-architectures",
        _set("model", lambda t: _folder(t, "m", {"vocab_size": 9})),
        2,
        "names no architectures",
        "run",
    ),
    (
        "model-missing",
        _set("model", "no-such-model"),
        2,
        "model: 'no-such-model' is neither a built-in model",
        "plan",
    ),
    (
        "draft-not-medusa",
        _set("draft.model", "tiny-llama-eagle"),
        2,
        "draft.model: tiny-llama-eagle is a LlamaForCausalLM, not a Medusa head",
        "run",
    ),
    (
        "draft-medusa-for-eagle",
        _both(_unswapped, _set("draft.method", "eagle")),
        2,
        "draft.model (variant base): tiny-llama-medusa is a Medusa head; method eagle needs a "
        "causal-LM draft",
        "run",
    ),
    (
        "draft-folder-wrong-kind",
        _set("draft.model", lambda t: _folder(t, "d", LLAMA)),
        2,
        "is a LlamaForCausalLM, not a Medusa head",
        "run",
    ),
    (
        "draft-vocab-differs",
        _set(
            "draft.model",
            lambda t: _folder(
                t, "d", {"model_type": "medusa", "num_heads": 3, "vocab_size": 32000}
            ),
        ),
        2,
        "vocab_size 32000 differs from the target's 1024",
        "run",
    ),
    (
        "medusa-heads",
        _set("draft.num_speculative_tokens", 5),
        2,
        "num_speculative_tokens: 5 is more than the 3 heads of the Medusa draft",
        "run",
    ),
    (
        "text-prompt-too-long",
        _long_text_prompts,
        2,
        "(at least 600 tokens) + workload.max_tokens = 616 exceeds max_model_len 512",
        "run",
    ),
    (
        "patch-not-importable",
        _set("variants.opt", {"patch": "tests.patches.nope:install"}),
        2,
        "variants.opt.patch: module 'tests.patches.nope' is not importable by ",
        "run",
    ),
    (
        "patch-not-an-import-path",
        _set("variants.opt", {"patch": "just_a_name"}),
        2,
        "variants.opt.patch: expected 'package.module:function', got 'just_a_name'",
        "run",
    ),
    (
        "patch-and-swap",
        _set("variants.opt.patch", "tests.patches.medusa_zero_drafts:install"),
        2,
        "variants.opt: implementation and patch both swap code: choose one",
        "run",
    ),
    (
        "patch-no-such-function",
        _set("variants.opt", {"patch": "tests.patches.medusa_zero_drafts:instal"}),
        2,
        "variants.opt.patch: module 'tests.patches.medusa_zero_drafts' has no function 'instal'; "
        "did you mean 'install'?",
        "run",
    ),
    (
        "patch-not-callable",
        _set("variants.opt", {"patch": "tests.patches.wrong_shapes:NOT_A_FUNCTION"}),
        2,
        "variants.opt.patch: tests.patches.wrong_shapes:NOT_A_FUNCTION is 3 (type int), not a "
        "function",
        "run",
    ),
    (
        "patch-two-arguments",
        _set("variants.opt", {"patch": "tests.patches.wrong_shapes:two_arguments"}),
        2,
        "variants.opt.patch: tests.patches.wrong_shapes:two_arguments(ctx: 'Any', extra: 'Any') "
        "-> 'None' cannot be called with one argument, the context",
        "run",
    ),
    (
        "patch-import-fails",
        _set("variants.opt", {"patch": "tests.patches.fails_to_import:install"}),
        2,
        "variants.opt.patch: importing module 'tests.patches.fails_to_import' under ",
        "run",
    ),
    (
        "workload-file-missing",
        _set(
            "workload", {"kind": "jsonl", "path": "nope.jsonl", "num_prompts": 2, "max_tokens": 8}
        ),
        2,
        "workload.path: file not found: ",
        "plan",
    ),
    (
        "workload-path-a-folder",
        _workload_at(_folder_at),
        2,
        "prompts.jsonl is a directory; prompts must come from a regular file",
        "plan",
    ),
    (
        "workload-path-dev-zero",
        _workload_at(lambda t: "/dev/zero"),
        2,
        "workload.path: /dev/zero is not a regular file (a character device); prompts must come "
        "from a regular file, which every launch reads again to the same end",
        "plan",
    ),
    (
        "workload-path-fifo",
        _workload_at(_fifo_at),
        2,
        "prompts.jsonl is not a regular file (a FIFO); prompts must come from a regular file",
        "run",
    ),
    (
        "key-twice",
        _written_twice("batch_size: 64"),
        2,
        "s.yaml:19: key 'batch_size' is written twice (lines 4 and 19); YAML would keep only the "
        "second, so remove one",
        "plan",
    ),
    (
        "key-twice-nested",
        _written_twice("  max_tokens: 64", after="  max_tokens: 8"),
        2,
        "s.yaml:13: key 'workload.max_tokens' is written twice (lines 12 and 13)",
        "run",
    ),
    (
        "key-twice-in-a-variant",
        _written_twice("    implementation: medusa-proposer:baseline"),
        2,
        "s.yaml:19: key 'variants.opt.implementation' is written twice (lines 18 and 19)",
        "run",
    ),
    (
        "sweep-too-many-cells",
        _set("sweep", BIG_GRID),
        2,
        "sweep: 1600 cells (batch_size 40 x workload.seed 40) is more than the limit of 1000 "
        "cells; make the grid smaller, or raise the limit on purpose (--max-cells N)",
        "plan",
    ),
    (
        "sweep-too-many-cells-run",
        _set("sweep", BIG_LINKED),
        2,
        "sweep: 1100 cells (workload.seed 100 x batch_size+workload.max_tokens 11) is more than "
        "the limit of 1000 cells",
        "run",
    ),
    (
        "beyond-max-positions",
        _set("workload", {"num_prompts": 2, "input_len": 2000, "max_tokens": 100}),
        2,
        "= 2100 exceeds the model's max_position_embeddings 2048 (max_model_len unset)",
        "run",
    ),
]
