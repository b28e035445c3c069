"""Plan expansion: launch order, merged engine arguments, forced implementation switches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import parse_scenario
from harness.plan.plan import expand_plan, launch_order
from tests.conftest import ROOT


def test_abba_interleaving(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 4
    order = launch_order(parse_scenario(scenario_data))
    assert order == [("base", 0), ("opt", 0), ("opt", 1), ("base", 1),
                     ("base", 2), ("opt", 2), ("opt", 3), ("base", 3)]


def test_sequential_and_shuffle(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 3
    scenario_data["interleave"] = "sequential"
    assert launch_order(parse_scenario(scenario_data)) == [
        ("base", 0), ("base", 1), ("base", 2), ("opt", 0), ("opt", 1), ("opt", 2)]
    scenario_data["interleave"] = "shuffle"
    a = launch_order(parse_scenario(scenario_data))
    assert a == launch_order(parse_scenario(scenario_data))  # seeded
    assert sorted(a) == sorted((v, r) for v in ("base", "opt") for r in range(3))


def test_run_specs(scenario_data: dict[str, Any]) -> None:
    scenario_data["repeats"] = 2
    scenario_data["engine"] = {"enforce_eager": True}
    scenario_data["env"] = {"A": "1"}
    scenario_data["variants"]["opt"]["env"] = {"A": "2", "B": "3"}
    scenario_data["variants"]["opt"]["engine"] = {"enforce_eager": False}
    plan = expand_plan(parse_scenario(scenario_data))
    assert [r.run_key for r in plan.runs] == ["base.r0", "opt.r0"]
    base, opt = plan.runs
    assert base.engine_args["max_num_seqs"] == 4
    assert base.engine_args["disable_log_stats"] is False
    assert base.engine_args["enable_prefix_caching"] is False
    assert base.engine_args["speculative_config"] == {
        "method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 3}
    assert base.engine_args["enforce_eager"] is True and opt.engine_args["enforce_eager"] is False
    assert base.env == {"A": "1"} and opt.env == {"A": "2", "B": "3"}
    assert base.implementation == "medusa-proposer:baseline" and base.baseline
    assert opt.repeats == 2


def test_tp_argmax_choice_sets_the_config_switch(scenario_data: dict[str, Any]) -> None:
    scenario_data["draft"] = {"method": "eagle", "model": "tiny-llama-eagle",
                              "num_speculative_tokens": 2}
    scenario_data["variants"] = {
        "gather": {"baseline": True, "implementation": "tp-argmax-reduction:baseline"},
        "local": {"implementation": "tp-argmax-reduction:optimized"},
    }
    scenario_data["design"] = "launch-per-arm"
    plan = expand_plan(parse_scenario(scenario_data))
    flags = {r.variant: r.engine_args["speculative_config"]["use_local_argmax_reduction"]
             for r in plan.runs}
    assert flags == {"gather": False, "local": True}
    # One engine for both arms starts as the baseline is configured; the arms switch at run
    # time inside vLLM's processes.
    scenario_data["design"] = "auto"
    [shared] = expand_plan(parse_scenario(scenario_data)).runs
    assert shared.design == "one-engine"
    assert shared.engine_args["speculative_config"]["use_local_argmax_reduction"] is False
    assert [a.implementation for a in shared.arms] == ["tp-argmax-reduction:baseline",
                                                      "tp-argmax-reduction:optimized"]


def test_a_patch_runs_in_its_own_engine_unless_switchable(scenario_data: dict[str, Any]) -> None:
    from harness.errors import ScenarioError

    scenario_data["variants"] = {"base": {"baseline": True},
                                 "idea": {"patch": "my_idea:install"}}
    plan = expand_plan(parse_scenario(scenario_data))
    assert plan.design == "launch-per-arm"
    assert [(r.variant, r.patch) for r in plan.runs] == [("base", None),
                                                        ("idea", "my_idea:install")]
    scenario_data["variants"]["idea"]["switchable"] = True
    [shared] = expand_plan(parse_scenario(scenario_data)).runs
    assert shared.design == "one-engine" and shared.patch == "my_idea:install"
    arms = {a.variant: (a.implementation, a.switch_to) for a in shared.arms}
    assert arms == {"base": (None, "patch:off"),
                    "idea": ("patch:my_idea:install", "patch:on")}
    scenario_data["variants"]["base"]["switchable"] = True
    with pytest.raises(ScenarioError, match="switchable: applies to a patch; this variant "
                       "has none"):
        parse_scenario(scenario_data)


def test_worker_spec_is_versioned(tmp_path: Path, scenario_data: dict[str, Any]) -> None:
    """The worker protocol's spec is a model with a version; a worker of another specbench
    (a variant's environment) answers a spec it cannot read with a failed result that says so."""
    from harness.plan.plan import WORKER_SPEC_VERSION, WorkerSpec
    from harness.results.records import WorkerResult

    [run] = expand_plan(parse_scenario(scenario_data)).runs
    spec = WorkerSpec(run=run, base_dir=str(tmp_path))
    assert spec.model_dump(mode="json")["spec_version"] == WORKER_SPEC_VERSION
    raw = {**spec.model_dump(mode="json"), "spec_version": WORKER_SPEC_VERSION + 1}
    (tmp_path / "spec.json").write_text(json.dumps(raw))
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.engine.worker", "--spec", str(tmp_path / "spec.json"),
         "--out", str(out)], env={**os.environ, "SPECBENCH_IMPL_REPORT_DIR": str(tmp_path)},
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    result = WorkerResult.model_validate_json(out.read_text())
    assert result.run_key == run.run_key and result.status == "failed"
    assert result.error is not None and result.error.startswith(
        f"worker spec version {WORKER_SPEC_VERSION + 1}, but this worker")
    assert "install the same specbench in this environment" in result.error
