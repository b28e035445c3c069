"""How many blocks (or rounds) and how much wall time a target minimum detectable effect needs,
forecast from a stored run's noise and timings. Pure reading of results: no engine.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import ResultsError
from harness.plan.plan import Plan, RunSpec
from harness.results.store import MANIFEST, RunResults, load_results


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


def forecast(results: RunResults, target_mde: float) -> Forecast:
    """Blocks (one-engine, one launch), launches (one-engine, several: their means are the
    error term) or rounds (launch-per-arm) needed for `target_mde`, and the wall time, from
    the stored run's output-throughput error term and its launches' timings."""
    from harness.analysis.compare import compare_results
    from harness.analysis.metrics import passes_frame
    from harness.analysis.stats import blocks_needed

    comparison = compare_results(results)
    rows = [r for c in comparison.candidates for r in c.rows if r.key == "output_throughput"]
    if not rows:
        raise ResultsError(f"{results.path}: no output-throughput comparison to forecast from")
    # The noisiest candidate decides.
    row = max(rows, key=lambda r: r.estimate.error_sd or 0.0)
    est = row.estimate
    if est.error_sd is None or not est.error_sd > 0 or est.error_n < 2:
        raise ResultsError(f"{results.path}: the run has too few units to estimate their noise "
                           "(needs at least 2 blocks, or 2 rounds)")
    ok = [r for r in results.runs if r.status == "ok" and r.result is not None]
    timings = [r.result.timings for r in ok if r.result is not None]
    overhead = float(np.median([t.import_s + t.engine_start_s + t.warmup_s + t.shutdown_s
                                + t.startup_s for t in timings])) if timings else 0.0
    passes = passes_frame(results.runs)
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
            span = (starts["started_unix"].iloc[-1] + starts["duration_s"].iloc[-1]
                    - starts["started_unix"].iloc[0])
            per_launch.append(span / max(blocks, 1))
            blocks_per_launch.append(blocks)
        seconds = float(np.median(per_launch))
        if unit == "launch":  # more launches of as many blocks as these had
            seconds = overhead + float(np.median(blocks_per_launch)) * seconds
    else:
        seconds = float(sum(np.median([r.wall_s for r in ok if r.variant == v])
                            for v in {r.variant for r in ok}))
    needed = blocks_needed(est.error_sd, target_mde, "relative")
    wall = None
    if needed is not None:
        wall = (overhead + needed * seconds) if unit == "block" else needed * seconds
    return Forecast(results.run_id, comparison.design, target_mde, unit, est.error_sd, needed,
                    seconds, overhead, wall, est.mde, est.error_n)


def describe(f: Forecast) -> list[str]:
    """The forecast in a few lines for the terminal."""
    lines = [f"from run {f.run_id} ({f.design}): output-throughput sd per {f.unit} difference "
             f"{100 * f.unit_sd:.2f}%; that run reached MDE "
             + (f"±{100 * f.measured_mde:.2f}%" if f.measured_mde is not None else "n/a")
             + f" with {f.measured_units} {f.unit}s"]
    if f.units_needed is None or f.wall_s is None:
        lines.append(f"MDE ±{100 * f.target_mde:.2f}% is out of reach at this noise")
        return lines
    per = (f"{f.seconds_per_unit:.1f} s per block + {f.launch_overhead_s:.0f} s engine "
           "start-up and shutdown" if f.unit == "block"
           else f"{f.seconds_per_unit:.0f} s per launch, engine start included"
           if f.unit == "launch" else f"{f.seconds_per_unit:.0f} s per round of launches")
    lines.append(f"MDE ±{100 * f.target_mde:.2f}% needs {f.units_needed} {f.unit}s: about "
                 f"{math.ceil(f.wall_s / 60)} min ({per})")
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


def _settings(run: RunSpec) -> str:
    """What decides a pass's speed: engine arguments and workload (not names or order)."""
    return json.dumps([run.engine_args, run.workload.model_dump(mode="json"), run.mode,
                       run.serve.model_dump(mode="json") if run.serve else None],
                      sort_keys=True, default=str)


def estimate_wall(plan: Plan, stored: RunResults) -> WallEstimate:
    """Wall time of `plan` from `stored`: per launch, the stored launches' median overhead plus
    the passes it will run at the speed the stored run measured for the same settings (a
    sweep's cells match cell by cell), else at the stored run's median speed per token."""
    ok = [r for r in stored.runs if r.status == "ok" and r.result is not None
          and r.result.passes]
    if not ok:
        raise ResultsError(f"{stored.path}: no completed launch to time a plan from")
    overhead = float(np.median([r.wall_s - r.result.timings.measure_s for r in ok
                                if r.result is not None]))
    stored_plan = {r["run_key"]: r for r in stored.manifest.get("plan", {}).get("runs", [])
                   if isinstance(r, dict)}
    per_token: dict[str, list[float]] = {}
    every: list[float] = []
    for r in ok:
        assert r.result is not None
        spec = stored_plan.get(r.run_key)
        key = _settings(RunSpec.model_validate(spec)) if spec else None
        for p in r.result.passes:
            tokens = sum(q.output_tokens for q in p.requests) or 1
            every.append(p.duration_s / tokens)
            if key is not None:
                per_token.setdefault(key, []).append(p.duration_s / tokens)
    typical = float(np.median(every))
    low = high = 0.0
    matched = 0
    for run in plan.runs:
        found = per_token.get(_settings(run))
        matched += found is not None
        pass_s = (float(np.median(found)) if found else typical) * _tokens(run)
        low += overhead + run.expected_passes * pass_s
        high += (max(run.precision.budget_s, overhead + run.expected_passes * pass_s)
                 if run.precision is not None else overhead + run.expected_passes * pass_s)
    return WallEstimate(stored.run_id, len(plan.runs), low, high, overhead, matched, typical)


def describe_wall(e: WallEstimate) -> str:
    span = (f"about {_minutes(e.low_s)}" if e.high_s - e.low_s < 1 else
            f"{_minutes(e.low_s)} to {_minutes(e.high_s)} (precision launches stop between "
            "their minimum blocks and their budget)")
    return (f"wall time: {span} for {e.launches} launch(es), timed from run {e.run_id}: "
            f"{e.overhead_s:.0f} s per launch to start and stop, passes at its measured speed "
            f"({e.matched} of {e.launches} launch(es) matched to the same settings, the rest at "
            f"its median {1000 * e.seconds_per_token:.2f} ms per output token)")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def newest_run_of(results_root: Path, scenario_name: str) -> RunResults | None:
    """The newest stored run of a scenario (by name) with a completed launch, if any."""
    if not results_root.is_dir():
        return None
    found = sorted((p for p in results_root.glob(f"{scenario_name}-*/{MANIFEST}")),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for manifest in found:
        try:
            results = load_results(manifest.parent)
        except ResultsError:
            continue
        if any(r.status == "ok" and r.result is not None and r.result.passes
               for r in results.runs):
            return results
    return None
