"""Simulated one-engine launches with the noise this machine has, driven by the shipped
scheduler (schedule.drive_shared_launch: the checked warm-up, the balanced blocks, the precision
stop) and estimated by the shipped statistics: the stress tests' seam. Nothing here decides;
it only makes passes.

Per pass (warm-up passes included, in launch order): log output throughput = level + AR(1)
pass noise + a slow drift + a periodic disturbance (`period_amp` at a period of `period`
passes, random phase) + the candidate's effect + its warm-up (a climb from `warm_amp` slower
over its first `warm_len` passes, linear or convex) + stalls (1 in `stall_every` passes, in
either arm or in one, `stall_factor` times slower).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from harness.analysis.stats import DeltaEstimate, arm_delta
from harness.config.scenario import Precision, parse_scenario
from harness.engine.schedule import WarmUp, drive_shared_launch, pass_throughput
from harness.plan.plan import expand_plan
from harness.wire.records import (
    PassRecord,
    PrecisionStop,
    Record,
    RequestRecord,
    RunRecord,
    WorkerResult,
)
from harness.wire.spec import ArmSpec, RunSpec
from testkit.scenarios import MINIMAL

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Noise:
    sigma_p: float = 0.03  # pass noise (log scale)
    rho: float = 0.3  # AR(1) between consecutive passes
    drift: float = 0.02  # log change over 500 passes (a slow machine drift)
    effect: float = 0.0  # the candidate's true log ratio
    warm_amp: float = 0.0  # the candidate starts this much slower (0.10 = 10%)
    warm_len: int = 40  # ... and recovers over this many of its own passes
    warm_shape: float = 1.0  # 1 linear, 2 convex (fast recovery, long tail)
    stall_every: int = 0  # 1 in this many passes stalls (0: none)
    stall_factor: float = 3.0
    stall_arm: str | None = None  # stalls in this arm only (None: either)
    launch_x_arm: float = 0.0  # sd of this launch's own effect around `effect`
    period: float = 0.0  # a periodic disturbance (a timer, a background task): its period
    period_amp: float = 0.0  # ... in passes, and its amplitude (log), at a random phase


def shared_run(
    blocks: int, precision: Precision | None = None, seed: int = 0, step_times: bool | None = None
) -> RunSpec:
    """The one-engine RunSpec of a two-arm scenario (arms 'base' and 'opt')."""
    data: dict[str, Any] = copy.deepcopy(MINIMAL)
    data["variants"] = {"base": {"baseline": True}, "opt": {}}  # nothing to switch or prove
    data["repeats"] = 2 * blocks
    data["workload"]["seed"] = seed
    if step_times is not None:
        data["step_times"] = step_times
    if precision is not None:
        data["precision"] = precision.model_dump()
    run = expand_plan(parse_scenario(data)).runs[0]
    assert run.design == "one-engine"
    return run


_Model = TypeVar("_Model", bound=Record)

_REQUEST = RequestRecord(
    index=0,
    prompt_tokens=16,
    output_tokens=64,
    ttft_s=0.001,
    e2el_s=1.0,
    finish_reason="length",
    output_token_ids=[],
)
_PASS = PassRecord(
    repeat=0,
    started_unix=0.0,
    duration_s=1.0,
    requests=[_REQUEST],
    spec_decode=None,
    workload_hash="w",
    arm="base",
    block=0,
)


def _copy(template: _Model, **values: Any) -> _Model:
    """A validated record with some fields replaced: model_copy without its deep copy of
    private state, which these records do not have (about 4x quicker; a simulated precision
    run makes hundreds of thousands of passes)."""
    new = object.__new__(type(template))
    object.__setattr__(new, "__dict__", {**template.__dict__, **values})
    object.__setattr__(
        new, "__pydantic_fields_set__", template.__pydantic_fields_set__ | values.keys()
    )
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


class Launch:
    """One simulated engine: measure(i, arm, block) -> a pass, in launch order."""

    def __init__(self, noise: Noise, rng: np.random.Generator) -> None:
        self.noise, self.rng = noise, rng
        self.ar = 0.0
        self.count = 0
        self.cand_count = 0
        self.effect = (
            noise.effect + rng.normal(0, noise.launch_x_arm) if noise.launch_x_arm else noise.effect
        )
        self.phase = rng.uniform(0, 2 * math.pi) if noise.period else 0.0

    def measure(self, _i: int, arm: ArmSpec, block: int) -> PassRecord:
        n, rng = self.noise, self.rng
        self.ar = n.rho * self.ar + rng.normal(0, n.sigma_p)
        y = 7.0 + self.ar + n.drift * self.count / 500
        if n.period:
            y += n.period_amp * math.sin(2 * math.pi * self.count / n.period + self.phase)
        if not arm.baseline:
            y += self.effect
            if n.warm_amp and self.cand_count < n.warm_len:
                left = 1 - self.cand_count / n.warm_len
                y += math.log(1 - n.warm_amp * left**n.warm_shape)
            self.cand_count += 1
        if (
            n.stall_every
            and (n.stall_arm is None or n.stall_arm == arm.variant)
            and rng.random() < 1 / n.stall_every
        ):
            y -= math.log(n.stall_factor)
        self.count += 1
        duration = 64 / math.exp(y)  # 64 tokens: one request stands for the pass's batch
        # Copies of validated records with the pass's own values (_copy): a simulated
        # precision run makes hundreds of thousands of passes, and validating each (or
        # model_construct's default filling) was a third of its time. test_stats_stress
        # checks that a copy is what validating its fields gives.
        reqs = [_copy(_REQUEST, e2el_s=duration)]
        return _copy(
            _PASS,
            repeat=_i,
            started_unix=float(self.count),
            duration_s=duration,
            requests=reqs,
            arm=arm.variant,
            block=block,
        )


def estimate(passes: list[PassRecord]) -> DeltaEstimate:
    """The shipped estimator on the output throughput of the measured passes."""
    values = np.array([pass_throughput(p) for p in passes])
    cand = np.array([p.arm == "opt" for p in passes])
    zeros = np.zeros(len(passes), dtype=int)
    block = np.array([p.block for p in passes])
    return arm_delta(values, cand, zeros, zeros, block, "relative", "one-engine")


def simulate(
    noise: Noise,
    blocks: int,
    trials: int,
    seed: int,
    checked_warmup: bool = True,
    precision: Precision | None = None,
) -> list[tuple[DeltaEstimate, WarmUp, int]]:
    """`trials` launches through drive_shared_launch: (estimate, its warm-up, blocks run)."""
    run = shared_run(blocks, precision)
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(trials):
        launch = Launch(noise, rng)
        warm = WarmUp() if checked_warmup else None
        # Each launch its own orientation draw (block_arms), without taking from the noise's
        # stream: the same seed gives the same noise whatever the scheduler draws.
        passes, _ = drive_shared_launch(
            run,
            launch.measure,
            None,
            None,
            1,
            None,
            log=lambda _m: None,
            warmup=warm,
            block_seed=seed * 100_003 + trial,
        )
        out.append((estimate(passes), warm or WarmUp(), len(passes) // 4))
    return out


def rates(
    results: list[tuple[DeltaEstimate, WarmUp, int]], effect: float
) -> tuple[float, float, float]:
    """(significant share, coverage of the true effect, median MDE)."""
    ests = [e for e, _, _ in results]
    truth = math.expm1(effect)
    sig = float(np.mean([e.significant for e in ests]))
    cover = float(
        np.mean(
            [
                e.ci_low is not None and e.ci_high is not None and e.ci_low <= truth <= e.ci_high
                for e in ests
            ]
        )
    )
    mde = float(np.median([e.mde for e in ests if e.mde is not None]))
    return sig, cover, mde


@dataclass
class History:
    """A benchmark's history on this machine: `runs` one-engine runs in a row, each its own
    launch (`blocks` balanced blocks with `noise`), the candidate `step` slower or faster (a
    log ratio) from run `at` on, in its delta and in its own value. Each launch's speed is
    offset by `launch_sd` (log; ~8% here) and the machine drifts by a random walk of
    `drift_sd` per run (the 2x between days, spread over runs), which deltas cancel and
    absolute values carry."""

    runs: int = 30
    step: float = 0.0
    at: int | None = None
    blocks: int = 40
    launch_sd: float = 0.08
    drift_sd: float = 0.0
    noise: Noise = field(default_factory=lambda: Noise(sigma_p=0.06, launch_x_arm=0.005))
    # The candidate's effect drifting linearly by this much (a log ratio) from the first run to
    # the last, in its delta and its own value: a slow change that no one commit made.
    trend: float = 0.0


def history_frame(h: History, rng: np.random.Generator) -> pd.DataFrame:
    """One simulated history as the run store's history frame (harness.results.index.history:
    the columns harness.analysis.history reads), each run's estimate from the shipped
    scheduler and statistics."""
    import pandas as pd

    run = shared_run(h.blocks)
    rows = []
    level = 0.0
    for i in range(h.runs):
        level += rng.normal(0, h.drift_sd) if h.drift_sd else 0.0
        offset = level + rng.normal(0, h.launch_sd)
        effect = h.noise.effect + (h.step if h.at is not None and i >= h.at else 0.0)
        effect += h.trend * i / max(h.runs - 1, 1)
        launch = Launch(replace(h.noise, effect=effect), rng)
        passes, _ = drive_shared_launch(
            run, launch.measure, None, None, 1, None, log=lambda _m: None, block_seed=i
        )
        est = estimate(passes)
        tput = np.array([pass_throughput(p) for p in passes]) * math.exp(offset)
        cand = np.array([p.arm == "opt" for p in passes])
        rows.append(
            {
                "run_id": f"r{i:03d}",
                "created": None,
                "created_unix": float(i),
                "commit": f"{i:040x}",
                "scenario": "sim",
                "machine": "m",
                "cell": None,
                "candidate": "opt",
                "baseline": "base",
                "metric": "output_throughput",
                "label": "Output throughput (tok/s)",
                "kind": "relative",
                "exact": False,
                "delta": est.delta,
                "ci_low": est.ci_low,
                "ci_high": est.ci_high,
                "significant": est.significant,
                "improved": est.delta > 0,
                "gate": None,
                "baseline_value": float(np.mean(tput[~cand])),
                "candidate_value": float(np.mean(tput[cand])),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class Detection:
    """How the shipped change-point detection (harness.analysis.history.build_series) did on
    simulated histories of one kind: `detected` the share with a change point within one run
    of the planted step, `false_per_100` change points elsewhere per 100 runs, `quiet` the
    share of histories with no change point at all."""

    histories: int
    detected: float
    false_per_100: float
    quiet: float
    median_step: float  # the reported size of the detected steps (a fraction)
    drifted: float = 0.0  # the share of histories whose series reports a drift (a slope)
    median_drift: float = math.nan  # the reported change over a drifting segment (a fraction)


def detection(h: History, trials: int, seed: int, series: str = "delta") -> Detection:
    """Simulate `trials` histories of `h` and read the change points of their `series`
    ("delta": the one-engine deltas; "value": the candidate arm's own value)."""
    from harness.analysis.history import build_series

    rng = np.random.default_rng(seed)
    found = false = quiet = drifted = 0
    sizes = []
    drifts: list[float] = []
    for _ in range(trials):
        (s,) = build_series(history_frame(h, rng))
        steps = s.delta_steps if series == "delta" else s.value_steps
        trends = getattr(s, f"{series}_drifts", [])
        drifted += bool(trends)
        drifts += [d.change for d in trends[:1]]
        hits = [x for x in steps if h.at is not None and abs(x.index - h.at) <= 1]
        found += bool(hits)
        sizes += [x.step for x in hits[:1]]
        false += len(steps) - len(hits[:1])
        quiet += not steps
    return Detection(
        trials,
        found / trials,
        100 * false / (trials * h.runs),
        quiet / trials,
        float(np.median(sizes)) if sizes else math.nan,
        drifted / trials,
        float(np.median(drifts)) if drifts else math.nan,
    )


@dataclass
class Parts:
    """A pass's time by part, each with its own noise (component rows): per engine
    step the drafter's time, the verification forward and the rest of the step, and per pass
    the time outside the steps; `steps` steps a pass (greedy: the same in every pass). Each part
    has AR(1) pass noise (log sd `sigma[part]`, `rho`) and the machine's slow drift; 1 in
    `stall_every` passes stalls one part (drawn at random) by `stall_factor`. The candidate's
    drafter is `draft_effect` (log) slower."""

    steps: int = 53
    ms: tuple[float, float, float, float] = (0.35, 1.1, 1.2, 60.0)  # draft, fwd, rest, out
    sigma: tuple[float, float, float, float] = (0.04, 0.03, 0.03, 0.08)
    rho: float = 0.5
    drift: float = 0.02  # log change over 500 passes, every part alike
    stall_every: int = 20
    stall_factor: float = 1.4
    draft_effect: float = 0.0


class PartsLaunch:
    """One simulated engine whose passes carry step times (PassRecord.step_times)."""

    def __init__(self, parts: Parts, rng: np.random.Generator) -> None:
        self.parts, self.rng = parts, rng
        self.ar = np.zeros(4)
        self.count = 0

    def measure(self, _i: int, arm: ArmSpec, block: int) -> PassRecord:
        from harness.wire.records import SpecDecodeCounters, StepTimes

        p, rng = self.parts, self.rng
        self.ar = p.rho * self.ar + rng.normal(0, 1, 4) * np.array(p.sigma)
        logs = self.ar + p.drift * self.count / 500
        if not arm.baseline:
            logs[0] += p.draft_effect
        if p.stall_every and rng.random() < 1 / p.stall_every:
            logs[rng.integers(4)] += math.log(p.stall_factor)
        self.count += 1
        draft, fwd, rest, out = (m / 1000 * math.exp(x) for m, x in zip(p.ms, logs, strict=True))
        step_s = p.steps * (draft + fwd + rest)
        duration = step_s + out
        times = StepTimes(
            steps=p.steps, step_s=step_s, forward_s=p.steps * fwd, draft_s=p.steps * draft
        )
        reqs = [_copy(_REQUEST, e2el_s=duration)]
        # Greedy: the same drafts and acceptance in every pass (a speculative arm's counters).
        counters = SpecDecodeCounters(
            num_drafts=8 * p.steps,
            num_draft_tokens=24 * p.steps,
            num_accepted_tokens=5 * p.steps,
            accepted_per_pos=[3 * p.steps, p.steps, p.steps],
        )
        return _copy(
            _PASS,
            repeat=_i,
            started_unix=float(self.count),
            duration_s=duration,
            requests=reqs,
            arm=arm.variant,
            block=block,
            step_times=times,
            spec_decode=counters,
        )


def drive_record(
    run: RunSpec, measure: Callable[[int, ArmSpec, int], PassRecord], block_seed: int
) -> tuple[list[PassRecord], RunRecord, PrecisionStop | None]:
    """One shared launch of `run` through the shipped scheduler (no switch, no warm-up pass
    of its own): its passes, the ok RunRecord the analysis reads, and why it stopped."""
    passes, stopped = drive_shared_launch(
        run,
        measure,
        None,
        None,
        1,
        None,
        log=lambda _m: None,
        warmup=WarmUp(),
        block_seed=block_seed,
    )
    return passes, shared_record(passes), stopped


def shared_record(passes: list[PassRecord], key: str = "base+opt.r0") -> RunRecord:
    """The ok record of one shared launch of arms 'base' and 'opt' holding `passes`."""
    return RunRecord(
        run_key=key,
        variant="base+opt",
        arms=["base", "opt"],
        round=0,
        order=0,
        status="ok",
        wall_s=1.0,
        result=WorkerResult(run_key=key, status="ok", passes=passes),
    )


def parts_trials(
    parts: Parts, blocks: int, trials: int, seed: int, precision: Precision | None = None
) -> list[dict[str, DeltaEstimate | Any]]:
    """`trials` launches through drive_shared_launch (checked warm-up; with `precision`, its
    stopping rule), each read by the shipped code: passes_frame, the component rows
    (compare_metric) and the attribution (analysis.attribution.attribute). Per trial: {row
    key: its estimate, "attribution": ..., "blocks": blocks run, "stopped": why}."""
    from harness.analysis.attribution import attribute
    from harness.analysis.metric_row import compare_metric
    from harness.results.metrics import COMPONENT_METRICS, passes_frame

    run = shared_run(blocks, precision, step_times=True)
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for trial in range(trials):
        launch = PartsLaunch(parts, rng)
        passes, record, stopped = drive_record(run, launch.measure, seed * 100_003 + trial)
        frame = passes_frame([record])
        found: dict[str, Any] = {}
        for metric in COMPONENT_METRICS:
            row = compare_metric(metric, frame, "base", "opt", "one-engine")
            found[metric.key] = None if row is None else row.estimate
        found["attribution"] = attribute(frame, "base", "opt", "one-engine")
        found["blocks"], found["stopped"] = len(passes) // 4, stopped
        out.append(found)
    return out
