"""Scenario validation: every bad input is one line naming the field, and the CLI exits
non-zero without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.scenario import (
    load_scenario,
    parse_scenario,
    scenario_hash,
    scenario_json_schema,
)
from harness.config.userfiles import load_yaml
from harness.errors import ScenarioError
from tests.conftest import ROOT, SCENARIOS


def _error(data: Any) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "s.yaml")
    return str(info.value)


def test_minimal_is_valid(scenario_data: dict[str, Any]) -> None:
    s = parse_scenario(scenario_data)
    assert s.baseline == "base"
    assert s.candidates == ["opt"]
    assert s.rounds == 1 and s.repeats == 1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(modle="x"), "modle: Extra inputs are not permitted"),
        (
            lambda d: d["variants"]["opt"].update(implementaton="x"),
            "variants.opt.implementaton: Extra inputs are not permitted",
        ),
        (lambda d: d.update(batch_size="many"), "batch_size: Input should be a valid integer"),
        (lambda d: d.update(batch_size=0), "batch_size: Input should be greater than or equal"),
        (lambda d: d["workload"].pop("max_tokens"), "workload.max_tokens: Field required"),
        (lambda d: d["draft"].update(method=""), "draft.method: String should have at least"),
        (
            lambda d: d["variants"]["opt"].update(baseline=True),
            "variants: exactly one variant must have baseline: true (found 2",
        ),
        (
            lambda d: d["variants"]["base"].update(baseline=False),
            "exactly one variant must have baseline: true (found 0)",
        ),
        (
            lambda d: d["variants"]["opt"].update(implementation="medusa-proposer:fast"),
            "variants.opt.implementation: unknown choice 'fast'",
        ),
        (
            lambda d: d["variants"]["opt"].update(implementation="warp-drive:on"),
            "unknown implementation 'warp-drive'",
        ),
        (
            lambda d: d["variants"]["opt"].update(implementation="tp-argmax-reduction:optimized"),
            "variants.opt.implementation: tp-argmax-reduction applies to draft method eagle",
        ),
        (lambda d: d["draft"].pop("model"), "draft: method 'medusa' needs"),
        (lambda d: d["workload"].update(kind="jsonl"), "workload: kind 'jsonl' needs"),
        (lambda d: d.update(tensor_parallel_size=-1), "tensor_parallel_size: Input should be"),
        (lambda d: d.update(engine={"max_num_seqs": 3}), "engine.max_num_seqs: set batch_size"),
        (lambda d: d.update(name="bad name!"), "name: use letters"),
    ],
)
def test_bad_input_names_the_field(
    scenario_data: dict[str, Any], mutate: Any, expected: str
) -> None:
    mutate(scenario_data)
    message = _error(scenario_data)
    assert message.startswith("s.yaml: ")
    assert expected in message
    assert "\n" not in message


def test_contradicting_override_is_refused(scenario_data: dict[str, Any]) -> None:
    scenario_data["draft"] = {
        "method": "eagle",
        "model": "tiny-llama-eagle",
        "num_speculative_tokens": 3,
    }
    scenario_data["variants"] = {
        "base": {
            "baseline": True,
            "implementation": "tp-argmax-reduction:baseline",
            "speculative_config": {"use_local_argmax_reduction": True},
        },
        "opt": {"implementation": "tp-argmax-reduction:optimized"},
    }
    assert (
        "variants.base.speculative_config.use_local_argmax_reduction: True contradicts"
        in _error(scenario_data)
    )


def test_top_level_must_be_mapping() -> None:
    assert "expected a mapping" in _error(["a", "b"])


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml:\d+:\d+: malformed YAML"):
        load_scenario(bad)


def test_missing_file() -> None:
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario("/nonexistent/scenario.yaml")


def test_a_scenario_that_is_no_regular_file_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A folder, a device or a FIFO is refused before it is opened (reading /dev/zero or a
    FIFO without a writer would never return)."""
    os.mkfifo(tmp_path / "fifo.yaml")
    for path, what in (
        (tmp_path, "is a directory"),
        (Path("/dev/zero"), "is not a regular file (a character device)"),
        (tmp_path / "fifo.yaml", "is not a regular file (a FIFO)"),
    ):
        with pytest.raises(ScenarioError) as info:
            load_scenario(path)
        assert (
            str(info.value) == f"{path}: cannot read it as a scenario: it {what} (a "
            "scenario is a YAML file)"
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", "s.yaml:4: key 'b.c' is written twice (lines 3 and 4)"),
        (
            "sweep:\n  linked:\n  - model: [a]\n    model: [b]\n",
            "s.yaml:4: key 'sweep.linked.0.model' is written twice (lines 3 and 4)",
        ),
        ("1: a\n0x1: b\n", "s.yaml:2: key '0x1' is written twice (lines 1 and 2)"),  # one int
    ],
)
def test_a_key_written_twice_names_both_lines(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path.parent}/{message}"), str(info.value)


def test_merge_keys_still_override(tmp_path: Path) -> None:
    """'<<' merges a mapping whose keys the mapping may then set again: YAML's own overriding,
    not a key written twice."""
    assert load_yaml("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  x: 3\n", "s.yaml") == {
        "base": {"x": 1, "y": 2},
        "mine": {"x": 3, "y": 2},
    }


