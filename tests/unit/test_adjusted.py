"""The speed-adjusted output-throughput row (harness.analysis.adjusted): the regression itself,
its checks, and a few simulated launches through the shipped scheduler whose noise is the
machine's speed (testkit.speed). The rates with 500+ trials a cell are
benchmarks/adjusted_stress.py's (docs/statistics.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.adjusted import KEY, adjust, covariate_of, declared_part, fit
from harness.config.scenario import Precision, parse_scenario
from harness.errors import ScenarioError
from harness.present.adjusted import adjustment_note
from testkit.scenarios import MINIMAL
from testkit.speed import Speed, speed_trials


def test_the_fit_reads_the_delta_where_the_covariate_did_not_move() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0, 0.05, 200)
    d = 0.01 - 1.3 * x + rng.normal(0, 0.002, 200)
    one = fit(d, x, np.zeros(200, dtype=int))
    assert one is not None
    assert one.est == pytest.approx(0.01, abs=0.001)
    assert one.theta == pytest.approx(-1.3, abs=0.02)
    assert one.df == 198 and one.removed > 0.99
    # Several launches: theta within them, the launches' adjusted means the error term.
    launch = np.repeat(np.arange(4), 50)
    several = fit(d + 0.003 * launch, x, launch)
    assert several is not None and several.df == 3 and several.error_unit == "launch"


def test_a_covariate_that_moved_is_seen_and_its_move_widens_the_interval() -> None:
    rng = np.random.default_rng(4)
    n = 80
    speed = rng.normal(0, 0.05, n)
    fwd, rest = speed + rng.normal(0, 0.01, n), speed + rng.normal(0, 0.01, n)
    d = -1.2 * speed + rng.normal(0, 0.003, n)
    launch = np.zeros(n, dtype=int)
    quiet = adjust(d, (fwd + rest) / 2, fwd, rest, launch, 0.5)
    moved = adjust(d, (fwd + 0.03 + rest) / 2, fwd + 0.03, rest, launch, 0.5)
    assert quiet is not None and moved is not None
    assert quiet.contrast is not None and moved.contrast is not None
    assert not quiet.contrast.moved() and moved.contrast.moved()
    assert moved.widen > 5 * quiet.widen


def test_each_part_is_adjusted_by_the_parts_it_leaves_alone() -> None:
    assert covariate_of("draft") == (("forward", "rest"), ("forward", "rest"))
    assert covariate_of("forward") == (("rest",), ("rest", "draft"))
    assert "forward" in covariate_of(None)[0]
    assert declared_part("medusa-proposer:optimized") == "draft"
    assert declared_part("v2-draft-handoff:with-copy") == "rest"
    assert declared_part("patch:testkit.patches.medusa_wait:install") is None
    assert declared_part(None) is None


def test_a_drafter_only_aa_is_not_significant_and_narrower_than_the_primary() -> None:
    """12 A/A launches (60 blocks, the speed's noise): the adjusted row is shown in most,
    significant in at most one (a rate above ~20% fails), and its interval is narrower than
    the primary row's (the adjustment removes most of the speed)."""
    found = speed_trials(Speed(), 60, 12, seed=21)
    shown = [r["adjusted"] for r in found if r["adjusted"].ci_low is not None]
    assert len(shown) >= 8
    assert sum(e.significant for e in shown) <= 1
    width = np.median([e.ci_high - e.ci_low for e in shown])
    primary = np.median([r["primary"].ci_high - r["primary"].ci_low for r in found])
    assert width < 0.7 * primary


def test_a_drafter_change_is_covered_and_a_moved_forward_withdraws_the_row() -> None:
    model = Speed(effects=(math.log(1.10), 0.0, 0.0, 0.0))
    truth = model.truth()
    found = speed_trials(model, 60, 8, seed=22)
    shown = [r["adjusted"] for r in found if r["adjusted"].ci_low is not None]
    assert len(shown) >= 6
    assert sum(e.ci_low <= truth <= e.ci_high for e in shown) >= len(shown) - 1
    moved = speed_trials(Speed(effects=(0.0, 0.05, 0.0, 0.0)), 60, 6, seed=23)
    assert all(r["adjusted"].ci_low is None for r in moved)
    assert all(r["adjustment"].withdrawn is not None for r in moved)
    notes = [adjustment_note(r["adjustment"]) for r in moved]
    assert all(n.startswith("withdrawn: the ") for n in notes)


def test_a_precision_run_may_target_the_adjusted_row() -> None:
    precision = Precision(mde=0.03, metric=KEY, budget_s=1e6, max_blocks=200)
    found = speed_trials(Speed(), 20, 2, seed=24, precision=precision)
    # The primary row alone needs about 60 blocks for 3% here; the adjusted row far fewer.
    assert all(20 <= r["blocks"] < 60 for r in found), [r["blocks"] for r in found]
    data = {**MINIMAL, "design": "one-engine", "step_times": False}
    data["precision"] = {"mde": 0.02, "metric": KEY}
    with pytest.raises(ScenarioError, match="step_times"):
        parse_scenario(data)


def test_stalls_outside_the_steps_are_trimmed_as_the_primary_trims_them() -> None:
    """1 pass in 20 with its time outside the steps 5x (the step parts do not see it): the
    primary row trims, and so does the adjusted row, which stays narrower and covers 0."""
    found = speed_trials(Speed(outside_stall_every=20), 60, 6, seed=25)
    shown = [r for r in found if r["adjusted"].ci_low is not None]
    assert len(shown) >= 4
    for r in shown:
        assert r["primary"].robust and r["adjusted"].robust
        assert "trimmed" in (r["adjusted"].test or "")
        a, p = r["adjusted"], r["primary"]
        assert a.ci_high - a.ci_low < p.ci_high - p.ci_low
    assert sum(r["adjusted"].significant for r in shown) <= 1


def test_the_speed_probe_sees_a_change_that_slows_every_step_part_alike() -> None:
    """The step parts' blind spot: the forward and the rest both 1% slower look like a slower
    machine to them, so their row misses the truth in most runs. Adjusted by the speed probe
    (no change touches it) the same launches are covered, nothing is widened, and the note
    names the probe."""
    blind = (0.0, 0.01, 0.01, 0.0)
    parts = speed_trials(Speed(effects=blind), 60, 8, seed=26)
    probed_model = Speed(effects=blind, probe_us=90.0)
    probed = speed_trials(probed_model, 60, 8, seed=26)

    def covered(found: list[dict[str, object]], truth: float) -> int:
        rows = [r["adjusted"] for r in found if getattr(r["adjusted"], "ci_low", None)]
        return sum(e.ci_low <= truth <= e.ci_high for e in rows)  # type: ignore[attr-defined]

    assert covered(parts, Speed(effects=blind).truth()) <= 4
    assert covered(probed, probed_model.truth()) >= 7
    facts = [r["adjustment"] for r in probed]
    assert all(a is not None and a.widen == 0.0 and "speed probe" in a.covariate for a in facts)
    note = adjustment_note(facts[0])
    assert note.startswith("speed-adjusted by the speed probe (a fixed Python loop timed")


def test_a_probe_the_change_moved_withdraws_the_row() -> None:
    """A change that reaches the probe itself (say, a busy thread it starts), 20% slower: the
    probe's own delta moved, so the row is withdrawn with a line naming it."""
    found = speed_trials(Speed(probe_us=90.0, probe_effect=0.2), 60, 4, seed=27)
    notes = [adjustment_note(r["adjustment"]) for r in found]
    assert all(n.startswith("withdrawn: the speed probe moved with the change (") for n in notes)
    assert all(r["adjusted"].ci_low is None for r in found)


def test_the_probes_twin_sees_a_change_that_slowed_the_probe_by_little() -> None:
    """The probe's own blind spot: a change that slows the probe itself by 1.5% (through the
    worker's interpreter or core) hides in its own delta, which carries the machine's whole
    speed, and biases the row by theta times that. Its twin runs the same loop in another
    process at the same moment, so the probe over its twin sees the move (the speed cancels):
    the row is widened by the bias it would cause, and covers where the probe alone does not."""
    drafter = (math.log(1.10), 0.0, 0.0, 0.0)
    slowed = math.log(1.015)
    alone = Speed(effects=drafter, probe_us=90.0, probe_effect=slowed, probe_sigma_own=0.04)
    twinned = Speed(
        effects=drafter, probe_us=90.0, probe_effect=slowed, probe_sigma_own=0.04, twin=True
    )
    without = speed_trials(alone, 60, 8, seed=31)
    checked = speed_trials(twinned, 60, 8, seed=31)

    def covered(found: list[dict[str, object]], truth: float) -> int:
        rows = [r["adjusted"] for r in found if getattr(r["adjusted"], "ci_low", None)]
        return sum(e.ci_low <= truth <= e.ci_high for e in rows)  # type: ignore[attr-defined]

    assert covered(without, alone.truth()) <= 5
    assert covered(checked, twinned.truth()) >= 7
    facts = [r["adjustment"] for r in checked]
    assert all(a is not None and a.twin and a.widen > 0.003 for a in facts)
    assert all(a.contrast is not None and a.contrast.low > 0.01 for a in facts)
    note = adjustment_note(facts[0])
    twin = "checked against its twin (the same loop in another process at the same moment)"
    assert twin in note and "the probe over its twin +1.4" in note
    assert "for the probe's own move" in note
    assert "what the twin cannot see: a change that slows the whole machine at those" in note
    unchecked = adjustment_note(without[0]["adjustment"])
    assert "checked only by its own delta (no twin ran beside it)" in unchecked


def test_a_probe_the_change_slowed_past_the_margin_is_withdrawn_by_its_twin() -> None:
    found = speed_trials(Speed(probe_us=90.0, probe_effect=math.log(1.04), twin=True), 60, 4, 32)
    notes = [adjustment_note(r["adjustment"]) for r in found]
    head = "withdrawn: the speed probe over its twin is not within ±2% (+"
    assert all(n.startswith(head) for n in notes), notes
    assert all("the change slowed the probe itself, in vLLM's worker;" in n for n in notes)
    assert all(n.count("over its twin") == 1 for n in notes)  # the ratio given once


def test_the_speed_probe_needs_the_step_timer() -> None:
    data = {**MINIMAL, "design": "one-engine", "step_times": False, "speed_probe": True}
    with pytest.raises(ScenarioError, match="speed_probe: is read with the step timer"):
        parse_scenario(data)
    serve = {**MINIMAL, "mode": "serve", "speed_probe": True}
    with pytest.raises(ScenarioError, match="speed_probe"):
        parse_scenario(serve)
    variants = {**MINIMAL["variants"], "target": {"speculation": False}}
    reference = {**MINIMAL, "speed_probe": True, "variants": variants}
    with pytest.raises(ScenarioError, match="speed_probe: costs the same time every step"):
        parse_scenario(reference)
    assert parse_scenario({**MINIMAL, "speed_probe": True}).speed_probe
