"""Where each arm's time goes, op by op: the torch profiler traces a profiled run keeps
(`profile:` / `run --profile`; vLLM's LLM.start_profile / stop_profile around passes run after
the measured ones), read back as each op's self time per pass and compared between each arm
and the baseline.

A trace is Chrome's trace format (Perfetto opens it), one file per profiled pass and vLLM
worker rank, named '<arm>-<index>_<rank suffix>.<...>.pt.trace.json[.gz]'. An op's self time
is its duration less its children's on the same thread (complete events, 'ph': 'X', nested by
time), for PyTorch ops ('cpu_op') and the Python functions the profiler records with stacks
('python_function', e.g. 'vllm/v1/spec_decode/medusa.py(96): propose'), on the threads that
ran PyTorch ops; blocking waits (WAITS) are left out, and addresses in names ('... object at
0x7f...') dropped, so that passes add up. Per arm: the mean over its
profiled passes of the mean over ranks. One profiled pass is one sample: the table ranks ops,
it does not test them.

The ops that ran in one arm only come first: the change's own code (a swapped function is
another file and line; an op one version calls and the other does not), which a single
pass's noise in the big shared ops (a matmul's milliseconds) would otherwise push out of the
table; then the ops whose self time moved most.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.wire.protocol import PROFILES_DIR
from harness.wire.records import RunRecord

KINDS = ("cpu_op", "python_function")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# Blocking waits (a worker idle until the engine core sends the next step, a thread parked):
# time where nothing of the arm's runs, left out of the ranking.
WAITS = re.compile(r": (wait|acquire_read|sleep|select|poll|recv\w*|_wait\w*)$|sched_yield")


@dataclass
class OpDelta:
    """One op of the profile table: its self time per pass in each arm (ms) and its share of
    the candidate's profiled pass."""

    name: str
    kind: str
    baseline_ms: float
    candidate_ms: float
    share: float  # of the candidate's pass (its self time / the pass's wall time)
    only: str | None = None  # the arm it ran in, where it ran in one arm only

    @property
    def delta_ms(self) -> float:
        return self.candidate_ms - self.baseline_ms


@dataclass
class ArmProfile:
    """An arm's profiled passes: ops' mean self time per pass (µs), and their mean wall time."""

    arm: str
    passes: int
    self_us: dict[tuple[str, str], float]
    pass_s: float


def self_times(events: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(kind, name) -> total self time (µs) of one trace's complete events of KINDS."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in KINDS and "dur" in e and "ts" in e:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    out: dict[tuple[str, str], float] = {}
    for spans in by_thread.values():
        if not any(e["cat"] == "cpu_op" for e in spans):
            continue  # a thread that ran no PyTorch op (RPC, tracing): not the arm's work
        spans.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[tuple[float, list[float], dict[str, Any]]] = []  # (end, [child time], e)

        def close(item: tuple[float, list[float], dict[str, Any]]) -> None:
            end, children, e = item
            key = (str(e["cat"]), _ADDRESS.sub("", str(e["name"])))
            if not WAITS.search(key[1]):
                out[key] = out.get(key, 0.0) + max(0.0, float(e["dur"]) - children[0])

        for e in spans:
            start, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            if stack:
                stack[-1][1][0] += dur
            stack.append((start + dur, [0.0], e))
        while stack:
            close(stack.pop())
    return out


def read_trace(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


def arm_profiles(run_dir: Path, runs: list[RunRecord]) -> dict[str, ArmProfile]:
    """Each arm's profile from the run's traces and its launches' records (profiled passes,
    their prefixes and wall times); arms without a readable trace are left out."""
    sums: dict[str, dict[tuple[str, str], float]] = {}
    count: dict[str, int] = {}
    walls: dict[str, list[float]] = {}
    for run in runs:
        if run.result is None:
            continue
        folder = run_dir / PROFILES_DIR / run.run_key
        for p in run.result.profiled:
            files = sorted(folder.glob(f"{p.prefix}_*.pt.trace.json*"))
            if not files:
                continue
            per_rank = [self_times(read_trace(f)) for f in files]
            total = sums.setdefault(p.arm, {})
            for times in per_rank:
                for key, us in times.items():
                    total[key] = total.get(key, 0.0) + us / len(per_rank)
            count[p.arm] = count.get(p.arm, 0) + 1
            walls.setdefault(p.arm, []).append(p.duration_s)
    return {
        arm: ArmProfile(
            arm,
            count[arm],
            {k: v / count[arm] for k, v in total.items()},
            sum(walls[arm]) / len(walls[arm]),
        )
        for arm, total in sums.items()
    }


def op_deltas(base: ArmProfile, cand: ArmProfile, top: int) -> list[OpDelta]:
    """The `top` ops: those that ran in one arm only, then those whose self time per pass
    differs most (absolute) between the arms; each group by the size of its difference."""
    keys = set(base.self_us) | set(cand.self_us)
    rows = [
        OpDelta(
            name,
            kind,
            base.self_us.get((kind, name), 0.0) / 1000,
            cand.self_us.get((kind, name), 0.0) / 1000,
            cand.self_us.get((kind, name), 0.0) / 1e6 / cand.pass_s if cand.pass_s > 0 else 0.0,
            only=None
            if (kind, name) in base.self_us and (kind, name) in cand.self_us
            else base.arm
            if (kind, name) in base.self_us
            else cand.arm,
        )
        for kind, name in keys
    ]
    rows.sort(key=lambda r: (r.only is None, -abs(r.delta_ms), r.name))
    return rows[:top]
