"""Bad input is refused before any engine starts: one line naming the field or file and line,
exit 2 (3 for hardware the machine lacks), no traceback, no run folder (so no worker was ever
launched), and neither vLLM nor torch imported by specbench."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT


def _jsonl(lines: list[Any]) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line)
                     for line in lines).encode()


# (file contents, workload kind, fragment of the one-line error)
FILES: list[tuple[str, bytes, str, str]] = [
    ("malformed-line", _jsonl([{"prompt": "w5 w6"}, "{not json"]), "jsonl", ".jsonl:2: not JSON"),
    ("string-token-ids", _jsonl([{"prompt_token_ids": ["5", 6]}]), "jsonl",
     ".jsonl:1: prompt_token_ids[0] is not an integer (\"5\")"),
    ("float-token-ids", _jsonl([{"prompt_token_ids": [5.7, 6]}]), "jsonl",
     "prompt_token_ids[0] is not an integer (5.7)"),
    ("out-of-vocabulary", _jsonl([{"prompt_token_ids": [5, 99999]}]), "jsonl",
     "token id 99999 is outside the model's vocabulary of 1024"),
    ("empty-file", b"", "jsonl", ": no prompts"),
    ("empty-prompt", _jsonl([{"prompt": "  "}]), "jsonl", ".jsonl:1: empty prompt"),
    ("empty-ids", _jsonl([{"prompt_token_ids": []}]), "jsonl", ".jsonl:1: empty prompt_token_ids"),
    ("not-utf8", b'{"prompt": "w5 \xff\xfe"}\n', "jsonl", "not UTF-8 text"),
    ("sharegpt-no-turns", json.dumps([{"conversations": [{"from": "gpt", "value": "hi"}]}])
     .encode(), "sharegpt", "no conversation with a non-empty human turn"),
    # vLLM's SpecBench raises a raw KeyError on a row without a category.
    ("spec-bench-no-category", _jsonl([{"turns": ["w5 w6"]}]), "spec_bench",
     ".jsonl:1: no 'category' (Spec-Bench gives every prompt one"),
    ("spec-bench-no-turns", _jsonl([{"category": "qa", "prompt": "w5"}]), "spec_bench",
     ".jsonl:1: expected an object with 'turns', a list of strings"),
    ("speed-bench-no-messages", _jsonl([{"category": "qa", "turns": ["w5"]}]), "speed_bench",
     ".jsonl:1: expected an object with 'messages'"),
    ("category-not-a-string", _jsonl([{"prompt": "w5", "category": 3}]), "jsonl",
     ".jsonl:1: 'category' must be a non-empty string, got 3"),
]


# The CLI as `specbench` runs it, writing at exit which of vLLM and torch it had imported.
CLI_WATCHING_IMPORTS = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(\n"
    "    sorted(m for m in ('vllm', 'torch') if m in sys.modules))))\n"
    "runpy.run_module('harness.cli', run_name='__main__')\n"
)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI_WATCHING_IMPORTS, str(tmp_path / "imported.json"), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def _run(tmp_path: Path, data: dict[str, Any] | str, *extra: str,
         command: str = "run") -> subprocess.CompletedProcess[str]:
    """`specbench COMMAND` on a scenario: a mapping, or the file's text as written."""
    path = tmp_path / "s.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    results = ["--results-dir", str(tmp_path / "results")] if command == "run" else []
    return _cli(tmp_path, command, str(path), *results, *extra)


def _refused(result: subprocess.CompletedProcess[str], fragment: str, tmp_path: Path,
             code: int = 2) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("specbench: error: ") and fragment in lines[0], lines[0]
    runs = tmp_path / "results"
    assert not runs.exists() or not any(runs.iterdir())  # no run folder: nothing launched
    assert json.loads((tmp_path / "imported.json").read_text()) == []  # no vLLM, no torch


