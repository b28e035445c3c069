"""Where a delta comes from: the output-throughput delta split into the parts
of a pass's time (harness.analysis.attribution), from per-pass step times."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.analysis.attribution import attribute
from harness.config.scenario import parse_scenario, scenario_hash, with_precision
from harness.errors import ScenarioError
from harness.present.stops import stop_words
from harness.present.tables import attribution_line
from harness.wire.records import PrecisionStop


def _frame(
    blocks: int,
    extra_draft_s: float,
    extra_outside_s: float,
    rng: np.random.Generator,
    noise: float = 0.01,
) -> pd.DataFrame:
    """One engine, ABBA blocks: 50 steps a pass, draft 0.35 ms, forward 1.1 ms, rest 1.2 ms a
    step, 60 ms outside the steps; the candidate pays `extra_*` seconds a pass more."""
    rows = []
    for b in range(blocks):
        for i, arm in enumerate(("a", "b", "b", "a")):
            jitter = 1 + rng.normal(0, noise)
            draft = 50 * 0.35e-3 * jitter + (extra_draft_s if arm == "b" else 0.0)
            forward, rest = 50 * 1.1e-3 * jitter, 50 * 1.2e-3 * jitter
            outside = 0.060 * jitter + (extra_outside_s if arm == "b" else 0.0)
            step = draft + forward + rest
            rows.append(
                {
                    "variant": arm,
                    "launch": 0,
                    "round": 0,
                    "block": b,
                    "repeat": 4 * b + i,
                    "output_tokens": 512,
                    "steps": 50,
                    "draft_s": draft,
                    "forward_s": forward,
                    "step_s": step,
                    "duration_s": step + outside,
                    "output_throughput": 512 / (step + outside),
                }
            )
    return pd.DataFrame(rows)


def test_a_slower_drafter_is_carried_by_the_draft_part_and_the_parts_add_up() -> None:
    rng = np.random.default_rng(1)
    frame = _frame(30, extra_draft_s=50 * 70e-6, extra_outside_s=0.0, rng=rng)
    found = attribute(frame, "a", "b", "one-engine")
    assert found is not None and found.units == 30 and found.unit == "blocks"
    parts = {f.key: f for f in found.parts}
    assert found.carrier == "draft" and found.finding is None
    assert abs(sum(f.value for f in found.parts) - found.measured.value) < 1e-12
    # 3.5 ms more on a pass of 0.1925 s: -1.79% of throughput, inside its interval.
    low, high = parts["draft"].low, parts["draft"].high
    assert low is not None and high is not None
    expected = -(50 * 70e-6) / (0.1925 + 50 * 70e-6)
    assert low < expected < high < 0
    for key in ("forward", "rest", "outside"):
        f = parts[key]
        assert f.low is not None and f.high is not None and f.low < 0 < f.high, key
    assert parts["tokens"].value == 0 and parts["tokens"].low == parts["tokens"].high == 0
    # The throughput delta the parts add up to is the per-block one, exactly.
    a = frame[frame.variant == "a"].groupby("block")["output_throughput"]
    b = frame[frame.variant == "b"].groupby("block")
    direct = (
        (512 / b["duration_s"].mean())
        / (512 / frame[frame.variant == "a"].groupby("block")["duration_s"].mean())
        - 1
    ).mean()
    assert math.isclose(found.measured.value, direct, rel_tol=1e-12) and a.ngroups == 30
    line = attribution_line(found)
    assert line.startswith(
        "Where b's delta comes from (step timer; each part's share of the "
        "output-throughput delta, -"
    )
    assert "draft time -1.80% [" in line and line.endswith("carried by the draft time.")
    assert "tokens per pass +0.00% (exact)" in line


def test_a_cost_outside_the_steps_is_a_finding() -> None:
    found = attribute(_frame(30, 0.0, 0.004, np.random.default_rng(2)), "a", "b", "one-engine")
    assert found is not None and found.carrier == "outside"
    assert found.finding is not None and "outside the timed steps" in found.finding
    # Said on the attribution line, not as a warning: a change that truly acts outside the
    # steps (the Medusa swap's host copy, on a real run) is a result, not a fault of the run.
    assert attribution_line(found).endswith(f" Finding: {found.finding}.")


def test_no_change_names_no_part() -> None:
    found = attribute(_frame(30, 0.0, 0.0, np.random.default_rng(3)), "a", "b", "one-engine")
    assert found is not None and found.carrier is None and found.finding is None
    assert attribution_line(found).endswith("no part moved beyond its interval.")


def test_the_speed_probe_is_a_part_of_its_own_and_never_the_carrier() -> None:
    """With the speed probe on, its seconds leave the time outside the steps for a part of
    their own; the parts still add up, and a probe that took longer in one arm (the speed,
    not the change: it runs the same loop in both) is never named as what carries a delta."""
    frame = _frame(30, 0.0, 0.0, np.random.default_rng(6))
    probe = np.where(frame["variant"] == "b", 50 * 150e-6, 50 * 90e-6)  # b's probe slower
    frame["probe_s"] = probe
    frame["duration_s"] += probe
    frame["output_throughput"] = 512 / frame["duration_s"]
    found = attribute(frame, "a", "b", "one-engine")
    assert found is not None
    parts = {f.key: f for f in found.parts}
    assert list(parts) == ["draft", "forward", "rest", "outside", "probe", "tokens"]
    assert abs(sum(f.value for f in found.parts) - found.measured.value) < 1e-12
    high = parts["probe"].high
    assert high is not None and high < 0  # it moved ...
    assert found.carrier is None and found.finding is None  # ... and carries nothing
    outside = parts["outside"]
    assert outside.low is not None and outside.high is not None and outside.low < 0 < outside.high
    assert "speed probe -" in attribution_line(found)
    # Without the probe (an older frame, or off): no such part.
    plain = attribute(_frame(30, 0.0, 0.0, np.random.default_rng(6)), "a", "b", "one-engine")
    assert plain is not None and "probe" not in {f.key for f in plain.parts}


@pytest.mark.parametrize("drop", ["step_s", "block"])
def test_without_step_times_or_blocks_there_is_no_attribution(drop: str) -> None:
    frame = _frame(4, 0.0, 0.0, np.random.default_rng(4))
    if drop == "block":
        frame["block"] = np.nan
    else:
        frame = frame.drop(columns=[drop])
    assert attribute(frame, "a", "b", "one-engine") is None


def test_launch_per_arm_pairs_rounds() -> None:
    frame = _frame(6, 50 * 70e-6, 0.0, np.random.default_rng(5))
    frame["round"] = frame["block"]  # each block stands for a round of two launches
    found = attribute(frame, "a", "b", "launch-per-arm")
    assert found is not None and found.units == 6 and found.unit == "rounds"
    assert found.carrier == "draft"


def test_component_rows_and_parts_keep_their_rate_under_component_noise() -> None:
    """Simulated through the shipped code (testkit.simulate.parts_trials: the scheduler,
    passes_frame, compare_metric, attribute), each part with its own AR(1) noise, drift and
    stalls of one part: A/A false positives and coverage of a drafter 5% slower. 150 trials a
    cell here (deterministic seeds); benchmarks/component_stress.py gives 1000 a cell."""
    from testkit.simulate import Parts, parts_trials

    def rate(results: list[dict[str, Any]], key: str, truth: float | None) -> float:
        hits = []
        for r in results:
            e = r["attribution"].parts[0] if key == "part:draft" else r[key]
            lo, hi = (e.low, e.high) if key == "part:draft" else (e.ci_low, e.ci_high)
            assert lo is not None and hi is not None
            hits.append(lo <= truth <= hi if truth is not None else (lo > 0 or hi < 0))
        return float(np.mean(hits))

    aa = parts_trials(Parts(), 40, 150, seed=11)
    for key in (
        "draft_ms_per_step",
        "forward_ms_per_step",
        "rest_ms_per_step",
        "outside_ms_per_pass",
        "part:draft",
    ):
        assert 0.01 <= rate(aa, key, None) <= 0.09, key
    slower = parts_trials(Parts(draft_effect=0.05), 40, 150, seed=12)
    extra = 53 * 0.35 * math.expm1(0.05)
    assert rate(slower, "draft_ms_per_step", math.expm1(0.05)) >= 0.90
    assert rate(slower, "part:draft", -extra / (53 * 2.65 + 60 + extra)) >= 0.90
    assert rate(slower, "forward_ms_per_step", 0.0) >= 0.90


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"precision": {"mde": 0.01, "metric": "draft_ms"}},
            "precision.metric: unknown metric 'draft_ms' (known: output_throughput",
        ),
        (
            {"precision": {"mde": 0.01, "metric": "draft_ms_per_step"}, "step_times": False},
            "step_times: precision.metric draft_ms_per_step is read from the step timer; set "
            "step_times: true",
        ),
        (
            {"gates": {"metrics": {"draft_ms_per_step": 0.05}}, "step_times": False},
            "step_times: draft_ms_per_step is read from the step timer",
        ),
        (
            {"precision": {"until": "gates", "metric": "draft_ms_per_step"}, "step_times": True},
            "metric: until: gates targets every gated metric",
        ),
        (
            {"primary_metric": "draft_ms_per_step", "step_times": True},
            "primary_metric: unknown metric 'draft_ms_per_step'",
        ),
    ],
)
def test_a_part_as_precision_target_or_gate_is_checked_before_any_engine(
    scenario_data: dict[str, Any], change: dict[str, Any], says: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**scenario_data, **change, "design": "one-engine"}, "s.yaml")
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_part_is_a_precision_target_and_a_gate_with_step_times(
    scenario_data: dict[str, Any],
) -> None:
    data = {
        **scenario_data,
        "step_times": True,
        "precision": {"mde": 0.01, "metric": "draft_ms_per_step"},
        "gates": {"metrics": {"draft_ms_per_step": 0.05, "output_throughput": 0.02}},
    }
    scenario = parse_scenario(data, "s.yaml")
    assert scenario.precision is not None and scenario.precision.metric == "draft_ms_per_step"
    # The default target hashes as before the field existed (stored runs stay comparable).
    plain = {**scenario_data, "precision": {"mde": 0.01}}
    named = {**scenario_data, "precision": {"mde": 0.01, "metric": "output_throughput"}}
    assert scenario_hash(parse_scenario(plain)) == scenario_hash(parse_scenario(named))
    assert scenario_hash(parse_scenario(data)) != scenario_hash(
        parse_scenario({**data, "precision": {"mde": 0.01}})
    )
    # --gate targets every gated metric: the single-row target gives way.
    gated = with_precision(scenario, None, None, "s.yaml", until="gates")
    assert gated.precision is not None and gated.precision.until == "gates"
    assert gated.precision.metric == "output_throughput"


def test_a_precision_run_on_the_draft_row_stops_there() -> None:
    """The shipped stopping rule on a part: it stops when the draft row's MDE reaches the
    target (its own noise, not throughput's), and says so."""
    from harness.config.scenario import Precision
    from testkit.simulate import Parts, parts_trials

    [trial] = parts_trials(
        Parts(),
        20,
        1,
        seed=5,
        precision=Precision(mde=0.02, metric="draft_ms_per_step", budget_s=1e9),
    )
    est, stopped = trial["draft_ms_per_step"], trial["stopped"]
    assert isinstance(stopped, PrecisionStop)
    assert stop_words(stopped).startswith(
        "target reached (draft_ms_per_step MDE <= ±2.00%) "
        f"after {trial['blocks']} blocks: draft_ms_per_step MDE"
    )
    assert est.mde is not None and est.mde <= 0.02 and est.units == trial["blocks"]


def test_a_gate_on_the_draft_row_fails_a_slower_drafter(tmp_path: Any) -> None:
    """gates.metrics.draft_ms_per_step: the drafter 10% slower (log) fails a 5% tolerance on
    its own row, judged on its interval like every gated metric; a same-speed drafter does
    not fail it."""
    from harness.wire.manifest import Manifest
    from harness.workflow import gate_run
    from testkit.factory import stored_run
    from testkit.simulate import Parts, PartsLaunch, drive_record, shared_run

    def stored(name: str, effect: float, seed: int) -> Any:
        launch = PartsLaunch(Parts(draft_effect=effect), np.random.default_rng(seed))
        _, record, _ = drive_record(shared_run(30, step_times=True), launch.measure, seed)
        folder = stored_run(
            tmp_path,
            name,
            [record],
            {"cpu_model": "x"},
            {"base": {"baseline": True}, "opt": {}},
            {
                "step_times": True,
                "design": "one-engine",
                "gates": {"metrics": {"draft_ms_per_step": 0.05}},
            },
        )
        _, manifest = Manifest.read(folder)
        data = manifest.model_dump(mode="json", exclude_unset=True)
        data["plan"] = {"design": "one-engine"}  # as a one-engine run's plan records it
        Manifest.model_validate(data).save(folder)
        return folder

    _, slower = gate_run(stored("slower", 0.10, 1))
    [draft] = [d for d in slower.decisions if d.check == "draft_ms_per_step"]
    assert draft.verdict == "REGRESSION" and slower.verdict == "REGRESSION"
    _, same = gate_run(stored("same", 0.0, 2))
    [draft] = [d for d in same.decisions if d.check == "draft_ms_per_step"]
    assert draft.verdict in ("PASS", "INCONCLUSIVE") and same.verdict != "REGRESSION"


def _parts_comparison(scenario_data: dict[str, Any]) -> Any:
    """A one-engine comparison of base and opt with step times (the drafter 5% slower)."""
    from harness.analysis.compare import Arms, compare_records
    from harness.engine.schedule import WarmUp, drive_shared_launch
    from harness.results.metrics import passes_frame
    from testkit.factory import run
    from testkit.simulate import Parts, PartsLaunch, shared_run

    launch = PartsLaunch(Parts(draft_effect=0.05), np.random.default_rng(9))
    passes, _ = drive_shared_launch(
        shared_run(20, step_times=True),
        launch.measure,
        None,
        None,
        1,
        None,
        log=lambda _m: None,
        warmup=WarmUp(),
        block_seed=9,
    )
    records = [run("base+opt", 0, 0, passes)]
    comparison = compare_records(
        records,
        Arms("base", ["opt"], design="one-engine", primary_metric="output_throughput"),
        "r",
        "unit",
        passes_frame(records),
    )
    return comparison


def test_a_swaps_part_is_marked_as_the_changes_own_row(scenario_data: dict[str, Any]) -> None:
    """medusa-proposer declares the drafter as its part: its candidate's draft row is marked
    (†) and named under the table; the primary metric stays the one tested first."""
    from harness.analysis.compare import mark_own_parts
    from harness.present.tables import footnotes, table_rows

    comparison = _parts_comparison(scenario_data)
    mark_own_parts(comparison, parse_scenario({**scenario_data, "step_times": True}))
    [cand] = comparison.candidates
    assert cand.own_part == "draft_ms_per_step"
    assert cand.own_part_why == (
        "the swap medusa-proposer changes it; the on-device proposer still waits for its "
        "drafts once per step, in take_draft_token_ids after the step, outside the timed "
        "draft: the row overstates the change; the throughput and latency rows include the "
        "wait"
    )
    _, rows = table_rows(comparison)
    marked = [r[0] for r in rows if r[0].endswith(" †")]
    assert marked == ["Draft time per step (ms) †"]
    [note] = [n for n in footnotes(comparison) if n.startswith("† ")]
    assert note.startswith(
        "† opt: Draft time per step (ms) is the part of the step its change "
        "lives in (the swap medusa-proposer changes it; the on-device "
        "proposer still waits"
    )
    assert "include the wait): its delta is the change at its own size, +5." in note
    assert note.endswith("(Output throughput (tok/s) stays the primary metric).")
    assert [r.key for r in cand.rows if r.role == "primary"] == ["output_throughput"]
    # An A/A of one choice changes nothing: no row is its change's own.
    twins = _parts_comparison(scenario_data)
    same = {
        "base": {"baseline": True, "implementation": "medusa-proposer:optimized"},
        "opt": {"implementation": "medusa-proposer:optimized"},
    }
    mark_own_parts(twins, parse_scenario({**scenario_data, "step_times": True, "variants": same}))
    assert twins.candidates[0].own_part is None


def test_an_overlays_part_comes_from_where_its_functions_run(scenario_data: dict[str, Any]) -> None:
    from harness.analysis.compare import mark_own_parts
    from harness.config.scenario import part_of_module
    from harness.wire.overlay import ArmOverlay, ChangeIdentity, OverlayCode, OverlaySpec

    assert part_of_module("vllm.v1.spec_decode.medusa") == "draft"
    assert part_of_module("vllm.model_executor.models.llama_eagle3") == "draft"
    assert part_of_module("vllm.v1.sample.rejection_sampler") == "rest"
    assert part_of_module("vllm.v1.worker.gpu_model_runner") is None
    assert part_of_module("vllm.model_executor.models.llama") is None

    def spec(*modules: str) -> OverlaySpec:
        code = [
            OverlayCode(
                module=m, name="f", kind="function", source="def f(): pass", line=1, file="x.py"
            )
            for m in modules
        ]
        change = ChangeIdentity(kind="diff", path="x.diff", sha256="0", files=["x.py"])
        return OverlaySpec(
            arms=[ArmOverlay(variant="base"), ArmOverlay(variant="opt", change=change, code=code)],
            functions=[f"{m}:f" for m in modules],
            active="base",
            vllm_location="/x",
        )

    plain = {
        **scenario_data,
        "step_times": True,
        "variants": {"base": {"baseline": True}, "opt": {}},
    }
    comparison = _parts_comparison(scenario_data)
    mark_own_parts(comparison, parse_scenario(plain), spec("vllm.v1.spec_decode.medusa"))
    assert comparison.candidates[0].own_part == "draft_ms_per_step"
    assert comparison.candidates[0].own_part_why == (
        "its overlay's functions run there (vllm.v1.spec_decode.medusa)"
    )
    # Functions in two parts, or in a module shared by the parts: no one part is named.
    for modules in (
        ("vllm.v1.spec_decode.medusa", "vllm.v1.sample.rejection_sampler"),
        ("vllm.v1.worker.gpu_model_runner",),
    ):
        comparison = _parts_comparison(scenario_data)
        mark_own_parts(comparison, parse_scenario(plain), spec(*modules))
        assert comparison.candidates[0].own_part is None, modules


def test_the_drafter_over_the_forward_leaves_out_what_moves_the_whole_pass() -> None:
    """draft_per_forward: the drafter's time over the verification forward's in the same pass.
    A pass the machine ran 30% slower moves both parts and so not their ratio; a drafter 20%
    slower moves the ratio by 20%; an arm without speculation has none."""
    from harness.results.metrics import pass_row
    from harness.wire.records import PassRecord, RequestRecord, SpecDecodeCounters, StepTimes

    sd = SpecDecodeCounters(
        num_drafts=10, num_draft_tokens=30, num_accepted_tokens=10, accepted_per_pos=[5, 3, 2]
    )
    request = RequestRecord(
        index=0,
        prompt_tokens=4,
        output_tokens=20,
        ttft_s=0.1,
        e2el_s=1.0,
        finish_reason="length",
        output_token_ids=[],
    )

    def row(slow: float, drafter: float, spec: SpecDecodeCounters | None = sd) -> dict[str, object]:
        st = StepTimes(
            steps=50, step_s=0.15 * slow, forward_s=0.05 * slow, draft_s=0.015 * slow * drafter
        )
        return pass_row(
            PassRecord(
                repeat=0,
                started_unix=0.0,
                duration_s=0.2 * slow,
                workload_hash="w",
                spec_decode=spec,
                step_times=st,
                requests=[request],
            )
        )

    assert row(1.0, 1.0)["draft_per_forward"] == pytest.approx(0.3)
    assert row(1.3, 1.0)["draft_per_forward"] == pytest.approx(0.3)
    assert row(1.3, 1.0)["draft_ms_per_step"] == pytest.approx(1.3 * 0.3)
    assert row(1.0, 1.2)["draft_per_forward"] == pytest.approx(0.36)
    unknown = row(1.0, 1.0, None)["draft_per_forward"]
    assert isinstance(unknown, float) and math.isnan(unknown)


def test_a_precision_run_on_the_drafter_over_the_forward_stops_there() -> None:
    from harness.config.scenario import Precision
    from testkit.simulate import Parts, parts_trials

    [trial] = parts_trials(
        Parts(),
        20,
        1,
        seed=5,
        precision=Precision(mde=0.03, metric="draft_per_forward", budget_s=1e9),
    )
    est, stopped = trial["draft_per_forward"], trial["stopped"]
    assert isinstance(stopped, PrecisionStop)
    assert (stopped.reason, stopped.metric, stopped.mde) == ("target", "draft_per_forward", 0.03)
    assert stopped.blocks == trial["blocks"] and (stopped.reached_mde or 1) <= 0.03
    assert est.mde is not None and est.mde <= 0.03 and est.units == trial["blocks"]
