"""Where the demo's wall time goes: engine start-up, measured generation, everything else.

    .venv/bin/python benchmarks/demo_breakdown.py [SCENARIO] [--runs N]

Runs `specbench run SCENARIO` N times (fresh processes each time), times the whole command,
and splits it using the timings each worker recorded and the wall time the parent measured
for each worker process. The harness's own overhead is the parent's time outside the worker
processes (CLI start, planning, manifests, statistics, rendering) plus each worker's Python
start-up and record building; the wait for a finished worker's process group to exit
(vLLM's multiprocessing resource tracker) is shown on its own line. Prints medians, as this
machine is shared and noisy; nothing here is a pass/fail gate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

PARTS = (
    "startup_s",
    "import_s",
    "models_s",
    "engine_start_s",
    "warmup_s",
    "measure_s",
    "shutdown_s",
    "finish_s",
)


def one_run(scenario: Path, results: Path, index: int) -> dict[str, float]:
    run_id = f"breakdown-{index}"
    start = time.perf_counter()
    proc, _ = run_scenario(scenario, results, "--run-id", run_id)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"run {index} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    loaded = load_run(results / run_id)
    split = dict.fromkeys(PARTS, 0.0)
    workers_wall = 0.0
    for record in loaded.runs:
        assert record.result is not None
        workers_wall += record.wall_s
        for part in PARTS:
            split[part] += getattr(record.result.timings, part)
    split["setup_s"] = float(loaded.manifest.get("timings", {}).get("setup_s", 0.0))
    split["wall_s"] = wall
    split["exit_s"] = workers_wall - sum(split[p] for p in PARTS)
    split["parent_s"] = wall - workers_wall - split["setup_s"]
    split["harness_s"] = split["parent_s"] + split["startup_s"] + split["finish_s"]
    return split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scenario", nargs="?", type=Path, default=ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
    )
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(args.scenario, Path(tmp), i) for i in range(args.runs)]
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    wall = med["wall_s"]
    rows = [
        ("engine start-up (LLM(...))", med["engine_start_s"]),
        ("measured generation", med["measure_s"]),
        ("warm-up requests", med["warmup_s"]),
        ("importing vLLM/torch in workers", med["import_s"]),
        ("vLLM engine shutdown", med["shutdown_s"]),
        ("worker process-group exit (vLLM's)", med["exit_s"]),
        ("model preparation (cached builds)", med["models_s"] + med["setup_s"]),
        ("harness overhead (harness code)", med["harness_s"]),
        ("  of which CLI/plan/stats/report", med["parent_s"]),
        ("  of which worker start + records", med["startup_s"] + med["finish_s"]),
    ]
    print(f"{args.scenario.name}: median of {args.runs} run(s), wall {wall:.1f} s")
    for label, seconds in rows:
        print(f"  {label:<38} {seconds:7.1f} s  {100 * seconds / wall:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
