"""A benchmark's history: the run store's estimates as series (one per scenario, machine,
cell, candidate and metric), their change points, and a run judged against the latest stable
segment of its own history instead of one saved baseline.

Two series per metric, with different noise:
- **deltas**: each run's candidate-vs-baseline estimate. In one engine launch-to-launch noise
  cancels, so a step of a few percent stands out;
- **values**: one arm's absolute value across runs, which carries the launch-to-launch spread
  (sd ~8% here): only large steps can be seen, and each series says how large.

Metrics that are deterministic under greedy decoding (acceptance, a count identical in every
unit of a run) are compared exactly: any change is a change point, and a gate compares the
value itself. The index holds the values, not their counts, so "exactly" is up to float
rounding (EXACT_RTOL): summaries stored means of equal values that round apart. Everything
else uses harness.analysis.changepoints (E-Divisive means with a t-test) and, in a gate, the
run-to-run spread of the latest stable segment as the error term. A step is a jump on top of a
linear trend, and a segment whose values trend is reported as a drift (TrendRun: its slope per
run with its interval, from its first run to its last), not as a step at one commit.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy import stats as sps

from harness.analysis.changepoints import ChangePoint, change_points, detectable_step, drifts
from harness.analysis.comparison import Comparison, HistoryLook, MetricRow
from harness.analysis.gate import Decision, GateResult, judge_metric
from harness.analysis.stats import DeltaEstimate, runs_estimate, same_exact
from harness.config.scenario import GateSpec
from harness.results.metrics import MetricDef, metric_def

if TYPE_CHECKING:
    import pandas as pd

    from harness.results.run import Run

SeriesKind = Literal["delta", "value"]
# A gate against history needs this many runs in the latest stable segment for a spread.
MIN_HISTORY = 3
KEY = ["scenario", "machine", "cell", "candidate", "metric"]


@dataclass
class Step:
    """A change point in a series, named by the first run after it."""

    index: int
    run_id: str
    commit: str | None
    created: Any
    before: float
    after: float
    step: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    exact: bool = False
    series: SeriesKind = "delta"  # a change of the deltas, or of the arm's own value

    def describe(self, kind: str | None, metric: MetricDef | None = None) -> str:
        """One line; `metric` gives an exact change of a value its unit ('1.613 tokens')."""
        unit = "pp" if kind == "points" else "%"
        scale = 1.0 if kind == "points" else 100.0
        where = f"{self.run_id}" + (f" ({self.commit[:12]})" if self.commit else "")
        if self.exact:
            # Enough digits to tell the two apart (a change of one token in a long run).
            digits = next(
                (d for d in range(4, 17) if f"{self.before:.{d}g}" != f"{self.after:.{d}g}"), 17
            )
            if self.series == "value":
                show = (metric or MetricDef("", "", True)).format_value
                return (
                    f"changed at {where}: {show(self.before, digits)} -> "
                    f"{show(self.after, digits)} (exact)"
                )
            return (
                f"changed at {where}: {scale * self.before:+.{digits}g}{unit} -> "
                f"{scale * self.after:+.{digits}g}{unit} (exact)"
            )
        size = f"{scale * self.step:+.2f}{unit}"
        interval = (
            ""
            if self.ci_low is None or self.ci_high is None
            else f" [{scale * self.ci_low:+.2f}, {scale * self.ci_high:+.2f}]"
        )
        p = "" if self.p_value is None else f", p={self.p_value:.2g}"
        return f"step {size}{interval} from {where}{p}"


@dataclass
class TrendRun:
    """A drift: a linear trend across the runs `first_run` .. `last_run` (a segment between
    change points), no one run or commit."""

    start: int
    end: int  # one past the last run of the segment
    first_run: str
    last_run: str
    runs: int
    slope: float  # per run; a fraction for relative metrics (log scale), points otherwise
    ci_low: float
    ci_high: float
    change: float  # fitted, from the first run to the last
    p_value: float
    series: SeriesKind = "delta"

    def describe(self, kind: str | None) -> str:
        """One line, naming the runs it spans and no commit."""
        unit = "pp" if kind == "points" else "%"
        scale = 1.0 if kind == "points" else 100.0
        return (
            f"drift {scale * self.change:+.2f}{unit} over {self.runs} runs "
            f"({self.first_run} .. {self.last_run}): {scale * self.slope:+.3f}{unit} a run "
            f"[{scale * self.ci_low:+.3f}, {scale * self.ci_high:+.3f}], "
            f"p={self.p_value:.2g}; gradual, not one commit"
        )


@dataclass
class Series:
    """One metric of one candidate over the runs of one scenario on one machine."""

    scenario: str
    machine: str | None
    cell: str | None
    candidate: str
    metric: str
    label: str
    kind: str | None  # "relative" (deltas are fractions) or "points"
    frame: pd.DataFrame  # the history's rows, oldest first
    exact: bool  # every run's value is known exactly (deterministic under greedy decoding)
    definition: MetricDef | None = None  # the registry's entry: the value's unit
    delta_steps: list[Step] = field(default_factory=list)
    value_steps: list[Step] = field(default_factory=list)  # the candidate arm's own value
    value_detectable: float | None = None  # smallest step the value series can show
    delta_drifts: list[TrendRun] = field(default_factory=list)
    value_drifts: list[TrendRun] = field(default_factory=list)
    # The latest run's comparison (same scenario hash, vLLM, commit; the series' machine):
    # how many of the last runs are runs of it, and their deltas combined with an interval
    # anytime-valid across re-runs (stats.runs_estimate), None for one run or exact metrics.
    repeats: int = 0
    across: DeltaEstimate | None = None
    planned: int | None = None  # the comparison's planned_runs: `across` is the plan's look

    @property
    def name(self) -> str:
        cell = f" [{self.cell}]" if self.cell else ""
        return f"{self.scenario}{cell}: {self.candidate} {self.label}"


def _finite(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=float)


def _exact_steps(values: np.ndarray, scale: np.ndarray) -> list[tuple[int, float, float]]:
    """Indices where an exactly-known value changes by more than rounding (same_exact, with
    `scale`: per value, the magnitude it is a difference of; zeros for values)."""
    return [
        (i, float(values[i - 1]), float(values[i]))
        for i in range(1, len(values))
        if not same_exact(
            float(values[i]), float(values[i - 1]), float(max(scale[i], scale[i - 1]))
        )
    ]


def _steps(
    frame: pd.DataFrame,
    values: np.ndarray,
    exact: bool,
    log: bool,
    series: SeriesKind,
    scale: np.ndarray | None = None,
    trends: list[TrendRun] | None = None,
) -> list[Step]:
    """Change points of one series, each named by the first run after it; the segments
    between them that drift are appended to `trends`."""
    ok = np.isfinite(values)
    if log:
        ok &= values > 0
    rows = frame[ok].reset_index(drop=True)
    vals = values[ok]
    scale = np.zeros(len(values)) if scale is None else scale
    out: list[Step] = []

    def at(i: int) -> dict[str, Any]:
        row = rows.iloc[i]
        return {
            "index": int(np.flatnonzero(ok)[i]),
            "run_id": str(row["run_id"]),
            "commit": None
            if row["commit"] is None or row["commit"] != row["commit"]
            else str(row["commit"]),
            "created": row["created"],
        }

    if exact:
        for i, before, after in _exact_steps(vals, np.nan_to_num(scale[ok])):
            out.append(
                Step(
                    **at(i),
                    before=before,
                    after=after,
                    step=after - before,
                    ci_low=None,
                    ci_high=None,
                    p_value=None,
                    exact=True,
                    series=series,
                )
            )
        return out
    if len(vals) < 2:
        return out
    scaled = np.log(vals) if log else vals
    found: list[ChangePoint] = change_points(scaled)
    if trends is not None:
        conv_slope = (lambda x: math.expm1(x)) if log else (lambda x: x)
        for d in drifts(scaled, found):
            trends.append(
                TrendRun(
                    int(np.flatnonzero(ok)[d.start]),
                    int(np.flatnonzero(ok)[d.end - 1]) + 1,
                    str(rows.iloc[d.start]["run_id"]),
                    str(rows.iloc[d.end - 1]["run_id"]),
                    d.end - d.start,
                    conv_slope(d.slope),
                    conv_slope(d.ci_low),
                    conv_slope(d.ci_high),
                    conv_slope(d.change),
                    d.p_value,
                    series,
                )
            )
    for cp in found:
        conv = (lambda x: math.expm1(x)) if log else (lambda x: x)
        before = math.exp(cp.before) if log else cp.before
        after = math.exp(cp.after) if log else cp.after
        out.append(
            Step(
                **at(cp.index),
                before=before,
                after=after,
                step=conv(cp.step),
                ci_low=conv(cp.ci_low),
                ci_high=conv(cp.ci_high),
                p_value=cp.p_value,
                series=series,
            )
        )
    return out


def build_series(frame: pd.DataFrame, metric: str | None = None) -> list[Series]:
    """The history frame (harness.results.index.history) as series with their change points:
    per-run deltas, and the candidate arm's own values (on a log scale for relative metrics,
    so a step is a fraction)."""
    if frame.empty:
        return []
    if metric is not None:
        frame = frame[frame["metric"].map(lambda m: fnmatch.fnmatchcase(str(m), metric))]
    out: list[Series] = []
    keyed = frame.assign(cell=frame["cell"].fillna(""), machine=frame["machine"].fillna(""))
    for key, group in keyed.groupby(KEY, sort=False):
        scenario, machine, cell, candidate, name = (str(k) for k in key)
        group = group.sort_values(["created_unix", "run_id"]).reset_index(drop=True)
        kind = group["kind"].iloc[-1]
        exact = bool(group["exact"].fillna(False).all())
        series = Series(
            scenario,
            machine or None,
            cell or None,
            candidate,
            name,
            str(group["label"].iloc[-1]),
            None if kind is None else str(kind),
            group,
            exact,
            metric_def(name),
        )
        values = _finite(group["candidate_value"])
        # A delta in points is a difference of values this large (relative: of ratios near 1).
        scale = (
            np.fmax(np.abs(values), np.abs(_finite(group["baseline_value"])))
            if kind == "points"
            else np.ones(len(values))
        )
        series.delta_steps = _steps(
            group,
            _finite(group["delta"]),
            exact,
            log=False,
            series="delta",
            scale=scale,
            trends=series.delta_drifts,
        )
        log = kind == "relative"
        series.value_steps = _steps(
            group, values, exact, log=log, series="value", trends=series.value_drifts
        )
        usable = values[np.isfinite(values) & (values > 0 if log else True)]
        if not exact and len(usable) >= 4:
            step = detectable_step(np.log(usable) if log else usable)
            series.value_detectable = (
                (math.expm1(step) if log else step) if math.isfinite(step) else None
            )
        repeated = repeated_comparison(group)
        series.repeats = len(repeated)
        series.planned = _planned(repeated)
        if not exact and kind in ("relative", "points"):
            series.across = runs_estimate(
                [float(d) for d in _finite(repeated["delta"])],
                "relative" if kind == "relative" else "points",
                series.planned,
            )
        out.append(series)
    return out


# What makes two runs of a series the same comparison, beside the series' own key (scenario,
# machine, cell, candidate, metric): the scenario's hash (its overlays included), the vLLM
# build and the commit under test.
SAME_COMPARISON = ("scenario_hash", "vllm", "commit")


def _planned(repeated: pd.DataFrame) -> int | None:
    """The planned_runs of the latest run's comparison (one value: it is in the hash)."""
    if repeated.empty or "planned_runs" not in repeated:
        return None
    value = repeated["planned_runs"].iloc[-1]
    try:
        return int(value)
    except (TypeError, ValueError):  # NULL: pandas' NA or NaN
        return None


