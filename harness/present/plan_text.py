"""`specbench plan` as text: what `run` would launch, and how long it will take (at most, from
the launches' limits; about, from a stored run of the same model and settings). Rendering
only: the numbers come from harness.analysis.forecast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.analysis.forecast import (
    describe,
    describe_bound,
    describe_wall,
    estimate_wall,
    forecast,
    wall_bound,
)
from harness.analysis.looks import plan_rule
from harness.analysis.setup import Setup
from harness.config.scenario import Scenario
from harness.results.run import Run
from harness.wire.spec import Plan


def render_plan(
    scenario: Scenario,
    plan: Plan,
    stored: Run | None,
    from_run_given: bool,
    target_mde: float | None = None,
    results_dir: Path | None = None,
) -> list[str]:
    """The lines `specbench plan` prints. `stored`: the run to time the plan from (--from,
    else harness.analysis.forecast.newest_run_like), or None; `from_run_given`: it came from
    --from, so also forecast what `target_mde` (default: the scenario's precision.mde, else
    1%) needs; `results_dir`: where a stored run was looked for, named when none was found."""
    lines = [
        f"scenario {plan.scenario_name} ({plan.scenario_hash}): baseline "
        f"{plan.baseline}, candidates {', '.join(plan.candidates)}",
        f"  {setup_line(Setup.of(scenario))}",
    ]
    precision = scenario.precision
    row = (
        ""
        if precision is None or precision.metric == "output_throughput"
        else f"{precision.metric} "
    )
    target = (
        ""
        if precision is None
        else f"; precision: {row}MDE ±{100 * precision.mde:g}%"
        if precision.mde is not None and precision.until == "mde"
        else "; precision: until every gate can decide"
    )
    lines.append(
        f"  design: {plan.design}{target}"
        + (
            f" within {precision.budget_s:g} s" + (" per cell" if plan.cells else "")
            if precision
            else ""
        )
    )
    if scenario.planned_runs is not None:
        lines.append(f"  {series_line(scenario.planned_runs)}")
    for name, found in plan.overlays.items():
        change = scenario.variants[name].change
        lines.append(f"  variants.{name}.{change}: {getattr(scenario.variants[name], str(change))}")
        lines += [f"    {line}" for line in found]
    if plan.cells:
        axes = scenario.sweep.paths if scenario.sweep else []
        lines.append(
            f"  sweep: {len(plan.cells)} cells over {', '.join(axes)}; launches in "
            "an order that spreads drift (the cells shuffled anew each round)"
        )
        lines += [f"    {cell.id}: {cell.label}" for cell in plan.cells]
    for r in plan.runs:
        impl = (
            (f" impl={r.implementation}" if r.implementation else "")
            + (f" patch={r.patch}" if r.patch else "")
            + (f" python={r.python}" if r.python else "")
        )
        spec = r.engine_args.get("speculative_config")
        spec_text = (
            f" spec={json.dumps(spec, sort_keys=True)}"
            if spec
            else " no speculation"
            if scenario.draft is not None
            else ""
        )
        if r.step_times:
            spec_text += " (steps timed, speed probe)" if r.speed_probe else " (steps timed)"
        what = (
            f"{r.blocks} block(s) of {' '.join(r.block_order)}"
            + (" (at least)" if r.precision else "")
            if r.design == "one-engine"
            else f"{r.repeats} pass(es)"
        )
        lines.append(
            f"  {r.order + 1:>3}. {r.run_key:<24} {what} x "
            f"{r.workload.num_prompts} prompts{impl}{spec_text}"
        )
    lines += wall_lines(plan, stored, from_run_given, results_dir)
    lines += budget_lines(plan, stored)
    if from_run_given and stored is not None and not plan.cells:
        mde = target_mde or (precision.mde if precision else None) or 0.01
        lines += [f"  {line}" for line in describe(forecast(stored, mde))]
    return lines


def series_line(planned: int) -> str:
    """What a planned series (planned_runs) means for each of its runs."""
    return (
        f"planned series: {planned} runs of this comparison (planned_runs); each run's gate "
        f"judges the runs so far combined, each a launch ({plan_rule(planned)}); `run` "
        f"refuses a run past the {planned} complete ones"
    )


def wall_lines(
    plan: Plan, stored: Run | None, from_run_given: bool = False, results_dir: Path | None = None
) -> list[str]:
    """How long the plan takes: the estimate from `stored` (when there is one) and the upper
    bound its launches' limits imply (always)."""
    bound = describe_bound(wall_bound(plan))
    if stored is None:
        where = f" in {results_dir}" if results_dir is not None else ""
        return [
            f"  wall time: {bound}",
            f"  no estimate: no complete run of the same model and settings{where} to "
            "time it from (or give --from RUN)",
        ]
    lines = [f"  {describe_wall(estimate_wall(plan, stored))}"]
    name = stored.scenario.name
    if not from_run_given and name != plan.scenario_name:
        lines.append(
            f"    (run {stored.run_id} is of scenario {name}, with the same model and settings)"
        )
    lines.append(f"  upper bound: {bound}")
    return lines


def budget_lines(plan: Plan, stored: Run | None) -> list[str]:
    """A warning when a precision budget, at a stored run's start, warm-up and block times,
    leaves fewer blocks than an interval needs: the run would end without a result."""
    if stored is None:
        return []
    # Here, not at the top: `plan` without a stored run imports no scipy (stats does).
    from harness.analysis.budget import LaunchCosts, launch_costs
    from harness.config.scenario import PRECISION_MIN_BLOCKS
    from harness.present.stops import costs_phrase

    costs = [c for c in map(launch_costs, stored.runs) if c is not None]
    budgets = sorted({r.precision.budget_s for r in plan.runs if r.precision is not None})
    if not costs or not budgets:
        return []
    typical = LaunchCosts(
        float(np.median([c.overhead_s for c in costs])),
        float(np.median([c.block_s for c in costs])),
    )
    short = [b for b in budgets if typical.blocks_within(b) < PRECISION_MIN_BLOCKS]
    return [
        f"  warning: budget_s={b:g} leaves about {typical.blocks_within(b)} block(s) "
        f"after the start and warm-up ({costs_phrase(typical)}, timed from run "
        f"{stored.run_id}); an interval needs {PRECISION_MIN_BLOCKS}: budget_s: "
        f"{typical.budget_for():.0f} would give one"
        for b in short
    ]


def setup_line(setup: Setup) -> str:
    """One line on how each pass was driven, for the footnotes and `specbench plan`."""
    per_pass = (
        f"{setup.num_prompts} {setup.kind} prompts x {setup.max_tokens} tokens per pass, "
        f"TP {setup.tensor_parallel_size}"
    )
    if setup.synthetic_acceptance is not None:
        per_pass += (
            f"; acceptance SYNTHETIC ({setup.synthetic_acceptance}): vLLM's synthetic "
            "rejection sampling, alike in every arm, so a throughput delta is the "
            "implementation's alone"
        )
    if setup.mode == "offline":
        return f"offline: LLM.generate in the worker, batch {setup.batch_size}; {per_pass}"
    rate = (
        f"{setup.request_rate:g} req/s (burstiness {setup.burstiness:g})"
        if setup.request_rate is not None
        else "all at once"
    )
    return (
        f"serve: a vLLM OpenAI server per launch, streamed /v1/completions, "
        f"concurrency {setup.concurrency}, arrivals {rate}, "
        f"max_num_seqs {setup.batch_size}; {per_pass}"
    )
