"""What else loads the machine during a pass: the /proc sampler tells a
busy process outside the launch's session from one inside it, and the analysis names a busy
machine and a disturbance that lines up with one arm, from real pass records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.analysis.contention import ALIGNED_MIN, BUSY_SHARE, Load, MachineUse, machine_load
from harness.engine.contention import foreign_share, sample
from harness.present.contention import load_findings, load_line, machine_use_line
from harness.wire.records import PassRecord, RunRecord
from testkit.simulate import shared_record

# Busy for argv[1] seconds, then idle but alive (a process's time leaves /proc with it).
SPIN = (
    "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\n"
    "while time.monotonic() < end: pass\nprint('done', flush=True)\ntime.sleep(60)\n"
)

# Run as the leader of a session of its own (as the executors start a worker), so that what
# the rest of the machine does (other tests' engines, another xdist worker) is foreign to it:
# starts the spinner in its session or in a new one, samples around it, and prints the deltas.
PROBE = """
import json, os, subprocess, sys
from harness.engine.contention import foreign_share, own_session, sample
session = own_session()
assert session is not None
own = sys.argv[1] == "own"
before = sample(session)
proc = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3]],
                        start_new_session=not own, stdout=subprocess.PIPE, text=True)
try:
    assert proc.stdout.readline().strip() == "done"
    after = sample(session)
    fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    spinner_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
finally:
    proc.kill()
    proc.wait(timeout=60)
print(json.dumps({"own_s": after.own_s - before.own_s, "wall_s": after.at - before.at,
                  "spinner_s": spinner_s, "share": foreign_share(before, after)}))
"""


def _probe(own: bool, seconds: float = 1.0) -> dict[str, float]:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "own" if own else "foreign", SPIN, str(seconds)],
        start_new_session=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    shares: dict[str, float] = json.loads(out)
    return shares


def test_a_process_outside_the_launch_counts_and_one_inside_does_not() -> None:
    """Judged by the spinner's own CPU time rather than against the machine's idle, so that
    what else runs here (xdist's other worker, another test's engine) cannot decide it."""
    cpus = os.cpu_count() or 1
    tick = 2 / os.sysconf("SC_CLK_TCK")
    inside = _probe(own=True)
    assert inside["spinner_s"] > 0.1, inside
    assert inside["own_s"] >= inside["spinner_s"] - tick, inside
    outside = _probe(own=False)
    assert outside["spinner_s"] > 0.1, outside
    # Only the probe itself (asleep on a pipe) is its own: the spinner is not.
    assert outside["own_s"] < 0.1 * outside["spinner_s"] + tick, outside
    # ... and the spinner's time is in the foreign share (others can only add to it).
    assert outside["share"] >= (outside["spinner_s"] - tick) / (outside["wall_s"] * cpus) - 0.01
    assert sample(None) is None and foreign_share(None, None) is None


def _record(key: str, shares: dict[str, list[float]]) -> RunRecord:
    passes: list[PassRecord] = []
    for arm, values in shares.items():
        for i, share in enumerate(values):
            passes.append(
                PassRecord(
                    repeat=len(passes),
                    started_unix=0.0,
                    duration_s=1.0,
                    requests=[],
                    spec_decode=None,
                    workload_hash="w",
                    arm=arm,
                    block=i,
                    foreign_cpu=share,
                    load1=1.0,
                )
            )
    return shared_record(passes, key)


class Worded:
    """A run's load as the table words it (harness.present.contention)."""

    def __init__(self, load: Load | None) -> None:
        assert load is not None
        self.facts, self.line = load, load_line(load)
        self.findings = load_findings(load)


def test_a_quiet_machine_gets_a_line_and_no_finding() -> None:
    load = Worded(
        machine_load(
            [_record("x.r0", {"base": [0.01, 0.02, 0.01, 0.03], "opt": [0.02, 0.01, 0.02, 0.01]})],
            "base",
        )
    )
    assert load.line is not None and load.line.startswith(
        "other processes used a median 1.5% of the machine's CPUs during the 8 measured "
        "passes, worst block "
    )
    assert load.findings == []
    assert load.facts.passes == 8 and load.facts.busy is None and load.facts.aligned == []
    assert load.facts.worst_launch == "x.r0" and load.facts.worst_block is not None


