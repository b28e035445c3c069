"""Figures of a stored run, from its raw records (matplotlib, no display needed), and the
self-contained HTML page of `specbench report RUN --html`:

- throughput per pass over time, one series per variant: drift and stalls made visible;
- latency CDFs per variant: TTFT, TPOT and (serve mode) ITL per request;
- acceptance per draft position per variant.

Each is written as PNG and SVG under the run folder's figures/.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.metrics import passes_frame, requests_frame
from harness.store import RunResults

FIGURE_DIR = "figures"


def _figure(width: float, height: float, cols: int = 1) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(1, cols, squeeze=False)[0]
    return fig, axes


def _variants(frame: pd.DataFrame, baseline: str) -> list[str]:
    names = [str(v) for v in frame["variant"].dropna().unique()]
    return sorted(names, key=lambda v: (v != baseline, v))


def throughput_over_time(passes: pd.DataFrame, baseline: str, title: str) -> Any:
    fig, (ax,) = _figure(8, 3.6)
    start = float(passes["started_unix"].min())
    for name in _variants(passes, baseline):
        rows = passes[passes["variant"] == name].sort_values("started_unix")
        ax.plot(rows["started_unix"] - start, rows["output_throughput"], marker="o", ms=3,
                lw=0.8, label=name)
    ax.set(title=f"{title}: output throughput per pass over the run",
           xlabel="seconds since the first measured pass", ylabel="output tokens/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def latency_cdfs(requests: pd.DataFrame, baseline: str, title: str) -> Any | None:
    metrics = [(c, label) for c, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"),
                                            ("itl_ms", "mean ITL"))
               if c in requests and requests[c].notna().any()]
    if not metrics:
        return None
    fig, axes = _figure(4 * len(metrics), 3.4, len(metrics))
    for ax, (column, label) in zip(axes, metrics, strict=True):
        for name in _variants(requests, baseline):
            values = np.sort(requests.loc[requests["variant"] == name, column].dropna()
                             .to_numpy(dtype=float))
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                        label=name)
        ax.set(title=f"{label} per request", xlabel="ms", ylabel="fraction of requests",
               ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{title}: latency CDFs")
    return fig


def acceptance_per_position(passes: pd.DataFrame, baseline: str, title: str) -> Any | None:
    columns = sorted((c for c in passes.columns if c.startswith("acceptance_pos_")),
                     key=lambda c: int(c.rsplit("_", 1)[1]))
    if not columns or passes[columns].isna().all().all():
        return None
    fig, (ax,) = _figure(7, 3.4)
    names = _variants(passes, baseline)
    width = 0.8 / max(1, len(names))
    x = np.arange(len(columns))
    for i, name in enumerate(names):
        means = passes.loc[passes["variant"] == name, columns].mean().to_numpy(dtype=float)
        bars = ax.bar(x + i * width - 0.4 + width / 2, means, width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(x, [f"position {c.rsplit('_', 1)[1]}" for c in columns])
    ax.set(title=f"{title}: acceptance per draft position (mean over passes)",
           ylabel="accepted (%)", ylim=(0, 105))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return fig


def run_figures(results: RunResults) -> dict[str, Any]:
    """name -> matplotlib Figure for every figure the run has data for."""
    baseline = next((n for n, v in results.manifest["scenario"].get("variants", {}).items()
                     if v.get("baseline")), "")
    title = str(results.manifest["scenario"].get("name", results.run_id))
    passes, requests = passes_frame(results.runs), requests_frame(results.runs)
    if passes.empty:
        return {}
    makers: dict[str, Callable[[], Any]] = {
        "throughput_over_time": lambda: throughput_over_time(passes, baseline, title),
        "latency_cdf": lambda: latency_cdfs(requests, baseline, title),
        "acceptance_per_position": lambda: acceptance_per_position(passes, baseline, title),
    }
    figures = {name: make() for name, make in makers.items()}
    return {name: fig for name, fig in figures.items() if fig is not None}


def write_figures(results: RunResults) -> list[Path]:
    """PNG and SVG of every figure under the run folder's figures/; the PNG paths."""
    out = results.path / FIGURE_DIR
    out.mkdir(exist_ok=True)
    written = []
    for name, fig in run_figures(results).items():
        for suffix in ("png", "svg"):
            tmp = out / f".{name}.tmp.{suffix}"
            fig.savefig(tmp, format=suffix)
            tmp.replace(out / f"{name}.{suffix}")
        written.append(out / f"{name}.png")
    return written


def markdown_links(pngs: list[Path], run_dir: Path) -> str:
    """The Markdown report's figure section (links relative to the run folder)."""
    if not pngs:
        return ""
    lines = ["", "## Figures", ""]
    lines += [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in pngs]
    return "\n".join(lines) + "\n"


def html_report(results: RunResults, table: str, pngs: list[Path]) -> str:
    """One self-contained page: the comparison, the figures (embedded), the builds and the
    fingerprint, the scenario."""
    esc = html.escape
    images = "\n".join(
        f'<figure><img alt="{esc(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{esc(p.stem)}'
        "</figcaption></figure>" for p in pngs)
    manifest = results.manifest
    sections = [
        ("Comparison", f"<pre>{esc(table)}</pre>"),
        ("Figures", images or "<p>No measured passes.</p>"),
        ("Builds", f"<pre>{esc(json.dumps(manifest['builds'], indent=1))}</pre>"
         if manifest.get("builds") else "<p>Not recorded (a run from before builds were "
         "kept).</p>"),
        ("Environment fingerprint",
         f"<pre>{esc(json.dumps(manifest.get('fingerprint') or {}, indent=1))}</pre>"),
        ("Scenario", f"<pre>{esc(yaml.safe_dump(manifest['scenario'], sort_keys=False))}</pre>"),
    ]
    body = "\n".join(f"<h2>{esc(title)}</h2>\n{content}" for title, content in sections)
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>specbench {esc(results.run_id)}</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:12px;line-height:1.25}"
        "img{max-width:100%;border:1px solid #ddd}figure{margin:1em 0}"
        "figcaption{color:#555;font-size:12px}</style></head><body>\n"
        f"<h1>{esc(str(manifest['scenario'].get('name')))}: {esc(results.run_id)}</h1>\n"
        f"<p>status: {esc(str(manifest.get('status')))}</p>\n{body}\n</body></html>\n")
