"""The no-speculation arm: how a scenario names it (and what it refuses), the plan it gets
(its own engine, no speculative_config), the 'Speedup vs no speculation' row, and where the
speedup goes, checked against a hand computation on fixed step timings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.analysis.compare import Arms, compare_records
from harness.analysis.speedup import decompose, decomposition_frame
from harness.config.engine_args import engine_args_for
from harness.config.scenario import parse_scenario
from harness.errors import ScenarioError
from harness.plan.design import one_engine_blocker, resolved_design
from harness.plan.plan import expand_plan
from harness.present.figures import forest_plot, speedup_decomposition
from harness.present.tables import render_markdown, render_terminal
from harness.results.metrics import passes_frame
from harness.wire.records import PassRecord, SpecDecodeCounters, StepTimes
from testkit.factory import request, run
from tests.conftest import ROOT


def with_nospec(data: dict[str, Any], **variant: Any) -> dict[str, Any]:
    data["variants"]["nospec"] = {"speculative_config": "none", **variant}
    return data


def test_speculative_config_none_is_an_arm_without_speculation(
    scenario_data: dict[str, Any],
) -> None:
    s = parse_scenario(with_nospec(scenario_data))
    assert not s.variants["nospec"].speculation and s.no_speculation_arm == "nospec"
    args = engine_args_for(s, "nospec")
    # Without speculation vLLM refuses per-request spec-decode metrics: neither is set.
    assert "speculative_config" not in args and "per_request_spec_decode_metrics" not in args
    assert engine_args_for(s, "base")["speculative_config"]["method"] == "medusa"
    blocker = one_engine_blocker(s)
    assert blocker is not None and "cannot switch drafting off at run time" in blocker
    assert resolved_design(s) == "launch-per-arm"
    assert not s.expects_identical_outputs("nospec")
    scenario_data["variants"]["nospec"] = {"speculation": False}
    assert parse_scenario(scenario_data).no_speculation_arm == "nospec"
    yaml_null = with_nospec(scenario_data)
    yaml_null["variants"]["nospec"]["speculative_config"] = None
    assert parse_scenario(yaml_null).no_speculation_arm == "nospec"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"variants.nospec.implementation": "medusa-proposer:optimized"},
            "variants.nospec: speculation: false runs no drafting, so implementation",
        ),
        (
            {"variants.other": {"speculation": False}},
            "variants.other.speculation: false: nospec already runs without speculation",
        ),
        (
            {
                "draft": None,
                "variants.base.implementation": None,
                "variants.opt.implementation": None,
                "variants.opt.env": {"X": "1"},
            },
            "variants.nospec.speculation: false, but no arm speculates",
        ),
        (
            {"variants.nospec.speculation": True},
            "speculative_config: none and speculation: true contradict",
        ),
        (
            {"design": "one-engine"},
            "design: one-engine is not possible: variants.nospec runs without speculation",
        ),
    ],
)
def test_what_a_no_speculation_arm_refuses(
    scenario_data: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    data = with_nospec(scenario_data)
    for path, value in change.items():
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    with pytest.raises(ScenarioError) as err:
        expand_plan(parse_scenario(data))  # the design is refused where it is decided: plan
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_the_plan_times_steps_in_every_launch_of_such_a_run(scenario_data: dict[str, Any]) -> None:
    s = parse_scenario({**with_nospec(scenario_data), "rounds": 3})
    plan = expand_plan(s, ROOT)
    assert plan.design == "launch-per-arm" and len(plan.runs) == 9
    assert all(r.step_times for r in plan.runs)
    # Without such an arm the timer is still on by default offline (it costs ~0.05% of a
    # step), and can be turned off; a no-speculation arm cannot go without it.
    without = {
        **scenario_data,
        "variants": {k: v for k, v in scenario_data["variants"].items() if k != "nospec"},
    }
    assert all(r.step_times for r in expand_plan(parse_scenario(without), ROOT).runs)
    off = expand_plan(parse_scenario({**without, "step_times": False}), ROOT)
    assert not any(r.step_times for r in off.runs)


def timed_pass(
    repeat: int,
    duration_s: float,
    steps: int,
    step_s: float,
    forward_s: float,
    draft_s: float,
    drafts: tuple[int, int, int] | None,
) -> PassRecord:
    """Ten output tokens (two requests of five) in `duration_s`, with fixed step times."""
    sd = (
        None
        if drafts is None
        else SpecDecodeCounters(
            num_drafts=drafts[0],
            num_draft_tokens=drafts[1],
            num_accepted_tokens=drafts[2],
            accepted_per_pos=[drafts[2]],
        )
    )
    return PassRecord(
        repeat=repeat,
        started_unix=0.0,
        duration_s=duration_s,
        requests=[request(0, 0.1, 0.5), request(1, 0.1, 0.5)],
        spec_decode=sd,
        workload_hash="w",
        step_times=StepTimes(steps=steps, step_s=step_s, forward_s=forward_s, draft_s=draft_s),
    )


def launches(spec_durations: list[float]) -> list[Any]:
    """Per round: a no-speculation launch (10 steps of 10 ms, 8 ms of them the forward; 1.25 s
    a pass) and a Medusa launch (4 steps of 20 ms: 2 ms draft, 12 ms forward), k = 3, alpha
    = 0.5 (6 of 12 drafted tokens accepted over 4 drafts)."""
    runs = []
    for r, spec_s in enumerate(spec_durations):
        runs.append(
            run(
                "nospec",
                r,
                2 * r,
                [timed_pass(i, 1.25, 10, 0.1, 0.08, 0.0, None) for i in range(2)],
            )
        )
        runs.append(
            run(
                "medusa",
                r,
                2 * r + 1,
                [timed_pass(i, spec_s, 4, 0.08, 0.048, 0.008, (4, 12, 6)) for i in range(2)],
            )
        )
    return runs


def test_the_decomposition_against_a_hand_computation() -> None:
    passes = passes_frame(launches([1.0]))
    d = decompose(passes, "medusa", "nospec", 3)
    assert d is not None
    # By hand: speedup 10 / 8 tok/s = 1.25 = 4 (ideal) x 2.5 / (4 x 1) (acceptance: 2.5 tokens
    # per step, not 4) x 10 / 12 (draft: 2 ms on a 10 ms step) x 12 / 16 (verification: the
    # forward 12 ms, not 8) x 0.8 (other: rest of the step 16 / 20, nothing outside).
    want = {"ideal": 4.0, "acceptance": 0.625, "draft": 10 / 12, "verification": 0.75, "other": 0.8}
    assert {f.key: f.value for f in d.factors} == pytest.approx(want)
    assert {f.key: f.value for f in d.parts_of_other} == pytest.approx(
        {"rest_of_step": 0.8, "outside": 1.0}
    )
    # Each request gains 2.5 tokens a step (1 + 6 accepted / 4 drafts), and so does the batch.
    assert {f.key: f.value for f in d.parts_of_acceptance} == pytest.approx(
        {"per_request": 0.625, "batch": 1.0}
    )
    assert d.measured.value == pytest.approx(1.25)
    assert all(f.low is None for f in [*d.factors, d.measured])  # one round: no interval
    assert d.raw["step0_ms"] == pytest.approx(10) and d.raw["draft_ms"] == pytest.approx(2)
    # Leviathan: alpha 0.5, k 3: (1 - 0.5^4) / 0.5 = 1.875 tokens; c = 2 / 10: 1.5625x.
    assert d.alpha == 0.5 and d.acceptance_length == pytest.approx(2.5)
    assert d.leviathan_tokens == pytest.approx(1.875)
    assert d.leviathan_speedup == pytest.approx(1.5625)


def test_factors_multiply_back_in_every_round_and_get_intervals() -> None:
    passes = passes_frame(launches([1.0, 0.95, 1.05]))
    d = decompose(passes, "medusa", "nospec", 3)
    assert d is not None and d.rounds == [0, 1, 2]
    assert math.prod(f.value for f in d.factors) == pytest.approx(d.measured.value)
    assert math.prod(f.value for f in d.parts_of_other) == pytest.approx(d.factors[-1].value)
    assert math.prod(f.value for f in d.parts_of_acceptance) == pytest.approx(d.factors[1].value)
    want = math.exp(sum(math.log(1.25 / s) for s in (1.0, 0.95, 1.05)) / 3)
    assert d.measured.value == pytest.approx(want)
    other = d.factors[-1]
    assert other.low is not None and other.high is not None
    assert other.low < other.value < other.high
    # Step times are the same in every round: those factors have no spread.
    draft = d.factors[2]
    assert draft.low == pytest.approx(draft.value) == pytest.approx(draft.high)


def test_the_table_gets_the_speedup_row_and_dashes() -> None:
    runs = launches([1.0, 0.95, 1.05])
    for baseline, candidates in (("medusa", ["nospec"]), ("nospec", ["medusa"])):
        comparison = compare_records(
            runs,
            Arms(baseline, candidates, no_speculation="nospec", draft_tokens={"medusa": 3}),
            "r",
            "unit",
        )
        text = render_terminal(comparison)
        row = next(line for line in text.splitlines() if "Speedup vs no speculation" in line)
        assert "1 (reference)" in row and "1.25× [" in row
        acceptance = next(line for line in text.splitlines() if "Acceptance rate" in line)
        assert "—" in acceptance and "50.00" in acceptance
        assert "Where the speedup goes: medusa vs nospec (k = 3; 3 rounds" in text
        assert "Leviathan et al. 2023" in text and "1.56×" in text
        md = render_markdown(comparison)
        assert "| = measured speedup | 1.25" in md and "| draft cost | 0.833× [" in md


def test_a_notebook_frame_and_a_figure_of_it() -> None:
    comparison = compare_records(
        launches([1.0, 0.95, 1.05]),
        Arms("nospec", ["medusa"], no_speculation="nospec", draft_tokens={"medusa": 3}),
        "r",
        "u",
    )
    frame = decomposition_frame(comparison.decompositions)
    top = frame[frame["part_of"].isna() & (frame["term"] != "measured")]
    measured = frame.loc[frame["term"] == "measured", "factor"].item()
    assert math.prod(top["factor"]) == pytest.approx(measured)
    assert set(frame.loc[frame["part_of"] == "acceptance", "term"]) == {"per_request", "batch"}
    fig = speedup_decomposition(comparison, "u")
    assert fig is not None and len(fig.axes) == 1
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "ideal: k + 1 tokens per step" and labels[-1] == "= measured speedup"
    unnamed = compare_records(launches([1.0]), Arms("nospec", ["medusa"]), "r", "u")
    assert speedup_decomposition(unnamed, "u") is None  # none named: none drawn


def test_figures_leave_out_what_the_arm_without_speculation_lacks() -> None:
    comparison = compare_records(
        launches([1.0, 0.95, 1.05]),
        Arms("medusa", ["nospec"], no_speculation="nospec", draft_tokens={"medusa": 3}),
        "r",
        "u",
    )
    fig = forest_plot(comparison, "u")
    assert fig is not None and len(fig.axes) == 1  # no empty acceptance panel
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "Output throughput (tok/s)" in labels
    assert not any("cceptance" in label for label in labels)


def simulated_passes(
    rng: np.random.Generator, rounds: int, launch_sd: float, part_sd: float, passes: int = 3
) -> pd.DataFrame:
    """Launch-per-arm passes of a no-speculation arm (10 ms steps: 8 ms forward) and a
    speculative one (20 ms steps: 2 ms draft, 12 ms forward), 90% of each pass in its steps.
    Each launch runs at its own speed (lognormal, launch_sd: the machine's launch-to-launch
    noise) and each time component varies on its own (part_sd), per launch and per pass."""
    rows = []
    for r in range(rounds):
        for variant, steps, d, v, o in (
            ("nospec", 100, 0.0, 8.0, 2.0),
            ("spec", 40, 2.0, 12.0, 6.0),
        ):
            speed = rng.lognormal(0, launch_sd)
            parts = rng.lognormal(0, part_sd, size=3)
            for _ in range(passes):
                dd, vv, oo = (
                    x * speed * p * rng.lognormal(0, part_sd / 3)
                    for x, p in zip((d, v, o), parts, strict=True)
                )
                step_s = steps * (dd + vv + oo) / 1000
                duration = step_s / 0.9
                rows.append(
                    {
                        "variant": variant,
                        "round": r,
                        "output_tokens": 800,
                        "duration_s": duration,
                        "output_throughput": 800 / duration,
                        "steps": steps,
                        "step_s": step_s,
                        "forward_s": steps * vv / 1000,
                        "draft_s": steps * dd / 1000,
                        "num_drafts": 320 if d else 0,
                        "num_draft_tokens": 960 if d else 0,
                        "num_accepted_tokens": 480 if d else 0,
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("rounds", [3, 5])
def test_factor_intervals_cover_under_launch_noise(rounds: int) -> None:
    """Coverage of the shipped decomposition's intervals (t over rounds) under launch-level
    noise (8% sd, as between launches here) and component noise (4%): the truth is the
    noise-free factor. 400 simulated runs each."""
    truth = {"draft": 10 / 12, "verification": 12 / 16, "measured": 1.25, "rest_of_step": 16 / 20}
    rng = np.random.default_rng(3)
    hits = dict.fromkeys(truth, 0)
    trials = 400
    for _ in range(trials):
        d = decompose(simulated_passes(rng, rounds, 0.08, 0.04), "spec", "nospec", 3)
        assert d is not None
        found = {f.key: f for f, _ in d.terms()}
        for key, value in truth.items():
            f = found[key]
            assert f.low is not None and f.high is not None
            hits[key] += f.low <= value <= f.high
    coverage = {k: v / trials for k, v in hits.items()}
    assert all(c >= 0.92 for c in coverage.values()), coverage
