"""Per-category comparison: a dataset whose prompts carry categories (Spec-Bench, SPEED-Bench,
a jsonl with 'category') gets, per category, acceptance length, output rate and TPOT for every
arm, each candidate's delta with its interval on the design's unit.

The categories share each pass's batch, so a category has no throughput of its own: its
output rate is its requests' output tokens over their end-to-end time (tok/s per request).
Each metric is one value per pass and category (acceptance pooled over the category's requests
as vLLM pools it: 1 + accepted / verify steps), estimated like the main table's metrics.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from harness.analysis.comparison import CandidateResult
from harness.analysis.metric_row import compare_metric
from harness.analysis.stats import Design
from harness.results.metrics import (
    MetricDef,
    _stat,
    _tpot_ms,
    measured_passes,
    request_acceptance,
)
from harness.wire.records import RequestRecord, RunRecord

CATEGORY_METRICS: tuple[MetricDef, ...] = (
    MetricDef("acceptance_length", "Acceptance length", True, unit="tokens"),
    MetricDef("output_rate", "Output rate (tok/s per request)", True),
    MetricDef("mean_tpot_ms", "Mean TPOT (ms)", False),
)
NO_CATEGORY = "(none)"


def _values(requests: list[RequestRecord]) -> dict[str, float]:
    ok = [r for r in requests if r.error is None]
    steps = accepted = 0
    for r in ok:
        _, s, a = request_acceptance(r)
        steps, accepted = steps + s, accepted + a
    e2el = sum(r.e2el_s for r in ok if r.e2el_s is not None)
    return {
        "acceptance_length": 1.0 + accepted / steps if steps else np.nan,
        "output_rate": (
            sum(r.output_tokens for r in ok if r.e2el_s is not None) / e2el if e2el > 0 else np.nan
        ),
        "mean_tpot_ms": _stat([_tpot_ms(r.ttft_s, r.e2el_s, r.output_tokens) for r in ok], "mean"),
    }


def has_categories(runs: list[RunRecord]) -> bool:
    return any(r.category is not None for _, p in measured_passes(runs) for r in p.requests)


def category_frame(
    runs: list[RunRecord], keep: Collection[tuple[str, int]] | None = None
) -> pd.DataFrame:
    """One row per measured pass and category; `keep`: the (run_key, repeat) passes to use
    (the main comparison's proven ones), None for all."""
    rows = []
    for run, p in measured_passes(runs):
        if keep is not None and (run.run_key, p.repeat) not in keep:
            continue
        by: dict[str, list[RequestRecord]] = {}
        for r in p.requests:
            by.setdefault(r.category or NO_CATEGORY, []).append(r)
        for category, requests in by.items():
            rows.append(
                {
                    "run_key": run.run_key,
                    "variant": p.arm or run.variant,
                    "round": run.round,
                    "launch": run.order,
                    "block": p.block,
                    "repeat": p.repeat,
                    "category": category,
                    "requests": len(requests),
                    **_values(requests),
                }
            )
    return pd.DataFrame(rows)


def compare_categories(
    frame: pd.DataFrame, baseline: str, candidates: list[str], design: Design
) -> dict[str, list[CandidateResult]]:
    """Category -> one CandidateResult per candidate with its CATEGORY_METRICS rows."""
    out: dict[str, list[CandidateResult]] = {}
    if frame.empty:
        return out
    for category, passes in frame.groupby("category", sort=False):
        results = []
        for name in candidates:
            cand = CandidateResult(name=name, status="ok")
            for metric in CATEGORY_METRICS:
                row = compare_metric(metric, passes, baseline, name, design, one_side_may_lack=True)
                if row is not None:
                    cand.rows.append(row)
            results.append(cand)
        out[str(category)] = results
    return out


def requests_per_category(frame: pd.DataFrame) -> dict[str, int]:
    """Requests of each category in one pass (the first pass's count)."""
    if frame.empty:
        return {}
    first = frame.groupby(["run_key", "repeat"], sort=False).ngroup() == 0
    return {str(c): int(n) for c, n in frame[first].groupby("category")["requests"].sum().items()}