def test_a_busy_machine_and_an_arm_aligned_disturbance_are_findings() -> None:
    busy = Worded(
        machine_load(
            [_record("x.r0", {"base": [0.30, 0.32, 0.29, 0.31], "opt": [0.31, 0.30, 0.33, 0.30]})],
            "base",
        )
    )
    assert any(
        f.startswith("the machine was busy: other processes used a median 30.")
        for f in busy.findings
    )
    assert not any("lined up" in f for f in busy.findings)
    assert BUSY_SHARE == 0.10
    aligned = Worded(
        machine_load(
            [
                _record(
                    "x.r0",
                    {"base": [0.01, 0.02, 0.01, 0.02, 0.01], "opt": [0.08, 0.09, 0.08, 0.10, 0.09]},
                )
            ],
            "base",
        )
    )
    [finding] = aligned.findings
    [fact] = aligned.facts.aligned
    assert fact.arm == "opt" and round(100 * fact.points, 1) == 7.4 and fact.p < 0.01
    assert finding.startswith(
        "a disturbance lined up with opt: other processes used 7.4 "
        "points more of the CPUs during its passes (p="
    )
    # Below ALIGNED_MIN the arms' difference is noise to name, not a finding.
    small = Worded(
        machine_load(
            [
                _record(
                    "x.r0",
                    {"base": [0.010, 0.011, 0.010, 0.011], "opt": [0.015, 0.016, 0.015, 0.016]},
                )
            ],
            "base",
        )
    )
    assert ALIGNED_MIN > 0.005 and small.findings == []
    # The same difference in every block is as aligned as it gets (no spread: no t to
    # compute); it was passed over as "no finding" before.
    constant = Worded(
        machine_load([_record("x.r0", {"base": [0.01] * 4, "opt": [0.21] * 4})], "base")
    )
    assert any(
        f.startswith("a disturbance lined up with opt: other processes used 20.0 points more")
        and "(p=0)" in f
        for f in constant.findings
    )
    same = Worded(machine_load([_record("x.r0", {"base": [0.05] * 4, "opt": [0.05] * 4})], "base"))
    assert same.findings == []


def test_contention_from_part_way_through_says_from_which_block() -> None:
    """A hog started halfway (as on this machine: 0% before, ~48% of the CPUs after): the
    median stays under the threshold, and the finding says from which block."""
    quiet, loud = [0.0] * 6, [0.47, 0.49, 0.48, 0.46, 0.5]
    load = Worded(
        machine_load([_record("x.r0", {"base": quiet + loud, "opt": quiet + loud})], "base")
    )
    [finding] = load.findings
    assert load.facts.busy == "part" and load.facts.busy_from == ("x.r0", 6)
    assert finding.startswith(
        "the machine was busy in part of the run: other processes "
        "used more than 10% of its CPUs in 10 of 22 passes, from block 6 "
        "of x.r0 on"
    )


def test_how_the_run_used_the_machine_is_a_fact_worded_by_present() -> None:
    """The manifest's `machine` (harness.machine.Holding) becomes MachineUse: shared, or a
    wait for the lock; a lock taken at once says nothing."""
    from harness.machine import Holding

    assert MachineUse.of(Holding("/tmp/lock").to_dict()) is None
    assert MachineUse.of(None) is None
    shared = MachineUse.of(Holding(None).to_dict())
    assert shared == MachineUse(shared=True)
    assert machine_use_line(shared).startswith("shared (--shared-machine): no machine lock")
    waited = MachineUse.of(Holding("/tmp/lock", 12.4, "a run (pid 7)").to_dict())
    assert waited == MachineUse(False, 12.4, "a run (pid 7)")
    assert machine_use_line(waited) == (
        "waited 12s for a run (pid 7), then held the machine's lock (one benchmark at a time)"
    )
