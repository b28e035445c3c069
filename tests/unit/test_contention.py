"""What else loads the machine during a pass (issue 36, items 1-2): the /proc sampler tells a
busy process outside the launch's session from one inside it, and the analysis names a busy
machine and a disturbance that lines up with one arm, from real pass records."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.analysis.contention import ALIGNED_MIN, BUSY_SHARE, machine_load
from harness.engine.contention import foreign_share, sample
from harness.wire.records import PassRecord, RunRecord, WorkerResult

# Busy for argv[1] seconds, then idle but alive (a process's time leaves /proc with it).
SPIN = ("import time\nend = time.monotonic() + float(__import__('sys').argv[1])\n"
        "while time.monotonic() < end: pass\nprint('done', flush=True)\ntime.sleep(60)\n")


def _share_while_spinning(own: bool, seconds: float = 1.5) -> float:
    """The foreign share over `seconds` while one process spins: in this test's session (the
    launch's own) or in a session of its own (another program)."""
    session = os.getsid(0)
    before = sample(session)
    proc = subprocess.Popen([sys.executable, "-c", SPIN, str(seconds)],
                            start_new_session=not own, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        after = sample(session)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    share = foreign_share(before, after)
    assert share is not None
    return share


def test_a_process_outside_the_launch_counts_and_one_inside_does_not() -> None:
    cpus = os.cpu_count() or 1
    foreign = _share_while_spinning(own=False)
    own = _share_while_spinning(own=True)
    # One spinning process is one CPU of `cpus`; what else runs here moves both alike.
    assert foreign - own >= 0.5 / cpus, (foreign, own)
    assert sample(None) is None and foreign_share(None, None) is None


def _record(key: str, shares: dict[str, list[float]]) -> RunRecord:
    passes = []
    for arm, values in shares.items():
        for i, share in enumerate(values):
            passes.append(PassRecord(repeat=len(passes), started_unix=0.0, duration_s=1.0,
                                     requests=[], spec_decode=None, workload_hash="w",
                                     arm=arm, block=i, foreign_cpu=share, load1=1.0))
    result = WorkerResult(run_key=key, status="ok", passes=passes)
    return RunRecord(run_key=key, variant="base+opt", arms=["base", "opt"], round=0, order=0,
                     status="ok", wall_s=1.0, result=result)


def test_a_quiet_machine_gets_a_line_and_no_finding() -> None:
    load = machine_load([_record("x.r0", {"base": [0.01, 0.02, 0.01, 0.03],
                                          "opt": [0.02, 0.01, 0.02, 0.01]})], "base")
    assert load.line is not None and load.line.startswith(
        "other processes used a median 1.5% of the machine's CPUs during the 8 measured "
        "passes, worst block ")
    assert load.findings == []


def test_a_busy_machine_and_an_arm_aligned_disturbance_are_findings() -> None:
    busy = machine_load([_record("x.r0", {"base": [0.30, 0.32, 0.29, 0.31],
                                          "opt": [0.31, 0.30, 0.33, 0.30]})], "base")
    assert any(f.startswith("the machine was busy: other processes used a median 30.")
               for f in busy.findings)
    assert not any("lined up" in f for f in busy.findings)
    assert BUSY_SHARE == 0.10
    aligned = machine_load([_record("x.r0", {"base": [0.01, 0.02, 0.01, 0.02, 0.01],
                                             "opt": [0.08, 0.09, 0.08, 0.10, 0.09]})], "base")
    [finding] = aligned.findings
    assert finding.startswith("a disturbance lined up with opt: other processes used 7.4 "
                              "points more of the CPUs during its passes (p=")
    # Below ALIGNED_MIN the arms' difference is noise to name, not a finding.
    small = machine_load([_record("x.r0", {"base": [0.010, 0.011, 0.010, 0.011],
                                           "opt": [0.015, 0.016, 0.015, 0.016]})], "base")
    assert ALIGNED_MIN > 0.005 and small.findings == []


def test_contention_from_part_way_through_says_from_which_block() -> None:
    """A hog started halfway (as on this machine: 0% before, ~48% of the CPUs after): the
    median stays under the threshold, and the finding says from which block."""
    quiet, loud = [0.0] * 6, [0.47, 0.49, 0.48, 0.46, 0.5]
    load = machine_load([_record("x.r0", {"base": quiet + loud, "opt": quiet + loud})],
                        "base")
    [finding] = load.findings
    assert finding.startswith("the machine was busy in part of the run: other processes "
                              "used more than 10% of its CPUs in 10 of 22 passes, from block 6 "
                              "of x.r0 on")
