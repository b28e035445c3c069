"""The figures of report.html and the history page as plotly figures: hover for each point's
values, zoom, pan, legend toggles. They draw the same data as the static figures
(harness.present.figures, written as PNG/SVG for PR comments), from the raw records and the
comparison; nothing here computes a statistic. plotly is imported only when a page is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.present.figures import _variants, forest_panels, per_pass_throughput
from harness.results.metrics import position_metrics

if TYPE_CHECKING:
    from harness.analysis.comparison import Comparison
    from harness.analysis.history import Series

GREEN, RED, BLUE, GREY = "#2ca02c", "#d62728", "#1f77b4", "#7f7f7f"
HEIGHT = 380


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _layout(fig: Any, title: str, **kwargs: Any) -> Any:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=HEIGHT,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.2},
        colorway=[_palette(i) for i in range(6)],
        **kwargs,
    )
    return fig


def throughput(passes: pd.DataFrame, baseline: str, title: str) -> Any | None:
    """Output throughput of every measured pass against when it started, a series per arm;
    hover names the pass (launch, round, block, repeat). In a sweep, each pass relative to its
    cell's median, as the static figure."""
    if passes.empty:
        return None
    go = _go()
    start = float(passes["started_unix"].min())
    values, sweep = per_pass_throughput(passes)
    fig = go.Figure()
    for name in _variants(passes, baseline):
        mask = passes["variant"] == name
        rows = passes[mask].assign(y=values[mask]).sort_values("started_unix")
        text = [
            f"launch {r.run_key}<br>round {r['round']}, block {r.block}, repeat {r.repeat}"
            + (f"<br>cell {r.cell}" if sweep else "")
            for _, r in rows.iterrows()
        ]
        fig.add_trace(
            go.Scatter(
                x=rows["started_unix"] - start,
                y=rows["y"],
                name=name,
                mode="markers" if sweep else "lines+markers",
                text=text,
                hovertemplate="%{y:.4g}<br>%{text}<extra>%{fullData.name}</extra>",
            )
        )
    return _layout(
        fig,
        f"{title}: output throughput per pass over the run",
        xaxis_title="seconds since the first measured pass",
        yaxis_title="relative to its cell's median" if sweep else "output tokens/s",
    )


LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "mean ITL"), ("e2el_ms", "E2EL"))


