"""One metric of one candidate against its baseline over the per-pass frame: each arm's mean
and the delta on the design's independent unit, or, for counts identical in every pass, the
exact value. The table's rows (harness.analysis.compare) and the per-category rows
(harness.analysis.categories) are both built here."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from harness.analysis.comparison import MetricRow
from harness.analysis.stats import Design, arm_delta
from harness.results.metrics import MetricDef


def compare_metric(
    metric: MetricDef,
    passes: pd.DataFrame,
    baseline: str,
    candidate: str,
    design: Design,
    one_side_may_lack: bool = False,
) -> MetricRow | None:
    """One metric: each arm's mean over its passes (a pass is what one `vllm bench` run
    reports: its throughput, its median TTFT, ...) and the delta estimated on the design's
    independent unit. `one_side_may_lack`: an arm without the metric (acceptance of the
    no-speculation arm) leaves the other's value, with no delta."""
    if metric.key not in passes:
        return None
    both = passes[passes["variant"].isin([baseline, candidate])]
    b = both.loc[both["variant"] == baseline, metric.key].astype(float)
    c = both.loc[both["variant"] == candidate, metric.key].astype(float)
    if (b.dropna().empty and c.dropna().empty) or (
        (b.dropna().empty or c.dropna().empty) and not one_side_may_lack
    ):
        return None
    # Every metric, latency statistics included, is one value per pass (a pass's mean, median
    # or p99 over its requests); the unit above the pass (block or launch) carries the error.
    est = arm_delta(
        both[metric.key].to_numpy(dtype=float),
        (both["variant"] == candidate).to_numpy(),
        both["launch"].to_numpy(),
        both["round"].to_numpy(),
        both["block"].fillna(0).to_numpy(),
        metric.delta,
        design,
    )
    if _same_counts(metric, both[both["variant"] == baseline]) and _same_counts(
        metric, both[both["variant"] == candidate]
    ):
        # Each arm's value is that of its counts, the same in every pass: taken as it is, not
        # as a mean of equal values, which may round apart (and did, between two runs).
        b_value, c_value = float(b.dropna().iloc[0]), float(c.dropna().iloc[0])
        delta = (
            c_value - b_value
            if metric.delta == "points"
            else c_value / b_value - 1
            if b_value > 0
            else math.nan
        )
        est = replace(
            est,
            delta=delta,
            ci_low=None,
            ci_high=None,
            p_value=None,
            significant=False,
            mde=None,
            se=None if est.se is None else 0.0,
            exact=True,
            note="no spread: the same counts in every pass of each arm",
        )
        return MetricRow(metric.key, metric.label, metric.higher_is_better, b_value, c_value, est)
    return MetricRow(
        metric.key,
        metric.label,
        metric.higher_is_better,
        float(b.mean()) if not b.dropna().empty else math.nan,
        float(c.mean()) if not c.dropna().empty else math.nan,
        est,
    )


def _same_counts(metric: MetricDef, passes: pd.DataFrame) -> bool:
    """Whether every one of an arm's passes with a value of `metric` has the same integer
    counts behind it (metric.counts: acceptance, deterministic under greedy decoding)."""
    if not metric.counts or any(c not in passes for c in metric.counts):
        return False
    counts = passes.loc[passes[metric.key].notna(), list(metric.counts)]
    return (
        not counts.empty
        and not counts.isna().to_numpy().any()
        and len(counts.drop_duplicates()) == 1
    )
