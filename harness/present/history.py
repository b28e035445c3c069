"""`specbench history`: a benchmark's series as text (per run: its commit or date, the estimate
with its interval, the verdict; change points under each series) and as one page with the
series figure (estimates with their intervals over runs, change points marked)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from harness.analysis.history import Series, Step
from harness.analysis.stats import runs_phrase
from harness.present.figures import _figure


def _pct(kind: str | None, value: float) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:+.2f}pp" if kind == "points" else f"{100 * value:+.2f}%"


def _when(row: Any) -> str:
    commit = row["commit"]
    if isinstance(commit, str) and commit:
        return commit[:12] + (" (dirty)" if commit.endswith("+dirty") else "")
    created = row["created"]
    return str(created)[:16] if created is not None else "?"


def _verdict(row: Any) -> str:
    if isinstance(row["gate"], str):
        return row["gate"]
    if row["exact"]:
        return "exact"
    if row["significant"] is True or row["significant"] == 1:
        return "better *" if row["improved"] else "worse *"
    return "n.s."


def _interval(row: Any) -> str:
    kind = row["kind"]
    low, high = row["ci_low"], row["ci_high"]
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return _pct(kind, row["delta"])
    scale = 1.0 if kind == "points" else 100.0
    return f"{_pct(kind, row['delta'])} [{scale * low:+.2f}, {scale * high:+.2f}]"


def machine_marks(row: Any) -> list[str]:
    """A run's machine findings (index column machine_findings), each cut to its first
    clause: "the machine was busy", "a disturbance lined up with opt", "shared machine ...".
    """
    raw = row.get("machine_findings") if hasattr(row, "get") else None
    if not isinstance(raw, str) or not raw:
        return []
    try:
        found = json.loads(raw)
    except ValueError:
        return []
    return [str(x).split(":")[0].split(" (")[0] for x in found if x]


def render_series(series: Series) -> list[str]:
    """One series as lines: a row per run, then its change points."""
    frame = series.frame
    machine = f" on machine {series.machine}" if series.machine else ""
    lines = [f"{series.name} ({len(frame)} run(s){machine})"]
    marks = {s.index: s for s in series.delta_steps}
    width = max((len(str(r)) for r in frame["run_id"]), default=6)
    lines.append(
        f"  {'run':<{width}}  {'commit or date':<18} {'delta [95% CI]':<28} "
        f"{'candidate':>12}  verdict"
    )
    busy: list[str] = []
    for i, row in frame.iterrows():
        mark = "▶ " if i in marks else "  "
        value = row["candidate_value"]
        shown = f"{value:.4g}" if value is not None and math.isfinite(value) else "—"
        found = machine_marks(row)
        if found:
            busy.append(f"  ⚠ {row['run_id']}: {'; '.join(found)} (its table says more)")
        lines.append(
            f"{mark}{row['run_id']:<{width}}  {_when(row):<18} {_interval(row):<28} "
            f"{shown:>12}  {_verdict(row)}{'  ⚠' if found else ''}"
        )
    lines.extend(busy)
    lines.extend(_step_lines(series))
    lines.extend(_across_lines(series))
    return lines


def _across_lines(series: Series) -> list[str]:
    """The runs of the latest run's comparison combined, when there are several: which
    interval that is and how many looks it allows for (a re-run is one more look)."""
    est = series.across
    if est is None or est.ci_low is None or est.ci_high is None:
        return []
    scale = 1.0 if series.kind == "points" else 100.0
    star = " *" if est.significant else ""
    which = f"the last {est.runs} runs"
    if series.planned is not None:
        past = series.repeats - est.runs
        which = (
            f"the first {est.runs} runs (the plan's; {past} later past it, not combined)"
            if past > 0
            else f"the {est.runs} runs so far of its plan"
        )
    return [
        f"  across {which} of this comparison (same scenario, build and "
        f"commit; each run one unit): {_pct(series.kind, est.delta)} "
        f"[{scale * est.ci_low:+.2f}, {scale * est.ci_high:+.2f}]{star}, "
        f"{runs_phrase(est.runs, series.planned)}; each row's interval is its own run's, "
        "fixed-sample 95%"
    ]


def _loaded(series: Series, step: Step) -> str:
    """A note when the first run after a change point is marked (⚠): the step may be the
    machine's, not the code's, until a run on a quiet machine says otherwise."""
    if 0 <= step.index < len(series.frame) and machine_marks(series.frame.iloc[step.index]):
        return "; ⚠ its first run had the machine loaded or shared: re-run it on a quiet machine"
    return ""


def _step_lines(series: Series) -> list[str]:
    kind = series.kind
    out = []
    if series.delta_steps:
        out += [
            f"  change point (delta): {s.describe(kind)}{_loaded(series, s)}"
            for s in series.delta_steps
        ]
    else:
        out.append("  no change point in the deltas")
    out += [f"  trend (delta): {d.describe(kind)}" for d in series.delta_drifts]
    what = f"{series.candidate}'s own value"
    value_kind = "relative" if kind == "relative" else kind
    if series.value_steps:
        out += [
            f"  change point ({what}): {s.describe(value_kind, series.definition)}"
            f"{_loaded(series, s)}"
            for s in series.value_steps
        ]
    elif series.exact:
        out.append(f"  {what}: exact, the same in every run (greedy decoding)")
    elif series.value_detectable is not None and not series.value_drifts:
        out.append(
            f"  {what}: no change point; across runs (launch-to-launch noise) it shows "
            f"steps of about {_pct(kind, series.value_detectable).lstrip('+')} or more"
        )
    out += [f"  trend ({what}): {d.describe(value_kind)}" for d in series.value_drifts]
    return out


def render_history(series: list[Series], others: list[Series] | None = None) -> str:
    """The text `specbench history` prints; `others`: series of metrics not shown whose
    change points are named in one line each."""
    if not series:
        return "no runs in the store (run a scenario, or `specbench index --rebuild`)\n"
    lines: list[str] = []
    for s in series:
        lines += render_series(s) + [""]
    changed = [s for s in (others or []) if s.delta_steps or s.value_steps]
    for s in changed:
        first = (s.delta_steps or s.value_steps)[0]
        lines.append(f"also changed: {s.name}: {first.describe(s.kind, s.definition)}")
    for s in (o for o in (others or []) if o.delta_drifts and not o.delta_steps):
        lines.append(f"also drifting: {s.name}: {s.delta_drifts[0].describe(s.kind)}")
    return "\n".join(lines).rstrip() + "\n"


def _mark(ax: Any, steps: list[Step], color: str, label: str) -> None:
    for j, step in enumerate(steps):
        ax.axvline(
            step.index - 0.5,
            color=color,
            linestyle="--",
            linewidth=1.2,
            label=label if j == 0 else None,
        )


def series_figure(series: Series) -> Any:
    """Two panels: the per-run delta with its interval, and the candidate arm's own value;
    change points as dashed lines before the first run after each."""
    frame = series.frame
    fig, axes = _figure(10, 3.4, cols=2)
    x = np.arange(len(frame))
    scale = 1.0 if series.kind == "points" else 100.0
    unit = "pp" if series.kind == "points" else "%"
    delta = frame["delta"].to_numpy(dtype=float) * scale
    low = frame["ci_low"].to_numpy(dtype=float) * scale
    high = frame["ci_high"].to_numpy(dtype=float) * scale
    ax = axes[0]
    err = np.vstack(
        [np.where(np.isfinite(low), delta - low, 0), np.where(np.isfinite(high), high - delta, 0)]
    )
    ax.errorbar(x, delta, yerr=err, fmt="o", color="#1f77b4", capsize=3, label="delta, 95% CI")
    ax.axhline(0, color="#888", linewidth=0.8)
    _mark(ax, series.delta_steps, "#d62728", "change point")
    loaded = [i for i, (_, r) in enumerate(frame.iterrows()) if machine_marks(r)]
    if loaded:
        ax.scatter(
            x[loaded],
            delta[loaded],
            s=160,
            facecolors="none",
            edgecolors="#ff7f0e",
            linewidths=1.8,
            zorder=3,
            label="machine loaded or shared (⚠)",
        )
    ax.set_ylabel(f"{series.candidate} vs baseline ({unit})")
    ax.set_title(f"{series.label}: delta per run", fontsize=10)
    ax = axes[1]
    ax.plot(
        x,
        frame["candidate_value"].to_numpy(dtype=float),
        "o-",
        color="#2ca02c",
        label=series.candidate,
    )
    ax.plot(
        x,
        frame["baseline_value"].to_numpy(dtype=float),
        "s--",
        color="#7f7f7f",
        label=str(frame["baseline"].iloc[-1]),
        alpha=0.7,
    )
    _mark(ax, series.value_steps, "#d62728", "change point")
    ax.set_title(f"{series.label}: each arm's value per run", fontsize=10)
    labels = [_when(r) for _, r in frame.iterrows()]
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
        ax.legend(fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    fig.suptitle(series.name, fontsize=11)
    return fig
