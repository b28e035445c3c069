"""report.html and the history page as pages, not pictures of a terminal:

- the tables as HTML tables, every cell as the terminal table has it (intervals included):
  copyable, and sortable by clicking a column's heading (numerically where the cells start
  with numbers);
- the figures as interactive plotly figures (hover, zoom, legend toggles), plotly.js bundled
  into the file once, so the page needs no network when it is opened;
- beside them, the static PNGs (embedded) and the names of the PNG/SVG files a PR comment
  takes;
- the notes under the table, the builds, the environment fingerprint and the scenario.

One file, opened from disk or attached to a CI job.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness.analysis.comparison import Comparison
from harness.analysis.sweep_comparison import SweepComparison
from harness.present import interactive
from harness.present.headline import tidy_paths, verdicts
from harness.present.history import (
    _interval,
    _verdict,
    _when,
    machine_marks,
    render_series,
    series_figure,
)
from harness.present.speedup import render_terminal_decompositions
from harness.present.tables import (
    CATEGORY_NOTE,
    OWN_MARK,
    category_rows,
    footnotes,
    render_sweep_terminal,
    render_terminal,
    sweep_notes,
    sweep_rows,
    table_rows,
)

if TYPE_CHECKING:
    from harness.analysis.history import Series
    from harness.results.run import Run

esc = html.escape

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1280px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table.results{border-collapse:collapse;font-size:13px;margin:.6em 0}
table.results caption{text-align:left;font-weight:600;padding:.3em 0}
table.results th,table.results td{border:1px solid #ccc;padding:.3em .6em;white-space:nowrap;
 text-align:left;font-variant-numeric:tabular-nums}
table.results th{background:#f0f3f6;cursor:pointer;user-select:none}
table.results th[aria-sort=ascending]::after{content:" ▲"}
table.results th[aria-sort=descending]::after{content:" ▼"}
table.results tbody tr:nth-child(even){background:#fafbfc}
td.better{color:#1a7f37;font-weight:600}td.worse{color:#cf222e;font-weight:600}
ul.notes{font-size:13px;line-height:1.4}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:12px;line-height:1.25}
img{max-width:100%;border:1px solid #ddd}figure{margin:1em 0}
figcaption{color:#555;font-size:12px}.figure{margin:1em 0;border:1px solid #eee}
"""

# Click a heading to sort its table's rows by that column (again: the other way). A cell that
# starts with a number (a sign, a Unicode minus, commas, %) sorts by it, others as text.
SORT_SCRIPT = """
function specbenchKey(text){
  const m=text.replace(/\\u2212/g,'-').replace(/,/g,'').match(/^\\s*[-+]?\\d+(\\.\\d+)?/);
  return m?parseFloat(m[0]):null;}
document.querySelectorAll('table.results').forEach(function(table){
  table.querySelectorAll('thead th').forEach(function(th,col){
    th.addEventListener('click',function(){
      const asc=th.getAttribute('aria-sort')!=='ascending';
      table.querySelectorAll('thead th').forEach(h=>h.removeAttribute('aria-sort'));
      th.setAttribute('aria-sort',asc?'ascending':'descending');
      const body=table.tBodies[0];
      const rows=Array.from(body.rows);
      rows.sort(function(a,b){
        const x=a.cells[col].textContent,y=b.cells[col].textContent;
        const p=specbenchKey(x),q=specbenchKey(y);
        const c=(p!==null&&q!==null)?p-q:x.localeCompare(y);
        return asc?c:-c;});
      rows.forEach(r=>body.appendChild(r));});});});
"""


