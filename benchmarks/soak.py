"""A soak: the demo as a precision run with a long budget (an hour by default), watched from
outside while it runs, then checked: memory, records, interval.

    .venv/bin/python benchmarks/soak.py [--budget-s 3600] [--scenario S] [--results-dir D]

While `specbench run` measures, every --every-s seconds (about a pass of the demo) it samples the
RSS of every process of the launch (psutil, over the worker's session: the worker, vLLM's engine
core and any helper they started), tagged with the stage and pass number of the worker's
progress note, and the size and mtime of every file of the run folder. Afterwards:

1. memory: each process's RSS at the start of measuring (median of its first samples after the
   warm-up) against its end (median of its last samples); target: growth <= 5%;
2. records: which files of the run folder were written while measuring (and how often), and
   whether the stored run holds every pass the progress note counted (no record lost);
3. interval: the table's drift findings (a trend of the arms' difference after warm-up, a
   warm-up cut at its cap), whether each is real (the two halves' own intervals disagree), and
   whether the interval at each quarter of the run holds the final estimate.

Prints a table and writes every sample as JSON (--out). The precision target is set out of
reach (--mde) so the run measures for its whole budget. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.compare import compare_run, running_estimate  # noqa: E402
from harness.analysis.metric_row import compare_metric  # noqa: E402
from harness.analysis.stats import Trend, WarmupCapped  # noqa: E402
from harness.lifeline import session_processes  # noqa: E402
from harness.present.stops import stop_line  # noqa: E402
from harness.present.tables import finding_line  # noqa: E402
from harness.results.metrics import METRICS  # noqa: E402
from harness.results.run import load_run  # noqa: E402
from harness.wire.progress import read_progress  # noqa: E402
from testkit.processes import sessions_of, start_specbench  # noqa: E402

DEMO = ROOT / "scenarios" / "cpu-medusa-proposer.yaml"
RUN_ID = "soak"
RSS_TARGET = 0.05
EDGE_SAMPLES = 10  # samples whose median is a process's start or end RSS
SESSIONS_EVERY_S = 30.0  # a launch's processes are found again this often
DRIFT = (Trend, WarmupCapped)  # findings that say the arms drift apart


@dataclass
class Watch:
    """What the soak saw while the run went: RSS samples and the run folder's writes."""

    run_dir: Path
    started: float = field(default_factory=time.time)
    samples: list[dict[str, Any]] = field(default_factory=list)
    sessions: set[int] = field(default_factory=set)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: dict[str, Any] | None = None
    looked: float = 0.0

    def tick(self, results: Path) -> None:
        now = time.time() - self.started
        if not self.sessions or now - self.looked >= SESSIONS_EVERY_S:
            self.sessions |= sessions_of(results)  # reads every process's environ: not cheap
            self.looked = now
        notes = sorted(self.run_dir.glob("work/*/progress.json"))
        self.note = read_progress(notes[-1]) if notes else None
        stage = self.note.get("stage") if self.note else "starting"
        passes = int(self.note.get("passes", 0)) if self.note else 0
        for sid in self.sessions:
            for pid, name in session_processes(sid):
                try:
                    rss = psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
                self.samples.append(
                    {
                        "t": round(now, 2),
                        "stage": stage,
                        "pass": passes,
                        "pid": pid,
                        "name": name,
                        "rss": rss,
                    }
                )
        self._scan_files(now, stage)

    def _scan_files(self, now: float, stage: str | None) -> None:
        if not self.run_dir.is_dir():
            return
        for path in self.run_dir.rglob("*"):
            try:
                st = path.stat()
            except OSError:
                continue
            if not path.is_file():
                continue
            key = str(path.relative_to(self.run_dir))
            seen = self.files.setdefault(key, {"first_t": now, "writes": {}, "mtime": None})
            if seen["mtime"] != st.st_mtime:
                seen["mtime"] = st.st_mtime
                seen["writes"][stage] = seen["writes"].get(stage, 0) + 1
                seen["size"] = st.st_size


def soak_scenario(path: Path, budget_s: float, mde: float, out: Path) -> Path:
    """The demo with a precision target out of reach and the soak's budget."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["name"] = "soak"
    data["precision"] = {
        **data.get("precision", {}),
        "mde": mde,
        "budget_s": budget_s,
        "max_blocks": 100_000,  # the budget, not the default cap of 2000 blocks, ends it
    }
    data["timeout_s"] = max(float(data.get("timeout_s", 900)), budget_s + 600)
    target = out / "soak.yaml"
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def run_watched(scenario: Path, results: Path, every_s: float) -> tuple[Watch, int, str]:
    """`specbench run` under the watch; returns it, the exit code and stderr's tail."""
    watch = Watch(results / RUN_ID)
    err = results.parent / "soak.stderr"
    with err.open("w") as stream:
        proc = start_specbench(
            "run",
            str(scenario),
            "--results-dir",
            str(results),
            "--run-id",
            RUN_ID,
            stdout=subprocess.DEVNULL,
            stderr=stream,
        )
        try:
            while proc.poll() is None:
                watch.tick(results)
                time.sleep(every_s)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=120)
    return watch, proc.returncode, err.read_text()[-2000:]


