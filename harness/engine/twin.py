"""The speed probe's twin: the same loop in a process of its own, run at the same moment.

The speed probe (harness.engine.steptimes.install_probe) times a fixed Python loop before every
engine step in vLLM's worker. The machine's speed moves it, and so it moves as much as the
end-to-end throughput does; a change that slowed the probe itself (a busy thread it starts,
the interpreter's or the core's state it leaves behind) would bias the speed-adjusted row, and
the probe's own delta is too noisy to see a move of 1-2%. The twin runs the same loop in
another process, started on the worker's first probe and told to run through a pipe each time
the worker's probe runs: the worker writes a byte, the twin answers "go" and runs the loop
while the worker runs its own, on the other core. Both see the same machine at the same
moment, so their ratio cancels its speed (a pass's ratio varies by about 2% where each loop
varies by 9-13%, docs/measurements.md) and moves only where something reached one process and
not the other: the row's check (harness.analysis.adjusted).

The probe's loop is here (probe_loop), so that the twin's process imports this module alone,
nothing from vLLM or torch; it ends when the worker closes its pipe (or dies:
the pipe closes with it), and it is in the launch's process group, which the parent ends.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import time
from typing import Any

PROBE_LOOP = 2000  # iterations of the probe's Python loop (75-110 µs on this CPU)
GO = b"g"
RESULT = struct.Struct("d")
ANSWER_WAIT_S = 1.0  # how long the worker waits for the twin's "go" or last result
STARTUP_WAIT_S = 10.0  # ... for the twin's first "go", that it started (an interpreter's start)


def probe_loop() -> float:
    """One probe: the fixed pure-Python loop, its time in seconds (the speed probe's, in vLLM's
    worker, harness.engine.steptimes; and its twin's, here)."""
    started = time.perf_counter()
    x = 0
    for i in range(PROBE_LOOP):
        x += i * i
    return time.perf_counter() - started


class Twin:
    """The worker's side: start the twin, run it beside each probe, collect its times."""

    def __init__(self) -> None:
        trigger_r, self._trigger = os.pipe()
        self._go, go_w = os.pipe()
        self._results, results_w = os.pipe()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.engine.twin",
                str(trigger_r),
                str(go_w),
                str(results_w),
            ],
            pass_fds=(trigger_r, go_w, results_w),
            stdin=subprocess.DEVNULL,
        )
        for fd in (trigger_r, go_w, results_w):
            os.close(fd)
        os.set_blocking(self._results, False)
        self.pending = 0  # results asked for and not yet read
        self._buffer = b""
        ready, _, _ = select.select([self._go], [], [], STARTUP_WAIT_S)
        if not ready or os.read(self._go, 1) != GO:
            self.proc.kill()
            self.proc.wait()
            raise OSError(f"the twin did not start in {STARTUP_WAIT_S:g} s")

    def start(self) -> bool:
        """Tell the twin to run its loop; True once it answered that it runs (the worker's
        own loop then runs beside it), False where it did not answer in time."""
        try:
            os.write(self._trigger, GO)
            ready, _, _ = select.select([self._go], [], [], ANSWER_WAIT_S)
            if not ready or os.read(self._go, 1) != GO:
                return False
        except OSError:  # the twin is gone (its end of the pipe closed)
            return False
        self.pending += 1
        return True

    def collect(self, wait: bool = False) -> list[float]:
        """The twin's loop times that have arrived, in the order they were asked for; `wait`:
        until every one asked for has (at most ANSWER_WAIT_S), as before the totals are read."""
        times: list[float] = []
        while self.pending:
            if wait:
                ready, _, _ = select.select([self._results], [], [], ANSWER_WAIT_S)
                if not ready:
                    break
            try:
                chunk = os.read(self._results, RESULT.size * self.pending)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buffer += chunk
            whole = len(self._buffer) // RESULT.size
            times += [RESULT.unpack_from(self._buffer, i * RESULT.size)[0] for i in range(whole)]
            self._buffer = self._buffer[whole * RESULT.size :]
            self.pending -= whole
        return times

    def close(self) -> None:
        os.close(self._trigger)
        self.proc.wait(timeout=ANSWER_WAIT_S)


def serve(trigger: int, go: int, results: int, loop: Any = probe_loop) -> None:
    """The twin's side: say on `go` that it started; then for every byte on `trigger`, answer
    on `go`, run `loop`, write its time on `results`; until the trigger's pipe closes."""
    os.write(go, GO)
    while os.read(trigger, 1):
        os.write(go, GO)
        os.write(results, RESULT.pack(loop()))


def _die_with_parent() -> None:
    """Linux: the twin gets SIGTERM when the worker that started it dies (besides the pipe's
    end, which a worker's own children could hold open)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _die_with_parent()
    serve(*(int(a) for a in sys.argv[1:4]))