@pytest.mark.parametrize(("name", "content", "kind", "fragment"), FILES,
                         ids=[f[0] for f in FILES])
def test_bad_workload_files(tmp_path: Path, scenario_data: dict[str, Any], name: str,
                            content: bytes, kind: str, fragment: str) -> None:
    suffix = ".json" if kind == "sharegpt" else ".jsonl"
    (tmp_path / f"prompts{suffix}").write_bytes(content)
    scenario_data["workload"] = {"kind": kind, "path": f"prompts{suffix}", "num_prompts": 1,
                                 "max_tokens": 8}
    _refused(_run(tmp_path, scenario_data), fragment, tmp_path)


def test_prompt_and_output_must_fit_max_model_len(tmp_path: Path,
                                                  scenario_data: dict[str, Any]) -> None:
    scenario_data["max_model_len"] = 512
    scenario_data["workload"] = {"num_prompts": 4, "input_len": 400, "max_tokens": 400}
    _refused(_run(tmp_path, scenario_data),
             "workload.input_len + workload.max_tokens = 800 exceeds max_model_len 512", tmp_path)


@pytest.mark.parametrize(("run_id", "fragment"), [
    ("../escape", "--run-id '../escape': use a plain name"),
    ("a/b", "--run-id 'a/b': use a plain name"),
])
def test_run_id_must_be_a_plain_name(tmp_path: Path, scenario_data: dict[str, Any],
                                     run_id: str, fragment: str) -> None:
    _refused(_run(tmp_path, scenario_data, "--run-id", run_id), fragment, tmp_path)


def test_existing_run_id_and_unwritable_results(tmp_path: Path,
                                                scenario_data: dict[str, Any]) -> None:
    (tmp_path / "results" / "taken").mkdir(parents=True)
    result = _run(tmp_path, scenario_data, "--run-id", "taken")
    assert result.returncode == 2 and "--run-id taken:" in result.stderr
    assert "already exists" in result.stderr and "Traceback" not in result.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = _cli(tmp_path, "run", str(tmp_path / "s.yaml"), "--results-dir",
                  str(blocker / "results"))
    assert result.returncode == 2 and "--results-dir" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def _folder(tmp_path: Path, name: str, config: dict[str, Any] | str | None,
            weights: bool = True) -> str:
    """A local model folder: config.json (a mapping, raw text, or none) and a weights file."""
    path = tmp_path / name
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(config if isinstance(config, str)
                                          else json.dumps(config))
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    return str(path)


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024,
         "max_position_embeddings": 2048}


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
        text = yaml.safe_dump(data, sort_keys=False)
        if after is None:
            return f"{text}{line}\n"
        assert after in text.splitlines()
        return text.replace(f"{after}\n", f"{after}\n{line}\n", 1)
    return mutate


def _workload_at(path: Any) -> Any:
    """A mutator pointing workload.path at `path(tmp_path)`."""
    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        data["workload"] = {"kind": "jsonl", "path": str(path(tmp_path)), "num_prompts": 2,
                            "max_tokens": 8}
    return mutate


def _folder_at(tmp_path: Path) -> Path:
    (tmp_path / "prompts.jsonl").mkdir()
    return tmp_path / "prompts.jsonl"


def _fifo_at(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "prompts.jsonl")  # no writer: opening it to read would wait for ever
    return tmp_path / "prompts.jsonl"


# 40 x 40: 1600 cells, past the default limit of 1000 (a linked group counts once).
BIG_GRID = {"axes": {"batch_size": list(range(1, 41)), "workload.seed": list(range(40))}}
BIG_LINKED = {"axes": {"workload.seed": list(range(100))},
              "linked": [{"batch_size": list(range(1, 12)), "workload.max_tokens": [8] * 11}]}


def _long_text_prompts(data: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "long.jsonl").write_text(json.dumps({"prompt": " ".join(["w5"] * 600)}) + "\n")
    data["max_model_len"] = 512
    data["workload"] = {"kind": "jsonl", "path": "long.jsonl", "num_prompts": 1,
                        "max_tokens": 16}


