"""Sweeps without an engine: the grid, each cell checked as a scenario of its own (one line
naming the cell and the field), the plan's order, refusals through the CLI before anything
starts, and the resume checks."""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import parse_scenario, sweep_cells
from harness.config.sweep import Sweep
from harness.errors import ScenarioError
from harness.plan.plan import expand_plan
from tests.conftest import ROOT, SCENARIOS
from tests.unit.test_preflight import _refused, _run


def _sweep(data: dict[str, Any], **sweep: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["sweep"] = sweep
    return data


def test_grid_product_and_linked(scenario_data: dict[str, Any]) -> None:
    data = _sweep(
        scenario_data,
        axes={"batch_size": [1, 4], "engine.enforce_eager": [True]},
        linked=[{"draft.num_speculative_tokens": [1, 2, 3], "workload.max_tokens": [8, 16, 16]}],
    )
    cells = sweep_cells(parse_scenario(data))
    assert [c.id for c in cells] == [f"c{i:02d}" for i in range(6)]
    assert cells[0].values == {
        "batch_size": 1,
        "engine.enforce_eager": True,
        "draft.num_speculative_tokens": 1,
        "workload.max_tokens": 8,
    }
    assert cells[5].label == (
        "batch_size=4, engine.enforce_eager=true, "
        "draft.num_speculative_tokens=3, workload.max_tokens=16"
    )
    last = cells[5].scenario
    assert (
        last.batch_size,
        last.engine,
        last.draft and last.draft.num_speculative_tokens,
        last.workload.max_tokens,
        last.sweep,
    ) == (4, {"enforce_eager": True}, 3, 16, None)
    # A scenario without a sweep is its own single cell.
    assert [c.id for c in sweep_cells(parse_scenario(scenario_data))] == ["c00"]


@pytest.mark.parametrize(
    ("sweep", "fragment"),
    [
        ({}, "sweep: axes: a sweep needs at least one axis"),
        ({"axes": {"batch_size": []}}, "sweep: batch_size: no values"),
        ({"axes": {"batch_size": [2, 2]}}, "batch_size: 2 is listed twice"),
        (
            {"linked": [{"model": ["a", "b"], "draft.model": ["c"]}]},
            "linked.0: linked lists differ in length (model: 2, draft.model: 1)",
        ),
        (
            {"linked": [{"batch_size": [1, 1], "workload.max_tokens": [8, 8]}]},
            "linked.0: {'batch_size': 1, 'workload.max_tokens': 8} is listed twice",
        ),
        ({"axes": {"name": ["x"]}}, "axes.name: a sweep cannot vary this field"),
        ({"axes": {"variants.opt.baseline": [True]}}, "a sweep cannot vary this field"),
        ({"axes": {"batch_size": [1]}, "linked": [{"batch_size": [2]}]}, "batch_size: swept twice"),
        (
            {"axes": {"batch_size": [1, 2]}, "break_even": {"axis": "tensor_parallel_size"}},
            "break_even.axis: 'tensor_parallel_size' is not swept (swept: batch_size)",
        ),
        (
            {"axes": {"model": ["tiny-llama"]}, "break_even": {"axis": "model"}},
            "break_even.axis: model takes values that are not all numbers",
        ),
        (
            {"axes": {"batch_size": [4]}, "break_even": {"axis": "batch_size"}},
            "needs at least 2 values",
        ),
        (
            {
                "axes": {"batch_size": [1, 2]},
                "break_even": {"axis": "batch_size", "candidate": "zz"},
            },
            "sweep.break_even.candidate: 'zz' is not a candidate (candidates: opt)",
        ),
        # Each cell is validated as a scenario of its own, named by its values.
        (
            {"axes": {"batch_size": [4, 0]}},
            "sweep cell batch_size=0: batch_size: Input should be greater than or equal to 1",
        ),
        (
            {"axes": {"workload.foo": [1]}},
            "sweep cell workload.foo=1: workload.foo: Extra inputs are not permitted",
        ),
        ({"axes": {"batch_size.x": [1]}}, "sweep cell batch_size.x=1: batch_size: not a mapping"),
        (
            {"axes": {"variants.opt.engine": [{}, {"enforce_eager": True}]}},
            "sweep: cells differ in design (launch-per-arm at variants.opt.engine="
            '{"enforce_eager": true}; one-engine at variants.opt.engine={}); set design: '
            "launch-per-arm",
        ),
    ],
)
def test_bad_sweeps_are_one_line(
    tmp_path: Path, scenario_data: dict[str, Any], sweep: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        expand_plan(parse_scenario(_sweep(scenario_data, **sweep), "s.yaml"))
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_huge_grid_is_refused_before_it_is_expanded(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    """1000 x 1000 values: validating the long axes costs their length, not its square; the
    cells are counted, not expanded, and refused in one line naming the product and each axis,
    within 2 s through the library and through `plan` and `run`."""
    axes = {"workload.seed": list(range(1000)), "workload.num_prompts": list(range(1, 1001))}
    started = time.perf_counter()
    sweep = Sweep.model_validate({"axes": axes})
    assert time.perf_counter() - started < 2
    assert sweep.cell_count == 1_000_000
    data = _sweep(scenario_data, axes=axes)
    fragment = (
        "sweep: 1000000 cells (workload.seed 1000 x workload.num_prompts 1000) is more "
        "than the limit of 1000 cells; make the grid smaller, or raise the limit on "
        "purpose (--max-cells N)"
    )
    started = time.perf_counter()
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    assert time.perf_counter() - started < 2
    assert str(err.value) == f"s.yaml: {fragment}"
    for command in ("plan", "run"):
        started = time.perf_counter()
        refused = _run(tmp_path, data, command=command)
        took = time.perf_counter() - started
        _refused(refused, fragment, tmp_path)
        # A process of its own (Python and specbench's imports: about 1.5 s, more on a busy
        # machine); expanding the million cells would take minutes.
        assert took < 20, f"{command} took {took:.1f} s"


def test_max_cells_raises_the_limit_on_purpose(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    small = _sweep(scenario_data, axes={"batch_size": [1, 2, 4], "workload.seed": [0, 1]})
    for command in ("plan", "run"):
        _refused(
            _run(tmp_path, small, "--max-cells", "5", command=command),
            "sweep: 6 cells (batch_size 3 x workload.seed 2) is more than the limit of 5 cells",
            tmp_path,
        )
    big = _sweep(
        scenario_data, axes={"batch_size": list(range(1, 41)), "workload.seed": list(range(40))}
    )
    planned = _run(tmp_path, big, "--max-cells", "1600", command="plan")
    assert planned.returncode == 0, planned.stderr
    assert "sweep: 1600 cells over batch_size, workload.seed" in planned.stdout
    # The library: a limit of its own, or none (a stored run's grid was accepted already).
    with pytest.raises(ScenarioError, match="1600 cells .* more than the limit of 1000 cells"):
        parse_scenario(big, "s.yaml")
    assert len(sweep_cells(parse_scenario(big, "s.yaml", max_cells=None))) == 1600


def test_draft_paths_need_a_draft(scenario_data: dict[str, Any]) -> None:
    del scenario_data["draft"]
    scenario_data["variants"] = {"base": {"baseline": True}, "other": {"env": {"X": "1"}}}
    with pytest.raises(
        ScenarioError,
        match="sweep cell draft.num_speculative_tokens=2: draft: the scenario has no draft to vary",
    ):
        parse_scenario(_sweep(scenario_data, axes={"draft.num_speculative_tokens": [2]}))


def test_plan_resolves_every_cell_and_spreads_drift(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 3
    data = _sweep(scenario_data, axes={"batch_size": [1, 2, 4, 8]})
    plan = expand_plan(parse_scenario(data))
    assert plan.design == "one-engine" and [c.id for c in plan.cells] == [
        "c00",
        "c01",
        "c02",
        "c03",
    ]
    assert len(plan.runs) == 4 * 3 and [r.order for r in plan.runs] == list(range(12))
    for run in plan.runs:
        assert run.run_key == f"{run.cell}.base+opt.r{run.round}"
        assert run.engine_args["max_num_seqs"] == run.cell_values["batch_size"]
        assert run.record_fields()["cell_values"] == run.cell_values
    # A run without a cell leaves its round short of the four below.
    rounds = [[r.cell for r in plan.runs if r.round == k and r.cell is not None] for k in range(3)]
    assert [r.round for r in plan.runs] == sorted(r.round for r in plan.runs)
    assert all(sorted(cells) == ["c00", "c01", "c02", "c03"] for cells in rounds)
    # Drawn anew each round (seeded: the same plan every time), not grid order every round.
    assert len({tuple(cells) for cells in rounds}) > 1
    assert [r.run_key for r in expand_plan(parse_scenario(data)).runs] == [
        r.run_key for r in plan.runs
    ]


def test_launch_per_arm_cells_keep_their_arms_together(scenario_data: dict[str, Any]) -> None:
    scenario_data["design"] = "launch-per-arm"
    scenario_data["rounds"] = 2
    plan = expand_plan(parse_scenario(_sweep(scenario_data, axes={"batch_size": [1, 2]})))
    keys = [r.run_key for r in plan.runs]
    for i in range(0, len(keys), 2):  # a cell's two arms of one round run back to back
        assert keys[i].split(".")[0] == keys[i + 1].split(".")[0]
        assert {plan.runs[i].variant, plan.runs[i + 1].variant} == {"base", "opt"}


@pytest.mark.parametrize(
    ("sweep", "fragment"),
    [
        (
            {"axes": {"engine.enforce_eagr": [True]}},
            "sweep cell engine.enforce_eagr=true: engine.enforce_eagr: not an argument of vLLM",
        ),
        (
            {"axes": {"model": ["tiny-llama", "no-such-model"]}},
            "model (sweep cell model=no-such-model): 'no-such-model' is neither a built-in model",
        ),
        (
            {"axes": {"workload.max_tokens": [8, 4000]}},
            "(max_model_len unset) (sweep cell workload.max_tokens=4000): vLLM would stop",
        ),
    ],
)
def test_cells_are_checked_before_anything_runs(
    tmp_path: Path, scenario_data: dict[str, Any], sweep: dict[str, Any], fragment: str
) -> None:
    for command in ("run", "plan"):
        _refused(
            _run(tmp_path, _sweep(scenario_data, **sweep), command=command), fragment, tmp_path
        )


def test_sweeps_refused_where_one_ab_is_meant(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    data = _sweep(scenario_data, axes={"batch_size": [1, 2]})
    _refused(
        _run(tmp_path, data, "--gate"), "--gate judges one A/B; this scenario is a sweep", tmp_path
    )
    _refused(_run(tmp_path, data, command="calibrate"), "calibrate runs one A/A", tmp_path)


def test_shipped_sweep_scenario_plans(tmp_path: Path) -> None:
    from tests.unit.test_preflight import _cli

    result = _cli(
        tmp_path,
        "plan",
        str(SCENARIOS / "cpu-eagle-tp2-argmax-sweep.yaml"),
        "--results-dir",
        str(tmp_path / "none"),
    )
    assert result.returncode == 0, result.stderr
    assert (
        "sweep: 12 cells over batch_size, workload.num_prompts, model, draft.model" in result.stdout
    )
    assert "c11: batch_size=32, workload.num_prompts=64, model=tiny-llama-32k" in result.stdout
    assert (
        "wall time: at most 22.0 min: 12 launches, each ended by its 110 s precision "
        "budget" in result.stdout
    )
    assert "no estimate: no complete run of the same model and settings in" in result.stdout


# -- resume checks on a real stored run (no engine) ------------------------------------------

FIXTURE = ROOT / "results" / "fixtures" / "cpu-medusa-small"


def _as_stored(scenario: dict[str, Any]) -> dict[str, Any]:
    """The fixture's scenario as this version stores it (every field spelled out), in the
    design the fixture ran (launch-per-arm, before one-engine existed)."""
    return parse_scenario({**scenario, "design": "launch-per-arm"}).model_dump(mode="json")


def _stored(tmp_path: Path, **manifest: Any) -> Path:
    from harness.config.scenario import scenario_hash

    run = tmp_path / "results" / FIXTURE.name
    shutil.copytree(FIXTURE, run)
    data = json.loads((run / "manifest.json").read_text())
    data["scenario"] = _as_stored(data["scenario"])
    data["scenario_hash"] = scenario_hash(parse_scenario(data["scenario"]))
    data.update(manifest)
    (run / "manifest.json").write_text(json.dumps(data))
    return run


def _resume(run: Path, scenario: dict[str, Any] | None = None) -> tuple[Any, Any]:
    from harness.execute.runner import check_resumable
    from harness.plan.builds import builds_of
    from harness.results.run import load_run

    results = load_run(run)
    data = scenario or results.manifest["scenario"]
    plan = expand_plan(parse_scenario(data), base_dir=ROOT / "scenarios")
    return check_resumable, (plan, results, builds_of(plan))


def test_resume_refuses_changes_and_finished_runs(tmp_path: Path) -> None:
    from harness.env import fingerprint

    run = _stored(tmp_path, status="interrupted")
    manifest = json.loads((run / "manifest.json").read_text())
    here = fingerprint(manifest["scenario_hash"])
    # The stored fingerprint is another session's machine: make it this one's, then change it.
    manifest["fingerprint"] = here
    manifest["builds"] = {}
    (run / "manifest.json").write_text(json.dumps(manifest))
    check, args = _resume(run)
    check(*args)  # same scenario, same machine, interrupted: resumable

    changed = copy.deepcopy(manifest["scenario"])
    changed["repeats"] = 7
    check, args = _resume(run, changed)
    with pytest.raises(
        ScenarioError,
        match="the scenario changed since that run started "
        r"\(repeats differ\)",
    ):
        check(*args)

    manifest["fingerprint"] = {**here, "cpu_count": 64}
    (run / "manifest.json").write_text(json.dumps(manifest))
    check, args = _resume(run)
    with pytest.raises(
        ScenarioError,
        match="the environment changed since that run started: "
        r"cpu_count \(64 -> ",
    ):
        check(*args)

    for status, fragment in (
        ("complete", "that run is complete; nothing to resume"),
        ("running", "that run is still running"),
    ):
        manifest.update(fingerprint=here, status=status, runner_pid=1)
        (run / "manifest.json").write_text(json.dumps(manifest))
        check, args = _resume(run)
        with pytest.raises(ScenarioError, match=fragment):
            check(*args)


def test_resume_cli_refusals(tmp_path: Path) -> None:
    from tests.unit.test_preflight import _cli

    run = _stored(tmp_path, status="complete")
    result = _cli(
        tmp_path,
        "run",
        "--resume",
        str(run),
        "--results-dir",
        str(tmp_path / "results"),
        "--mde",
        "0.01",
    )
    assert (
        result.returncode == 2 and "--resume continues a run as it was planned" in result.stderr
    ), result.stderr
    result = _cli(tmp_path, "run", "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 2 and "missing SCENARIO" in result.stderr


def test_wall_time_from_a_stored_run() -> None:
    from harness.analysis.forecast import describe_wall, estimate_wall
    from harness.results.run import load_run

    stored = load_run(FIXTURE)
    scenario = parse_scenario(_as_stored(stored.manifest["scenario"]))
    plan = expand_plan(scenario, base_dir=ROOT / "scenarios")
    same = estimate_wall(plan, stored)
    ok = [r for r in stored.runs if r.status == "ok"]
    # Its own plan: every launch matched, and about the wall time the launches took.
    assert same.matched == len(plan.runs)
    assert 0.7 < same.low_s / sum(r.wall_s for r in ok) < 1.3
    bigger = _as_stored(stored.manifest["scenario"])
    bigger["repeats"] *= 4
    grown = estimate_wall(expand_plan(parse_scenario(bigger), base_dir=ROOT), stored)
    assert grown.low_s > same.low_s and grown.overhead_s == same.overhead_s
    assert "timed from run" in describe_wall(grown)


def test_a_build_spelled_another_way_is_the_same_build(tmp_path: Path) -> None:
    from harness.execute.runner import _same_build

    real = tmp_path / "python3.11"
    real.write_text("")
    (tmp_path / "python").symlink_to(real)
    base = {"vllm": "0.32.0", "git": None}
    assert _same_build({**base, "python": str(tmp_path / "python")}, {**base, "python": str(real)})
    assert not _same_build(
        {**base, "python": str(real)}, {**base, "python": str(real), "vllm": "0.33.0"}
    )
