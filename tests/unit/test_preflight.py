"""Bad input is refused before any engine starts: one line naming the field or file and line,
exit 2 (3 for hardware the machine lacks), no traceback, no run folder (so no worker was ever
launched), and neither vLLM nor torch imported by specbench."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ScenarioError
from testkit.bad_inputs import CASES, FILES
from tests.conftest import ROOT

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
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _run(
    tmp_path: Path, data: dict[str, Any] | str, *extra: str, command: str = "run"
) -> subprocess.CompletedProcess[str]:
    """`specbench COMMAND` on a scenario: a mapping, or the file's text as written."""
    path = tmp_path / "s.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    results = ["--results-dir", str(tmp_path / "results")] if command == "run" else []
    return _cli(tmp_path, command, str(path), *results, *extra)


def _refused(
    result: subprocess.CompletedProcess[str], fragment: str, tmp_path: Path, code: int = 2
) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("specbench: error: ") and fragment in lines[0], lines[0]
    runs = tmp_path / "results"
    assert not runs.exists() or not any(runs.iterdir())  # no run folder: nothing launched
    assert json.loads((tmp_path / "imported.json").read_text()) == []  # no vLLM, no torch


@pytest.mark.parametrize(("name", "content", "kind", "fragment"), FILES, ids=[f[0] for f in FILES])
def test_bad_workload_files(
    tmp_path: Path,
    scenario_data: dict[str, Any],
    name: str,
    content: bytes,
    kind: str,
    fragment: str,
) -> None:
    suffix = ".json" if kind == "sharegpt" else ".jsonl"
    (tmp_path / f"prompts{suffix}").write_bytes(content)
    scenario_data["workload"] = {
        "kind": kind,
        "path": f"prompts{suffix}",
        "num_prompts": 1,
        "max_tokens": 8,
    }
    _refused(_run(tmp_path, scenario_data), fragment, tmp_path)