def repeated_comparison(group: pd.DataFrame) -> pd.DataFrame:
    """The last rows of a series (oldest first) that are runs of the latest run's comparison,
    back to the first run of another: the runs a re-run adds to, never chosen by their values
    (a change point's segment would be)."""
    columns = [c for c in SAME_COMPARISON if c in group]

    def same(value: Any) -> Any:  # missing (None or NaN) is one value
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    keys = [tuple(same(v) for v in row) for row in zip(*(group[c] for c in columns), strict=True)]
    start = len(keys)
    while start > 0 and (not columns or keys[start - 1] == keys[-1]):
        start -= 1
    return group.iloc[start:]


def latest_segment(values: np.ndarray, steps: list[Step]) -> np.ndarray:
    """The values after the last change point (all of them when there is none)."""
    start = max((s.index for s in steps), default=0)
    return values[start:]


# --- a run judged against its history ---------------------------------------------------------


def _prediction(value: float, segment: np.ndarray, log: bool) -> tuple[float, float, float, float]:
    """This run's value against the segment's: (difference, low, high, sd of the segment),
    the interval a new run of the same code would fall in 95% of the time (t, n - 1 df, with
    the segment's run-to-run spread as the error term). `log`: relative, as a fraction."""
    x = np.log(segment) if log else segment
    v = math.log(value) if log else value
    n = len(x)
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    half = float(sps.t.ppf(0.975, n - 1)) * sd * math.sqrt(1 + 1 / n)
    diff = v - mean
    if log:
        return math.expm1(diff), math.expm1(diff - half), math.expm1(diff + half), math.expm1(sd)
    return diff, diff - half, diff + half, sd


