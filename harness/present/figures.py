"""Figures of a stored run, from its raw records (matplotlib, no display needed; the page's
interactive versions are harness.present.interactive):

- throughput per pass over time, one series per variant: drift and stalls made visible;
- latency CDFs per variant: TTFT, TPOT and (serve mode) ITL per request;
- acceptance per draft position per variant; per-request acceptance length (histogram, and
  against output length);
- a forest plot: every candidate's delta on every metric with its 95% interval;
- (one-engine runs) the output-throughput estimate with its interval as the blocks came in,
  narrowing towards the table's.

Each is written as PNG and SVG under the run folder's figures/.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.breakeven import choose_scale
from harness.analysis.comparison import Comparison
from harness.analysis.sweep_comparison import SweepComparison
from harness.atomic import atomic_path
from harness.results.metrics import position_metrics
from harness.results.run import Run

FIGURE_DIR = "figures"


def _figure(width: float, height: float, cols: int = 1) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(1, cols, squeeze=False)[0]
    return fig, axes


def _variants(frame: pd.DataFrame, baseline: str) -> list[str]:
    names = [str(v) for v in frame["variant"].dropna().unique()]
    return sorted(names, key=lambda v: (v != baseline, v))


def per_pass_throughput(passes: pd.DataFrame) -> tuple[pd.Series, bool]:
    """Each pass's output throughput, and whether the run is a sweep: then relative to its
    cell's median (cells differ in level), so that drift across the run stays visible."""
    sweep = "cell" in passes and bool(passes["cell"].notna().any())
    values = passes["output_throughput"].astype(float)
    if sweep:
        values = values / passes.groupby("cell")["output_throughput"].transform("median")
    return values, sweep


def throughput_over_time(passes: pd.DataFrame, baseline: str, title: str) -> Any:
    """Output throughput of every pass against the time it started, one series per variant.
    In a sweep, each pass is shown relative to its cell's median (cells differ in level) and
    the cells' stretches of time are marked, so drift across the run stays visible."""
    fig, (ax,) = _figure(8, 3.6)
    start = float(passes["started_unix"].min())
    values, sweep = per_pass_throughput(passes)
    if sweep:
        for i, (cell, rows) in enumerate(passes.groupby("cell")):
            left = float(rows["started_unix"].min()) - start
            right = float((rows["started_unix"] + rows["duration_s"]).max()) - start
            if i % 2 == 0:
                ax.axvspan(left, right, color="grey", alpha=0.08, lw=0)
            ax.annotate(
                str(cell),
                ((left + right) / 2, 0.01),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                fontsize=7,
                color="grey",
            )
    for name in _variants(passes, baseline):
        mask = passes["variant"] == name
        rows = passes[mask].assign(y=values[mask]).sort_values("started_unix")
        ax.plot(
            rows["started_unix"] - start,
            rows["y"],
            marker="o",
            ms=3,
            lw=0 if sweep else 0.8,
            label=name,
        )
    ax.set(
        title=f"{title}: output throughput per pass over the run",
        xlabel="seconds since the first measured pass",
        ylabel="relative to its cell's median" if sweep else "output tokens/s",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def latency_cdfs(requests: pd.DataFrame, baseline: str, title: str) -> Any | None:
    metrics = [
        (c, label)
        for c, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "mean ITL"))
        if c in requests and requests[c].notna().any()
    ]
    if not metrics:
        return None
    fig, axes = _figure(4 * len(metrics), 3.4, len(metrics))
    for ax, (column, label) in zip(axes, metrics, strict=True):
        for name in _variants(requests, baseline):
            values = np.sort(
                requests.loc[requests["variant"] == name, column].dropna().to_numpy(dtype=float)
            )
            if values.size:
                ax.step(
                    values, np.arange(1, values.size + 1) / values.size, where="post", label=name
                )
        ax.set(
            title=f"{label} per request", xlabel="ms", ylabel="fraction of requests", ylim=(0, 1.02)
        )
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{title}: latency CDFs")
    return fig


