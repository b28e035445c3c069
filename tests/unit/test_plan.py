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
    assert order == [
        ("base", 0),
        ("opt", 0),
        ("opt", 1),
        ("base", 1),
        ("base", 2),
        ("opt", 2),
        ("opt", 3),
        ("base", 3),
    ]


def test_sequential_and_shuffle(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 3
    scenario_data["interleave"] = "sequential"
    assert launch_order(parse_scenario(scenario_data)) == [
        ("base", 0),
        ("base", 1),
        ("base", 2),
        ("opt", 0),
        ("opt", 1),
        ("opt", 2),
    ]
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
        "method": "medusa",
        "model": "tiny-llama-medusa",
        "num_speculative_tokens": 3,
    }
    assert base.engine_args["enforce_eager"] is True and opt.engine_args["enforce_eager"] is False
    assert base.env == {"A": "1"} and opt.env == {"A": "2", "B": "3"}
    assert base.implementation == "medusa-proposer:baseline" and base.baseline
    assert opt.repeats == 2


def test_tp_argmax_choice_sets_the_config_switch(scenario_data: dict[str, Any]) -> None:
    scenario_data["draft"] = {
        "method": "eagle",
        "model": "tiny-llama-eagle",
        "num_speculative_tokens": 2,
    }
    scenario_data["variants"] = {
        "gather": {"baseline": True, "implementation": "tp-argmax-reduction:baseline"},
        "local": {"implementation": "tp-argmax-reduction:optimized"},
    }
    scenario_data["design"] = "launch-per-arm"
    plan = expand_plan(parse_scenario(scenario_data))
    flags = {
        r.variant: r.engine_args["speculative_config"]["use_local_argmax_reduction"]
        for r in plan.runs
    }
    assert flags == {"gather": False, "local": True}
    # One engine for both arms starts as the baseline is configured; the arms switch at run
    # time inside vLLM's processes.
    scenario_data["design"] = "auto"
    [shared] = expand_plan(parse_scenario(scenario_data)).runs
    assert shared.design == "one-engine"
    assert shared.engine_args["speculative_config"]["use_local_argmax_reduction"] is False
    assert [a.implementation for a in shared.arms] == [
        "tp-argmax-reduction:baseline",
        "tp-argmax-reduction:optimized",
    ]


def test_a_patch_runs_in_its_own_engine_unless_switchable(scenario_data: dict[str, Any]) -> None:
    from harness.errors import ScenarioError

    scenario_data["variants"] = {"base": {"baseline": True}, "idea": {"patch": "my_idea:install"}}
    plan = expand_plan(parse_scenario(scenario_data))
    assert plan.design == "launch-per-arm"
    assert [(r.variant, r.patch) for r in plan.runs] == [
        ("base", None),
        ("idea", "my_idea:install"),
    ]
    scenario_data["variants"]["idea"]["switchable"] = True
    [shared] = expand_plan(parse_scenario(scenario_data)).runs
    assert shared.design == "one-engine" and shared.patch == "my_idea:install"
    arms = {a.variant: (a.implementation, a.switch_to) for a in shared.arms}
    assert arms == {"base": (None, "patch:off"), "idea": ("patch:my_idea:install", "patch:on")}
    scenario_data["variants"]["base"]["switchable"] = True
    with pytest.raises(
        ScenarioError, match="switchable: applies to a patch; this variant has none"
    ):
        parse_scenario(scenario_data)


def test_a_patch_every_arm_carries_is_installed_in_the_shared_engine(
    scenario_data: dict[str, Any],
) -> None:
    """The same patch in every arm, the baseline's included, switchable or not: one engine
    with it installed and on in every arm (each arm's passes prove it ran). It was planned
    as one engine without the patch, and the first switch failed in vLLM's worker."""
    same = {"patch": "common_fix:install"}
    scenario_data["variants"] = {"base": {"baseline": True, **same}, "other": dict(same)}
    [shared] = expand_plan(parse_scenario(scenario_data)).runs
    assert shared.design == "one-engine" and shared.patch == "common_fix:install"
    arms = {a.variant: (a.implementation, a.switch_to) for a in shared.arms}
    assert arms == {
        "base": ("patch:common_fix:install", "patch:on"),
        "other": ("patch:common_fix:install", "patch:on"),
    }