def html_table(
    header: list[str],
    rows: list[list[str]],
    caption: str,
    classes: dict[tuple[int, int], str] | None = None,
) -> str:
    """A results table; `classes`: a CSS class per (row, column) cell."""
    classes = classes or {}
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in header)
    body = "\n".join(
        "<tr>"
        + "".join(
            f'<td class="{classes[(i, j)]}">{esc(c)}</td>'
            if (i, j) in classes
            else f"<td>{esc(c)}</td>"
            for j, c in enumerate(row)
        )
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return (
        f'<table class="results"><caption>{esc(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>"
    )


def _delta_classes(comparison: Comparison, rows: list[list[str]]) -> dict[tuple[int, int], str]:
    """Colour each starred delta cell: better (green) or worse (red), by the row's metric."""
    out: dict[tuple[int, int], str] = {}
    by_label = {}
    for cand in comparison.candidates:
        for row in cand.rows:
            by_label[(cand.name, row.label)] = row
    for i, line in enumerate(rows):
        label = line[0].removesuffix(f" {OWN_MARK}")
        for k, cand in enumerate(comparison.candidates):
            found = by_label.get((cand.name, label))
            if found is not None and found.star and found.improved is not None:
                out[(i, 3 + 2 * k)] = "better" if found.improved else "worse"
    return out


def _notes(lines: list[str]) -> str:
    lines = [line for line in lines if line.strip()]
    if not lines:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def comparison_html(comparison: Comparison, caption: str) -> str:
    """The comparison's table, its notes, and the per-category table where there is one."""
    header, rows = table_rows(comparison)
    answer = "<br>".join(f"<strong>{esc(v)}</strong>" for v in verdicts(comparison))
    parts = [
        f'<p class="verdict">{answer}</p>',
        html_table(header, rows, caption, _delta_classes(comparison, rows)),
        _notes(
            [
                tidy_paths(line)
                for line in footnotes(comparison) + render_terminal_decompositions(comparison)
            ]
        ),
    ]
    if comparison.categories:
        parts.append(html_table(*category_rows(comparison), "Per category"))
        parts.append(_notes([CATEGORY_NOTE]))
    return "\n".join(parts)


def _plotly(figures: dict[str, Any]) -> str:
    divs = []
    for name, fig in figures.items():
        if fig is None:
            continue
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"fig-{name}",
            config={"displaylogo": False, "responsive": True},
        )
        divs.append(f'<div class="figure" data-figure="{esc(name)}">{div}</div>')
    return "\n".join(divs)


def _png(data: bytes, alt: str) -> str:
    """An <img> with the PNG embedded (the page stays one file)."""
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _static(pngs: list[Path], run_dir: Path | None) -> str:
    if not pngs:
        return ""
    items = []
    for p in pngs:
        where = (
            p.relative_to(run_dir).as_posix()
            if run_dir is not None and p.is_relative_to(run_dir)
            else p.name
        )
        svg = where[:-4] + ".svg"
        items.append(
            f"<figure>{_png(p.read_bytes(), p.stem)}<figcaption>"
            f"{esc(where)} · {esc(svg)}</figcaption></figure>"
        )
    return (
        "<details><summary>Static figures (the PNG and SVG files beside this page, for "
        "PR comments)</summary>\n" + "\n".join(items) + "\n</details>"
    )


def _static_figure(fig: Any, name: str) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return (
        f"<details><summary>Static figure (PNG)</summary><figure>"
        f"{_png(buffer.getvalue(), name)}</figure></details>"
    )


def document(
    title: str, heading: str, sections: list[tuple[str, str]], interactive_figures: bool
) -> str:
    """The page: its sections in order; plotly.js inlined once where it has figures."""
    plotly_js = ""
    if interactive_figures:
        from plotly.offline import get_plotlyjs

        plotly_js = f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
    body = "\n".join(f"<h2>{esc(name)}</h2>\n{content}" for name, content in sections if content)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width"><title>{esc(title)}'
        f"</title><style>{STYLE}</style>\n{plotly_js}</head><body>\n"
        f"<h1>{esc(heading)}</h1>\n{body}\n<script>{SORT_SCRIPT}</script>\n"
        "</body></html>\n"
    )


def run_figures(run: Run, comparison: Comparison | None) -> dict[str, Any]:
    baseline, title = run.scenario.baseline, run.scenario.name
    passes, requests = run.passes, run.requests
    if passes.empty:
        return {}
    figures = {
        "throughput_over_time": interactive.throughput(passes, baseline, title),
        "latency_cdf": interactive.latency(requests, baseline, title),
        "acceptance_per_position": interactive.acceptance(passes, baseline, title),
    }
    if comparison is not None:
        figures["forest"] = interactive.forest(comparison, title)
        figures["running_estimate"] = interactive.running(comparison, title)
    return {k: v for k, v in figures.items() if v is not None}