def acceptance_per_position(passes: pd.DataFrame, baseline: str, title: str) -> Any | None:
    columns = position_metrics(passes)
    if not columns or passes[columns].isna().all().all():
        return None
    fig, (ax,) = _figure(7, 3.4)
    # (an arm without speculation has no acceptance: no bars)
    names = [
        n
        for n in _variants(passes, baseline)
        if passes.loc[passes["variant"] == n, columns].notna().any().any()
    ]
    width = 0.8 / max(1, len(names))
    x = np.arange(len(columns))
    for i, name in enumerate(names):
        means = passes.loc[passes["variant"] == name, columns].mean().to_numpy(dtype=float)
        bars = ax.bar(x + i * width - 0.4 + width / 2, means, width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(x, [f"position {c.rsplit('_', 1)[1]}" for c in columns])
    ax.set(
        title=f"{title}: acceptance per draft position (mean over passes)",
        ylabel="accepted (%)",
        ylim=(0, 105),
    )
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return fig


def acceptance_per_request(requests: pd.DataFrame, baseline: str, title: str) -> Any | None:
    """Per-request acceptance length (vLLM's per_request_spec_decode_metrics): its histogram
    per variant, and against each request's output length."""
    if "acceptance_length" not in requests or requests["acceptance_length"].isna().all():
        return None
    fig, (hist, scatter) = _figure(10, 3.4, 2)
    values = requests["acceptance_length"].astype(float)
    finite = values.dropna()
    bins = np.linspace(1.0, max(float(finite.max()), 1.0) + 1e-9, 21)
    for name in _variants(requests, baseline):
        mask = (requests["variant"] == name) & values.notna()
        if not mask.any():
            continue  # an arm without speculation
        hist.hist(values[mask], bins=bins, histtype="step", lw=1.5, label=name)
        scatter.scatter(
            requests.loc[mask, "output_tokens"], values[mask], s=8, alpha=0.5, label=name
        )
    hist.set(
        title="acceptance length per request",
        xlabel="tokens per verify step (bonus token included)",
        ylabel="requests",
    )
    scatter.set(title="against output length", xlabel="output tokens", ylabel="acceptance length")
    for ax in (hist, scatter):
        ax.grid(alpha=0.3)
    hist.legend(fontsize=8)
    fig.suptitle(f"{title}: per-request acceptance")
    return fig


def forest_panels(comparison: Comparison) -> list[tuple[str, list[tuple[str, Any]]]]:
    """The forest's panels: (delta kind, [(label, row)]) for relative metrics and for
    acceptance (percentage points), each with rows; rows with no delta (acceptance against
    the arm without speculation) left out."""
    panels: dict[str, list[tuple[str, Any]]] = {"relative": [], "points": []}
    several = len(comparison.candidates) > 1
    for cand in comparison.candidates:
        for row in cand.rows:
            if math.isfinite(row.estimate.delta):
                panels[row.estimate.kind].append(
                    (f"{cand.name}: {row.label}" if several else row.label, row)
                )
    return [(kind, rows) for kind, rows in panels.items() if rows]


def forest_plot(comparison: Comparison, title: str) -> Any | None:
    """Every candidate's delta on every metric with its 95% interval, relative metrics (%)
    and acceptance (percentage points) in two panels; a delta known exactly is a diamond
    with no bar, one with no interval a hollow circle."""
    shown = forest_panels(comparison)
    if not shown:
        return None
    height = 1.2 + 0.28 * max(len(rows) for _, rows in shown)
    fig, axes = _figure(6.5 * len(shown), height, len(shown))
    for ax, (kind, rows) in zip(axes, shown, strict=True):
        scale = 100.0 if kind == "relative" else 1.0
        y = np.arange(len(rows))[::-1]
        for yi, (_, row) in zip(y, rows, strict=True):
            est = row.estimate
            d = scale * est.delta
            if est.known_exactly:
                ax.plot(d, yi, marker="D", color="#555", ms=5)
            elif est.ci_low is None or est.ci_high is None:
                ax.plot(d, yi, marker="o", mfc="none", color="#999", ms=5)
            else:
                color = (
                    "#2ca02c" if row.improved else "#d62728" if row.improved is False else "#1f77b4"
                )
                ax.errorbar(
                    d,
                    yi,
                    xerr=[[d - scale * est.ci_low], [scale * est.ci_high - d]],
                    fmt="o",
                    color=color,
                    capsize=3,
                    ms=4,
                )
        ax.axvline(0, color="#888", lw=0.8)
        ax.set_yticks(y, [label for label, _ in rows], fontsize=8)
        ax.set_xlabel(
            "delta vs baseline (%)"
            if kind == "relative"
            else "delta vs baseline (percentage points)"
        )
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(
        f"{title}: every delta with its 95% interval\n(green better, red worse, blue "
        "not significant; diamond: exact; hollow: no interval)",
        fontsize=9,
    )
    return fig


def running_estimate_figure(comparison: Comparison, title: str) -> Any | None:
    """The output-throughput delta of each candidate with its 95% interval from the first k
    blocks, against k (Comparison.running): how the estimate settled and the interval
    narrowed."""
    frames = {
        name: pd.DataFrame(points)
        for name, points in comparison.running.items()
        if len(points) >= 2
    }
    if not frames:
        return None
    fig, (ax,) = _figure(7, 3.4)
    for name, f in frames.items():
        line = ax.plot(f["blocks"], 100 * f["delta"], marker="o", ms=3, label=name)[0]
        ax.fill_between(
            f["blocks"].astype(float),
            100 * f["ci_low"].astype(float),
            100 * f["ci_high"].astype(float),
            color=line.get_color(),
            alpha=0.2,
        )
    ax.axhline(0, color="#888", lw=0.8)
    ax.set(
        title=f"{title}: output-throughput delta as the blocks came in",
        xlabel="blocks measured",
        ylabel="delta vs baseline (%), 95% CI",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def speedup_decomposition(comparison: Comparison, title: str) -> Any | None:
    """Each speculative arm's factors (ideal k + 1, acceptance, draft, verification, other)
    with their 95% intervals on a log axis, and the measured speedup they multiply to; the
    parts of acceptance and of other overhead indented below them."""
    if not comparison.decompositions:
        return None
    n = len(comparison.decompositions)
    fig, axes = _figure(6.5 * n, 3.8, n)
    for ax, d in zip(axes, comparison.decompositions, strict=True):
        rows = [
            (f"↳ {f.label}", f, "#9ecae1")
            if part_of
            else ("= measured speedup", f, "#2ca02c" if f.value >= 1 else "#d62728")
            if f.key == "measured"
            else (f.label, f, "#1f77b4")
            for f, part_of in d.terms()
        ]
        y = np.arange(len(rows))[::-1]
        for yi, (_, f, color) in zip(y, rows, strict=True):
            ax.plot([1, f.value], [yi, yi], color=color, lw=6, solid_capstyle="butt")
            if f.low is not None and f.high is not None:
                ax.errorbar(
                    f.value,
                    yi,
                    xerr=[[f.value - f.low], [f.high - f.value]],
                    fmt="none",
                    color="#333",
                    capsize=3,
                )
            ax.text(f.value, yi + 0.3, f"{f.value:.2f}×", fontsize=7, ha="center")
        ax.axvline(1, color="#888", lw=0.8)
        ax.set_xscale("log")
        values = [v for _, f, _ in rows for v in (f.value, f.low, f.high) if v is not None]
        low, high = min([*values, 1.0]) / 1.3, max([*values, 1.0]) * 1.3
        ax.set_xlim(low, high)
        ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16) if low <= t <= high]
        ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks(y, [label for label, _, _ in rows], fontsize=8)
        ax.set_xlabel("factor (log scale; 1 = no effect)")
        ax.set_title(f"{d.arm} vs {d.reference} (k = {d.k}, {len(d.rounds)} round(s))", fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(
        f"{title}: where the speedup over no speculation goes\n(the dark factors "
        "multiply to the measured speedup; whiskers: 95% CI over rounds)",
        fontsize=9,
    )
    return fig


def run_figures(run: Run, comparison: Comparison | None = None) -> dict[str, Any]:
    """name -> matplotlib Figure for every figure the run (and its comparison, when given)
    has data for."""
    baseline, title = run.scenario.baseline, run.scenario.name
    passes, requests = run.passes, run.requests
    if passes.empty:
        return {}
    makers: dict[str, Callable[[], Any]] = {
        "throughput_over_time": lambda: throughput_over_time(passes, baseline, title),
        "latency_cdf": lambda: latency_cdfs(requests, baseline, title),
        "acceptance_per_position": lambda: acceptance_per_position(passes, baseline, title),
        "acceptance_per_request": lambda: acceptance_per_request(requests, baseline, title),
    }
    if comparison is not None:
        makers["forest"] = lambda: forest_plot(comparison, title)
        makers["running_estimate"] = lambda: running_estimate_figure(comparison, title)
        makers["speedup_decomposition"] = lambda: speedup_decomposition(comparison, title)
    figures = {name: make() for name, make in makers.items()}
    return {name: fig for name, fig in figures.items() if fig is not None}


def write_figures(
    run: Run, sweep: SweepComparison | None = None, comparison: Comparison | None = None
) -> list[Path]:
    """PNG and SVG of every figure under the run folder's figures/; the PNG paths."""
    out = run.path / FIGURE_DIR
    out.mkdir(exist_ok=True)
    written = []
    figures = sweep_figures(run, sweep) if sweep is not None else run_figures(run, comparison)
    for name, fig in figures.items():
        for suffix in ("png", "svg"):
            with atomic_path(out / f"{name}.{suffix}") as tmp:
                fig.savefig(tmp, format=suffix)
        written.append(out / f"{name}.png")
    keep = {p.stem for p in written}
    for old in [*out.glob("*.png"), *out.glob("*.svg")]:
        if old.stem not in keep:  # a figure this run no longer has (older code, no data)
            old.unlink()
    return written


def markdown_links(pngs: list[Path], run_dir: Path) -> str:
    """The Markdown report's figure section (links relative to the run folder)."""
    if not pngs:
        return ""
    lines = ["", "## Figures", ""]
    lines += [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in pngs]
    return "\n".join(lines) + "\n"


# -- sweeps ----------------------------------------------------------------------------------


def delta_vs_axis(sweep: SweepComparison, axis: str, metric: str, title: str) -> Any | None:
    """The candidates' delta (with its 95% interval as a band) against one swept field, one
    line per combination of the other fields, zero marked, and each break-even with its
    interval."""
    frame = sweep.frame()
    if frame.empty or axis not in frame:
        return None
    rows = frame[frame["metric"] == metric]
    if rows.empty:
        return None
    others = sweep.others(axis)
    numeric = pd.api.types.is_numeric_dtype(rows[axis])
    relative = bool((rows["kind"] == "relative").all())
    scale = 100.0 if relative else 1.0
    fig, (ax,) = _figure(8, 4.2)
    groups = (
        rows.groupby(["candidate", *others], sort=False, dropna=False)
        if others
        else rows.groupby(["candidate"], sort=False)
    )
    for key, line in groups:
        key = key if isinstance(key, tuple) else (key,)
        line = line.sort_values(axis) if numeric else line
        x = line[axis].to_numpy() if numeric else np.arange(len(line))
        y = line["delta"].to_numpy(dtype=float) * scale
        lo = line["ci_low"].to_numpy(dtype=float) * scale
        hi = line["ci_high"].to_numpy(dtype=float) * scale
        name = ", ".join([str(key[0])] + [f"{o}={v}" for o, v in zip(others, key[1:], strict=True)])
        (drawn,) = ax.plot(x, y, marker="o", ms=4, label=name)
        ax.fill_between(x, lo, hi, alpha=0.18, color=drawn.get_color(), lw=0)
        sig = line["significant"].to_numpy(dtype=bool)
        ax.plot(x[sig], y[sig], ls="none", marker="o", ms=7, mfc="none", color=drawn.get_color())
        if not numeric:
            ax.set_xticks(x, [str(v) for v in line[axis]])
        for b in sweep.break_even:
            if (
                b.axis != axis
                or b.metric != metric
                or b.crossing is None
                or b.candidate != key[0]
                or any(b.others.get(o) != v for o, v in zip(others, key[1:], strict=True))
            ):
                continue
            c = b.crossing
            if c.ci_low is not None and c.ci_high is not None:
                left = c.ci_low if np.isfinite(c.ci_low) else float(np.min(x))
                right = c.ci_high if np.isfinite(c.ci_high) else float(np.max(x))
                ax.axvspan(left, right, color=drawn.get_color(), alpha=0.08)
            if c.estimate is not None:
                ax.axvline(c.estimate, color=drawn.get_color(), ls="--", lw=1)
                ax.annotate(
                    f"break-even ≈ {c.estimate:.3g}",
                    (c.estimate, 0),
                    xytext=(4, 6),
                    textcoords="offset points",
                    fontsize=8,
                    color=drawn.get_color(),
                )
    ax.axhline(0, color="black", lw=0.8)
    # The axis scale the break-even interpolates on.
    if numeric and choose_scale(rows[axis].astype(float).tolist()) == "log":
        ax.set_xscale("log", base=2)
        ticks = sorted(rows[axis].unique())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    label = rows["metric_label"].iloc[0]
    ax.set(
        title=f"{title}: {label}, candidate vs baseline",
        xlabel=axis,
        ylabel="delta (%)" if relative else "delta (points)",
    )
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize=8,
        title="band: the delta's 95% interval; circled: significant; "
        "shaded span: the break-even's 95% interval",
        title_fontsize=7,
    )
    return fig