def test_hash_ignores_formatting(tmp_path: Path, scenario_data: dict[str, Any]) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(scenario_data, sort_keys=True))
    b.write_text(yaml.safe_dump(scenario_data, sort_keys=False, default_flow_style=True))
    assert scenario_hash(load_scenario(a)) == scenario_hash(load_scenario(b))
    scenario_data["workload"]["seed"] = 7
    b.write_text(yaml.safe_dump(scenario_data))
    assert scenario_hash(load_scenario(a)) != scenario_hash(load_scenario(b))


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path) -> None:
    s = load_scenario(path)
    assert s.draft is not None


def test_gpu_scenarios_reproduce_the_seed_setups() -> None:
    medusa = load_scenario(SCENARIOS / "gpu-mistral-medusa.yaml")
    assert medusa.device == "cuda" and medusa.batch_size == 32
    assert medusa.workload.max_tokens == 256 and medusa.workload.num_prompts == 64
    assert medusa.draft is not None and medusa.draft.method == "medusa"
    eagle = load_scenario(SCENARIOS / "gpu-llama4-maverick-eagle-tp8.yaml")
    assert eagle.device == "cuda" and eagle.tensor_parallel_size == 8
    assert eagle.workload.kind == "sharegpt" and eagle.workload.num_prompts == 1000
    assert eagle.draft is not None and eagle.draft.num_speculative_tokens == 5
    assert eagle.engine["compilation_config"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"


def test_schema_lists_descriptions() -> None:
    schema = scenario_json_schema()
    assert schema["additionalProperties"] is False
    assert "description" in schema["properties"]["batch_size"]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_cli_bad_scenario_is_one_line_no_traceback(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    scenario_data["variants"]["opt"]["implementation"] = "medusa-proposer:nope"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data))
    for command in ("run", "plan"):
        # cwd: where `run` would write results/ by default, so the check below can fail.
        result = _cli(command, str(path), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert "variants.opt.implementation" in lines[0] and "unknown choice 'nope'" in lines[0]
    assert not (tmp_path / "results").exists()


def test_cli_missing_model_path(tmp_path: Path, scenario_data: dict[str, Any]) -> None:
    scenario_data["model"] = "./no-such-model"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data))
    result = _cli("run", str(path), "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"specbench: error: model: './no-such-model' is neither a built-in model (specbench "
        f"models lists them) nor an existing folder (looked for "
        f"{tmp_path / 'no-such-model'})"
    ]
    assert not (tmp_path / "results").exists()


def test_cli_tp_larger_than_machine(tmp_path: Path, scenario_data: dict[str, Any]) -> None:
    scenario_data["tensor_parallel_size"] = 64
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data))
    result = _cli("run", str(path), "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 3
    [line] = result.stderr.strip().splitlines()
    assert "tensor_parallel_size: 64 needs 64 CPU cores" in line


@pytest.mark.parametrize("name", ["gpu-mistral-medusa.yaml", "gpu-llama4-maverick-eagle-tp8.yaml"])
def test_cli_gpu_scenario_refused_here(tmp_path: Path, name: str) -> None:
    result = _cli("run", str(SCENARIOS / name), "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 3, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "device: cuda" in line and "found GPUs: none" in line
    assert not (tmp_path / "results").exists()


def test_cli_plan_and_schema_need_no_engine() -> None:
    # plan/schema/--help must not import torch or vllm (fast start, engine-free machines).
    code = (
        "import sys; from harness.cli import main; "
        f"main(['plan', '{SCENARIOS / 'cpu-medusa-proposer.yaml'}']); main(['schema']); "
        "bad = [m for m in ('torch', 'vllm', 'pandas', 'scipy') if m in sys.modules]; "
        "print('LOADED', bad)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert "LOADED []" in result.stdout


@pytest.mark.parametrize("args", [["report"], ["run"], ["run", "a", "--bogus"], ["nope"]])
def test_cli_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    result = _cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


def test_cli_missing_results_folder(tmp_path: Path) -> None:
    result = _cli("report", str(tmp_path / "none"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"specbench: error: {tmp_path / 'none'}: no specbench results here (no manifest.json)"
    ]


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"rejection_sample_method": "synthetic"}, "exactly one of"),
        (
            {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.6, 0.1]},
            "non-increasing",
        ),
        (
            {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.4]},
            "needs 3",
        ),
        (
            {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 5},
            r"in \[1, 4\]",
        ),
        ({"synthetic_acceptance_length": 2}, "only with rejection_sample_method: synthetic"),
    ],
)
def test_synthetic_acceptance_is_checked_before_launch(
    scenario_data: dict[str, Any], config: dict[str, Any], error: str
) -> None:
    scenario_data["draft"]["config"] = config
    with pytest.raises(ScenarioError, match=error):
        parse_scenario(scenario_data)


def test_synthetic_acceptance_is_said_and_relaxes_parity(scenario_data: dict[str, Any]) -> None:
    scenario_data["draft"]["config"] = {
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.6, 0.4, 0.2],
    }
    scenario = parse_scenario(scenario_data)
    from harness.analysis.setup import Setup
    from harness.present.plan_text import setup_line

    setup = setup_line(Setup.of(scenario))
    assert "acceptance SYNTHETIC (per-position rates 0.6, 0.4, 0.2)" in setup
    assert not scenario.expects_identical_outputs("opt")
