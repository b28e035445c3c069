"""Regression gates: per-metric policies in, PASS / REGRESSION / INCONCLUSIVE decisions out.

Pure: a Comparison and a GateSpec give a GateResult; rendering (Markdown, JUnit) lives in
report.py and exit codes in the CLI. A metric is judged on its 95% interval against its
tolerance in the bad direction (non-inferiority): the whole interval beyond the tolerance is a
REGRESSION, the whole interval inside it a PASS, anything else INCONCLUSIVE, with the minimum
detectable effect and the extra blocks (or rounds) a decision would need.

The gated metrics judged on intervals are one declared family (judge: FAMILY_RATE): a
REGRESSION among them needs Holm's step-down at one-sided 2.5% across all of them, so a
candidate at or inside every tolerance is failed at most 2.5% of the time however many
metrics are gated; a PASS needs every check to PASS, which no number of checks makes easier.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from harness.analysis.comparison import Comparison, MetricRow
from harness.analysis.stats import (
    ALPHA,
    holm,
    runs_alpha,
    runs_phrase,
    units_for_halfwidth,
)
from harness.config.scenario import GateSpec

Verdict = Literal["PASS", "REGRESSION", "INCONCLUSIVE"]

# summary of GateResult.to_dict(); bump when a reader must know.
# 1: verdict and decisions. 2: the family (what the gate controls across its metrics), each
#    decision's p_regression and holm_p; a REGRESSION alone may be INCONCLUSIVE after Holm.
GATE_VERSION = 2


@dataclass(frozen=True)
class Decision:
    """One gated check of one candidate."""

    candidate: str
    check: str  # metric key, "output_parity" or "implementation_proof"
    label: str
    verdict: Verdict
    reason: str
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    tolerance: float | None = None
    kind: str | None = None  # "relative" or "points"
    mde: float | None = None
    more_units: int | None = None  # extra blocks/rounds that would likely decide
    # One-sided p-value of "worse than the tolerance" (the interval's own t, on its scale):
    # below 2.5% alone is the interval wholly past the tolerance. None: not judged on an
    # interval (known exactly, no estimate) and outside the gate's family.
    p_regression: float | None = None
    holm_p: float | None = None  # its Holm-adjusted value across the family


# The family-wise rate of a false REGRESSION across the gated metrics judged on intervals
# (one-sided: the 95% interval's bad side).
FAMILY_RATE = 0.025


@dataclass
class GateResult:
    decisions: list[Decision] = field(default_factory=list)
    # What the gate controls across its gated metrics, one sentence for its output ("" for
    # results built elsewhere, e.g. against history).
    family: str = ""

    @property
    def verdict(self) -> Verdict:
        verdicts = {d.verdict for d in self.decisions}
        if "REGRESSION" in verdicts:
            return "REGRESSION"
        return "INCONCLUSIVE" if "INCONCLUSIVE" in verdicts else "PASS"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate_version": GATE_VERSION,
            "verdict": self.verdict,
            "family": self.family,
            "decisions": [asdict(d) for d in self.decisions],
        }


def _fmt(value: float, kind: str) -> str:
    return f"{100 * value:+.2f}%" if kind == "relative" else f"{value:+.2f}pp"


def judge_metric(
    row: MetricRow,
    tolerance: float,
    candidate: str,
    unit: str = "blocks",
    planned: int | None = None,
) -> Decision:
    """Non-inferiority of one metric: its interval against `tolerance` in the bad direction
    (a fraction for relative metrics, percentage points for rates). `planned`: the interval
    is a look of a series of that many runs (what decides next is the plan's next run)."""
    est = row.estimate
    kind = est.kind
    sign = 1.0 if row.higher_is_better else -1.0  # "better" is sign * delta > 0
    base = Decision(
        candidate,
        row.key,
        row.label,
        "INCONCLUSIVE",
        "",
        est.delta,
        est.ci_low,
        est.ci_high,
        tolerance,
        kind,
        est.mde,
    )
    if est.delta is None or math.isnan(est.delta):
        return _replace(base, reason=f"no estimate ({est.note or 'no data'})")
    low, high = est.ci_low, est.ci_high
    exact = False
    if low is None or high is None or est.known_exactly:
        if est.known_exactly:
            low = high = est.delta  # exact: the same in every unit
            exact = True
        else:
            return _replace(base, reason=f"no interval: {est.note or 'not estimable'}")
    # The worst and best plausible values, in the "better is positive" orientation.
    worst = min(sign * low, sign * high)
    best = max(sign * low, sign * high)
    bound = f"{_fmt(-sign * tolerance, kind)}"
    shown = (
        f"{_fmt(est.delta, kind)} (exact)"
        if exact
        else f"{_fmt(est.delta, kind)} [{_fmt(low, kind)}, {_fmt(high, kind)}]"
    )
    if not exact and est.se is not None and est.se > 0 and est.df is not None:
        centre = math.log1p(est.delta) if kind == "relative" else est.delta
        edge = math.log1p(-sign * tolerance) if kind == "relative" else -sign * tolerance
        # On the ALPHA scale (as the interval: a combination of runs spends less, stats.
        # across_runs), so Holm's FAMILY_RATE applies unchanged.
        p_reg = _t_cdf(sign * (centre - edge) / est.se, est.df) * ALPHA / est.alpha
        base = _replace(base, p_regression=min(1.0, p_reg))
    if best < -tolerance:
        return _replace(
            base, verdict="REGRESSION", reason=f"{shown}: worse than the tolerance {bound}"
        )
    if worst >= -tolerance:
        return _replace(base, verdict="PASS", reason=f"{shown}: within the tolerance {bound}")
    if planned is not None:
        nxt = (
            f"; the plan's next look is run {est.runs + 1} of {planned}"
            if est.runs < planned
            else "; the plan's last look"
        )
        return _replace(base, reason=f"{shown} straddles the tolerance {bound}{nxt}")
    more = None
    if est.se is not None and est.error_sd and est.error_n:
        # Units of the error term (blocks of one launch; launches or rounds when the interval
        # comes from several) that would shrink the interval so it clears the tolerance on
        # the side the estimate lies on (at the current estimate; on the line never decides).
        unit = {"block": "blocks", "launch": "launches", "round": "rounds"}.get(
            est.error_unit or "", unit
        )
        centre = math.log1p(est.delta) if kind == "relative" else est.delta
        edge = math.log1p(-sign * tolerance) if kind == "relative" else -sign * tolerance
        # Runs combined: each further run is a later look at a smaller alpha (one launch a
        # run assumed; with more, this asks for more than needed).
        looks = (
            None if est.runs <= 1 else (lambda n: runs_alpha(est.runs + max(0, n - est.error_n)))
        )
        needed = units_for_halfwidth(est.error_sd, abs(centre - edge), alpha=looks)
        if needed is not None:
            more = max(0, needed - est.error_n)
    mde = ""
    if est.mde is not None:
        mde = f"; MDE ±{100 * est.mde:.2f}%" if kind == "relative" else f"; MDE ±{est.mde:.2f}pp"
    extra = f"; about {more} more {unit} would decide" if more is not None else ""
    return _replace(
        base, more_units=more, reason=f"{shown} straddles the tolerance {bound}{mde}{extra}"
    )


def _replace(d: Decision, **changes: Any) -> Decision:
    return Decision(**{**asdict(d), **changes})


def _t_cdf(x: float, df: float) -> float:
    from scipy import stats as sps

    return float(sps.t.cdf(x, df))


def control_family(result: GateResult) -> None:
    """Holm's step-down across the decisions judged on intervals, in place: a REGRESSION
    stands only where its adjusted one-sided p-value is below FAMILY_RATE, else it is
    INCONCLUSIVE (past the tolerance alone, not across the family). States the family."""
    family = [i for i, d in enumerate(result.decisions) if d.p_regression is not None]
    m = len(family)
    adjusted = holm([result.decisions[i].p_regression or 0.0 for i in family])
    for i, running in zip(family, adjusted, strict=True):
        d = result.decisions[i]
        changes: dict[str, Any] = {"holm_p": running}
        if d.verdict == "REGRESSION" and running >= FAMILY_RATE:
            changes.update(
                verdict="INCONCLUSIVE",
                reason=(
                    f"{d.reason} alone, but not across the {m} gated metrics (Holm-adjusted "
                    f"p {running:.3f} >= {FAMILY_RATE})"
                ),
            )
        result.decisions[i] = _replace(d, **changes)
    if m:
        result.family = (
            f"family: {m} gated metric check(s) judged on intervals; a REGRESSION among them "
            f"needs Holm-adjusted one-sided p < {100 * FAMILY_RATE:g}% across all {m}, so a "
            f"candidate at or inside every tolerance is failed at most {100 * FAMILY_RATE:g}% "
            "of the time; a PASS needs every check to PASS (its whole 95% interval inside the "
            "tolerance). Exact checks, parity and proof are decided without an interval."
        )


def judge(comparison: Comparison, spec: GateSpec) -> GateResult:
    """Every gated check of every candidate."""
    result = GateResult()
    unit = "blocks" if comparison.design == "one-engine" else "rounds"
    for cand in comparison.candidates:
        if cand.status != "ok":
            result.decisions.append(
                Decision(
                    cand.name,
                    "launches",
                    "Launches",
                    "INCONCLUSIVE",
                    "no completed launch: nothing to gate",
                )
            )
            continue
        for pattern, tolerance in spec.metrics.items():
            rows = [r for r in cand.rows if fnmatch.fnmatchcase(r.key, pattern)]
            for row in rows:
                result.decisions.append(
                    judge_metric(row, tolerance, cand.name, unit, comparison.planned)
                )
        if spec.output_parity and cand.parity is not None and cand.parity.expected:
            ok = not cand.parity.violated
            result.decisions.append(
                Decision(
                    cand.name,
                    "output_parity",
                    "Output parity",
                    "PASS" if ok else "REGRESSION",
                    f"{cand.parity.identical}/{cand.parity.compared} greedy outputs identical"
                    + ("" if ok else f", first divergence at token {cand.parity.first_divergence}"),
                )
            )
    if spec.implementation_proof and (
        comparison.baseline_implementation or any(c.implementation for c in comparison.candidates)
    ):
        ok = not comparison.unproven
        result.decisions.append(
            Decision(
                "*",
                "implementation_proof",
                "Implementation proof",
                "PASS" if ok else "REGRESSION",
                "every launch and pass proved its implementation ran in vLLM"
                if ok
                else "; ".join(f"{u.launch}: {u.why}" for u in comparison.unproven)[:1000],
            )
        )
    control_family(result)
    runs = max((r.estimate.runs for c in comparison.candidates for r in c.rows), default=1)
    if (runs > 1 or comparison.planned is not None) and result.family:
        result.family = (
            result.family.replace("whole 95% interval", "whole interval")
            + f" Intervals: {runs_phrase(runs, comparison.planned)}."
        )
    return result


@functools.cache
def pass_margin(df: float, false_alarm: float) -> float:
    """c such that a later A/A run with `df` fails to PASS a tolerance of c * se with
    probability `false_alarm`, se being the calibration run's. A PASS needs estimate -
    t_{0.975} * se' > -c * se, where both standard errors are estimates (sigma * chi_df /
    sqrt(df), independent): t_{1-fa} + t_{0.975} would ignore that and let 2.2% through for a
    1% target (simulated, 40 blocks). Solved by a seeded Monte Carlo of 400,000 draws."""
    from scipy import stats as sps

    rng = np.random.default_rng(20261201)
    n = 400_000
    z = rng.standard_normal(n)
    se_cal = np.sqrt(rng.chisquare(df, n) / df)
    se_run = np.sqrt(rng.chisquare(df, n) / df)
    t = float(sps.t.ppf(0.975, df))
    return float(np.quantile((t * se_run - z) / se_cal, 1 - false_alarm))


def propose_tolerances(
    comparison: Comparison, spec: GateSpec, false_alarm: float
) -> dict[str, float]:
    """Tolerances for the gated metrics of an A/A comparison: tolerance = c * se, never below
    the minimum detectable effect, with c from pass_margin: an unchanged candidate run at this
    precision fails to PASS -- INCONCLUSIVE or REGRESSION, not REGRESSION alone -- with
    probability `false_alarm`. REGRESSION (the whole interval past the tolerance) is far
    rarer. Metrics identical in every unit keep the policy's tolerance."""
    proposed: dict[str, float] = {}
    for pattern, current in spec.metrics.items():
        worst: float | None = None
        for cand in comparison.candidates:
            for row in cand.rows:
                est = row.estimate
                if not fnmatch.fnmatchcase(row.key, pattern) or est.se is None or est.df is None:
                    continue
                if not est.se > 0:
                    continue
                scale = pass_margin(est.df, false_alarm) * est.se
                tol = math.expm1(scale) if est.kind == "relative" else scale
                tol = max(tol, est.mde or 0.0)
                worst = tol if worst is None else max(worst, tol)
        proposed[pattern] = round(worst, 4) if worst is not None else current
    return proposed