def test_worker_spec_is_versioned(tmp_path: Path, scenario_data: dict[str, Any]) -> None:
    """The worker protocol's spec is a model with a version; a worker of another specbench
    (a variant's environment) answers a spec it cannot read with a failed result that says so."""
    from harness.wire.protocol import WORKER_SPEC_VERSION, WorkerSpec
    from harness.wire.records import WorkerResult

    [run] = expand_plan(parse_scenario(scenario_data)).runs
    spec = WorkerSpec(run=run, base_dir=str(tmp_path))
    assert spec.model_dump(mode="json")["spec_version"] == WORKER_SPEC_VERSION
    raw = {**spec.model_dump(mode="json"), "spec_version": WORKER_SPEC_VERSION + 1}
    (tmp_path / "spec.json").write_text(json.dumps(raw))
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.engine.worker",
            "--spec",
            str(tmp_path / "spec.json"),
            "--out",
            str(out),
        ],
        env={**os.environ, "SPECBENCH_IMPL_REPORT_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    result = WorkerResult.model_validate_json(out.read_text())
    assert result.run_key == run.run_key and result.status == "failed"
    assert result.error is not None and result.error.startswith(
        f"worker spec version {WORKER_SPEC_VERSION + 1}, but this worker"
    )
    assert "install the same specbench in this environment" in result.error


# -- `specbench plan` as text (harness.present.plan_text) -------------------------------------

FIXTURES = ROOT / "results" / "fixtures"


def test_plan_text_without_a_stored_run_gives_the_bound(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    """No run to time it from: the launches as before, then the bound the launches' limits
    imply (2 launches x (600 s timeout + 15 s to stop) = 20.5 min), and one line saying why
    there is no estimate."""
    from harness.analysis.setup import Setup
    from harness.present.plan_text import render_plan, setup_line

    scenario_data.update(design="launch-per-arm", timeout_s=600)
    scenario = parse_scenario(scenario_data)
    plan = expand_plan(scenario)
    lines = render_plan(scenario, plan, None, False, None, tmp_path / "results")
    spec = '{"method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 3}'
    assert lines == [
        f"scenario unit ({plan.scenario_hash}): baseline base, candidates opt",
        f"  {setup_line(Setup.of(scenario))}",
        "  design: launch-per-arm",
        f"    1. base.r0                  1 pass(es) x 4 prompts "
        f"impl=medusa-proposer:baseline spec={spec} (steps timed)",
        f"    2. opt.r0                   1 pass(es) x 4 prompts "
        f"impl=medusa-proposer:optimized spec={spec} (steps timed)",
        "  wall time: at most 20.5 min: 2 launches, each killed at its 600 s timeout "
        "(timeout_s, engine start included), + up to 15 s to stop each; plus, before the "
        "first launch, up to 30 min to build tiny-llama, tiny-llama-medusa where not yet "
        "cached",
        f"  no estimate: no complete run of the same model and settings in "
        f"{tmp_path / 'results'} to time it from (or give --from RUN)",
    ]


def test_plan_text_of_a_shipped_precision_scenario(tmp_path: Path) -> None:
    from harness.analysis.forecast import newest_run_like
    from harness.config.scenario import load_scenario
    from harness.present.plan_text import render_plan

    path = ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
    scenario = load_scenario(path)
    plan = expand_plan(scenario, scenario_file=path)
    (tmp_path / "results").mkdir()
    stored = newest_run_like(tmp_path / "results", plan)
    assert stored is None
    text = "\n".join(render_plan(scenario, plan, stored, False, None, tmp_path / "results"))
    assert "unknown" not in text
    precision = scenario.precision
    assert precision is not None
    assert (
        f"  wall time: at most {precision.budget_s / 60:.1f} min: 1 launch, ended by its "
        f"{precision.budget_s:g} s precision budget"
    ) in text


def test_plan_text_times_from_a_run_of_the_same_settings(tmp_path: Path) -> None:
    """A stored run of the same model and settings under another scenario name: the estimate
    from it, which run it is, and the bound."""
    import shutil

    from harness.analysis.forecast import newest_run_like
    from harness.present.plan_text import render_plan
    from harness.results.run import load_run

    results = tmp_path / "results"
    shutil.copytree(FIXTURES / "cpu-medusa-small", results / "cpu-medusa-small")
    data = {
        **load_run(FIXTURES / "cpu-medusa-small").manifest["scenario"],
        "name": "renamed",
        "design": "launch-per-arm",
    }
    scenario = parse_scenario(data)
    plan = expand_plan(scenario, base_dir=tmp_path)
    stored = newest_run_like(results, plan)
    assert stored is not None
    lines = render_plan(scenario, plan, stored, False, None, results)
    wall = lines[-3:]
    assert (
        wall[0].startswith("  wall time: about ")
        and "timed from run cpu-medusa-small" in wall[0]
        and "(2 of 2 launch(es) matched to the same settings" in wall[0]
    ), wall
    assert wall[1] == (
        "    (run cpu-medusa-small is of scenario cpu-medusa-small, with the "
        "same model and settings)"
    )
    assert wall[2].startswith(
        "  upper bound: at most 30.5 min: 2 launches, each killed at its 900 s timeout"
    ), wall
    assert not any("no estimate" in line for line in lines)


def test_plan_text_from_a_given_run_forecasts_too(tmp_path: Path) -> None:
    from harness.present.plan_text import render_plan
    from harness.results.run import load_run

    stored = load_run(FIXTURES / "cpu-eagle-tp2-one-engine-small")
    scenario = parse_scenario(stored.manifest["scenario"])
    plan = expand_plan(scenario, base_dir=tmp_path)
    lines = render_plan(scenario, plan, stored, True, 0.05)
    text = "\n".join(lines)
    assert "  wall time: about " in text and "  upper bound: at most 15.2 min" in text
    assert "is of scenario" not in text
    assert lines[-2].startswith("  from run e2 (one-engine)") and "MDE ±5.00%" in lines[-1]
