"""A/A check on real vLLM: the same variant in both arms must rarely look different, and the
spread of A/A deltas over several runs must match the intervals the runs printed.

    .venv/bin/python benchmarks/aa_check.py [SCENARIO] [--runs N] [--design D] [--repeats N]

Takes the scenario (default: the CPU Medusa demo, one-engine with its precision target), makes
both arms the baseline variant's exact configuration (in the one-engine design the harness
still switches between the two identical arms and checks every pass's proof), runs it N times
through `specbench run`, and prints each run's output-throughput delta, 95% interval, p-value
and MDE, then: how many runs were significant (about 1 in 20 expected), and the spread of the
deltas against the printed standard errors (z = log delta / se should have sd near 1). Where
the run has the speed-adjusted row (step times, or the scenario's speed_probe), the same for
it: its delta and interval per run, or why it was withdrawn.
This is a benchmark to run and read, not a CI gate; tests/unit/test_stats.py measures the
false-positive rate over thousands of simulated trials.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_run  # noqa: E402
from harness.config.scenario import ADJUSTED_METRIC  # noqa: E402
from harness.present.adjusted import adjustment_note  # noqa: E402
from harness.present.stops import stop_line  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402


def aa_scenario(
    path: Path, design: str | None, repeats: int | None, rounds: int | None
) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    base_name = next(n for n, v in data["variants"].items() if v.get("baseline"))
    arm = {k: v for k, v in data["variants"][base_name].items() if k != "baseline"}
    data["name"] = f"{data['name']}-aa"
    data["variants"] = {"a": {"baseline": True, **arm}, "a-again": dict(arm)}
    if design:
        data["design"] = design
        if design == "launch-per-arm":
            data.pop("precision", None)
    if repeats:
        data["repeats"] = repeats
    if rounds:
        data["rounds"] = rounds
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scenario", nargs="?", type=Path, default=ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
    )
    parser.add_argument("--runs", type=int, default=1, help="A/A runs, one after another")
    parser.add_argument("--design", choices=["one-engine", "launch-per-arm"], default=None)
    parser.add_argument("--rounds", type=int, default=None, help="override rounds")
    parser.add_argument("--repeats", type=int, default=None, help="override repeats")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the run folders under this results directory"
    )
    args = parser.parse_args()

    data = aa_scenario(args.scenario, args.design, args.repeats, args.rounds)
    rows = []
    shown: list[tuple[float, float, bool]] = []  # the speed-adjusted rows shown
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep) if args.keep else Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        scenario = Path(scratch) / "aa.yaml"
        scenario.write_text(yaml.safe_dump(data, sort_keys=False))
        for i in range(args.runs):
            start = time.perf_counter()
            run_id = f"aa-{int(time.time())}-{i}"
            proc, _ = run_scenario(scenario, tmp, "--run-id", run_id)
            wall = time.perf_counter() - start
            if proc.returncode not in (0, 6):
                sys.exit(f"A/A run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            comparison = compare_run(load_run(tmp / run_id))
            row = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
            est = row.estimate
            ci = (
                f"[{100 * est.ci_low:+.2f}%, {100 * est.ci_high:+.2f}%]"
                if est.ci_low is not None and est.ci_high is not None
                else "no interval"
            )
            mde = f"{100 * est.mde:.2f}%" if est.mde is not None else "n/a"
            print(
                f"run {i + 1}: {row.baseline:.0f} vs {row.candidate:.0f} tok/s "
                f"{100 * est.delta:+.2f}% {ci} p={est.p_value:.3f} MDE {mde} units={est.units}"
                f" ({est.test}) significant={est.significant} wall={wall:.0f}s"
                + (f" [{stop_line(comparison.stops[0])}]" if comparison.stops else ""),
                flush=True,
            )
            adjusted = _adjusted(comparison)
            if adjusted is not None:
                print(f"  speed-adjusted: {adjusted[0]}", flush=True)
                if adjusted[1] is not None:
                    shown.append(adjusted[1])
            rows.append((est.delta, est.se, est.significant, wall))
    deltas = np.array([math.log1p(d) for d, *_ in rows])
    ses = np.array([se or math.nan for _, se, *_ in rows])
    flagged = sum(sig for *_, sig, _ in rows)
    print(
        f"A/A {data['name']} x{len(rows)} (design {data.get('design', 'auto')}): "
        f"{flagged} significant; median wall {np.median([r[3] for r in rows]):.0f}s"
    )
    if len(rows) >= 2:
        z = deltas / ses
        print(
            f"  deltas: mean {100 * deltas.mean():+.2f}%, sd {100 * deltas.std(ddof=1):.2f}%; "
            f"printed se: median {100 * np.nanmedian(ses):.2f}%; "
            f"z = delta/se: sd {np.nanstd(z, ddof=1):.2f} (about 1 when the intervals are "
            f"honest), max |z| {np.nanmax(np.abs(z)):.2f}"
        )
    if shown:
        z_adj = np.array([math.log1p(d) / se for d, se, _ in shown])
        print(
            f"  speed-adjusted row: shown in {len(shown)} of {len(rows)} runs, "
            f"{sum(sig for *_, sig in shown)} significant; z sd "
            f"{np.std(z_adj, ddof=1) if len(shown) >= 2 else math.nan:.2f}, "
            f"max |z| {np.max(np.abs(z_adj)):.2f}"
        )
    return 1 if flagged > max(1, len(rows) // 10) else 0


def _adjusted(comparison: Any) -> tuple[str, tuple[float, float, bool] | None] | None:
    """The speed-adjusted row's line (its interval, then its note as the table words it: what
    it is adjusted by, or why it was withdrawn), and (delta, se, significant) where it is
    shown; None: the run has no such row."""
    row = next((r for r in comparison.candidates[0].rows if r.key == ADJUSTED_METRIC), None)
    if row is None or row.adjustment is None:
        return None
    est, note = row.estimate, adjustment_note(row.adjustment)
    if est.ci_low is None or est.ci_high is None or est.se is None:
        return note, None
    return (
        f"{100 * est.delta:+.2f}% [{100 * est.ci_low:+.2f}%, {100 * est.ci_high:+.2f}%] "
        f"significant={est.significant}; {note}",
        (est.delta, est.se, est.significant),
    )


if __name__ == "__main__":
    sys.exit(main())