# (id, mutation, exit code, fragment of the one line, command)
CASES: list[tuple[str, Any, int, str, str]] = [
    ("engine-unknown-key", _set("engine", {"zz": 3}), 2,
     "engine.zz: not an argument of vLLM 0.32.0's EngineArgs", "run"),
    ("engine-unknown-key-plan", _set("engine", {"zz": 3}), 2,
     "engine.zz: not an argument of vLLM", "plan"),
    ("engine-wrong-type", _set("engine", {"enforce_eager": "maybe-not"}), 2,
     "engine.enforce_eager: expected true or false, got 'maybe-not'", "run"),
    ("engine-wrong-type-plan", _set("engine", {"enforce_eager": "maybe-not"}), 2,
     "engine.enforce_eager: expected true or false", "plan"),
    ("engine-owned-key", _set("engine", {"speculative_config": {}}), 2,
     "engine.speculative_config: set draft", "run"),
    ("engine-out-of-range", _set("engine", {"max_model_len": 8}), 2,
     "engine.max_model_len: 8 is out of range (>= 16)", "run"),
    ("dtype", _set("dtype", "bf16"), 2, "dtype: 'bf16' is not one vLLM 0.32.0 accepts", "run"),
    ("variant-engine-typo", _set("variants.opt.engine", {"enforce_eagr": True}), 2,
     "variants.opt.engine.enforce_eagr: not an argument of vLLM 0.32.0's EngineArgs; did you "
     "mean 'enforce_eager'?", "run"),
    ("variant-dtype", _set("variants.opt.engine", {"dtype": "float8"}), 2,
     "variants.opt.engine.dtype: 'float8' is not one vLLM", "run"),
    ("variant-tp-beyond-cores", _set("variants.opt.engine", {"tensor_parallel_size": 64}), 3,
     "tensor_parallel_size: 64 (variant opt) needs 64 CPU cores", "run"),
    ("draft-config-unknown", _set("draft.config", {"prompt_lookup_maxx": 3}), 2,
     "draft.config.prompt_lookup_maxx: not an argument of vLLM 0.32.0's SpeculativeConfig",
     "run"),
    ("draft-config-internal", _set("draft.config", {"target_model_config": {}}), 2,
     "draft.config.target_model_config: vLLM fills this", "run"),
    ("draft-config-type", _set("draft.config", {"disable_padded_drafter_batch": "no"}), 2,
     "draft.config.disable_padded_drafter_batch: expected true or false", "run"),
    ("variant-spec-type", _set("variants.opt.speculative_config",
                               {"num_speculative_tokens": "3"}), 2,
     "variants.opt.speculative_config.num_speculative_tokens: expected an integer", "run"),
    ("variant-spec-range", _set("variants.opt.speculative_config",
                                {"num_speculative_tokens": 0}), 2,
     "variants.opt.speculative_config.num_speculative_tokens: 0 is out of range", "run"),
    ("model-no-config", _set("model", lambda t: _folder(t, "m", None)), 2,
     "has no config.json, so it is not a model folder vLLM can load", "run"),
    ("model-config-not-json", _set("model", lambda t: _folder(t, "m", "{oops")), 2,
     "config.json is not readable JSON", "run"),
    ("model-no-weights", _set("model", lambda t: _folder(t, "m", LLAMA, weights=False)), 2,
     "has no weights (*.safetensors", "run"),
    ("model-no-architectures", _set("model", lambda t: _folder(t, "m", {"vocab_size": 9})), 2,
     "names no architectures", "run"),
    ("model-missing", _set("model", "no-such-model"), 2,
     "model: 'no-such-model' is neither a built-in model", "plan"),
    ("draft-not-medusa", _set("draft.model", "tiny-llama-eagle"), 2,
     "draft.model: tiny-llama-eagle is a LlamaForCausalLM, not a Medusa head", "run"),
    ("draft-medusa-for-eagle", _both(_unswapped, _set("draft.method", "eagle")), 2,
     "draft.model (variant base): tiny-llama-medusa is a Medusa head; method eagle needs a "
     "causal-LM draft",
     "run"),
    ("draft-folder-wrong-kind", _set("draft.model", lambda t: _folder(t, "d", LLAMA)), 2,
     "is a LlamaForCausalLM, not a Medusa head", "run"),
    ("draft-vocab-differs", _set("draft.model", lambda t: _folder(
        t, "d", {"model_type": "medusa", "num_heads": 3, "vocab_size": 32000})), 2,
     "vocab_size 32000 differs from the target's 1024", "run"),
    ("medusa-heads", _set("draft.num_speculative_tokens", 5), 2,
     "num_speculative_tokens: 5 is more than the 3 heads of the Medusa draft", "run"),
    ("text-prompt-too-long", _long_text_prompts, 2,
     "(at least 600 tokens) + workload.max_tokens = 616 exceeds max_model_len 512", "run"),
    ("patch-not-importable", _set("variants.opt", {"patch": "tests.patches.nope:install"}), 2,
     "variants.opt.patch: module 'tests.patches.nope' is not importable by ", "run"),
    ("patch-not-an-import-path", _set("variants.opt", {"patch": "just_a_name"}), 2,
     "variants.opt.patch: expected 'package.module:function', got 'just_a_name'", "run"),
    ("patch-and-swap", _set("variants.opt.patch", "tests.patches.medusa_zero_drafts:install"),
     2, "variants.opt: implementation and patch both swap code: choose one", "run"),
    ("patch-no-such-function", _set("variants.opt", {
        "patch": "tests.patches.medusa_zero_drafts:instal"}), 2,
     "variants.opt.patch: module 'tests.patches.medusa_zero_drafts' has no function 'instal'; "
     "did you mean 'install'?", "run"),
    ("patch-not-callable", _set("variants.opt", {
        "patch": "tests.patches.wrong_shapes:NOT_A_FUNCTION"}), 2,
     "variants.opt.patch: tests.patches.wrong_shapes:NOT_A_FUNCTION is 3 (type int), not a "
     "function", "run"),
    ("patch-two-arguments", _set("variants.opt", {
        "patch": "tests.patches.wrong_shapes:two_arguments"}), 2,
     "variants.opt.patch: tests.patches.wrong_shapes:two_arguments(ctx: 'Any', extra: 'Any') "
     "-> 'None' cannot be called with one argument, the context", "run"),
    ("patch-import-fails", _set("variants.opt", {
        "patch": "tests.patches.fails_to_import:install"}), 2,
     "variants.opt.patch: importing module 'tests.patches.fails_to_import' under ",
     "run"),
    ("workload-file-missing", _set("workload", {"kind": "jsonl", "path": "nope.jsonl",
                                                "num_prompts": 2, "max_tokens": 8}), 2,
     "workload.path: file not found: ", "plan"),
    ("workload-path-a-folder", _workload_at(_folder_at), 2,
     "prompts.jsonl is a directory; prompts must come from a regular file", "plan"),
    ("workload-path-dev-zero", _workload_at(lambda t: "/dev/zero"), 2,
     "workload.path: /dev/zero is not a regular file (a character device); prompts must come "
     "from a regular file, which every launch reads again to the same end", "plan"),
    ("workload-path-fifo", _workload_at(_fifo_at), 2,
     "prompts.jsonl is not a regular file (a FIFO); prompts must come from a regular file",
     "run"),
    ("key-twice", _written_twice("batch_size: 64"), 2,
     "s.yaml:19: key 'batch_size' is written twice (lines 4 and 19); YAML would keep only the "
     "second, so remove one", "plan"),
    ("key-twice-nested", _written_twice("  max_tokens: 64", after="  max_tokens: 8"), 2,
     "s.yaml:13: key 'workload.max_tokens' is written twice (lines 12 and 13)", "run"),
    ("key-twice-in-a-variant", _written_twice("    implementation: medusa-proposer:baseline"),
     2, "s.yaml:19: key 'variants.opt.implementation' is written twice (lines 18 and 19)",
     "run"),
    ("sweep-too-many-cells", _set("sweep", BIG_GRID), 2,
     "sweep: 1600 cells (batch_size 40 x workload.seed 40) is more than the limit of 1000 "
     "cells; make the grid smaller, or raise the limit on purpose (--max-cells N)", "plan"),
    ("sweep-too-many-cells-run", _set("sweep", BIG_LINKED), 2,
     "sweep: 1100 cells (workload.seed 100 x batch_size+workload.max_tokens 11) is more than "
     "the limit of 1000 cells", "run"),
    ("beyond-max-positions", _set("workload", {"num_prompts": 2, "input_len": 2000,
                                               "max_tokens": 100}), 2,
     "= 2100 exceeds the model's max_position_embeddings 2048 (max_model_len unset)", "run"),
]


