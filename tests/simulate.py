"""Simulated one-engine launches with the noise this machine has, driven by the shipped
scheduler (schedule.drive_shared_launch: the checked warm-up, the balanced blocks, the precision
stop) and estimated by the shipped statistics: the stress tests' seam. Nothing here decides;
it only makes passes.

Per pass (warm-up passes included, in launch order): log output throughput = level + AR(1)
pass noise + a slow drift + the candidate's effect + its warm-up (a climb from `warm_amp`
slower over its first `warm_len` passes, linear or convex) + stalls (1 in `stall_every`
passes, in either arm or in one, `stall_factor` times slower).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.stats import DeltaEstimate, arm_delta
from harness.config.scenario import Precision, parse_scenario
from harness.plan.plan import ArmSpec, RunSpec, expand_plan
from harness.plan.schedule import WarmUp, drive_shared_launch, pass_throughput
from harness.results.records import PassRecord, RequestRecord
from tests.conftest import MINIMAL


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


def shared_run(blocks: int, precision: Precision | None = None, seed: int = 0) -> RunSpec:
    """The one-engine RunSpec of a two-arm scenario (arms 'base' and 'opt')."""
    data: dict[str, Any] = copy.deepcopy(MINIMAL)
    data["variants"] = {"base": {"baseline": True}, "opt": {}}  # nothing to switch or prove
    data["repeats"] = 2 * blocks
    data["workload"]["seed"] = seed
    if precision is not None:
        data["precision"] = precision.model_dump()
    run = expand_plan(parse_scenario(data)).runs[0]
    assert run.design == "one-engine"
    return run


class Launch:
    """One simulated engine: measure(i, arm, block) -> a pass, in launch order."""

    def __init__(self, noise: Noise, rng: np.random.Generator) -> None:
        self.noise, self.rng = noise, rng
        self.ar = 0.0
        self.count = 0
        self.cand_count = 0
        self.effect = noise.effect + rng.normal(0, noise.launch_x_arm) \
            if noise.launch_x_arm else noise.effect

    def measure(self, _i: int, arm: ArmSpec, block: int) -> PassRecord:
        n, rng = self.noise, self.rng
        self.ar = n.rho * self.ar + rng.normal(0, n.sigma_p)
        y = 7.0 + self.ar + n.drift * self.count / 500
        if not arm.baseline:
            y += self.effect
            if n.warm_amp and self.cand_count < n.warm_len:
                left = 1 - self.cand_count / n.warm_len
                y += math.log(1 - n.warm_amp * left ** n.warm_shape)
            self.cand_count += 1
        if n.stall_every and (n.stall_arm is None or n.stall_arm == arm.variant) \
                and rng.random() < 1 / n.stall_every:
            y -= math.log(n.stall_factor)
        self.count += 1
        duration = 64 / math.exp(y)  # 64 tokens: one request stands for the pass's batch
        reqs = [RequestRecord(index=0, prompt_tokens=16, output_tokens=64, ttft_s=0.001,
                              e2el_s=duration, finish_reason="length", output_token_ids=[])]
        return PassRecord(repeat=_i, started_unix=float(self.count), duration_s=duration,
                          requests=reqs, spec_decode=None, workload_hash="w",
                          arm=arm.variant, block=block)


def estimate(passes: list[PassRecord]) -> DeltaEstimate:
    """The shipped estimator on the output throughput of the measured passes."""
    values = np.array([pass_throughput(p) for p in passes])
    cand = np.array([p.arm == "opt" for p in passes])
    zeros = np.zeros(len(passes), dtype=int)
    block = np.array([p.block for p in passes])
    return arm_delta(values, cand, zeros, zeros, block, "relative", "one-engine")


def simulate(noise: Noise, blocks: int, trials: int, seed: int, checked_warmup: bool = True,
             precision: Precision | None = None) -> list[tuple[DeltaEstimate, WarmUp, int]]:
    """`trials` launches through drive_shared_launch: (estimate, its warm-up, blocks run)."""
    run = shared_run(blocks, precision)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        launch = Launch(noise, rng)
        warm = WarmUp() if checked_warmup else None
        passes, _ = drive_shared_launch(run, launch.measure, None, None, 1, None,
                                        log=lambda _m: None, warmup=warm)
        out.append((estimate(passes), warm or WarmUp(), len(passes) // 4))
    return out


def rates(results: list[tuple[DeltaEstimate, WarmUp, int]], effect: float
          ) -> tuple[float, float, float]:
    """(significant share, coverage of the true effect, median MDE)."""
    ests = [e for e, _, _ in results]
    truth = math.expm1(effect)
    sig = float(np.mean([e.significant for e in ests]))
    cover = float(np.mean([e.ci_low is not None and e.ci_high is not None
                           and e.ci_low <= truth <= e.ci_high for e in ests]))
    mde = float(np.median([e.mde for e in ests if e.mde is not None]))
    return sig, cover, mde
