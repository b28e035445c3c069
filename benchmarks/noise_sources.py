"""Where the demo's pass-to-pass noise comes from on this machine: the
machine's CPU time sampled from /proc/stat every 20 ms while a run goes on (steal, other
processes' user and nice time, idle), each measured pass given the shares of its own window,
and their correlations with the pass's parts (log output throughput, verification forward per
step, rest of the step, time outside the steps). The CPU frequency is read from
/sys/devices/system/cpu/cpu*/cpufreq where a guest exposes it (a KVM guest here does not:
/proc/cpuinfo's MHz is the host's nominal figure), and said when it cannot be.

    .venv/bin/python benchmarks/noise_sources.py SCENARIO [--results-dir /tmp/noise]
        [--run DIR --samples FILE]   # read a run already made with its samples

The correlations use each pass's deviation from its (arm, block) mean, so that neither the
arms' difference nor the launch's drift is read as noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.run import load_run  # noqa: E402
from testkit.processes import run_scenario  # noqa: E402

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_stat() -> list[float]:
    """The machine's jiffies by FIELDS, all CPUs together."""
    with Path("/proc/stat").open() as f:
        parts = f.readline().split()[1:9]
    return [float(x) for x in parts]


def read_freq() -> float | None:
    """Mean current CPU frequency (MHz) over the CPUs that expose it; None where none do."""
    found = [
        float(p.read_text()) / 1000.0
        for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")
    ]
    return float(np.mean(found)) if found else None


class Sampler(threading.Thread):
    """/proc/stat (and the frequency) every `every` seconds until stopped."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        self.rows: list[list[float | None]] = []  # time, FIELDS' jiffies, frequency

    def run(self) -> None:
        while not self.done.is_set():
            self.rows.append([time.time(), *read_stat(), read_freq()])
            time.sleep(self.every)


def per_pass(passes: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Each pass's shares of the machine's CPU time over its own window."""
    t = samples["t"].to_numpy()
    out: list[dict[str, float]] = []
    for _, p in passes.iterrows():
        start, end = float(p["started_unix"]), float(p["started_unix"] + p["duration_s"])
        i, j = np.searchsorted(t, start), np.searchsorted(t, end)
        if j - i < 2:
            out.append({})
            continue
        delta = samples.iloc[j - 1][list(FIELDS)] - samples.iloc[i][list(FIELDS)]
        total = float(delta.sum())
        row = {f"{k}_share": float(delta[k]) / total for k in FIELDS} if total > 0 else {}
        freq = samples["freq"].iloc[i:j].dropna()
        row["freq_mhz"] = float(freq.mean()) if not freq.empty else np.nan
        out.append(row)
    return pd.DataFrame(out, index=passes.index)


def report(run_dir: Path, samples: pd.DataFrame) -> None:
    run = load_run(run_dir)
    passes = run.passes.copy()
    shares = per_pass(passes, samples)
    frame = pd.concat([passes, shares], axis=1)
    logs = {
        "throughput": np.log(frame["output_throughput"]),
        "forward": np.log(frame["forward_ms_per_step"]),
        "rest": np.log(frame["rest_ms_per_step"]),
        "outside": np.log(frame["outside_ms_per_pass"]),
    }
    causes = ["steal_share", "nice_share", "user_share", "idle_share", "foreign_cpu"]
    data = pd.DataFrame({**logs, **{c: frame[c] for c in causes if c in frame}})
    group = [frame["variant"], frame["block"]]
    dev = data - data.groupby(group).transform("mean")
    print(f"{run_dir.name}: {len(frame)} passes, {len(samples)} samples of /proc/stat")
    print(
        "  machine over the run: "
        + ", ".join(f"{c} {100 * frame[c].mean():.2f}%" for c in causes[:4] if c in frame)
    )
    freq = frame.get("freq_mhz")
    print(
        "  CPU frequency: "
        + (
            f"{freq.mean():.0f} MHz, sd {freq.std():.1f}"
            if freq is not None and freq.notna().any()
            else "not readable here (no cpufreq in this guest)"
        )
    )
    print("  correlation of each pass's deviation from its (arm, block) mean:")
    corr = dev.corr()
    for cause in [c for c in causes if c in dev]:
        print(
            f"    {cause:12s}"
            + "".join(f"  {part} {corr.loc[cause, part]:+.2f}" for part in logs)
            + f"  (sd {100 * dev[cause].std():.2f} points)"
        )
    print(
        "    parts among themselves: "
        + ", ".join(
            f"{a}~{b} {corr.loc[a, b]:+.2f}"
            for a, b in [("forward", "rest"), ("forward", "outside"), ("outside", "throughput")]
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path, nargs="?")
    parser.add_argument("--results-dir", type=Path, default=Path("/tmp/noise"))
    parser.add_argument("--run", type=Path, default=None)
    parser.add_argument("--samples", type=Path, default=None)
    args = parser.parse_args()
    if args.run is not None and args.samples is not None:
        report(args.run, pd.read_json(args.samples))
        return 0
    if args.scenario is None:
        parser.error("give a scenario, or --run and --samples")
    sampler = Sampler()
    sampler.start()
    done, run_dir = run_scenario(args.scenario, args.results_dir)
    sampler.done.set()
    sampler.join()
    samples = pd.DataFrame(sampler.rows, columns=["t", *FIELDS, "freq"])
    if run_dir is None:
        print(done.stderr[-2000:], file=sys.stderr)
        return done.returncode or 1
    path = run_dir.parent / f"{run_dir.name}.samples.json"
    path.write_text(json.dumps(samples.to_dict("list")))
    print(f"samples: {path}")
    report(run_dir, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
