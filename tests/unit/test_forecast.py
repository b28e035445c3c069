"""Forecasts from a stored run: what a target MDE needs, counted in the units whose noise the
interval is built from (blocks of one launch; whole launches when there are several)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.analysis.forecast import (
    describe_bound,
    estimate_wall,
    forecast,
    matched_launches,
    newest_run_like,
    wall_bound,
)
from harness.config.scenario import parse_scenario
from harness.plan.plan import expand_plan
from harness.results.run import load_run
from harness.results.store import save_run_record
from harness.wire.manifest import Manifest
from harness.wire.protocol import KILL_GRACE_S
from harness.wire.spec import Plan
from testkit.stored import shared_launch


def test_several_launches_forecast_launches_not_blocks(tmp_path: Path) -> None:
    """2 launches x 40 blocks at a true -3% with a launch x arm interaction: the interval
    comes from the 2 launch means (MDE ~7%), so asking for '74 blocks' (what the within-launch
    block noise says) when the run already has 80 is wrong: it needs launches."""
    rng = np.random.default_rng(1)
    runs = [
        shared_launch(r, 40, math.log(0.97) + rng.normal(0, 0.02), rng, 1000.0 * r)
        for r in range(2)
    ]
    run_dir = tmp_path / "two"
    Manifest.model_validate(
        {
            "run_id": "two",
            "status": "complete",
            "fingerprint": {},
            "plan": {"design": "one-engine"},
            "scenario": {
                "name": "unit",
                "model": "tiny-llama",
                "batch_size": 2,
                "workload": {"num_prompts": 2, "max_tokens": 5},
                "variants": {"a": {"baseline": True}, "b": {}},
            },
        }
    ).save(run_dir)
    for record in runs:
        save_run_record(run_dir, record)
    f = forecast(load_run(run_dir), 0.02)
    assert f.unit == "launch" and f.measured_units == 2
    assert f.measured_mde is not None and f.measured_mde > 0.02
    assert f.units_needed is None or f.units_needed > 2


# -- how long a plan takes: the bound its limits imply, and the run to time it from ---------

FIXTURES = Path(__file__).resolve().parents[2] / "results" / "fixtures"


def _copy(fixture: str, results: Path, as_name: str | None = None, **manifest: Any) -> Path:
    """A stored fixture run copied into `results` (never written in the repo), its manifest's
    fields (and its scenario's name) changed as asked."""
    run_dir = results / (as_name or fixture)
    shutil.copytree(FIXTURES / fixture, run_dir)
    path = run_dir / "manifest.json"
    data = json.loads(path.read_text())
    if as_name is not None:
        data["scenario"]["name"] = as_name
        data["run_id"] = as_name
    data.update(manifest)
    path.write_text(json.dumps(data))
    return run_dir


def _plan_of(fixture: str, name: str, base_dir: Path, **changes: Any) -> Plan:
    """The plan of a fixture's own scenario under another name, with `changes` made."""
    data = {**load_run(FIXTURES / fixture).manifest["scenario"], "name": name, **changes}
    return expand_plan(parse_scenario(data), base_dir=base_dir)


def test_the_bound_is_every_launch_at_its_timeout(scenario_data: dict[str, Any]) -> None:
    """4 launch-per-arm launches at a 600 s timeout: each is killed at 600 s (its process's
    start counted: engine start inside) plus the SIGTERM grace and SIGKILL wait."""
    scenario_data.update(rounds=2, timeout_s=600, design="launch-per-arm")
    plan = expand_plan(parse_scenario(scenario_data))
    bound = wall_bound(plan)
    by_hand = 4 * (600 + KILL_GRACE_S + 5.0)
    assert len(plan.runs) == 4 and bound.hard_s == by_hand == bound.at_most_s
    assert bound.budgeted == 0 and bound.builtin_models == ("tiny-llama", "tiny-llama-medusa")
    text = describe_bound(bound)
    assert text.startswith(
        f"at most {by_hand / 60:.1f} min: 4 launches, each killed at its "
        "600 s timeout (timeout_s, engine start included), + up to 15 s to "
        "stop each"
    ), text
    assert "up to 30 min to build tiny-llama, tiny-llama-medusa where not yet cached" in text


def test_precision_launches_are_bounded_by_their_budget(scenario_data: dict[str, Any]) -> None:
    """One engine under precision: the budget (engine start inside) ends it; the timeout is
    the hard limit. A sweep's launches each get the budget; one over its timeout is cut."""
    scenario_data.update(precision={"mde": 0.02, "budget_s": 290}, timeout_s=900)
    bound = wall_bound(expand_plan(parse_scenario(scenario_data)))
    assert (bound.launches, bound.budget_bound_s, bound.hard_s) == (1, 290, 900 + 15)
    assert describe_bound(bound).startswith(
        "at most 4.8 min: 1 launch, ended by its 290 s precision budget (budget_s, engine "
        "start included: no block starts that would end past it); never past 15.2 min, "
        "killed at its 900 s timeout"
    )
    scenario_data.update(
        sweep={"axes": {"batch_size": [1, 2, 4]}},
        timeout_s=200,
        precision={"mde": 0.02, "budget_s": 290},
    )
    swept = wall_bound(expand_plan(parse_scenario(scenario_data)))
    assert swept.launches == 3 and swept.budget_bound_s == swept.hard_s == 3 * (200 + 15)


def test_the_bound_holds_the_stored_runs_own_launches() -> None:
    for fixture in (
        "cpu-medusa-small",
        "cpu-eagle-tp2-one-engine-small",
        "cpu-eagle-tp2-sweep-small",
    ):
        stored = load_run(FIXTURES / fixture)
        plan = expand_plan(parse_scenario(stored.manifest["scenario"]), base_dir=FIXTURES)
        assert sum(r.wall_s for r in stored.runs) < wall_bound(plan).at_most_s


def test_a_run_of_the_same_model_and_settings_is_found_under_another_name(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _copy("cpu-medusa-small", results)
    plan = _plan_of("cpu-medusa-small", "renamed", tmp_path, design="launch-per-arm")
    found = newest_run_like(results, plan)
    assert found is not None and found.run_id == "cpu-medusa-small"
    estimate = estimate_wall(plan, found)
    assert estimate.matched == len(plan.runs) == 2


@pytest.mark.parametrize(
    "changes",
    [
        {"model": "tiny-llama-32k"},  # another target model
        {"draft": {"method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 2}},
        {"engine": {"enforce_eager": True}},
        {"workload": {"kind": "random", "num_prompts": 8, "input_len": 32, "max_tokens": 16}},
    ],
)
def test_a_run_of_other_settings_is_not_used(tmp_path: Path, changes: dict[str, Any]) -> None:
    results = tmp_path / "results"
    _copy("cpu-medusa-small", results)
    _copy("cpu-eagle-tp2-one-engine-small", results)
    plan = _plan_of("cpu-medusa-small", "cpu-medusa-small", tmp_path, **changes)
    assert newest_run_like(results, plan) is None


def test_only_complete_runs_with_timed_launches_count(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _copy("cpu-medusa-small", results, status="interrupted")
    plan = _plan_of("cpu-medusa-small", "cpu-medusa-small", tmp_path)
    assert newest_run_like(results, plan) is None
    assert newest_run_like(tmp_path / "absent", plan) is None


def test_the_plans_own_scenario_first_then_the_newest(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _copy("cpu-medusa-small", results, as_name="mine", created_unix=1000.0)
    _copy("cpu-medusa-small", results, as_name="other-new", created_unix=3000.0)
    _copy("cpu-medusa-small", results, as_name="other-old", created_unix=2000.0)
    mine = newest_run_like(results, _plan_of("cpu-medusa-small", "mine", tmp_path))
    theirs = newest_run_like(results, _plan_of("cpu-medusa-small", "third", tmp_path))
    assert mine is not None and mine.run_id == "mine"
    assert theirs is not None and theirs.run_id == "other-new"


def test_a_sweeps_cells_match_and_a_relative_prompts_file_resolves(tmp_path: Path) -> None:
    """The stored sweep named its prompts file by absolute path; a plan naming the same file
    relative to its own folder has the same settings."""
    results = tmp_path / "results"
    run_dir = _copy("cpu-eagle-tp2-sweep-small", results)
    data = json.loads((run_dir / "manifest.json").read_text())
    prompts = tmp_path / "scenarios" / "p.jsonl"
    for spec in data["plan"]["runs"]:
        spec["workload"]["path"] = str(prompts)
    (run_dir / "manifest.json").write_text(json.dumps(data))
    workload = {**data["scenario"]["workload"], "path": "p.jsonl"}
    plan = _plan_of("cpu-eagle-tp2-sweep-small", "wider", prompts.parent, workload=workload)
    assert len(plan.runs) == 3 and matched_launches(plan, Manifest.model_validate(data)) == 3
    found = newest_run_like(results, plan)
    assert found is not None and estimate_wall(plan, found).matched == 3
    elsewhere = _plan_of("cpu-eagle-tp2-sweep-small", "wider", tmp_path, workload=workload)
    assert matched_launches(elsewhere, Manifest.model_validate(data)) == 0
