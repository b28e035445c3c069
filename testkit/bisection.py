"""Bisection simulated: the shipped Bisector with its one seam, `observe`, answered by
intervals drawn from the noise instead of engine runs. Each comparison's standard error is what
its precision target buys (se = MDE / 2.8), shared with the run's other candidates through
good's passes (RUN_CORRELATION), plus a launch x arm interaction (sd 0.3%) that precision cannot
remove, and each candidate has the whole step or none of it. CostModel: the same, each run
timed and its noise sized as benchmarks/bisect_cost.py describes (fitted to the real 8-commit
bisects). Used by tests/unit/test_bisection.py and benchmarks/bisect_cost.py,
bisect_two_steps.py."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import yaml

from harness.analysis.bisection import RUN_CORRELATION, Interval, Outcome, Step
from harness.bisect import Bisector
from harness.config.scenario import parse_scenario
from harness.plan.commits import Candidate
from testkit.scenarios import MINIMAL

S = TypeVar("S", bound="Simulated")
LAUNCH_X_ARM = 0.003  # sd of a launch's own effect per arm, which precision cannot remove


class Simulated(Bisector):
    """The shipped bisector; its engine runs replaced by intervals drawn from the noise."""

    def __init__(
        self,
        n: int,
        culprit: int | None,
        step: float,
        rng: np.random.Generator,
        tmp: Path,
        check_runs: int = 1,
    ) -> None:
        data: dict[str, Any] = copy.deepcopy(MINIMAL)
        data["variants"] = {"base": {"baseline": True}, "opt": {}}
        path = tmp / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        cands = [
            Candidate(f"c{i}", f"{i:040d}", f"commit {i}", None, None, True) for i in range(n + 1)
        ]
        # check_runs=1: these simulations test the check beside a culprit, which the CLI
        # runs only when asked (--check-beside).
        super().__init__(
            parse_scenario(data),
            path,
            cands,
            tmp / "bisect",
            "output_throughput",
            0.02,
            60.0,
            3,
            lambda _m: None,
            check_runs=check_runs,
        )
        self.culprit, self.step_size, self.rng, self.runs = culprit, step, rng, 0
        (tmp / "bisect").mkdir(exist_ok=True)

    def truth(self, i: int) -> float:
        return self.step_size if self.culprit is not None and i >= self.culprit else 0.0

    def observe(
        self, arms: list[int], target: float | None, attempt: int
    ) -> tuple[Step, dict[int, Interval]]:
        self.runs += 1
        return self.draw(arms, target, (target or 0.02) / 2.8)

    def draw(
        self, arms: list[int], target: float | None, noise: float
    ) -> tuple[Step, dict[int, Interval]]:
        """One run's deltas against arms[0], each of sd `noise`: RUN_CORRELATION of its variance
        is arms[0]'s own, shared by every delta (candidates measured in one run are correlated
        through good's passes, as in the real 4-arm runs), the rest the arm's, plus each arm's
        own launch x arm interaction."""
        se = math.hypot(noise, LAUNCH_X_ARM)
        shared = self.rng.normal(0, noise * math.sqrt(RUN_CORRELATION))
        out = {}
        for i in arms[1:]:
            own = self.rng.normal(0, noise * math.sqrt(1 - RUN_CORRELATION))
            d = (
                self.truth(i)
                - self.truth(arms[0])
                + own
                - shared
                + self.rng.normal(0, LAUNCH_X_ARM)
            )
            out[i] = Interval(d, d - 1.96 * se, d + 1.96 * se)
        return Step(f"sim{self.runs}", str(self.runs), arms, target, "one-engine"), out


START_S, AROUND_S, ARM_BLOCK_S = 35.0, 5.0, 0.62
BUDGET_PER_ARM_S, MIN_BLOCKS, LOOK_EVERY = 80.0, 20, 4


class CostModel(Simulated):
    """The shipped bisector (as the unit tests simulate it), at the bisect scenario's 5%
    threshold and 80 s per arm; each engine run replaced by its modelled cost and intervals."""

    def __init__(
        self,
        n: int,
        culprit: int | None,
        step: float,
        rng: np.random.Generator,
        tmp: Path,
        points: int,
        check_runs: int = 0,
    ) -> None:
        # check_runs 0: the CLI's default (no run spent beside a culprit unless asked).
        super().__init__(n, culprit, step, rng, tmp, check_runs=check_runs)
        self.threshold, self.budget_s, self.points = 0.05, BUDGET_PER_ARM_S, points
        self.wall_s = 0.0

    def observe(
        self, arms: list[int], target: float | None, attempt: int
    ) -> tuple[Step, dict[int, Interval]]:
        self.runs += 1
        k = len(arms)
        c = self.rng.uniform(0.27, 0.33) + 0.025 * (k - 2)
        cap = int((BUDGET_PER_ARM_S * k - START_S) / (k * ARM_BLOCK_S))
        blocks = MIN_BLOCKS
        while target is not None and c / math.sqrt(blocks) > target and blocks + LOOK_EVERY <= cap:
            blocks += LOOK_EVERY
        self.wall_s += START_S + AROUND_S + blocks * k * ARM_BLOCK_S
        step, out = self.draw(arms, target, c / math.sqrt(blocks) / 2.8)
        step.run_id = f"model{self.runs}"
        return step, out


def planted(base: type[S], steps: dict[int, float]) -> type[S]:
    """`base` whose commit i has the sum of the `steps` at or before it."""

    class Planted(base):  # type: ignore[valid-type, misc]
        def truth(self, i: int) -> float:
            return sum(s for at, s in steps.items() if i >= at)

    return Planted


def named(out: Outcome) -> set[int]:
    """Every commit the outcome names as a culprit."""
    found = {out.culprit} if out.verdict == "CULPRIT" and out.culprit is not None else set()
    return found | {c.culprit for c in out.changes if c.culprit is not None}


def reported(out: Outcome, a: int, b: int) -> bool:
    """Both steps reported: each named as a culprit, or the one not named found as a STEP (with
    its interval) in the part of the range that holds it, beside the culprit named."""
    if named(out) == {a, b}:
        return True
    if out.verdict != "CULPRIT" or out.culprit not in (a, b):
        return False
    other = b if out.culprit == a else a
    return any(
        c.verdict == "STEP" and c.lo < other <= c.hi and c.culprit in (None, other)
        for c in out.changes
    )