def _decision(
    candidate: str,
    check: str,
    label: str,
    kind: str | None,
    higher: bool,
    delta: float,
    low: float | None,
    high: float | None,
    tolerance: float,
    note: str,
    exact: bool,
) -> Decision:
    """judge_metric's non-inferiority rule on a history comparison."""
    estimate = DeltaEstimate(
        kind="points" if kind == "points" else "relative",
        delta=delta,
        ci_low=None if exact else low,
        ci_high=None if exact else high,
        p_value=None,
        test="history",
        significant=False,
        mde=None,
        cv_baseline=None,
        cv_candidate=None,
        noisy=False,
        n_baseline=0,
        n_candidate=0,
        note="no spread: exact" if exact else None,
        no_spread=exact,
    )
    row = MetricRow(check, label, higher, float("nan"), float("nan"), estimate)
    d = judge_metric(row, tolerance, candidate, "runs")
    return replace(d, reason=f"{d.reason}; {note}")


def judge_against_history(
    run: Run, comparison: Comparison, frame: pd.DataFrame, spec: GateSpec
) -> tuple[GateResult, HistoryLook]:
    """Each gated metric of `comparison` (this run) against the latest stable segment of the
    same scenario's history on the same machine (`frame`: the store's history, this run
    excluded): the candidate arm's value, exactly where it is deterministic, else with the
    segment's run-to-run spread as the error term; and, for a one-engine run, its delta
    against the segment's deltas. Returns the result and what it read."""
    result = GateResult()
    earlier = frame[frame["created_unix"] < (run.manifest.created_unix or math.inf)]
    earlier = earlier[earlier["run_id"] != run.run_id]
    series = {(s.candidate, s.metric): s for s in build_series(earlier) if s.cell is None}
    runs_seen = earlier["run_id"].nunique()
    # The folders the store's history left out, one line each with why (index.history).
    look = HistoryLook(run.scenario.name, int(runs_seen), list(frame.attrs.get("skipped", [])))
    for cand in comparison.candidates:
        for pattern, tolerance in spec.metrics.items():
            for row in [r for r in cand.rows if fnmatch.fnmatchcase(r.key, pattern)]:
                result.decisions.extend(
                    _judge_row(
                        cand.name,
                        row,
                        tolerance,
                        series.get((cand.name, row.key)),
                        comparison.design,
                    )
                )
    return result, look