def test_prompt_and_output_must_fit_max_model_len(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    scenario_data["max_model_len"] = 512
    scenario_data["workload"] = {"num_prompts": 4, "input_len": 400, "max_tokens": 400}
    _refused(
        _run(tmp_path, scenario_data),
        "workload.input_len + workload.max_tokens = 800 exceeds max_model_len 512",
        tmp_path,
    )


@pytest.mark.parametrize(
    ("run_id", "fragment"),
    [
        ("../escape", "--run-id '../escape': use a plain name"),
        ("a/b", "--run-id 'a/b': use a plain name"),
    ],
)
def test_run_id_must_be_a_plain_name(
    tmp_path: Path, scenario_data: dict[str, Any], run_id: str, fragment: str
) -> None:
    _refused(_run(tmp_path, scenario_data, "--run-id", run_id), fragment, tmp_path)


def test_existing_run_id_and_unwritable_results(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    (tmp_path / "results" / "taken").mkdir(parents=True)
    result = _run(tmp_path, scenario_data, "--run-id", "taken")
    assert result.returncode == 2 and "--run-id taken:" in result.stderr
    assert "already exists" in result.stderr and "Traceback" not in result.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = _cli(
        tmp_path, "run", str(tmp_path / "s.yaml"), "--results-dir", str(blocker / "results")
    )
    assert result.returncode == 2 and "--results-dir" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("name", "mutate", "code", "fragment", "command"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_scenarios(
    tmp_path: Path,
    scenario_data: dict[str, Any],
    name: str,
    mutate: Any,
    code: int,
    fragment: str,
    command: str,
) -> None:
    text = mutate(scenario_data, tmp_path)  # the file's text, where a mapping cannot say it
    _refused(
        _run(tmp_path, text if isinstance(text, str) else scenario_data, command=command),
        fragment,
        tmp_path,
        code,
    )


DAMAGE: list[tuple[str, bytes | None, str]] = [
    ("missing", None, "no specbench results here (no manifest.json)"),
    ("empty", b"", "manifest.json: damaged, not JSON"),
    ("truncated", b'{"schema_version": 3, "status": "comp', "manifest.json: damaged, not JSON"),
    ("binary", b"\xff\xfe\x00garbage", "manifest.json: damaged, not JSON (not UTF-8)"),
    ("a-list", b"[1, 2]", "manifest.json: damaged, expected a JSON object"),
    (
        "no-scenario",
        b'{"schema_version": 3, "status": "complete", "runs": []}',
        "manifest.json: damaged, its 'scenario' is missing",
    ),
    (
        "scenario-string",
        b'{"schema_version": 3, "scenario": "x"}',
        "manifest.json: damaged, its 'scenario' is a str, not a dict",
    ),
    ("no-version", b'{"scenario": {}}', "no integer schema_version"),
]


@pytest.mark.parametrize("command", ["report", "compare", "gate"])
@pytest.mark.parametrize(("name", "content", "fragment"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_results_folder_is_one_line(
    tmp_path: Path, command: str, name: str, content: bytes | None, fragment: str
) -> None:
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


@pytest.mark.parametrize(
    ("python", "fragment"),
    [
        (
            "/nonexistent/bin/python",
            "variants.opt.python: /nonexistent/bin/python: no such interpreter",
        ),
        (
            "/usr/bin/python3",
            "variants.opt.python: /usr/bin/python3 has no vLLM (import vllm finds nothing)",
        ),
    ],
)
def test_another_build_that_cannot_run_is_refused(
    tmp_path: Path, scenario_data: dict[str, Any], python: str, fragment: str
) -> None:
    if python.startswith("/usr") and not Path(python).is_file():
        pytest.skip(f"{python} is not on this machine")
    scenario_data["variants"]["opt"]["python"] = python
    _refused(_run(tmp_path, scenario_data), fragment, tmp_path)


GPUS = [
    {"index": str(i), "uuid": f"GPU-{i}a{i}b-0000", "name": f"NVIDIA H200 #{i}"} for i in range(4)
]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, ["0", "1", "2", "3"]),  # unset: every GPU
        ("2,0", ["2", "0"]),  # the order CUDA numbers them in
        ("GPU-1a1b", ["1"]),  # a UUID prefix
        ("3,7,1", ["3"]),  # CUDA stops at the first entry naming no GPU
        ("", []),
        ("-1", []),
        ("1,1", ["1"]),  # a GPU named twice: CUDA refuses the rest
    ],
)
def test_the_gpus_a_run_may_use_are_those_cuda_visible_devices_leaves(
    visible: str | None, expected: list[str]
) -> None:
    """nvidia-smi lists every GPU of the machine; a run on 2 of 8 must count 2."""
    from harness.env import visible_gpus

    assert [g["index"] for g in visible_gpus(GPUS, visible)] == expected


def test_a_hub_model_in_the_local_cache_is_checked_before_any_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU scenario's Hub id is read from the local Hugging Face cache where it is there
    (nothing downloaded): a draft whose vocabulary differs from the target's is refused in one
    line. A Hub id the cache lacks is left to vLLM, as before."""
    import huggingface_hub.constants

    from harness.plan.preflight import model_config

    hub = tmp_path / "hub"
    for repo, config in (
        ("org/target", {"architectures": ["LlamaForCausalLM"], "vocab_size": 32000}),
        ("org/noarch", {"vocab_size": 32000}),
    ):
        folder = hub / f"models--{repo.replace('/', '--')}"
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text("abc123")
        snapshot = folder / "snapshots" / "abc123"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    found = model_config("org/target", "model", tmp_path, "cuda", target=True)
    assert found is not None and found["vocab_size"] == 32000
    with pytest.raises(ScenarioError, match="names no architectures"):
        model_config("org/noarch", "model", tmp_path, "cuda", target=True)
    assert model_config("org/not-cached", "model", tmp_path, "cuda", target=True) is None
    with pytest.raises(ScenarioError, match="neither a built-in model"):
        model_config("org/target", "model", tmp_path, "cpu", target=True)
