"""How often the shipped stall watchdog calls a healthy launch stalled, and how late it finds a
real hang: simulated one-engine launches (testkit.simulate's noise: AR(1) pass noise, a slow
drift, a periodic disturbance, stalled passes, and a machine slowing every part of a step at
once for a stretch) driven by the shipped schedule (schedule.measure_launch: its PassLog's
progress notes, on a virtual clock) and judged by the shipped rule
(harness.execute.progress.StallWatch) at the parent's 1 s ticks, with the engine's heartbeat
beating as steps end (at most every second, as harness.engine.steptimes does).

    .venv/bin/python benchmarks/stall_false_alarms.py --trials 200

Prints, per noise and pass length, the share of healthy launches called stalled (with its
Wilson 95% interval and the trial count) and, for a hang planted at a random pass, the time
from the hang to the first tick that calls it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.engine import schedule  # noqa: E402
from harness.execute.progress import StallWatch  # noqa: E402
from harness.wire import progress as wire_progress  # noqa: E402
from harness.wire.protocol import PROGRESS_ENV  # noqa: E402
from harness.wire.records import PassRecord, WorkerResult  # noqa: E402
from testkit.simulate import Launch, Noise, shared_run  # noqa: E402

TICK_S = 1.0  # harness.execute.local.TICK_S
BEAT_EVERY_S = 1.0  # harness.wire.protocol.HEARTBEAT_EVERY_S
GAP_S = 0.05  # between passes: the switch, the counters, the note


class Clock:
    """The virtual wall clock the schedule's and the notes' `time` read."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    perf_counter = monotonic = time


class Hang(Exception):
    """The planted hang was found (or the launch was called stalled)."""


@dataclass(frozen=True)
class Slowdown:
    """The machine slows every part of a step by `factor` for `passes` passes, from a pass
    drawn at random (another job, thermal throttling, a noisy neighbour)."""

    factor: float = 1.0
    passes: int = 0


@dataclass
class Judge:
    """The parent's side: the shipped StallWatch at every tick, fed the latest note and the
    engine's heartbeat as it would have read them then."""

    note_path: Path
    clock: Clock
    steps_per_pass: int
    watch: StallWatch
    phase: float  # where the parent's ticks fall, in [0, 1) s
    beat: dict[str, Any] | None = None
    median: float | None = None
    stalled: tuple[float, str] | None = None  # (when, the phase named)

    def run(self, start: float, duration: float, hang: bool = False) -> None:
        """A pass of `duration` from `start` (engine steps all along; with `hang`, none
        ends after `start`): every tick inside it is judged."""
        note = wire_progress.read_progress(self.note_path)
        step = duration / self.steps_per_pass
        tick = math.floor(start - self.phase) + self.phase + TICK_S
        if not hang:
            self.median = step  # the heartbeat's median step: the steps that ended
        while tick < start + duration:
            if hang:
                beat_unix = start  # no step ends
            else:
                # The last step that ended by `tick`, at most BEAT_EVERY_S late (rate limit).
                ended = start + math.floor((tick - start) / step) * step
                beat_unix = max(start, ended - BEAT_EVERY_S) if ended > start else start
            self.beat = {"unix": beat_unix, "steps": 1, "median_step_s": self.median}
            stall = self.watch.check(note, tick, self.beat)
            if stall is not None:
                self.stalled = (tick, stall.phase)
                raise Hang
            tick += TICK_S


def one_launch(
    rng: np.random.Generator,
    noise: Noise,
    pass_s: float,
    blocks: int,
    slowdown: Slowdown,
    hang_at: int | None,
    note_path: Path,
    clock: Clock,
) -> tuple[bool, float | None, int]:
    """(called stalled, seconds from the planted hang to its finding, passes run)."""
    run = shared_run(blocks, seed=int(rng.integers(1 << 30)))
    sim = Launch(noise, rng)
    arms = {a.variant: a for a in run.arms}
    judge = Judge(note_path, clock, int(rng.integers(20, 200)), StallWatch(clock.now), rng.random())
    slow_from = int(rng.integers(0, 4 * blocks + 60)) if slowdown.passes else -1
    count = 0
    hang_started: float | None = None

    def measure(repeat: int, variant: str | None, block: int | None) -> PassRecord:
        nonlocal count, hang_started
        assert variant is not None and block is not None
        record = sim.measure(repeat, arms[variant], block)
        duration = record.duration_s * pass_s / 0.058  # the simulator's passes: about 58 ms
        if slow_from <= count < slow_from + slowdown.passes:
            duration *= slowdown.factor
        count += 1
        clock.now += GAP_S
        if hang_at is not None and count > hang_at:
            hang_started = clock.now
            judge.run(clock.now, 1e6, hang=True)  # raises Hang at its finding
        judge.run(clock.now, duration)
        clock.now += duration
        return record.model_copy(update={"duration_s": duration})

    result = WorkerResult(run_key=run.run_key, status="failed")
    try:
        schedule.measure_launch(run, measure, None, lambda c: [[]], None, 1, 1, result)
    except Hang:
        assert judge.stalled is not None
        if hang_started is None:
            return True, None, count
        return False, judge.stalled[0] - hang_started, count
    return False, None, count


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    z, p = 1.96, k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


CELLS: dict[str, tuple[Noise, Slowdown]] = {
    "pass noise 3%, AR(1), drift": (Noise(), Slowdown()),
    "+ 1 pass in 20 stalls 3x": (Noise(stall_every=20, stall_factor=3.0), Slowdown()),
    "+ 1 pass in 20 stalls 8x": (Noise(stall_every=20, stall_factor=8.0), Slowdown()),
    "+ a periodic disturbance (5%, 8 passes)": (Noise(period=8, period_amp=0.05), Slowdown()),
    "+ the machine 3x slower for 30 passes": (Noise(stall_every=20), Slowdown(3.0, 30)),
    "+ the machine 12x slower for 30 passes": (Noise(stall_every=20), Slowdown(12.0, 30)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pass-s", type=float, nargs="+", default=[0.3, 10.0])
    args = parser.parse_args()
    clock = Clock()
    # The virtual clock in place of the time module the shipped code reads.
    vars(schedule)["time"] = clock
    vars(wire_progress)["time"] = clock
    with tempfile.TemporaryDirectory() as tmp:
        note = Path(tmp) / "progress.json"
        os.environ[PROGRESS_ENV] = str(note)
        rng = np.random.default_rng(args.seed)
        print(
            "| noise | pass | false stalls | 95% CI | launches | hang found after (median, max) |"
        )
        print("|---|---|---|---|---|---|")
        for pass_s in args.pass_s:
            for name, (noise, slow) in CELLS.items():
                false = 0
                for _ in range(args.trials):
                    called, _, _ = one_launch(
                        rng, noise, pass_s, args.blocks, slow, None, note, clock
                    )
                    false += called
                found: list[float] = []
                for _ in range(max(1, args.trials // 4)):
                    hang_at = int(rng.integers(0, 4 * args.blocks + 60))
                    called, after, _ = one_launch(
                        rng, replace(noise), pass_s, args.blocks, slow, hang_at, note, clock
                    )
                    if after is not None:
                        found.append(after)
                lo, hi = wilson(false, args.trials)
                hang = (
                    f"{np.median(found):.0f} s, {max(found):.0f} s (n={len(found)})"
                    if found
                    else "n/a"
                )
                print(
                    f"| {name} | {pass_s:g} s | {100 * false / args.trials:.1f}% | "
                    f"[{100 * lo:.1f}, {100 * hi:.1f}] | {args.trials} | {hang} |"
                )


if __name__ == "__main__":
    main()