def per_cell_grid(n: int, cols: int = 3) -> tuple[int, int]:
    cols = min(cols, n)
    return -(-n // cols), cols


LATENCY_COLUMNS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "mean ITL"}


def sweep_cell_figure(
    sweep: SweepComparison, passes: pd.DataFrame, requests: pd.DataFrame, kind: str, title: str
) -> Any | None:
    """Small multiples, one panel per cell: per-request CDFs per variant of one latency
    (`kind` a LATENCY_COLUMNS key), or acceptance per position per variant
    ('acceptance_per_position')."""
    import textwrap

    from matplotlib.figure import Figure

    cells = (
        [c for c in sweep.cells if (passes.get("cell") == c.id).any()] if not passes.empty else []
    )
    if not cells:
        return None
    rows_n, cols = per_cell_grid(len(cells))
    fig = Figure(figsize=(4 * cols, 2.8 * rows_n), dpi=110, layout="constrained")
    axes = fig.subplots(rows_n, cols, squeeze=False).ravel()
    drew = False
    for ax, cell in zip(axes, cells, strict=False):
        base = cell.comparison.baseline
        if kind in LATENCY_COLUMNS:
            column = kind
            mine = requests[requests["cell"] == cell.id]
            for name in _variants(mine, base):
                values = np.sort(
                    mine.loc[mine["variant"] == name, column].dropna().to_numpy(dtype=float)
                )
                if values.size:
                    drew = True
                    ax.step(
                        values,
                        np.arange(1, values.size + 1) / values.size,
                        where="post",
                        label=name,
                    )
            ax.set(xlabel=f"{LATENCY_COLUMNS[column]} (ms)", ylim=(0, 1.02))
        else:
            mine = passes[passes["cell"] == cell.id]
            columns = [c for c in position_metrics(mine) if mine[c].notna().any()]
            names = _variants(mine, base)
            width = 0.8 / max(1, len(names))
            x = np.arange(len(columns))
            for i, name in enumerate(names):
                means = mine.loc[mine["variant"] == name, columns].mean().to_numpy(dtype=float)
                if means.size:
                    drew = True
                    ax.bar(x + i * width - 0.4 + width / 2, means, width, label=name)
            ax.set_xticks(x, [c.rsplit("_", 1)[1] for c in columns])
            ax.set(xlabel="draft position", ylim=(0, 105))
        ax.set_title(textwrap.fill(f"{cell.id}: {cell.label}", 48), fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(cells) :]:
        ax.set_visible(False)
    if not drew:
        return None
    axes[0].legend(fontsize=7)
    what = (
        f"{LATENCY_COLUMNS[kind]} CDF per request"
        if kind in LATENCY_COLUMNS
        else "acceptance per draft position (%, mean over passes)"
    )
    fig.suptitle(f"{title}: {what}, per cell")
    return fig


