"""The speed probe's twin (harness.engine.twin): a real process, run beside each probe."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time

import pytest

from harness.engine import steptimes
from harness.engine.steptimes import PAIR_CLIP, TOTALS, TWIN_EVERY, TwinnedProbe, probe_loop
from harness.engine.twin import Twin
from harness.engine.worker import step_delta


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_twin_runs_its_loop_each_time_the_probe_does_and_ends_with_its_pipe() -> None:
    twin = Twin()
    try:
        for _ in range(5):
            assert twin.start()
            probe_loop()
        times = twin.collect(wait=True)
        assert len(times) == 5 and twin.pending == 0
        assert all(1e-6 < t < 0.1 for t in times)  # a loop of 2000 steps, in seconds
    finally:
        twin.close()
    assert twin.proc.returncode == 0


def test_the_twin_dies_with_the_worker_that_started_it() -> None:
    """A worker killed outright (SIGKILL: no close, no atexit) leaves no twin behind."""
    code = textwrap.dedent(
        """
        import sys, time
        from harness.engine.twin import Twin
        twin = Twin()
        assert twin.start()
        print(twin.proc.pid, flush=True)
        time.sleep(60)
        """
    )
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    pid = int(worker.stdout.readline())
    worker.kill()
    worker.wait()
    assert _gone(pid, within_s=5.0)


def test_the_probe_goes_on_alone_where_its_twin_fails() -> None:
    def cannot() -> object:
        raise OSError("no fork")

    probe = TwinnedProbe(start=cannot)
    assert probe() > 0 and probe() > 0
    assert probe.failed == "the probe's twin did not start: no fork"

    class Silent:
        def start(self) -> bool:
            return False

        def collect(self, wait: bool = False) -> list[float]:
            return []

    follower = TwinnedProbe(start=Silent, lead=lambda: False)
    assert follower() > 0 and follower.twin is None
    assert follower.failed == "not the first rank: no twin"

    probe = TwinnedProbe(start=Silent, every=1)
    assert probe() > 0
    assert probe.failed == "the probe's twin stopped answering" and probe.twin is None
    assert not probe.waiting  # a probe the twin did not run beside is not paired


def test_a_pass_carries_the_twin_only_where_every_run_asked_for_was_paired() -> None:
    before = dict.fromkeys(TOTALS, 0.0) | {"steps": 10.0, "step_s": 1.0, "forward_s": 0.5}
    after = {**before, "steps": 20.0, "step_s": 2.0, "forward_s": 1.0, "probes": 10.0}
    probed = {**after, "probe_s": 0.001, "twin_s": 0.0011, "pair_log": 3 * math.log(0.98)}
    both = step_delta(before, {**probed, "twins": 3.0, "twin_asked": 3.0})
    assert both is not None and both.twins == 3 and both.twin_s == pytest.approx(0.0011)
    assert both.probe_over_twin == pytest.approx(0.98)
    short = step_delta(before, {**probed, "twins": 2.0, "twin_asked": 3.0})
    assert short is not None and short.probe_s == pytest.approx(0.001)
    assert short.twin_s is None and short.probe_over_twin is None


def test_each_probe_is_paired_with_its_twins_run_and_an_outlier_clipped() -> None:
    """The pairs' log ratios add up in order, each clipped at PAIR_CLIP: a twin held up by
    another process on its core (three times as long) counts as a 10% move, not a 110% one."""

    class Scripted:
        def __init__(self) -> None:
            self.times = [1.0, 3.0]

        def start(self) -> bool:
            return True

        def collect(self, wait: bool = False) -> list[float]:
            return [self.times.pop(0)] if wait else []

    probe = TwinnedProbe()
    probe.twin = Scripted()
    before = dict(TOTALS)
    probe.waiting.extend([1.02, 1.0])
    probe.settle()
    probe.settle()
    assert TOTALS["twins"] - before["twins"] == 2
    assert TOTALS["twin_s"] - before["twin_s"] == pytest.approx(4.0)
    assert TOTALS["pair_log"] - before["pair_log"] == pytest.approx(math.log(1.02) - PAIR_CLIP)


def test_the_totals_carry_the_twins_results_once_settled() -> None:
    """The twin runs beside every TWIN_EVERY-th probe: 8 probes, 2 pairs."""
    probe = TwinnedProbe()
    assert probe.every == TWIN_EVERY == 4
    before = dict(TOTALS)
    try:
        for _ in range(8):
            steptimes.probing(lambda: None, probe)()
        probe.settle()
        assert TOTALS["probes"] - before["probes"] == 8 and not probe.waiting
        assert TOTALS["twin_asked"] - before["twin_asked"] == 2
        assert TOTALS["twins"] - before["twins"] == 2 and TOTALS["twin_s"] > before["twin_s"]
        assert TOTALS["twin_wait_s"] > before["twin_wait_s"]
        ratio = math.exp((TOTALS["pair_log"] - before["pair_log"]) / 2)
        assert math.exp(-PAIR_CLIP) - 1e-12 <= ratio <= math.exp(PAIR_CLIP) + 1e-12  # clipped
    finally:
        assert probe.twin is not None
        probe.twin.close()


def test_a_twin_that_died_is_answered_false_not_raised() -> None:
    twin = Twin()
    twin.proc.kill()
    twin.proc.wait()
    assert not twin.start()
    assert twin.collect(wait=True) == []


def test_a_twin_that_never_starts_is_an_oserror_the_probe_goes_on_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker waits for the twin's first word (an interpreter starting, on a loaded machine,
    can take a while); a twin that never says it started is refused, not waited on per step."""
    from harness.engine import twin as module

    monkeypatch.setattr(module, "STARTUP_WAIT_S", 0.2)
    monkeypatch.setattr(sys, "executable", "/bin/cat")  # a process that never writes "go"
    with pytest.raises(OSError, match="the twin did not start in 0.2 s"):
        Twin()
