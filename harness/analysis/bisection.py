"""Bisection's decisions (Chromium Pinpoint's three-way verdict), pure: a comparison's interval
in, DIFFERENT / SAME / UNKNOWN out, and the next candidate to measure.

- **The range first**: `good` against `bad`, on a boundary of half the threshold (the smallest
  change worth finding): DIFFERENT when the whole interval lies beyond it on one side, SAME
  when it lies inside (-boundary, +boundary) (then no commit differs), UNKNOWN otherwise.
- **The first run** measures up to three points inside the range beside `bad`, all in one
  engine with `good` (first_points): judged once the step is known, they narrow the range to
  a quarter for the price of one engine start.
- **Every later run** measures up to three points splitting what is left of the range
  (spread_points), again in one engine with `good`: an engine start costs more here than
  another arm's passes, and a point that comes out UNKNOWN does not stall the search while
  its neighbours decide.
- **Each point** against `good`, on a boundary of half the step good..bad measured: DIFFERENT
  (it already has the change) when its interval lies beyond the boundary towards the step,
  SAME when it lies on good's side, UNKNOWN otherwise. Halfway is where a commit with the whole
  step and one with none are equally far: the rule that errs least either way.
- **The step** that halfway is taken from is re-estimated as the search goes: the
  inverse-variance mean of every measurement of a candidate known to have the change (bad,
  and each one at or after the oldest DIFFERENT), so that one noisy good..bad does not
  misplace the boundary for the rest of the bisect (pooled_step).
- A run that decides nothing is measured again with a tighter precision target, within a
  budget of tries. Re-measuring until something decides is a sequential test: every look is
  another chance of a wrong SAME, so good..bad is judged on every look so far, pooled (their
  inverse-variance mean), with the error rate spent across the `tries` looks (Bonferroni:
  each look at 2.5% / tries a side, look_interval); stopping at the first decision then says
  "no commit differs" at a step of exactly half the threshold at most 2.5% of the time
  (it was 5.8-8.2% with every look at 2.5%).
- SAME means "on good's side of half the step", never "no change": a commit with a third of
  the step is SAME. So after a culprit is named, what lies on either side of it is checked
  (side_verdict): the change across good..its parent and across it..bad, from every
  measurement against good, is a further step when its interval (spent across looks as
  above, at 5% two-sided) excludes zero, none (of half the threshold or more) when it lies
  inside +-half the threshold, and is measured again otherwise; a further step is bisected
  the same way, within the bisect's budget of engine runs.
A metric known exactly (greedy acceptance) has a zero-width interval: it always decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from scipy import stats as sps

from harness.errors import ExitCode
from harness.plan.commits import Candidate

Verdict = Literal["DIFFERENT", "SAME", "UNKNOWN"]
# The bisect's reference candidate: index 0, the good end of the range.
GOOD = "good"


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


def spread_points(lo: int, hi: int, most: int = 3) -> list[int]:
    """Up to `most` candidates strictly between `lo` and `hi`, splitting the range evenly (all
    of them when there are no more than `most`)."""
    inner = hi - lo - 1
    if inner <= 0:
        return []
    parts = min(most, inner) + 1
    return sorted({lo + round((hi - lo) * k / parts) for k in range(1, parts)} - {lo, hi})


def first_points(n: int, most: int = 3) -> list[int]:
    """The candidates the first run measures beside good (0) and bad (n): up to `most` points
    splitting 1..n-1 evenly, so that one engine narrows the range to a quarter instead of a
    half (an engine start costs more here than another arm's passes)."""
    return spread_points(0, n, most)


def pooled_step(intervals: list[Interval]) -> float | None:
    """The step good..bad from every measurement of candidates that have it: their
    inverse-variance mean (an exact one, zero-width, is the step itself); None without a
    finite one."""
    usable = [iv for iv in intervals if iv.finite]
    exact = [iv.delta for iv in usable if iv.high <= iv.low]
    if exact:
        return exact[-1]
    if not usable:
        return None
    weights = [1 / ((iv.high - iv.low) / 3.92) ** 2 for iv in usable]
    return sum(w * iv.delta for w, iv in zip(weights, usable, strict=True)) / sum(weights)


Z95 = 1.959963984540054  # the measured intervals' half-width, in standard errors


def look_z(tries: int, alpha: float = 0.05) -> float:
    """The half-width (in standard errors) of each look's interval when `alpha` (two-sided)
    is spent evenly across `tries` looks (Bonferroni: at most `alpha` over all of them,
    whatever their correlation)."""
    return float(sps.norm.ppf(1 - alpha / (2 * max(tries, 1))))


def _se(iv: Interval) -> float:
    return max(iv.high - iv.low, 0.0) / (2 * Z95)


def look_interval(iv: Interval, z: float) -> Interval:
    """A 95% interval re-drawn at `z` standard errors."""
    if not iv.finite:
        return iv
    half = z * _se(iv)
    return Interval(iv.delta, iv.delta - half, iv.delta + half)


def difference(a: Interval, b: Interval) -> Interval:
    """b - a, both against the same reference: the standard errors added in quadrature (the
    conservative side when both were measured in one run: the reference's own noise cancels
    from their difference but is counted in each)."""
    if not (a.finite and b.finite):
        return Interval(b.delta - a.delta, math.nan, math.nan)
    half = Z95 * math.hypot(_se(a), _se(b))
    d = b.delta - a.delta
    return Interval(d, d - half, d + half)


Side = Literal["STEP", "NONE", "UNKNOWN"]


def side_verdict(interval: Interval, threshold: float) -> Side:
    """A part of the range beside a culprit: STEP when its change's interval excludes zero
    (a further step, of any size), NONE when it lies inside +-half the threshold (no further
    step worth finding; a smaller one may remain), UNKNOWN otherwise. `interval` is already
    drawn at the look's level."""
    if not interval.finite:
        return "UNKNOWN"
    if interval.low > 0 or interval.high < 0:
        return "STEP"
    boundary = threshold / 2
    if -boundary < interval.low and interval.high < boundary:
        return "NONE"
    return "UNKNOWN"


def pooled(intervals: list[Interval]) -> Interval | None:
    """Measurements of one delta from separate runs as one: their inverse-variance mean with
    its 95% interval (an exact one, zero-width, is the delta itself); None without a finite
    one."""
    usable = [iv for iv in intervals if iv.finite]
    exact = [iv for iv in usable if iv.high <= iv.low]
    if exact:
        return exact[-1]
    if not usable:
        return None
    weights = [1 / _se(iv) ** 2 for iv in usable]
    total = sum(weights)
    mean = sum(w * iv.delta for w, iv in zip(weights, usable, strict=True)) / total
    half = Z95 / math.sqrt(total)
    return Interval(mean, mean - half, mean + half)


# Two candidates measured in one run against the same good share good's passes, so their deltas'
# errors are correlated: with equal noise in every arm, half of each delta's variance is good's.
# Measured in the real 4-arm bisect runs of tests/integration/test_bisect_cpu.py (block
# differences against good, two runs): 0.58-0.95. 0.5 is the equal-noise value and the low
# side of that, so a difference between two candidates of one run is never made narrower than
# the data support.
RUN_CORRELATION = 0.5


class Levels:
    """Every candidate's level against good (0) from every run at once: generalised least
    squares over the runs' deltas, each run's deltas correlated through its shared reference
    (RUN_CORRELATION), so that a difference between two candidates measured in the same run
    is as precise as the run made it (not the sum of both intervals' variances). `runs`: each
    run's reference index and its deltas against it. A zero-width (exactly known) delta, as a
    greedy acceptance metric gives, is taken as it is (the newest one per candidate)."""

    def __init__(
        self, runs: list[tuple[int, dict[int, Interval]]], correlation: float = RUN_CORRELATION
    ) -> None:
        self._exact: dict[int, Interval] = {}
        self._seen: dict[int, list[Interval]] = {}
        for ref, deltas in runs:
            for i, iv in deltas.items():
                if ref == 0:
                    self._seen.setdefault(i, []).append(iv)
                if ref == 0 and iv.finite and iv.high <= iv.low:
                    self._exact[i] = iv
        index = sorted({i for ref, d in runs for i in [ref, *d]} - {0})
        at = {i: k for k, i in enumerate(index)}
        info = np.zeros((len(index), len(index)))
        score = np.zeros(len(index))
        for ref, deltas in runs:
            usable = [
                (i, iv) for i, iv in deltas.items() if iv.finite and iv.high > iv.low and i != ref
            ]
            if not usable:
                continue
            var = np.array([_se(iv) ** 2 for _, iv in usable])
            shared = correlation * float(var.min())
            cov = np.diag(var - shared) + shared
            x = np.zeros((len(usable), len(index)))
            for row, (i, _) in enumerate(usable):
                x[row, at[i]] = 1.0
                if ref != 0:
                    x[row, at[ref]] = -1.0
            w = np.linalg.inv(cov)
            info += x.T @ w @ x
            score += x.T @ w @ np.array([iv.delta for _, iv in usable])
        known = np.flatnonzero(np.diag(info) > 0)
        self._at = {index[k]: j for j, k in enumerate(known)}
        sub = info[np.ix_(known, known)]
        self._cov = np.linalg.inv(sub) if len(known) else np.zeros((0, 0))
        self._mean = self._cov @ score[known] if len(known) else np.zeros(0)

    def _pooled_exact(self, i: int) -> Interval:
        if i == 0:
            return Interval(0.0, 0.0, 0.0)
        return pooled(self._seen.get(i, [])) or Interval(math.nan, math.nan, math.nan)

    def between(self, a: int, b: int) -> Interval:
        """b's level minus a's, with its 95% interval (NaN where either was never measured)."""
        if a in self._exact or b in self._exact:
            return difference(self._pooled_exact(a), self._pooled_exact(b))
        if any(i != 0 and i not in self._at for i in (a, b)):
            return Interval(math.nan, math.nan, math.nan)
        g = np.zeros(len(self._at))
        if b != 0:
            g[self._at[b]] += 1.0
        if a != 0:
            g[self._at[a]] -= 1.0
        d = float(g @ self._mean)
        half = Z95 * math.sqrt(max(float(g @ self._cov @ g), 0.0))
        return Interval(d, d - half, d + half)


# --- what a bisect measured and found (harness.bisect makes them, harness.present.bisect
# words them) ---


@dataclass
class Measured:
    """One candidate's comparison with good in one step."""

    index: int
    verdict: Verdict
    delta: float
    low: float
    high: float

    @property
    def interval(self) -> Interval:
        return Interval(self.delta, self.low, self.high)


@dataclass
class Step:
    """One run: good and one or two candidates, in one engine where they overlay."""

    run_id: str
    folder: str
    arms: list[int]
    target_mde: float | None
    design: str
    measured: list[Measured] = field(default_factory=list)


@dataclass
class Change:
    """A part of the range beside a culprit, checked for a further step: commits lo+1..hi,
    their change (hi against lo, from every measurement against good), the verdict (STEP,
    NONE: no step of half the threshold or more, UNKNOWN, UNCHECKED: the budget of runs
    was spent, or NOT ASKED: --check-beside 0), and the culprit found in it with its own step
    (against its parent)."""

    lo: int
    hi: int
    verdict: str
    delta: float
    low: float
    high: float
    culprit: int | None = None
    culprit_step: list[float] | None = None  # [delta, low, high]

    @property
    def interval(self) -> Interval:
        return Interval(self.delta, self.low, self.high)


@dataclass
class Outcome:
    """What a bisect found: `culprit` (an index into candidates), none (`same`), or UNKNOWN
    between `lo` and `hi`."""

    candidates: list[Candidate]
    metric: str
    threshold: float
    steps: list[Step]
    verdict: str  # "CULPRIT", "NO CHANGE" or "UNKNOWN"
    culprit: int | None
    lo: int
    hi: int
    step: Measured | None  # good against bad, pooled over its looks
    folder: Path
    changes: list[Change] = field(default_factory=list)  # beside each culprit, in order
    culprit_step: Measured | None = None  # the culprit against its parent
    looks_z: float = 1.96  # the half-width, in standard errors, of good..bad's decision

    @property
    def exit_code(self) -> int:
        return int(ExitCode.INCONCLUSIVE) if self.verdict == "UNKNOWN" else int(ExitCode.OK)