def sweep_figures(run: Run, sweep: SweepComparison) -> dict[str, Any]:
    """name -> Figure for a sweep: delta vs each numeric swept field (the break-even axis
    first), per-cell latency CDFs and acceptance, throughput per pass over the run."""
    title = sweep.scenario
    passes, requests = run.passes, run.requests
    makers: dict[str, Callable[[], Any]] = {}
    metric = next((b.metric for b in sweep.break_even), "output_throughput")
    first = [b.axis for b in sweep.break_even][:1]
    # One figure per field that varies on its own (linked fields share theirs).
    groups = [g for g in sweep.groups if not set(g) & set(first)]
    for axis in first + [g[0] for g in groups]:
        makers[f"delta_vs_{_file_name(axis)}"] = _delta_maker(sweep, axis, metric, title)
    if not passes.empty:
        baseline = sweep.cells[0].comparison.baseline
        makers["throughput_over_time"] = lambda: throughput_over_time(passes, baseline, title)
        for column in LATENCY_COLUMNS:
            if column in requests and requests[column].notna().any():
                makers[f"latency_cdf_{column.removesuffix('_ms')}"] = _cell_maker(
                    sweep, passes, requests, column, title
                )
        makers["acceptance_per_position"] = lambda: sweep_cell_figure(
            sweep, passes, requests, "acceptance_per_position", title
        )
    figures = {name: make() for name, make in makers.items()}
    return {name: fig for name, fig in figures.items() if fig is not None}


def _cell_maker(
    sweep: SweepComparison, passes: pd.DataFrame, requests: pd.DataFrame, kind: str, title: str
) -> Callable[[], Any]:
    return lambda: sweep_cell_figure(sweep, passes, requests, kind, title)


def _delta_maker(sweep: SweepComparison, axis: str, metric: str, title: str) -> Callable[[], Any]:
    return lambda: delta_vs_axis(sweep, axis, metric, title)


def _file_name(path: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in path)
