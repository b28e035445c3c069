"""How many blocks (or rounds) and how much wall time a target minimum detectable effect needs,
forecast from a stored run's noise and timings. Pure reading of results: no engine.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.catalog import BUILTIN_MODELS
from harness.config.scenario import ServeSettings, Workload
from harness.errors import ResultsError, SpecbenchError
from harness.results.run import Run, load_run, stored_manifests
from harness.wire.manifest import MANIFEST, Manifest
from harness.wire.spec import Plan, RunSpec


@dataclass(frozen=True)
class Forecast:
    """What reaching `target_mde` on output throughput would take, per the stored run."""

    run_id: str
    design: str
    target_mde: float
    unit: str  # "block", "launch" (one-engine, several launches) or "round"
    unit_sd: float  # sd of one unit's log difference in the stored run (its error term)
    units_needed: int | None  # None: not reachable within the search limit
    seconds_per_unit: float
    launch_overhead_s: float  # import + engine start + warm-up + shutdown, per launch
    wall_s: float | None  # forecast wall time of a run that reaches the target
    measured_mde: float | None  # what the stored run itself reached
    measured_units: int


def forecast(results: Run, target_mde: float) -> Forecast:
    """Blocks (one-engine, one launch), launches (one-engine, several: their means are the
    error term) or rounds (launch-per-arm) needed for `target_mde`, and the wall time, from
    the stored run's output-throughput error term and its launches' timings."""
    from harness.analysis.compare import compare_run
    from harness.analysis.stats import blocks_needed

    comparison = compare_run(results)
    rows = [r for c in comparison.candidates for r in c.rows if r.key == "output_throughput"]
    if not rows:
        raise ResultsError(f"{results.path}: no output-throughput comparison to forecast from")
    # The noisiest candidate decides.
    row = max(rows, key=lambda r: r.estimate.error_sd or 0.0)
    est = row.estimate
    if est.error_sd is None or not est.error_sd > 0 or est.error_n < 2:
        raise ResultsError(
            f"{results.path}: the run has too few units to estimate their noise "
            "(needs at least 2 blocks, or 2 rounds)"
        )
    ok = [r for r in results.runs if r.status == "ok" and r.result is not None]
    timings = [r.result.timings for r in ok if r.result is not None]
    overhead = (
        float(
            np.median(
                [
                    t.import_s + t.engine_start_s + t.warmup_s + t.shutdown_s + t.startup_s
                    for t in timings
                ]
            )
        )
        if timings
        else 0.0
    )
    passes = results.passes  # the frame compare_run built
    one_engine = comparison.design == "one-engine"
    # The unit the interval's error term is made of: the blocks of one launch, or (several
    # launches) whole launches, whose means carry the launch x arm interaction too.
    unit = est.error_unit or ("block" if one_engine else "round")
    if one_engine:
        # A block's wall time: its passes plus the switches between them, from start times.
        per_launch, blocks_per_launch = [], []
        for _, launch in passes.groupby("launch"):
            starts = launch.sort_values("started_unix")
            blocks = starts["block"].nunique()
            span = (
                starts["started_unix"].iloc[-1]
                + starts["duration_s"].iloc[-1]
                - starts["started_unix"].iloc[0]
            )
            per_launch.append(span / max(blocks, 1))
            blocks_per_launch.append(blocks)
        seconds = float(np.median(per_launch))
        if unit == "launch":  # more launches of as many blocks as these had
            seconds = overhead + float(np.median(blocks_per_launch)) * seconds
    else:
        seconds = float(
            sum(
                np.median([r.wall_s for r in ok if r.variant == v]) for v in {r.variant for r in ok}
            )
        )
    needed = blocks_needed(est.error_sd, target_mde, "relative")
    wall = None
    if needed is not None:
        wall = (overhead + needed * seconds) if unit == "block" else needed * seconds
    return Forecast(
        results.run_id,
        comparison.design,
        target_mde,
        unit,
        est.error_sd,
        needed,
        seconds,
        overhead,
        wall,
        est.mde,
        est.error_n,
    )


def describe(f: Forecast) -> list[str]:
    """The forecast in a few lines for the terminal."""
    lines = [
        f"from run {f.run_id} ({f.design}): output-throughput sd per {f.unit} difference "
        f"{100 * f.unit_sd:.2f}%; that run reached MDE "
        + (f"±{100 * f.measured_mde:.2f}%" if f.measured_mde is not None else "n/a")
        + f" with {f.measured_units} {f.unit}s"
    ]
    if f.units_needed is None or f.wall_s is None:
        lines.append(f"MDE ±{100 * f.target_mde:.2f}% is out of reach at this noise")
        return lines
    per = (
        f"{f.seconds_per_unit:.1f} s per block + {f.launch_overhead_s:.0f} s engine "
        "start-up and shutdown"
        if f.unit == "block"
        else f"{f.seconds_per_unit:.0f} s per launch, engine start included"
        if f.unit == "launch"
        else f"{f.seconds_per_unit:.0f} s per round of launches"
    )
    lines.append(
        f"MDE ±{100 * f.target_mde:.2f}% needs {f.units_needed} {f.unit}s: about "
        f"{math.ceil(f.wall_s / 60)} min ({per})"
    )
    return lines


@dataclass(frozen=True)
class WallEstimate:
    """How long a plan's launches will take, timed from a stored run's launches and passes."""

    run_id: str
    launches: int
    low_s: float  # every launch at its planned (or, with precision, its minimum) passes
    high_s: float  # precision launches at their budget
    overhead_s: float  # per launch: start-up, engine start, warm-up, shutdown
    matched: int  # launches timed from passes of the same cell/settings in the stored run
    seconds_per_token: float  # the stored run's median pass time per output token


def _tokens(run: RunSpec) -> int:
    return run.workload.num_prompts * run.workload.max_tokens


def _settings(run: RunSpec, base_dir: str | Path | None = None) -> str:
    """What decides a pass's speed: engine arguments (the model and draft among them),
    workload, mode and serve load; not names, order, passes or rounds. A prompts file is
    named by its absolute path (relative ones against `base_dir`, the plan's folder)."""
    return _settings_of(run.engine_args, run.workload, run.mode, run.serve, base_dir)


# Engine arguments that only add what vLLM reports, not what a pass costs: a run from before
# specbench set them times a plan as well as one after.
REPORTING_ONLY = ("per_request_spec_decode_metrics",)


def _settings_of(
    engine_args: Mapping[str, Any],
    workload: Workload,
    mode: str,
    serve: ServeSettings | None,
    base_dir: str | Path | None,
) -> str:
    engine_args = {k: v for k, v in engine_args.items() if k not in REPORTING_ONLY}
    load = workload.model_dump(mode="json")
    if workload.path is not None and base_dir is not None:
        path = Path(workload.path).expanduser()
        load["path"] = os.path.normpath(path if path.is_absolute() else Path(base_dir) / path)
    return json.dumps(
        [dict(engine_args), load, mode, serve.model_dump(mode="json") if serve else None],
        sort_keys=True,
        default=str,
    )


def _stored_settings(spec: Any, base_dir: str | Path | None) -> str | None:
    """_settings of a RunSpec as a stored plan holds it (any version): None when it lacks
    what the settings are made of."""
    if not isinstance(spec, dict) or not isinstance(spec.get("engine_args"), dict):
        return None
    try:
        serve = spec.get("serve")
        return _settings_of(
            spec["engine_args"],
            Workload.model_validate(spec.get("workload")),
            str(spec.get("mode") or "offline"),
            ServeSettings.model_validate(serve) if serve else None,
            base_dir,
        )
    except ValueError:  # pydantic's ValidationError among them
        return None


def _stored_base(manifest: Manifest) -> str | None:
    """The folder a stored plan's relative paths resolve against: its base_dir, else (runs
    from before plans stored it) its scenario file's folder."""
    if manifest.plan.base_dir:
        return manifest.plan.base_dir
    scenario_file = manifest.scenario_file
    return str(Path(scenario_file).parent) if scenario_file else None


def _stored_specs(manifest: Manifest) -> dict[str, str | None]:
    """run_key -> the settings of each launch in a stored plan."""
    base = _stored_base(manifest)
    return {
        str(spec["run_key"]): _stored_settings(spec, base)
        for spec in manifest.plan.runs
        if spec.get("run_key")
    }


def estimate_wall(plan: Plan, stored: Run) -> WallEstimate:
    """Wall time of `plan` from `stored`: per launch, the stored launches' median overhead plus
    the passes it will run at the speed the stored run measured for the same settings (a
    sweep's cells match cell by cell), else at the stored run's median speed per token."""
    ok = [r for r in stored.runs if r.status == "ok" and r.result is not None and r.result.passes]
    if not ok:
        raise ResultsError(f"{stored.path}: no completed launch to time a plan from")
    overhead = float(
        np.median([r.wall_s - r.result.timings.measure_s for r in ok if r.result is not None])
    )
    stored_plan = _stored_specs(stored.manifest)
    per_token: dict[str, list[float]] = {}
    every: list[float] = []
    for r in ok:
        assert r.result is not None
        key = stored_plan.get(r.run_key)
        for p in r.result.passes:
            tokens = sum(q.output_tokens for q in p.requests) or 1
            every.append(p.duration_s / tokens)
            if key is not None:
                per_token.setdefault(key, []).append(p.duration_s / tokens)
    typical = float(np.median(every))
    low = high = 0.0
    matched = 0
    for run in plan.runs:
        found = per_token.get(_settings(run, plan.base_dir))
        matched += found is not None
        pass_s = (float(np.median(found)) if found else typical) * _tokens(run)
        low += overhead + run.expected_passes * pass_s
        high += (
            max(run.precision.budget_s, overhead + run.expected_passes * pass_s)
            if run.precision is not None
            else overhead + run.expected_passes * pass_s
        )
    return WallEstimate(stored.run_id, len(plan.runs), low, high, overhead, matched, typical)


def describe_wall(e: WallEstimate) -> str:
    span = (
        f"about {_minutes(e.low_s)}"
        if e.high_s - e.low_s < 1
        else f"{_minutes(e.low_s)} to {_minutes(e.high_s)} (precision launches stop between "
        "their minimum blocks and their budget)"
    )
    return (
        f"wall time: {span} for {e.launches} launch(es), timed from run {e.run_id}: "
        f"{e.overhead_s:.0f} s per launch to start and stop, passes at its measured speed "
        f"({e.matched} of {e.launches} launch(es) matched to the same settings, the rest at "
        f"its median {1000 * e.seconds_per_token:.2f} ms per output token)"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def matched_launches(plan: Plan, manifest: Manifest) -> int:
    """How many of `plan`'s launches a stored run (its manifest) ran with the same settings
    (_settings: model, draft, engine arguments, workload, mode) and finished ok."""
    ok = {e.run_key for e in manifest.runs if e.status == "ok"}
    timed = {
        key for run_key, key in _stored_specs(manifest).items() if key is not None and run_key in ok
    }
    return sum(_settings(run, plan.base_dir) in timed for run in plan.runs)


def newest_run_like(results_root: Path, plan: Plan) -> Run | None:
    """The stored run to time `plan` from: the newest complete run in `results_root` that ran
    at least one of the plan's launches with the same model and settings (matched_launches),
    whatever its scenario's name; a run of the plan's own scenario (by name) first. None when
    there is none."""
    found: list[tuple[bool, float, Path]] = []
    for run_dir, manifest in stored_manifests(results_root):
        if manifest.status != "complete" or not matched_launches(plan, manifest):
            continue
        when = (
            manifest.created_unix
            if manifest.created_unix is not None
            else (run_dir / MANIFEST).stat().st_mtime
        )
        found.append((manifest.scenario.get("name") == plan.scenario_name, when, run_dir))
    for _, _, run_dir in sorted(found, key=lambda f: (f[0], f[1]), reverse=True):
        try:
            stored = load_run(run_dir)
        except SpecbenchError:  # damaged, or its scenario no longer parses
            continue
        if any(r.status == "ok" and r.result is not None and r.result.passes for r in stored.runs):
            return stored
    return None


@dataclass(frozen=True)
class WallBound:
    """The longest a plan can take, from the limits that stop each launch, with no stored run:
    every launch's worker is killed at its timeout_s (counted from its process's start, so
    engine start and warm-up are inside); a precision launch starts no block that would end
    past its budget_s (also counted with engine start inside)."""

    launches: int
    timeouts_s: tuple[float, ...]  # the launches' timeout_s, distinct, ascending
    stop_s: float  # after a timeout: the most stopping the worker's process group takes
    hard_s: float  # sum over launches of timeout_s + stop_s: no run takes longer
    budgeted: int  # launches with a precision budget
    budgets_s: tuple[float, ...]  # their budget_s, distinct, ascending
    budget_bound_s: float  # sum: budgeted launches at their budget, the rest at hard
    builtin_models: tuple[str, ...]  # built-in models a run may first have to build

    @property
    def at_most_s(self) -> float:
        return self.budget_bound_s if self.budgeted else self.hard_s


def wall_bound(plan: Plan) -> WallBound:
    """The upper bound the plan's limits imply, launch by launch (harness.execute.local
    run_one and _kill_group; the runner's deadline_of for precision budgets)."""
    from harness.wire.protocol import KILL_GRACE_S, SIGKILL_WAIT_S

    stop = KILL_GRACE_S + SIGKILL_WAIT_S
    hard = [run.timeout_s + stop for run in plan.runs]
    bounded = [
        min(run.precision.budget_s, h) if run.precision is not None else h
        for run, h in zip(plan.runs, hard, strict=True)
    ]
    models: list[str] = []
    for run in plan.runs:
        spec = run.engine_args.get("speculative_config") or {}
        for name in (run.engine_args.get("model"), spec.get("model")):
            if isinstance(name, str) and name in BUILTIN_MODELS and name not in models:
                models.append(name)
    budgets = [run.precision.budget_s for run in plan.runs if run.precision is not None]
    return WallBound(
        len(plan.runs),
        tuple(sorted({r.timeout_s for r in plan.runs})),
        stop,
        sum(hard),
        len(budgets),
        tuple(sorted(set(budgets))),
        sum(bounded),
        tuple(models),
    )


def _limit(values: tuple[float, ...]) -> str:
    return f"{values[0]:g} s" if len(values) == 1 else f"{values[0]:g}-{values[-1]:g} s"


def describe_bound(b: WallBound) -> str:
    """'at most 4.8 min: 1 launch, ended by its 290 s precision budget ...', saying what the
    bound is made of."""
    from harness.wire.protocol import MODELS_BUILD_TIMEOUT_S

    if b.launches == 0:
        return "at most 0 s: nothing to launch"
    one = b.launches == 1
    launches = "1 launch" if one else f"{b.launches} launches"
    each = "" if one else "each "
    timeout = (
        f"its {_limit(b.timeouts_s)} timeout"
        if len(b.timeouts_s) == 1
        else f"its timeout ({_limit(b.timeouts_s)})"
    )
    killed = (
        f"{each}killed at {timeout} (timeout_s, engine start included), "
        f"+ up to {b.stop_s:g} s to stop {'it' if one else 'each'}"
    )
    if not b.budgeted:
        text = f"at most {_minutes(b.hard_s)}: {launches}, {killed}"
    else:
        who = launches if b.budgeted == b.launches else f"{b.budgeted} of {launches}"
        budget = (
            f"its {_limit(b.budgets_s)} precision budget"
            if len(b.budgets_s) == 1
            else f"its precision budget ({_limit(b.budgets_s)})"
        )
        text = (
            f"at most {_minutes(b.budget_bound_s)}: {who}, "
            f"{'' if b.budgeted == 1 else 'each '}ended by {budget} "
            "(budget_s, engine start included: no block starts that would end past it)"
            + ("" if b.budgeted == b.launches else ", the rest at their timeouts")
            + f"; never past {_minutes(b.hard_s)}, {killed}"
        )
    if b.builtin_models:
        text += (
            f"; plus, before the first launch, up to {MODELS_BUILD_TIMEOUT_S / 60:.0f} "
            f"min to build {', '.join(b.builtin_models)} where not yet cached"
        )
    return text
