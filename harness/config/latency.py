"""Latency percentiles as vLLM names them (`vllm bench serve --percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,99`): the key of a percentile is
`p{q}_{metric}_ms` (99 -> p99, 99.9 -> p99.9), the 50th is `median_{metric}_ms`."""

from __future__ import annotations

import re
from typing import Literal, get_args

LatencyMetric = Literal["ttft", "tpot", "itl", "e2el"]
LATENCY_METRICS: tuple[LatencyMetric, ...] = get_args(LatencyMetric)
LABELS: dict[str, str] = {m: m.upper() for m in LATENCY_METRICS}
_KEY = re.compile(rf"^(?:median|p(\d+(?:\.\d+)?))_({'|'.join(LATENCY_METRICS)})_ms$")


def p_word(q: float) -> str:
    """vLLM's word for a percentile in a key: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(q)) if int(q) == q else str(q)


def percentile_key(metric: str, q: float) -> str:
    return f"median_{metric}_ms" if q == 50 else f"p{p_word(q)}_{metric}_ms"


def parse_percentile_key(key: str) -> tuple[str, float] | None:
    """(metric, percentile) of a latency percentile's key, None for any other key (and for
    a spelling that is not the canonical one, e.g. p50_ttft_ms for median_ttft_ms)."""
    found = _KEY.match(key)
    if found is None:
        return None
    q = float(found.group(1)) if found.group(1) else 50.0
    if not 0 < q < 100 or percentile_key(found.group(2), q) != key:
        return None
    return found.group(2), q
