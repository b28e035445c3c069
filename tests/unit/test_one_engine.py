"""The one-engine design without an engine: which scenarios may share one, the plan's balanced
blocks, the proof each pass must carry, the block loop with its precision stop, and how
unproven passes are left out of the comparison."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness.analysis.budget import LaunchStop, launch_stop
from harness.analysis.compare import Arms, compare_records
from harness.analysis.proof import proof_problems
from harness.analysis.stats import PRECISION_LOOK_EVERY, PRECISION_MIN_BLOCKS
from harness.config.scenario import parse_scenario, with_precision
from harness.engine.schedule import block_arms, drive_shared_launch
from harness.errors import ScenarioError
from harness.plan.plan import expand_plan
from harness.present.stops import stop_line, stop_words
from harness.present.tables import render_terminal
from harness.wire.records import ImplReport, PassRecord, RunRecord, WorkerResult
from harness.wire.spec import ArmSpec
from testkit.factory import run, simple_pass

MEDUSA = "medusa-proposer"


def report(
    choice: str,
    pid: int = 100,
    rank: int | None = 0,
    paths: dict[str, int] | None = None,
    error: str | None = None,
    calls: int = 10,
) -> ImplReport:
    path = "medusa.propose.tolist" if choice == "baseline" else "medusa.propose.tensor"
    paths = {path: calls} if paths is None else paths
    return ImplReport(
        implementation=MEDUSA,
        choice=choice,
        path=next(iter(paths), None),
        paths=paths,
        matches_choice=set(paths) <= {path} and bool(paths),
        pid=pid,
        tp_rank=rank,
        calls=sum(paths.values()),
        error=error,
    )


# -- scenario and plan ---------------------------------------------------------------------


def test_choice_only_variants_share_one_engine(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 2
    scenario_data["repeats"] = 5
    plan = expand_plan(parse_scenario(scenario_data))
    assert plan.design == "one-engine" and len(plan.runs) == 2
    first, second = plan.runs
    assert first.run_key == "base+opt.r0" and first.blocks == 3  # 5 per arm -> 3 blocks of 2
    assert first.expected_passes == 12
    for r in plan.runs:
        assert sorted(r.block_order) == ["base", "base", "opt", "opt"]
        assert r.block_order == r.block_order[:2] + r.block_order[:2][::-1]  # A B B A
    assert [a.variant for a in first.arms] == ["base", "opt"]


def test_random_start_differs_between_rounds(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 12
    starts = {r.block_order[0] for r in expand_plan(parse_scenario(scenario_data)).runs}
    assert starts == {"base", "opt"}


def test_engine_changes_need_their_own_launches(scenario_data: dict[str, Any]) -> None:
    scenario_data["variants"]["opt"]["engine"] = {"enforce_eager": True}
    assert expand_plan(parse_scenario(scenario_data)).design == "launch-per-arm"
    scenario_data["design"] = "one-engine"
    with pytest.raises(ScenarioError, match="variants.opt.engine changes the engine"):
        expand_plan(parse_scenario(scenario_data))


def test_precision_needs_one_engine_and_one_round(scenario_data: dict[str, Any]) -> None:
    scenario_data["precision"] = {"mde": 0.01, "budget_s": 300}
    assert parse_scenario(scenario_data).precision is not None
    scenario_data["rounds"] = 2
    with pytest.raises(ScenarioError, match="precision: .*set rounds: 1"):
        parse_scenario(scenario_data)
    scenario_data["rounds"] = 1
    scenario_data["variants"]["opt"]["env"] = {"X": "1"}
    with pytest.raises(ScenarioError, match="precision: needs the one-engine design"):
        expand_plan(parse_scenario(scenario_data))  # refused where the design is decided


def test_cli_precision_override_is_validated(scenario_data: dict[str, Any]) -> None:
    scenario_data["rounds"] = 3
    scenario = with_precision(parse_scenario(scenario_data), 0.01, 120.0)
    assert scenario.precision is not None and scenario.precision.budget_s == 120.0
    assert scenario.rounds == 1
    with pytest.raises(ScenarioError, match="mde"):
        with_precision(parse_scenario(scenario_data), 2.0, None)


# -- proof ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reports", "tp", "why"),
    [
        ([report("baseline")], 1, None),
        (None, 1, "no implementation reports"),
        ([], 1, "no vLLM process reported"),
        ([report("baseline", pid=7)], 1, "harness's own worker process"),
        ([report("optimized")], 1, "ran medusa-proposer:optimized"),
        ([report("baseline", paths={})], 1, "zero calls"),
        (
            [report("baseline", paths={"medusa.propose.tolist": 3, "medusa.propose.tensor": 2})],
            1,
            "ran paths",
        ),
        ([report("baseline", error="ImportError: x")], 1, "ImportError"),
        ([report("baseline", rank=0)], 2, "no report from TP rank(s) 1"),
        ([report("baseline", rank=0), report("baseline", pid=101, rank=1)], 2, None),
    ],
)
def test_proof_problems(reports: list[ImplReport] | None, tp: int, why: str | None) -> None:
    problems = proof_problems(reports, f"{MEDUSA}:baseline", tp, harness_pid=7)
    if why is None:
        assert problems == []
    else:
        assert any(why in p for p in problems), problems


# -- the block loop ------------------------------------------------------------------------


def _shared_spec(scenario_data: dict[str, Any], **precision: Any) -> Any:
    if precision:
        scenario_data["precision"] = precision
    scenario_data["repeats"] = 4
    return expand_plan(parse_scenario(scenario_data)).runs[0]


def test_block_loop_switches_before_and_collects_after_each_pass(
    scenario_data: dict[str, Any],
) -> None:
    spec = _shared_spec(scenario_data)
    calls: list[str | None] = []
    active = {"choice": "baseline"}

    def switch(choice: str | None) -> list[list[dict[str, Any]]]:
        calls.append(choice)
        done = [[report(active["choice"]).model_dump()]]
        if choice:
            active["choice"] = choice.split(":")[1]
        return done

    def measure(i: int, arm: ArmSpec, block: int) -> PassRecord:
        return simple_pass(i, 1.0).model_copy(update={"arm": arm.variant, "block": block})

    passes, stopped = drive_shared_launch(
        spec, measure, switch, None, 1, 7, log=lambda m: None, block_seed=5
    )
    assert stopped is None and len(passes) == spec.expected_passes == 8
    # Each block is balanced (A B B A or B A A B), its orientation drawn from the seed.
    a, b = spec.block_order[0], spec.block_order[1]
    assert spec.block_order == [a, b, b, a]
    drawn = [block_arms(spec.block_order, i, 5) for i in range(2)]
    assert [p.arm for p in passes] == drawn[0] + drawn[1]
    assert all(d in ([a, b, b, a], [b, a, a, b]) for d in drawn)
    assert [p.block for p in passes] == [0] * 4 + [1] * 4
    # Each pass's reports were taken right after it, under the arm it ran.
    for p in passes:
        assert p.impl_reports is not None
        assert p.impl_reports[0].choice == ("baseline" if p.arm == "base" else "optimized")
    assert calls[:2] == [
        spec.arms[[a.variant for a in spec.arms].index(drawn[0][0])].implementation,
        None,
    ]


def test_block_orientation_is_drawn_per_block_and_told_again_by_its_seed() -> None:
    """Random, not alternating: a periodic disturbance cannot line up with a fixed pattern.
    Balanced either way (each arm once in each half), and the same seed draws the same."""
    order = ["a", "b", "b", "a"]
    draws = [block_arms(order, block, seed=3) for block in range(400)]
    assert draws == [block_arms(order, block, seed=3) for block in range(400)]
    assert {tuple(d) for d in draws} == {("a", "b", "b", "a"), ("b", "a", "a", "b")}
    flipped = sum(d[0] == "b" for d in draws)
    assert 160 < flipped < 240  # about half (binomial sd 10)
    assert draws != [block_arms(order, block, seed=4) for block in range(400)]
    warm = [block_arms(order, block, seed=3, stream=1) for block in range(400)]
    assert warm != draws  # the warm-up draws its own
    three = block_arms(["a", "b", "c", "c", "b", "a"], 0, seed=1)
    assert three[:3] == three[3:][::-1] and sorted(three[:3]) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "words",
    [
        "max_blocks=40 reached",
        "time budget budget_s=40 spent after 1 blocks",
        "target reached (MDE <= ±1.00%) after 40 blocks: output-throughput MDE ±0.97%",
        "target reached (draft_per_forward MDE <= ±3.00%) after 16 blocks: "
        "draft_per_forward MDE ±2.90%",
        "target reached (every gated metric's MDE <= its tolerance) after 24 blocks: "
        "output-throughput MDE not estimable yet",
    ],
)
def test_a_stop_in_pre_13_words_reads_back_as_facts(words: str) -> None:
    """A worker before schema 13 said in words why it stopped: the record reads them back as
    a PrecisionStop that present words as they were; words of no known form stay words."""
    result = WorkerResult.model_validate({"run_key": "r", "status": "ok", "stopped": words})
    assert result.stop is not None and stop_words(result.stop) == words
    odd = WorkerResult.model_validate({"run_key": "r", "status": "ok", "stopped": "odd"})
    record = RunRecord(
        run_key="r", variant="a", round=0, order=0, status="ok", wall_s=1.0, result=odd
    )
    assert odd.stop is None and stop_line(launch_stop(record) or LaunchStop("", None)) == "r: odd"


def test_precision_stops_at_target_or_budget(scenario_data: dict[str, Any]) -> None:
    counter = itertools.count()

    def measure(i: int, arm: ArmSpec, block: int) -> PassRecord:
        # Tiny alternating noise: the MDE falls below 2% at the first look.
        duration = 1.0 + 0.001 * (next(counter) % 3)
        return simple_pass(i, duration).model_copy(update={"arm": arm.variant, "block": block})

    # An A/A of one configuration: nothing to switch, nothing to prove.
    for variant in scenario_data["variants"].values():
        variant.pop("implementation")
    spec = _shared_spec(scenario_data, mde=0.02, budget_s=600)
    logged: list[str] = []
    passes, stopped = drive_shared_launch(spec, measure, None, None, 1, 7, log=logged.append)
    first_look = max(PRECISION_MIN_BLOCKS, 2)
    first_look += -first_look % PRECISION_LOOK_EVERY
    assert stopped is not None and stopped.reason == "target" and stopped.blocks == first_look
    assert logged[-1].endswith("(target: MDE <= ±2.00%)")  # each look names the target
    assert stop_words(stopped).startswith("target reached (MDE <= ±2.00%)")
    assert len(passes) == first_look * 4
    # A spent budget stops before the next block, whatever the precision.
    spec = _shared_spec(scenario_data, mde=0.0001, budget_s=600)
    passes, stopped = drive_shared_launch(spec, measure, None, 0.0, 1, 7, log=lambda m: None)
    assert passes == [] and stopped is not None
    assert (stopped.reason, stopped.blocks, stopped.budget_s) == ("budget", 0, 600)


# -- comparison of a shared launch -----------------------------------------------------------


def _shared_run(bad_pass: int | None = None) -> Any:
    passes = []
    order = ["base", "opt", "opt", "base"]
    for block in range(6):
        for k, arm in enumerate(order):
            i = 4 * block + k
            duration = (1.0 if arm == "base" else 0.95) * (1 + 0.01 * ((i * 7) % 5))
            choice = "baseline" if arm == "base" else "optimized"
            reps = [report("optimized" if i == bad_pass else choice)]
            passes.append(
                simple_pass(i, duration).model_copy(
                    update={"arm": arm, "block": block, "impl_reports": reps}
                )
            )
    record = run("base+opt", 0, 0, passes)
    assert record.result is not None
    record.result.worker_pid = 7
    return record


def test_shared_launch_is_compared_on_blocks() -> None:
    impls: dict[str, str | None] = {"base": f"{MEDUSA}:baseline", "opt": f"{MEDUSA}:optimized"}
    comparison = compare_records(
        [_shared_run()],
        Arms("base", ["opt"], implementations=impls, design="one-engine"),
        "r",
        "unit",
    )
    tput = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    assert tput.estimate.design == "one-engine" and tput.estimate.units == 6
    assert tput.estimate.test == "paired t (blocks)" and tput.estimate.delta > 0.03
    assert comparison.passes_per_arm == {"base": 12, "opt": 12} and not comparison.unproven
    assert comparison.candidates[0].ran == [f"{MEDUSA}:optimized -> medusa.propose.tensor"]


def test_unproven_pass_is_discarded_counted_and_named() -> None:
    impls: dict[str, str | None] = {"base": f"{MEDUSA}:baseline", "opt": f"{MEDUSA}:optimized"}
    comparison = compare_records(
        [_shared_run(bad_pass=4)],
        Arms("base", ["opt"], implementations=impls, design="one-engine"),
        "r",
        "unit",
    )
    assert comparison.discarded == {"base": 1} and comparison.passes_per_arm["base"] == 11
    assert comparison.unproven and "ran medusa-proposer:optimized" in comparison.unproven[0].why
    tput = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    # The block keeps its other baseline pass: still a complete block.
    assert tput.estimate.units == 6 and tput.estimate.n_baseline == 11
    text = render_terminal(comparison)
    assert "DISCARDED passes (path not proven): base=1" in text and "UNPROVEN" in text


def test_a_failed_shared_launch_fails_every_arm() -> None:
    failed = run("base+opt", 0, 0, [], status="failed")
    comparison = compare_records([failed], Arms("base", ["opt"], design="one-engine"), "r", "unit")
    assert comparison.baseline_failures == ["base+opt.r0: failed: boom"]
    assert comparison.candidates[0].failures == ["base+opt.r0: failed: boom"]
    assert "FAILED base: base+opt.r0" in render_terminal(comparison)


def test_synthetic_acceptance_is_refused_on_cpu_before_any_engine(
    scenario_data: dict[str, Any],
) -> None:
    from harness.errors import HardwareError
    from harness.plan.preflight import check_hardware

    scenario_data["draft"]["config"] = {
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.0,
    }
    for launch in expand_plan(parse_scenario(scenario_data)).runs:
        with pytest.raises(HardwareError, match="Synthetic acceptance not supported with CPU"):
            check_hardware(launch)


def test_gated_precision_samples_until_every_gate_can_decide(scenario_data: dict[str, Any]) -> None:
    for variant in scenario_data["variants"].values():
        variant.pop("implementation")
    counter = itertools.count()

    def measure(i: int, arm: ArmSpec, block: int) -> PassRecord:
        duration = 1.0 + 0.01 * (next(counter) % 3)  # about 1% pass-to-pass noise
        return simple_pass(i, duration).model_copy(update={"arm": arm.variant, "block": block})

    # Loose tolerances: every gate can decide at the first look.
    scenario_data["gates"] = {
        "metrics": {"output_throughput": 0.05, "mean_tpot_ms": 0.05, "acceptance_rate": 1.0}
    }
    spec = _shared_spec(scenario_data, until="gates", budget_s=600, max_blocks=40)
    assert spec.gates is not None and spec.precision.mde is None
    passes, stopped = drive_shared_launch(spec, measure, None, None, 1, 7, log=lambda m: None)
    assert stopped is not None and (stopped.reason, stopped.metric) == ("target", None)
    assert stop_words(stopped).startswith("target reached (every gated metric")
    first = len(passes) // 4
    # A tolerance far below the noise keeps it sampling to the block limit.
    scenario_data["gates"]["metrics"]["output_throughput"] = 0.0001
    spec = _shared_spec(scenario_data, until="gates", budget_s=600, max_blocks=40)
    passes, stopped = drive_shared_launch(spec, measure, None, None, 1, 7, log=lambda m: None)
    assert stopped is not None and stop_words(stopped) == "max_blocks=40 reached"
    assert len(passes) // 4 == 40 > first


def test_gate_flag_turns_a_precision_run_into_a_gated_one(scenario_data: dict[str, Any]) -> None:
    scenario_data["precision"] = {"mde": 0.02, "budget_s": 300}
    scenario = with_precision(parse_scenario(scenario_data), None, None, until="gates")
    assert scenario.precision is not None and scenario.precision.until == "gates"
    [shared] = expand_plan(scenario).runs
    assert shared.gates == scenario.gates
    scenario_data["precision"] = {"until": "mde"}
    with pytest.raises(ScenarioError, match="mde: needed with until: mde"):
        parse_scenario(scenario_data)


def test_step_times_are_a_scenario_switch_that_one_engine_launches_follow(
    scenario_data: dict[str, Any],
) -> None:
    """Offline, the steps of every launch are timed by default, one-engine ones included
    (rows per arm for the draft, the verification forward and the rest of a step);
    step_times: false turns the timer off."""
    plan = expand_plan(parse_scenario(scenario_data))
    assert plan.design == "one-engine" and all(r.step_times for r in plan.runs)
    off = expand_plan(parse_scenario({**scenario_data, "step_times": False}))
    assert not any(r.step_times for r in off.runs)
    assert not parse_scenario({**scenario_data, "mode": "serve"}).times_steps
    serve = {**scenario_data, "mode": "serve", "step_times": True}
    with pytest.raises(ScenarioError, match="step_times: offline mode only"):
        parse_scenario(serve)
    nospec = {
        **scenario_data,
        "step_times": False,
        "variants": {**scenario_data["variants"], "off": {"speculation": False}},
    }
    with pytest.raises(ScenarioError, match="step_times: false, but the no-speculation"):
        parse_scenario(nospec)


def test_an_arm_whose_warm_up_never_proves_is_refused_before_measuring(
    scenario_data: dict[str, Any],
) -> None:
    """Item 8's self-check: a switch that does not change what the proof records (here the
    workers keep running the baseline whatever they are told) is found in the warm-up, in
    one line, instead of after the whole budget as every measured pass 'unproven'."""
    from harness.engine.schedule import check_warmup_proof
    from harness.errors import ProofRefused

    spec = _shared_spec(scenario_data)
    base, cand = spec.arms[0], spec.arms[1]

    def warm(choices: dict[str, str]) -> list[PassRecord]:
        return [
            simple_pass(i, 1.0).model_copy(
                update={
                    "arm": arm.variant,
                    "block": 0,
                    "impl_reports": [report(choices[arm.variant])],
                }
            )
            for i, arm in enumerate([base, cand, cand, base])
        ]

    honest = {base.variant: "baseline", cand.variant: "optimized"}
    check_warmup_proof(spec, warm(honest), 1, 7)  # every pass proven: no refusal
    stuck = {base.variant: "baseline", cand.variant: "baseline"}
    with pytest.raises(
        ProofRefused,
        match=(
            rf"proof failed in all 2 warm-up pass\(es\) of {cand.variant}, before the first "
            r"measured block: pid 100 \(TP rank 0\) ran medusa-proposer:baseline"
        ),
    ):
        check_warmup_proof(spec, warm(stuck), 1, 7)
    # One proven warm-up pass is enough: the measured ones are each judged again.
    mixed = warm(stuck)
    mixed[1] = mixed[1].model_copy(update={"impl_reports": [report("optimized")]})
    check_warmup_proof(spec, mixed, 1, 7)