def _judge_row(
    candidate: str, row: MetricRow, tolerance: float, series: Series | None, design: str
) -> list[Decision]:
    kind = row.estimate.kind
    exact_now = row.estimate.known_exactly
    label = f"{row.label} (vs history)"
    if series is None or series.frame.empty:
        return [
            Decision(
                candidate,
                row.key,
                label,
                "INCONCLUSIVE",
                "no earlier run of this comparison in the results folder's store",
            )
        ]
    values = _finite(series.frame["candidate_value"])
    out = []
    if series.exact and exact_now:
        reference = float(latest_segment(values, series.value_steps)[-1])
        diff = (
            0.0
            if same_exact(row.candidate, reference)  # the same counts, rounded apart
            else row.candidate - reference
            if kind == "points"
            else row.candidate / reference - 1
            if reference
            else float("nan")
        )
        n = len(latest_segment(values, series.value_steps))
        note = (
            f"exact under greedy decoding: {row.candidate:.6g} against {reference:.6g} "
            f"in the last {n} run(s)"
        )
        out.append(
            _decision(
                candidate,
                row.key,
                label,
                kind,
                row.higher_is_better,
                diff,
                None,
                None,
                tolerance,
                note,
                exact=True,
            )
        )
        return out
    log = kind == "relative"
    segment = latest_segment(values, series.value_steps)
    segment = segment[np.isfinite(segment) & ((segment > 0) if log else True)]
    if len(segment) < MIN_HISTORY or not math.isfinite(row.candidate):
        out.append(
            Decision(
                candidate,
                row.key,
                label,
                "INCONCLUSIVE",
                f"the latest stable segment of the history holds {len(segment)} "
                f"run(s); a spread needs {MIN_HISTORY}",
            )
        )
    else:
        diff, low, high, sd = _prediction(row.candidate, segment, log)
        spread = f"{100 * sd:.2f}%" if log else f"{sd:.3g}"
        note = (
            f"error term: the run-to-run spread of the {len(segment)} runs in the latest "
            f"stable segment (sd {spread}), launch-to-launch noise included"
        )
        out.append(
            _decision(
                candidate,
                row.key,
                label,
                kind,
                row.higher_is_better,
                diff,
                low,
                high,
                tolerance,
                note,
                exact=False,
            )
        )
    if design == "one-engine" and not exact_now:
        deltas = latest_segment(_finite(series.frame["delta"]), series.delta_steps)
        deltas = deltas[np.isfinite(deltas)]
        dlabel = f"{row.label} delta (vs history)"
        if len(deltas) < MIN_HISTORY:
            out.append(
                Decision(
                    candidate,
                    f"{row.key}:delta",
                    dlabel,
                    "INCONCLUSIVE",
                    f"the latest stable segment of the deltas holds {len(deltas)} "
                    f"run(s); a spread needs {MIN_HISTORY}",
                )
            )
        else:
            diff, low, high, sd = _prediction(row.estimate.delta, deltas, log=False)
            unit = 100 if kind == "relative" else 1
            note = (
                f"this run's delta against the {len(deltas)} one-engine deltas of the "
                f"latest stable segment (sd {unit * sd:.2f}{'%' if unit == 100 else 'pp'})"
            )
            out.append(
                _decision(
                    candidate,
                    f"{row.key}:delta",
                    dlabel,
                    kind,
                    row.higher_is_better,
                    diff,
                    low,
                    high,
                    tolerance,
                    note,
                    exact=False,
                )
            )
    return out