def report_page(run: Run, analysis: Comparison | SweepComparison, pngs: list[Path]) -> str:
    """report.html of a run: a comparison, or a sweep's summary and every cell's table."""
    manifest = run.manifest
    if isinstance(analysis, SweepComparison):
        tables = [
            html_table(*sweep_rows(analysis), f"{analysis.scenario} sweep ({analysis.run_id})"),
            _notes(sweep_notes(analysis)),
        ]
        tables += [comparison_html(c.comparison, f"Cell {c.id}: {c.label}") for c in analysis.cells]
        figures = run_figures(run, None)
        figures.update(
            {
                f"forest_{c.id}": interactive.forest(c.comparison, f"cell {c.id}")
                for c in analysis.cells
            }
        )
        figures = {k: v for k, v in figures.items() if v is not None}
        text = render_sweep_terminal(analysis)
    else:
        tables = [comparison_html(analysis, f"{analysis.scenario} ({analysis.run_id})")]
        figures = run_figures(run, analysis)
        text = render_terminal(analysis)
    sections = [
        ("Comparison", "\n".join(tables)),
        ("Figures", _plotly(figures) or "<p>No measured passes.</p>"),
        ("Static figures", _static(pngs, run.path)),
        (
            "Terminal table",
            f"<details><summary>As printed</summary><pre>{esc(text)}</pre></details>"
            if text
            else "",
        ),
        (
            "Builds",
            f"<pre>{esc(json.dumps(manifest.builds, indent=1))}</pre>"
            if manifest.builds
            else "<p>Not recorded (a run from before builds were kept).</p>",
        ),
        (
            "Environment fingerprint",
            f"<pre>{esc(json.dumps(manifest.fingerprint, indent=1))}</pre>",
        ),
        ("Scenario", f"<pre>{esc(yaml.safe_dump(manifest.scenario, sort_keys=False))}</pre>"),
    ]
    name = str(manifest.scenario.get("name"))
    return document(
        f"specbench {run.run_id}",
        f"{name}: {run.run_id}",
        [("Status", f"<p>{esc(str(manifest.status))}</p>"), *sections],
        bool(figures),
    )


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) and math.isfinite(value) else "—"


def history_rows(series: Series) -> tuple[list[str], list[list[str]]]:
    header = [
        "Run",
        "Commit or date",
        "Delta [95% CI]",
        "Candidate",
        "Baseline",
        "Verdict",
        "Machine",
    ]
    rows = []
    for _, row in series.frame.iterrows():
        rows.append(
            [
                str(row["run_id"]),
                _when(row),
                _interval(row),
                _value(row["candidate_value"]),
                _value(row["baseline_value"]),
                _verdict(row),
                "; ".join(machine_marks(row)) or "ok",
            ]
        )
    return header, rows


def history_page(series: list[Series], text: str, title: str) -> str:
    """The history page: per series, its interactive figure, its runs as a table and its
    change points; the printed history (`text`) below."""
    sections = []
    for s in series:
        loaded = [i for i, (_, r) in enumerate(s.frame.iterrows()) if machine_marks(r)]
        lines = render_series(s)
        notes = [
            line.strip()
            for line in lines
            if line.lstrip().startswith(("change point", "no change point", "trend", "⚠"))
        ]
        sections.append(
            (
                s.name,
                "\n".join(
                    [
                        _plotly({s.name: interactive.history_series(s, loaded)}),
                        html_table(*history_rows(s), f"{s.name}: {len(s.frame)} run(s)"),
                        _notes(notes),
                        _static_figure(series_figure(s), s.name),
                    ]
                ),
            )
        )
    sections.append(("As printed", f"<pre>{esc(text)}</pre>"))
    return document(f"specbench history: {title}", f"History: {title}", sections, bool(series))
