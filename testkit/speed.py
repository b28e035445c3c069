"""Simulated shared launches whose noise is the machine's speed: every part of a pass
slowed or sped at once, driven by the shipped scheduler and read by the shipped rows (the
primary output-throughput row and the speed-adjusted one). Nothing here decides.

Per pass, on the log scale, part j's time is its mean + loading_j * speed + its own noise:
- speed: AR(1) (`rho`, stationary sd `sigma_speed`), a slow drift, a periodic disturbance, and
  1 pass in `stall_every` stalled (the whole pass `stall_factor` slower);
- loading: 1 for the step's parts; `outside_loading` for the time outside the steps (on the
  demo it moves more than the steps do: theta -1.4);
- own noise: AR(1) (`rho_own`) of sd `sigma_own` per part;
- one launch: a launch level (`launch_sd`) moves the whole launch; with `launch_x_arm` the
  candidate's effect differs from launch to launch.
The candidate's change: `effects` (log) on draft, forward, rest and outside.

The speed probe (`probe_us` > 0: each pass carries it, as with the scenario's speed_probe):
its time a step is probe_us * exp(speed + its own noise), the own noise white per pass
(`probe_sigma_own`: the probe samples the speed for 75-110 µs before each step, so a pass's
mean carries sampling noise, not a slow part of its own; 10% makes it remove about half of
the throughput's variance here, as the shipped loop did on real vLLM); it sees the whole-pass
stalls (the machine) but not the time outside the steps alone (the engine core held up).
`probe_effect` (log): a change that reaches the probe anyway (the caches, the interpreter's
state), in the candidate's arm.

The probe's twin (`twin`: harness.engine.twin, the same loop in another process run at the
same moment): it shares the speed and the probe's own sampling noise (both loops run in the
same 75-110 µs), and each of the two has a little noise of its own (`twin_sigma_own`, white
per pass: on the demo a pass's probe over its twin, each pair's ratio clipped at 10%, varied
by 0.8% where the probe varied by 3.4%). A change that reaches the probe does not reach the
twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.config.scenario import Precision
from harness.wire.records import PassRecord, SpecDecodeCounters, StepTimes
from harness.wire.spec import ArmSpec
from testkit.simulate import _PASS, _REQUEST, _copy, drive_record, shared_run


@dataclass
class Speed:
    steps: int = 53
    ms: tuple[float, float, float, float] = (0.42, 1.40, 1.25, 75.0)  # draft, fwd, rest, out
    sigma_speed: float = 0.08
    rho: float = 0.7
    outside_loading: float = 2.0
    sigma_own: tuple[float, float, float, float] = (0.02, 0.02, 0.02, 0.12)
    rho_own: float = 0.5
    drift: float = 0.02  # log change of the speed over 500 passes
    period: float = 0.0  # passes
    period_amp: float = 0.0
    stall_every: int = 20
    stall_factor: float = 1.5
    outside_stall_every: int = 0  # 1 in this many passes, the time outside the steps alone
    outside_stall_factor: float = 5.0  # ... this many times longer (the engine core held up)
    launch_sd: float = 0.05
    launch_x_arm: float = 0.0
    effects: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    probe_us: float = 0.0  # 0: the passes carry no probe
    probe_sigma_own: float = 0.10
    probe_effect: float = 0.0
    twin: bool = False
    twin_sigma_own: float = 0.006
    loadings: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.loadings = (1.0, 1.0, 1.0, self.outside_loading)

    def truth(self) -> float:
        """The candidate's true output-throughput delta (same tokens per pass): the
        baseline's mean pass time over the candidate's, less one, at zero noise."""
        d, f, r, o = self.ms
        e = [math.exp(x) for x in self.effects]
        p = self.probe_us / 1000
        base = self.steps * (d + f + r + p) + o
        cand = self.steps * (d * e[0] + f * e[1] + r * e[2] + p * math.exp(self.probe_effect))
        cand += o * e[3]
        return base / cand - 1.0


class SpeedLaunch:
    """One simulated engine whose passes carry step times."""

    def __init__(self, model: Speed, rng: np.random.Generator) -> None:
        self.m, self.rng = model, rng
        self.speed = rng.normal(0, model.sigma_speed)
        self.own = rng.normal(0, 1, 4) * np.array(model.sigma_own)
        self.level = rng.normal(0, model.launch_sd)
        self.phase = rng.uniform(0, 2 * math.pi)
        self.extra = rng.normal(0, model.launch_x_arm)  # this launch's own effect
        self.count = 0

    def measure(self, i: int, arm: ArmSpec, block: int) -> PassRecord:
        m, rng = self.m, self.rng
        innov = m.sigma_speed * math.sqrt(1 - m.rho**2)
        self.speed = m.rho * self.speed + rng.normal(0, innov)
        own_innov = np.array(m.sigma_own) * math.sqrt(1 - m.rho_own**2)
        self.own = m.rho_own * self.own + rng.normal(0, 1, 4) * own_innov
        speed = self.speed + self.level + m.drift * self.count / 500
        if m.period:
            speed += m.period_amp * math.sin(2 * math.pi * self.count / m.period + self.phase)
        if m.stall_every and rng.random() < 1 / m.stall_every:
            speed += math.log(m.stall_factor)
        self.count += 1
        logs = np.array(m.loadings) * speed + self.own
        if m.outside_stall_every and rng.random() < 1 / m.outside_stall_every:
            logs[3] += math.log(m.outside_stall_factor)
        probe = speed + rng.normal(0, m.probe_sigma_own)
        twin = probe + rng.normal(0, m.twin_sigma_own) if m.twin else None
        if twin is not None:
            probe += rng.normal(0, m.twin_sigma_own)
        if not arm.baseline:
            logs += np.array(m.effects)
            logs[0] += self.extra
            probe += m.probe_effect
        draft, fwd, rest, out = (ms / 1000 * math.exp(x) for ms, x in zip(m.ms, logs, strict=True))
        step_s = m.steps * (draft + fwd + rest)
        probe_s = m.steps * m.probe_us / 1e6 * math.exp(probe) if m.probe_us else 0.0
        duration = step_s + out + probe_s
        times = StepTimes(
            steps=m.steps,
            step_s=step_s,
            forward_s=m.steps * fwd,
            draft_s=m.steps * draft,
            probes=m.steps if m.probe_us else None,
            probe_s=probe_s or None,
            twins=m.steps if twin is not None else None,
            twin_s=m.steps * m.probe_us / 1e6 * math.exp(twin) if twin is not None else None,
            probe_over_twin=math.exp(probe - twin) if twin is not None else None,
        )
        counters = SpecDecodeCounters(
            num_drafts=8 * m.steps,
            num_draft_tokens=24 * m.steps,
            num_accepted_tokens=5 * m.steps,
            accepted_per_pos=[3 * m.steps, m.steps, m.steps],
        )
        return _copy(
            _PASS,
            repeat=i,
            started_unix=float(self.count),
            duration_s=duration,
            requests=[_copy(_REQUEST, e2el_s=duration)],
            arm=arm.variant,
            block=block,
            step_times=times,
            spec_decode=counters,
        )


def speed_trials(
    model: Speed,
    blocks: int,
    trials: int,
    seed: int,
    part: str | None = "draft",
    precision: Precision | None = None,
) -> list[dict[str, Any]]:
    """`trials` launches through drive_shared_launch (checked warm-up; with `precision`, its
    stop), each read by the shipped rows: per trial {"primary": the output-throughput
    estimate, "adjusted": the speed-adjusted row's estimate (None: no row), "adjustment":
    its facts (analysis.comparison.SpeedAdjustment), "blocks": blocks run}."""
    from harness.analysis.adjusted import adjusted_row
    from harness.analysis.metric_row import compare_metric
    from harness.results.metrics import METRICS, passes_frame

    throughput = next(m for m in METRICS if m.key == "output_throughput")
    run = shared_run(blocks, precision, step_times=True)
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for trial in range(trials):
        launch = SpeedLaunch(model, rng)
        passes, record, _stopped = drive_record(run, launch.measure, seed * 100_003 + trial)
        frame = passes_frame([record])
        primary = compare_metric(throughput, frame, "base", "opt", "one-engine")
        robust = primary is not None and primary.estimate.robust
        row = adjusted_row(frame, "base", "opt", part, "one-engine", robust=robust)
        out.append(
            {
                "primary": None if primary is None else primary.estimate,
                "adjusted": None if row is None else row.estimate,
                "adjustment": None if row is None else row.adjustment,
                "blocks": len(passes) // 4,
            }
        )
    return out
