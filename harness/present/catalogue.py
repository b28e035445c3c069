"""The metric catalogue as a Markdown table (docs/metrics.md holds it; a test keeps the two
the same): each metric's key, label, unit, direction, exact or noisy, source and roles."""

from __future__ import annotations

from dataclasses import replace

from harness.config.metrics import (
    METRICS,
    POSITIONS,
    PRECISION_METRICS,
    SOURCES,
    MetricDef,
    percentile_metric,
    position_metric,
)

HEAD = (
    "| key | row | unit | better | exact or noisy | from | gate | precision | primary |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)


def _yes(flag: bool) -> str:
    return "yes" if flag else ""


def _row(m: MetricDef) -> str:
    kind = "exact where its counts match" if m.exact else "noisy"
    unit = m.unit + (" (delta in points)" if m.delta == "points" else "")
    return (
        f"| `{m.key}` | {m.label} | {unit} | {'higher' if m.higher_is_better else 'lower'} "
        f"| {kind} | ({SOURCES.index(m.source) + 1}) | {_yes(m.gate)} "
        f"| {_yes(m.key in PRECISION_METRICS)} | {_yes(m.primary)} |\n"
    )


def catalogue_markdown() -> str:
    """The catalogue's table, then its families (draft positions, latency percentiles) and the
    numbered sources."""
    position = position_metric(f"{POSITIONS[:-1]}1")
    percentile = percentile_metric("p90_itl_ms")
    assert percentile is not None
    families = (
        replace(position, key=f"{POSITIONS[:-1]}N", label="Acceptance at draft position N (%)"),
        replace(
            percentile, key="pQ_METRIC_ms", label="Percentile Q of TTFT, TPOT, ITL or E2EL (ms)"
        ),
    )
    rows = [_row(m) for m in (*METRICS, *families)]
    sources = "".join(f"{i}. {s}\n" for i, s in enumerate(SOURCES, start=1))
    return HEAD + "".join(rows) + "\nSources:\n\n" + sources