def memory(watch: Watch) -> list[dict[str, Any]]:
    """Per process: RSS at the start and end of measuring, and its growth."""
    rows = []
    for pid in sorted({s["pid"] for s in watch.samples}):
        mine = [s for s in watch.samples if s["pid"] == pid and s["stage"] == "measuring"]
        if len(mine) < 2 * EDGE_SAMPLES:
            continue
        first = statistics.median(s["rss"] for s in mine[:EDGE_SAMPLES])
        last = statistics.median(s["rss"] for s in mine[-EDGE_SAMPLES:])
        # The slope over the last two thirds (past one-time steps such as the first look's
        # imports), per pass: what an hour's passes would add.
        tail = mine[len(mine) // 3 :]
        slope = _slope([s["pass"] for s in tail], [s["rss"] for s in tail])
        rows.append(
            {
                "pid": pid,
                "name": mine[0]["name"],
                "samples": len(mine),
                "passes": [mine[0]["pass"], mine[-1]["pass"]],
                "rss_start_mib": first / 2**20,
                "rss_end_mib": last / 2**20,
                "rss_peak_mib": max(s["rss"] for s in mine) / 2**20,
                "growth": last / first - 1,
                "kib_per_pass": None if slope is None else slope / 1024,
                "ok": last / first - 1 <= RSS_TARGET,
            }
        )
    return rows


def _slope(x: list[float], y: list[float]) -> float | None:
    if len(set(x)) < 2:
        return None
    mx, my = statistics.fmean(x), statistics.fmean(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum(
        (a - mx) ** 2 for a in x
    )


def records(watch: Watch, run: Any) -> dict[str, Any]:
    """Files written while measuring, and whether the stored run kept every pass counted."""
    during = {
        k: v["writes"]["measuring"] for k, v in watch.files.items() if "measuring" in v["writes"]
    }
    counted = int(watch.note.get("passes", 0)) if watch.note else 0
    stored = sum(len(r.result.passes) for r in run.runs if r.result is not None)
    # Pass records, not the progress note, heartbeat or log: a file of records seen growing.
    growing = [k for k, n in during.items() if n >= 2 and (k.endswith(".jsonl") or "runs/" in k)]
    return {
        "written_while_measuring": dict(sorted(during.items(), key=lambda kv: -kv[1])),
        "record_files_growing": growing,
        "passes_counted_by_progress": counted,
        "passes_stored": stored,
        "none_lost": stored >= counted > 0,
    }


def _overlap(*halves: list[float | None] | None) -> bool | None:
    """Whether the halves' intervals ([delta, low, high] each) overlap; None without both."""
    bounds = [(h[1], h[2]) for h in halves if h is not None]
    if len(bounds) != 2:
        return None
    (lo1, hi1), (lo2, hi2) = bounds
    if lo1 is None or hi1 is None or lo2 is None or hi2 is None:
        return None
    return lo1 <= hi2 and lo2 <= hi1


def interval(run: Any) -> dict[str, Any]:
    """The primary row's drift findings, the halves' own intervals and the running interval."""
    comparison = compare_run(run)
    cand = comparison.candidates[0]
    row = next(r for r in cand.rows if r.key == comparison.primary_metric)
    est = row.estimate
    drift = [finding_line(f) for f in est.findings if isinstance(f, DRIFT)]
    passes = run.passes
    base, other = comparison.baseline, cand.name
    metric = next(m for m in METRICS if m.key == comparison.primary_metric)
    mid = int(passes["block"].max() + 1) // 2
    halves: list[list[float | None] | None] = []
    for part in (passes[passes["block"] < mid], passes[passes["block"] >= mid]):
        got = compare_metric(metric, part, base, other, "one-engine")
        e = got.estimate if got is not None else None
        halves.append(None if e is None else [e.delta, e.ci_low, e.ci_high])
    agree = _overlap(*halves)
    blocks = int(passes["block"].max() + 1)
    running = running_estimate(
        passes, base, other, metric.key, "one-engine", every=max(1, blocks // 4)
    )
    holds = [
        bool(r.ci_low <= est.delta <= r.ci_high)
        for r in running.itertuples()
        if r.blocks >= blocks // 4
    ]
    return {
        "estimate": [est.delta, est.ci_low, est.ci_high],
        "blocks": blocks,
        "findings": [finding_line(f) for f in est.findings],
        "drift_findings": drift,
        "halves": halves,
        "halves_agree": agree,
        "drift_real": bool(drift) and agree is False,
        "drift_not_real": bool(drift) and agree is True,
        "running": running.to_dict(orient="records"),
        "quarters_hold_final": holds,
        "stopped": [stop_line(s) for s in comparison.stops],
    }


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f}%"


def show(mem: list[dict[str, Any]], rec: dict[str, Any], ival: dict[str, Any], wall: float) -> None:
    print(f"soak: {wall:.0f} s wall, {ival['blocks']} blocks; {ival['stopped']}")
    print(
        f"{'pid':>7}  {'process':<16} {'samples':>7} {'passes':>9} {'start MiB':>9} "
        f"{'end MiB':>8} {'peak MiB':>8} {'growth':>8} {'KiB/pass':>9}  <=5%"
    )
    for m in mem:
        print(
            f"{m['pid']:>7}  {m['name']:<16} {m['samples']:>7} "
            f"{m['passes'][0]:>4}-{m['passes'][1]:<4} {m['rss_start_mib']:>9.1f} "
            f"{m['rss_end_mib']:>8.1f} {m['rss_peak_mib']:>8.1f} {pct(m['growth']):>8} "
            f"{'n/a' if m['kib_per_pass'] is None else format(m['kib_per_pass'], '.1f'):>9}  "
            f"{'ok' if m['ok'] else 'FAIL'}"
        )
    print(
        f"records: {rec['passes_stored']} passes stored, {rec['passes_counted_by_progress']} "
        f"counted by the progress note: {'none lost' if rec['none_lost'] else 'LOST'}"
    )
    growing = rec["record_files_growing"]
    print(f"records written as the run went: {', '.join(growing) if growing else 'NO'}")
    print(
        "files written while measuring (times seen changed): "
        + (", ".join(f"{k} x{v}" for k, v in rec["written_while_measuring"].items()) or "none")
    )
    d, lo, hi = ival["estimate"]
    print(
        f"interval: {pct(d)} [{pct(lo)}, {pct(hi)}]; halves: "
        + "; ".join(
            "n/a" if h is None else f"{pct(h[0])} [{pct(h[1])}, {pct(h[2])}]"
            for h in ival["halves"]
        )
        + f" ({'agree' if ival['halves_agree'] else 'DISAGREE'})"
    )
    print(
        f"drift findings: {ival['drift_findings'] or 'none'}"
        + (" (real: the halves disagree)" if ival["drift_real"] else "")
        + (" (NOT real: the halves agree)" if ival["drift_not_real"] else "")
    )
    print(f"the interval at each quarter holds the final estimate: {ival['quarters_hold_final']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-s", type=float, default=3600.0, help="precision budget_s")
    parser.add_argument("--scenario", type=Path, default=DEMO)
    parser.add_argument("--mde", type=float, default=0.001, help="a target out of reach")
    parser.add_argument("--every-s", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: a new temp dir")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every sample")
    args = parser.parse_args(argv)
    base = args.results_dir or Path(tempfile.mkdtemp(prefix="soak-"))
    base.mkdir(parents=True, exist_ok=True)
    scenario = soak_scenario(args.scenario, args.budget_s, args.mde, base)
    results = base / "results"
    t0 = time.monotonic()
    watch, code, stderr = run_watched(scenario, results, args.every_s)
    wall = time.monotonic() - t0
    if code != 0:
        print(f"specbench run exited {code}:\n{stderr}", file=sys.stderr)
    run = load_run(results / RUN_ID)
    mem, rec, ival = memory(watch), records(watch, run), interval(run)
    show(mem, rec, ival, wall)
    out = args.out or base / "soak.json"
    out.write_text(
        json.dumps(
            {
                "budget_s": args.budget_s,
                "wall_s": wall,
                "exit_code": code,
                "run_dir": str(run.path),
                "memory": mem,
                "records": rec,
                "interval": ival,
                "files": watch.files,
                "samples": watch.samples,
            },
            indent=1,
            default=str,
        )
    )
    print(f"samples: {out}")
    ok = all(m["ok"] for m in mem) and rec["none_lost"] and rec["record_files_growing"]
    ok = ok and not ival["drift_not_real"]
    return 0 if code == 0 and ok and mem else 1


if __name__ == "__main__":
    sys.exit(main())