@pytest.mark.parametrize(("name", "mutate", "code", "fragment", "command"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_scenarios(tmp_path: Path, scenario_data: dict[str, Any], name: str, mutate: Any,
                       code: int, fragment: str, command: str) -> None:
    text = mutate(scenario_data, tmp_path)  # the file's text, where a mapping cannot say it
    _refused(_run(tmp_path, text if isinstance(text, str) else scenario_data, command=command),
             fragment, tmp_path, code)


DAMAGE: list[tuple[str, bytes | None, str]] = [
    ("missing", None, "no specbench results here (no manifest.json)"),
    ("empty", b"", "manifest.json: damaged, not JSON"),
    ("truncated", b'{"schema_version": 3, "status": "comp', "manifest.json: damaged, not JSON"),
    ("binary", b"\xff\xfe\x00garbage", "manifest.json: damaged, not JSON (not UTF-8)"),
    ("a-list", b"[1, 2]", "manifest.json: damaged, expected a JSON object"),
    ("no-scenario", b'{"schema_version": 3, "status": "complete", "runs": []}',
     "manifest.json: damaged, its 'scenario' is missing"),
    ("scenario-string", b'{"schema_version": 3, "scenario": "x"}',
     "manifest.json: damaged, its 'scenario' is a str, not a dict"),
    ("no-version", b'{"scenario": {}}', "no integer schema_version"),
]


@pytest.mark.parametrize("command", ["report", "compare", "gate"])
@pytest.mark.parametrize(("name", "content", "fragment"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_results_folder_is_one_line(tmp_path: Path, command: str, name: str,
                                            content: bytes | None, fragment: str) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "runs").mkdir(parents=True)
    if content is not None:
        (run_dir / "manifest.json").write_bytes(content)
    args = [str(run_dir)] * (2 if command == "compare" else 1)
    result = _cli(tmp_path, command, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("specbench: error: ") and fragment in lines[0], lines[0]


@pytest.mark.parametrize(("python", "fragment"), [
    ("/nonexistent/bin/python", "variants.opt.python: /nonexistent/bin/python: no such "
     "interpreter"),
    ("/usr/bin/python3", "variants.opt.python: /usr/bin/python3 has no vLLM (import vllm "
     "finds nothing)"),
])
def test_another_build_that_cannot_run_is_refused(tmp_path: Path, scenario_data: dict[str, Any],
                                                  python: str, fragment: str) -> None:
    if python.startswith("/usr") and not Path(python).is_file():
        pytest.skip(f"{python} is not on this machine")
    scenario_data["variants"]["opt"]["python"] = python
    _refused(_run(tmp_path, scenario_data), fragment, tmp_path)