def latency(requests: pd.DataFrame, baseline: str, title: str) -> Any | None:
    """Each latency's empirical CDF per arm over the measured requests, a panel each."""
    metrics = [(c, label) for c, label in LATENCIES if c in requests and requests[c].notna().any()]
    if not metrics:
        return None
    from plotly.subplots import make_subplots

    go = _go()
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[1] for m in metrics])
    colors: dict[str, str] = {}
    for col, (column, _) in enumerate(metrics, start=1):
        for i, name in enumerate(_variants(requests, baseline)):
            values = np.sort(
                requests.loc[requests["variant"] == name, column].dropna().to_numpy(dtype=float)
            )
            if not values.size:
                continue
            color = colors.setdefault(name, _palette(i))
            fig.add_trace(
                go.Scatter(
                    x=values,
                    y=np.arange(1, values.size + 1) / values.size,
                    mode="lines",
                    line={"shape": "hv", "color": color},
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    hovertemplate="%{x:.4g} ms: %{y:.0%} of requests"
                    "<extra>%{fullData.name}</extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="ms", row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    return _layout(fig, f"{title}: latency CDFs per request")


def _palette(i: int) -> str:
    return ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")[i % 6]


def acceptance(passes: pd.DataFrame, baseline: str, title: str) -> Any | None:
    """Mean acceptance per draft position per arm (an arm without speculation has none)."""
    columns = position_metrics(passes)
    if not columns or passes[columns].isna().all().all():
        return None
    go = _go()
    fig = go.Figure()
    positions = [f"position {c.rsplit('_', 1)[1]}" for c in columns]
    for name in _variants(passes, baseline):
        rows = passes.loc[passes["variant"] == name, columns]
        if not rows.notna().any().any():
            continue
        fig.add_trace(
            go.Bar(
                x=positions,
                y=rows.mean().to_numpy(dtype=float),
                name=name,
                hovertemplate="%{x}: %{y:.1f}% accepted<extra>%{fullData.name}</extra>",
            )
        )
    return _layout(
        fig,
        f"{title}: acceptance per draft position (mean over passes)",
        barmode="group",
        yaxis_title="accepted (%)",
        yaxis_range=[0, 105],
    )


def forest(comparison: Comparison, title: str) -> Any | None:
    """Every candidate's delta on every metric with its 95% interval: relative metrics (%) and
    acceptance (percentage points) in two panels; hover gives the interval, p and the test."""
    shown = forest_panels(comparison)
    if not shown:
        return None
    from plotly.subplots import make_subplots

    go = _go()
    fig = make_subplots(
        rows=1,
        cols=len(shown),
        horizontal_spacing=0.3,
        subplot_titles=[
            "delta (%)" if k == "relative" else "delta (percentage points)" for k, _ in shown
        ],
    )
    for col, (kind, rows) in enumerate(shown, start=1):
        scale = 100.0 if kind == "relative" else 1.0
        for label, row in reversed(rows):
            e = row.estimate
            d = scale * e.delta
            has_ci = e.ci_low is not None and e.ci_high is not None
            color = GREEN if row.improved else RED if row.improved is False else BLUE
            interval = (
                f"[{scale * e.ci_low:+.2f}, {scale * e.ci_high:+.2f}]"
                if has_ci
                else "exact"
                if e.known_exactly
                else "no interval"
            )
            p = f"p = {e.p_value:.3g}" if e.p_value is not None else ""
            fig.add_trace(
                go.Scatter(
                    x=[d],
                    y=[label],
                    mode="markers",
                    showlegend=False,
                    marker={
                        "color": color if has_ci else GREY,
                        "size": 9,
                        "symbol": "diamond"
                        if e.known_exactly
                        else "circle"
                        if has_ci
                        else "circle-open",
                    },
                    error_x={
                        "type": "data",
                        "symmetric": False,
                        "array": [scale * e.ci_high - d] if has_ci else [0],
                        "arrayminus": [d - scale * e.ci_low] if has_ci else [0],
                        "visible": has_ci,
                    },
                    hovertemplate=f"{label}<br>{d:+.2f} {interval}<br>{p} {e.test or ''}"
                    "<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.add_vline(x=0, line_color="#888", line_width=1, row=1, col=col)
    height = max(HEIGHT, 120 + 28 * max(len(rows) for _, rows in shown))
    fig = _layout(
        fig,
        f"{title}: every delta with its 95% interval (green better, red worse, "
        "blue not significant)",
    )
    fig.update_layout(height=height)
    return fig


def running(comparison: Comparison, title: str) -> Any | None:
    """The output-throughput delta and its 95% interval from the first k blocks, against k."""
    frames = {
        name: pd.DataFrame(points)
        for name, points in comparison.running.items()
        if len(points) >= 2
    }
    if not frames:
        return None
    go = _go()
    fig = go.Figure()
    for i, (name, f) in enumerate(frames.items()):
        color = _palette(i)
        x = f["blocks"].astype(float).tolist()
        fig.add_trace(
            go.Scatter(
                x=x + x[::-1],
                y=(100 * f["ci_high"].astype(float)).tolist()
                + (100 * f["ci_low"].astype(float)).tolist()[::-1],
                fill="toself",
                line={"width": 0},
                opacity=0.2,
                fillcolor=color,
                hoverinfo="skip",
                showlegend=False,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=100 * f["delta"].astype(float),
                name=name,
                mode="lines+markers",
                line={"color": color},
                hovertemplate="%{x} blocks: %{y:+.2f}%<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(y=0, line_color="#888", line_width=1)
    return _layout(
        fig,
        f"{title}: output-throughput delta as the blocks came in",
        xaxis_title="blocks measured",
        yaxis_title="delta vs baseline (%), 95% CI",
    )


def history_series(series: Series, loaded: list[int]) -> Any:
    """A history series: each run's delta with its 95% interval, and the candidate's and the
    baseline's own values; change points as dashed lines; runs on a loaded or shared machine
    (`loaded`: their positions) ringed."""
    from plotly.subplots import make_subplots

    from harness.present.history import _when

    go = _go()
    frame = series.frame
    scale = 1.0 if series.kind == "points" else 100.0
    unit = "pp" if series.kind == "points" else "%"
    labels = [f"{i}: {_when(r)}" for i, (_, r) in enumerate(frame.iterrows())]
    delta = frame["delta"].to_numpy(dtype=float) * scale
    low = frame["ci_low"].to_numpy(dtype=float) * scale
    high = frame["ci_high"].to_numpy(dtype=float) * scale
    runs = frame["run_id"].astype(str).tolist()
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[
            f"{series.label}: delta per run ({unit})",
            f"{series.label}: each arm's value",
        ],
    )
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=delta,
            mode="markers",
            name="delta, 95% CI",
            marker={"color": BLUE},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": np.where(np.isfinite(high), high - delta, 0),
                "arrayminus": np.where(np.isfinite(low), delta - low, 0),
            },
            customdata=np.stack([runs, low, high], axis=-1),
            hovertemplate="run %{customdata[0]}<br>%{y:+.2f} [%{customdata[1]:.2f}, "
            "%{customdata[2]:.2f}]<extra></extra>",
        ),
        row=1,
        col=1,
    )
    if loaded:
        fig.add_trace(
            go.Scatter(
                x=[labels[i] for i in loaded],
                y=delta[loaded],
                mode="markers",
                name="machine loaded or shared (⚠)",
                marker={
                    "size": 18,
                    "color": "rgba(0,0,0,0)",
                    "line": {"color": "#ff7f0e", "width": 2},
                },
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=frame["candidate_value"].to_numpy(dtype=float),
            mode="lines+markers",
            name=series.candidate,
            line={"color": GREEN},
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=frame["baseline_value"].to_numpy(dtype=float),
            mode="lines+markers",
            name=str(frame["baseline"].iloc[-1]),
            line={"color": GREY, "dash": "dash"},
        ),
        row=1,
        col=2,
    )
    for col, steps in ((1, series.delta_steps), (2, series.value_steps)):
        for step in steps:
            if 0 < step.index < len(labels):
                fig.add_vline(x=step.index - 0.5, line_dash="dash", line_color=RED, row=1, col=col)
    fig.add_hline(y=0, line_color="#888", line_width=1, row=1, col=1)
    return _layout(fig, series.name)
