"""Bad input is refused before any engine starts: one line naming the field or file and line,
exit 2, no traceback, and no run folder (so no worker was ever launched)."""

from __future__ import annotations

import json
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
]


def _run(tmp_path: Path, data: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path), "--results-dir",
         str(tmp_path / "results"), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def _refused(result: subprocess.CompletedProcess[str], fragment: str, tmp_path: Path) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("specbench: error: ") and fragment in lines[0], lines[0]
    runs = tmp_path / "results"
    assert not runs.exists() or not any(runs.iterdir())  # no run folder: nothing launched


@pytest.mark.parametrize(("name", "content", "kind", "fragment"), FILES,
                         ids=[f[0] for f in FILES])
def test_bad_workload_files(tmp_path: Path, scenario_data: dict[str, Any], name: str,
                            content: bytes, kind: str, fragment: str) -> None:
    suffix = ".jsonl" if kind == "jsonl" else ".json"
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
    path = tmp_path / "s.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path), "--results-dir",
         str(blocker / "results")], capture_output=True, text=True, cwd=ROOT, timeout=120,
        check=False)
    assert result.returncode == 2 and "--results-dir" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
