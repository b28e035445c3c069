"""Bisection simulated: the shipped Bisector with its one seam, `observe`, answered by
intervals drawn from the noise instead of engine runs. Each comparison's standard error is what
its precision target buys (se = MDE / 2.8) plus a launch x arm interaction (sd 0.3%) that
precision cannot remove, and each candidate has the whole step or none of it. Used by
tests/unit/test_bisection.py and benchmarks/bisect_cost.py, bisect_two_steps.py."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from harness.analysis.bisection import Interval
from harness.bisect import Bisector, Step
from harness.config.scenario import parse_scenario
from harness.plan.commits import Candidate
from testkit.scenarios import MINIMAL


class Simulated(Bisector):
    """The shipped bisector; its engine runs replaced by intervals drawn from the noise."""

    def __init__(self, n: int, culprit: int | None, step: float, rng: np.random.Generator,
                 tmp: Path, check_runs: int = 1) -> None:
        data: dict[str, Any] = copy.deepcopy(MINIMAL)
        data["variants"] = {"base": {"baseline": True}, "opt": {}}
        path = tmp / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        cands = [Candidate(f"c{i}", f"{i:040d}", f"commit {i}", None, None, True)
                 for i in range(n + 1)]
        # check_runs=1: these simulations test the check beside a culprit, which the CLI
        # runs only when asked (--check-beside).
        super().__init__(parse_scenario(data), path, cands, tmp / "bisect", "output_throughput",
                         0.02, 60.0, 3, lambda _m: None, check_runs=check_runs)
        self.culprit, self.step_size, self.rng, self.runs = culprit, step, rng, 0
        (tmp / "bisect").mkdir(exist_ok=True)

    def truth(self, i: int) -> float:
        return self.step_size if self.culprit is not None and i >= self.culprit else 0.0

    def observe(self, arms: list[int], target: float | None,
                attempt: int) -> tuple[Step, dict[int, Interval]]:
        self.runs += 1
        se = math.hypot((target or 0.02) / 2.8, 0.003)
        out = {}
        for i in arms[1:]:
            truth = self.truth(i)
            d = truth + self.rng.normal(0, se)
            out[i] = Interval(d, d - 1.96 * se, d + 1.96 * se)
        return Step(f"sim{self.runs}", str(self.runs), arms, target, "one-engine"), out
