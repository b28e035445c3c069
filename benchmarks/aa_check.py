"""A/A check on real vLLM: the same variant twice must show no significant throughput delta.

    .venv/bin/python benchmarks/aa_check.py [SCENARIO] [--rounds R] [--repeats N]

Takes the scenario (default: the CPU Medusa demo), makes both arms the baseline variant's
exact configuration, runs it through `specbench run`, and prints the output-throughput delta,
its 95% interval, p-value, the minimum detectable effect and the wall time. By construction a
5%-level test flags about 1 A/A run in 20, so this is a benchmark to run and read, not a CI
gate; tests/unit/test_stats.py measures the false-positive rate over thousands of trials.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.compare import compare_results  # noqa: E402
from harness.store import load_results  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", type=Path,
                        default=ROOT / "scenarios" / "cpu-medusa-proposer.yaml")
    parser.add_argument("--rounds", type=int, default=None, help="override rounds")
    parser.add_argument("--repeats", type=int, default=None, help="override repeats")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the run folder under this results directory")
    args = parser.parse_args()

    data = yaml.safe_load(args.scenario.read_text())
    base_name = next(n for n, v in data["variants"].items() if v.get("baseline"))
    arm = {k: v for k, v in data["variants"][base_name].items() if k != "baseline"}
    data["name"] = f"{data['name']}-aa"
    data["variants"] = {"a": {"baseline": True, **arm}, "a-again": dict(arm)}
    if args.rounds:
        data["rounds"] = args.rounds
    if args.repeats:
        data["repeats"] = args.repeats
    with tempfile.TemporaryDirectory() as scratch:
        tmp = str(args.keep) if args.keep else scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        scenario = Path(scratch) / "aa.yaml"
        scenario.write_text(yaml.safe_dump(data, sort_keys=False))
        start = time.perf_counter()
        run_id = f"aa-{int(time.time())}"
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(scenario),
                               "--results-dir", tmp, "--run-id", run_id], cwd=ROOT,
                              capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 6):
            sys.exit(f"A/A run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        comparison = compare_results(load_results(Path(tmp) / run_id))
    row = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    est = row.estimate
    ci = (f"[{100 * est.ci_low:+.2f}%, {100 * est.ci_high:+.2f}%]"
          if est.ci_low is not None and est.ci_high is not None else "no interval")
    print(f"A/A {data['name']}: rounds={data.get('rounds', 1)} repeats={data.get('repeats', 1)}"
          f" wall={wall:.0f}s")
    print(f"  output throughput {row.baseline:.1f} vs {row.candidate:.1f} tok/s: "
          f"{100 * est.delta:+.2f}% {ci} p={est.p_value} ({est.test}) "
          f"significant={est.significant}")
    if est.mde is not None:
        print(f"  minimum detectable effect (80% power): {100 * est.mde:.2f}%")
    print(f"  CV: a={est.cv_baseline} a-again={est.cv_candidate}")
    return 1 if est.significant else 0


if __name__ == "__main__":
    sys.exit(main())
