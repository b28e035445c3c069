"""Bisection's decisions (Chromium Pinpoint's three-way verdict), pure: a comparison's interval
in, DIFFERENT / SAME / UNKNOWN out, and the next candidate to measure.

- **The range first**: `good` against `bad`, on a boundary of half the threshold (the smallest
  change worth finding): DIFFERENT when the whole interval lies beyond it on one side, SAME
  when it lies inside (-boundary, +boundary) (then no commit differs), UNKNOWN otherwise.
- **The first run** measures up to three points inside the range beside `bad`, all in one
  engine with `good` (first_points): judged once the step is known, they narrow the range to
  a quarter for the price of one engine start.
- **Each midpoint** against `good`, on a boundary of half the step good..bad measured: DIFFERENT
  (it already has the change) when its interval lies beyond the boundary towards the step,
  SAME when it lies on good's side, UNKNOWN otherwise. Halfway is where a commit with the whole
  step and one with none are equally far: the rule that errs least either way.
- An UNKNOWN is measured again with a tighter precision target, within a budget of tries.
A metric known exactly (greedy acceptance) has a zero-width interval: it always decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["DIFFERENT", "SAME", "UNKNOWN"]


@dataclass(frozen=True)
class Interval:
    """A delta (a fraction for relative metrics) with its 95% interval."""

    delta: float
    low: float
    high: float

    @property
    def finite(self) -> bool:
        return all(math.isfinite(x) for x in (self.delta, self.low, self.high))


def range_verdict(interval: Interval, threshold: float) -> Verdict:
    """good against bad: does the range hold a change of at least about `threshold`?"""
    if not interval.finite:
        return "UNKNOWN"
    boundary = threshold / 2
    if interval.low > boundary or interval.high < -boundary:
        return "DIFFERENT"
    if -boundary < interval.low and interval.high < boundary:
        return "SAME"
    return "UNKNOWN"


def midpoint_verdict(interval: Interval, step: float) -> Verdict:
    """good against a candidate inside the range, given the step good..bad measured (signed):
    DIFFERENT when the candidate is on bad's side of half the step, SAME on good's side."""
    if not interval.finite or step == 0 or not math.isfinite(step):
        return "UNKNOWN"
    boundary = step / 2
    # Orient so that the step is positive.
    low, high = (interval.low, interval.high) if step > 0 else (-interval.high, -interval.low)
    boundary = abs(boundary)
    if low > boundary:
        return "DIFFERENT"
    if high < boundary:
        return "SAME"
    return "UNKNOWN"


def precision_target(boundary: float, interval: Interval | None = None) -> float:
    """The output-throughput MDE to ask a comparison for so that its interval can clear
    `boundary`: the boundary itself at first (an interval about 0.7 times as wide as the
    MDE, centred on 0 or on the step, clears half the step), and, after an UNKNOWN, enough to
    clear the boundary from where the estimate lies (at least halving the target)."""
    target = abs(boundary)
    if interval is not None and interval.finite:
        distance = abs(abs(interval.delta) - abs(boundary))
        target = min(target / 2, max(distance * 1.4, target / 4))
    return max(target, 0.002)


@dataclass
class Search:
    """The state of a bisection over candidates 0 (good) .. n (bad): `lo` is the newest known
    SAME as good, `hi` the oldest known DIFFERENT."""

    lo: int
    hi: int

    @property
    def done(self) -> bool:
        return self.hi - self.lo <= 1

    def midpoint(self) -> int:
        return (self.lo + self.hi) // 2

    @property
    def consistent(self) -> bool:
        """False when a candidate measured SAME lies after one measured DIFFERENT: the metric
        is not monotone over the range (a change undone later, or noise), and no single
        commit explains it."""
        return self.lo < self.hi

    def record(self, index: int, verdict: Verdict) -> None:
        if verdict == "DIFFERENT":
            self.hi = min(self.hi, index)
        elif verdict == "SAME":
            self.lo = max(self.lo, index)


def first_points(n: int, most: int = 3) -> list[int]:
    """The candidates the first run measures beside good (0) and bad (n): up to `most` points
    splitting 1..n-1 evenly, so that one engine narrows the range to a quarter instead of a
    half (an engine start costs more here than another arm's passes)."""
    if n <= 1:
        return []
    parts = min(most, n - 1) + 1
    return sorted({round(n * k / parts) for k in range(1, parts)} - {0, n})

