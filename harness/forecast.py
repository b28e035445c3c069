"""How many blocks (or rounds) and how much wall time a target minimum detectable effect needs,
forecast from a stored run's noise and timings. Pure reading of results: no engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.compare import compare_results
from harness.errors import ResultsError
from harness.metrics import passes_frame
from harness.stats import blocks_needed
from harness.store import RunResults


@dataclass(frozen=True)
class Forecast:
    """What reaching `target_mde` on output throughput would take, per the stored run."""

    run_id: str
    design: str
    target_mde: float
    unit: str  # "block" or "round"
    unit_sd: float  # sd of one unit's log difference in the stored run
    units_needed: int | None  # None: not reachable within the search limit
    seconds_per_unit: float
    launch_overhead_s: float  # import + engine start + warm-up + shutdown, per launch
    wall_s: float | None  # forecast wall time of a run that reaches the target
    measured_mde: float | None  # what the stored run itself reached
    measured_units: int


def forecast(results: RunResults, target_mde: float) -> Forecast:
    """Blocks (one-engine) or rounds (launch-per-arm) needed for `target_mde`, and the wall
    time, from the stored run's output-throughput unit noise and its launches' timings."""
    comparison = compare_results(results)
    rows = [r for c in comparison.candidates for r in c.rows if r.key == "output_throughput"]
    if not rows:
        raise ResultsError(f"{results.path}: no output-throughput comparison to forecast from")
    # The noisiest candidate decides.
    row = max(rows, key=lambda r: (r.estimate.components.unit_sd or 0.0)
              if r.estimate.components else 0.0)
    comp = row.estimate.components
    if comp is None or comp.unit_sd is None or not comp.unit_sd > 0:
        raise ResultsError(f"{results.path}: the run has too few units to estimate their noise "
                           "(needs at least 2 blocks, or 2 rounds)")
    ok = [r for r in results.runs if r.status == "ok" and r.result is not None]
    timings = [r.result.timings for r in ok if r.result is not None]
    overhead = float(np.median([t.import_s + t.engine_start_s + t.warmup_s + t.shutdown_s
                                + t.startup_s for t in timings])) if timings else 0.0
    passes = passes_frame(results.runs)
    one_engine = comparison.design == "one-engine"
    if one_engine:
        # A block's wall time: its passes plus the switches between them, from start times.
        per_launch = []
        for _, launch in passes.groupby("launch"):
            starts = launch.sort_values("started_unix")
            blocks = starts["block"].nunique()
            span = (starts["started_unix"].iloc[-1] + starts["duration_s"].iloc[-1]
                    - starts["started_unix"].iloc[0])
            per_launch.append(span / max(blocks, 1))
        seconds = float(np.median(per_launch))
    else:
        seconds = float(sum(np.median([r.wall_s for r in ok if r.variant == v])
                            for v in {r.variant for r in ok}))
    needed = blocks_needed(comp.unit_sd, target_mde, "relative")
    wall = None
    if needed is not None:
        wall = (overhead + needed * seconds) if one_engine else needed * seconds
    return Forecast(results.run_id, comparison.design, target_mde,
                    "block" if one_engine else "round", comp.unit_sd, needed, seconds,
                    overhead, wall, row.estimate.mde, row.estimate.units)


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
           else f"{f.seconds_per_unit:.0f} s per round of launches")
    lines.append(f"MDE ±{100 * f.target_mde:.2f}% needs {f.units_needed} {f.unit}s: about "
                 f"{math.ceil(f.wall_s / 60)} min ({per})")
    return lines
