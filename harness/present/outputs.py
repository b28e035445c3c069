"""A stored run's outputs, derived from its raw records: the comparison as table.txt, table.md
and a versioned summary.json, per-pass / per-request Parquet, figures (and report.html).
Library code, so a notebook or a CI script writes exactly what `specbench run` and
`specbench report` write.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.compare import Comparison, compare_results, compare_runs
from harness.analysis.gate import GateResult, judge
from harness.analysis.metrics import passes_frame, requests_frame
from harness.analysis.repeats import combined, earlier_runs, repeat_note
from harness.analysis.sweep_comparison import SweepComparison, compare_sweep, is_sweep
from harness.config.scenario import parse_scenario
from harness.errors import ResultsError
from harness.present.figures import html_report, markdown_links, write_figures
from harness.present.tables import (
    render_gate_junit,
    render_gate_markdown,
    render_markdown,
    render_sweep_markdown,
    render_sweep_terminal,
    render_terminal,
)
from harness.results.store import (
    RunResults,
    load_results,
    resolve_baseline,
    write_json_atomic,
    write_text_atomic,
)

# summary.json history (bump when a reader must know; readers refuse newer ones):
#   1 - first versioned summary: run_id, status, comparison (with design, unit, variance
#       components, discarded/unproven passes), timings.
#   2 - sweeps: "sweep" (cells, each with its comparison, and the break-even lines) in place
#       of "comparison"; runs without a sweep are unchanged.
SUMMARY_VERSION = 2


def summary(results: RunResults, comparison: Comparison | SweepComparison) -> dict[str, Any]:
    """The machine-readable comparison of a stored run (of each cell, for a sweep)."""
    key = "sweep" if isinstance(comparison, SweepComparison) else "comparison"
    return {"summary_version": SUMMARY_VERSION, "run_id": results.run_id,
            "status": results.manifest.get("status"), key: comparison.to_dict(),
            "timings": results.manifest.get("timings")}


def write_frames(results: RunResults) -> None:
    """Per-pass summaries and per-request rows as Parquet (pandas.read_parquet in one call).
    Derived from the raw records, which stay the source of truth."""
    for name, frame in (("passes", passes_frame(results.runs)),
                        ("requests", requests_frame(results.runs))):
        tmp = results.path / f".{name}.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.replace(results.path / f"{name}.parquet")


def write_outputs(run_dir: Path, html: bool = False, figures: bool = True,
                  force: bool = False) -> tuple[Comparison | SweepComparison, str]:
    """Compare a stored run and write table.txt, table.md (linking the figures),
    summary.json, the Parquet frames and figures/*.png|svg beside it; with `html`, also the
    self-contained report.html (`figures=False`: no figures, as after Ctrl-C, when a prompt
    exit matters more; `specbench report` draws them later). Returns the comparison and the
    terminal table. A sweep gets its summary table, break-even and one table per cell, the
    tidy sweep.parquet and its own figures."""
    results = load_results(run_dir)
    fingerprint = results.manifest.get("fingerprint")
    comparison: Comparison | SweepComparison
    sweep: SweepComparison | None = None
    if is_sweep(results):
        comparison = sweep = compare_sweep(results, force)
        text = render_sweep_terminal(sweep)
        markdown = render_sweep_markdown(sweep, fingerprint)
    else:
        comparison = compare_results(results, force)
        note = repeat_note(earlier_runs(results))
        if note:
            comparison.warnings.append(note)
        text = render_terminal(comparison)
        markdown = render_markdown(comparison, fingerprint)
    write_text_atomic(results.path / "table.txt", text)
    write_json_atomic(results.path / "summary.json", summary(results, comparison))
    write_frames(results)
    if sweep is not None:
        tmp = results.path / ".sweep.parquet.tmp"
        sweep.frame().to_parquet(tmp, index=False)
        tmp.replace(results.path / "sweep.parquet")
    pngs: list[Path] = []
    if figures or html:
        try:
            pngs = write_figures(results, sweep)
        except Exception as exc:  # a figure must never cost the tables
            print(f"specbench: figures not drawn: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
    write_text_atomic(results.path / "table.md", markdown + markdown_links(pngs, results.path))
    if html:
        # A sweep's page shows every cell's own table under the sweep's.
        page = text if sweep is None else text + "".join(
            f"\nCell {c.id}: {c.label}\n" + render_terminal(c.comparison) for c in sweep.cells)
        write_text_atomic(results.path / "report.html", html_report(results, page, pngs))
    return comparison, text


@dataclass
class GatedRun:
    """A stored run judged by its scenario's gates, and where the gate's files went."""

    comparison: Comparison
    result: GateResult
    files: list[Path]


def gate_run(run_dir: Path, against: str | None = None, baselines_dir: Path | None = None,
             variant: str | None = None, force: bool = False,
             combine: bool = False) -> tuple[Comparison, GateResult]:
    """Judge a stored run with its scenario's gates: its candidates against its baseline, or
    (`against`) its `variant` (default: its baseline) against a saved reference run's same-named
    variant (default: the reference's baseline). Refuses incomparable runs, naming the fields.
    `combine`: this run and every earlier run of the same comparison, each a launch."""
    results = load_results(run_dir)
    scenario = parse_scenario(results.manifest["scenario"], f"{results.path}/manifest.json",
                              max_cells=None)
    if scenario.sweep is not None:
        raise ResultsError(f"{results.path}: a sweep; a gate judges one A/B (gate a scenario "
                           "without sweep:, e.g. the cell you ship)")
    if combine:
        if against is not None:
            raise ResultsError("--combine gates a run with its own earlier runs; --against "
                               "gates it against a saved baseline: choose one")
        comparison = combined(results)[0]
    elif against is None:
        comparison = compare_results(results)
    else:
        reference = load_results(resolve_baseline(against, *(
            [baselines_dir] if baselines_dir is not None else [])))
        ref_scenario = parse_scenario(reference.manifest["scenario"],
                                      f"{reference.path}/manifest.json", max_cells=None)
        name = variant or scenario.baseline
        if name not in scenario.variants:
            raise ResultsError(f"{results.path}: no variant {name!r} to gate")
        ref_name = name if name in ref_scenario.variants else ref_scenario.baseline
        comparison = compare_runs(reference, results, ref_name, name, force)
    return comparison, judge(comparison, scenario.gates)


def write_gate_files(run_dir: Path, comparison: Comparison, result: GateResult,
                     junit: Path | None = None, markdown: Path | None = None,
                     inconclusive_fails: bool = False) -> list[Path]:
    """gate.json, gate.md and gate.junit.xml in the run folder (and copies where asked); the
    Markdown is appended to $GITHUB_STEP_SUMMARY when that is set."""
    md = render_gate_markdown(result, comparison)
    xml = render_gate_junit(result, comparison, inconclusive_fails)
    written = []
    for path, text in ((run_dir / "gate.md", md), (run_dir / "gate.junit.xml", xml),
                       (markdown, md), (junit, xml)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
            written.append(path)
    write_json_atomic(run_dir / "gate.json", {**result.to_dict(), "run_id": comparison.run_id})
    written.append(run_dir / "gate.json")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with Path(step_summary).open("a", encoding="utf-8") as out:
            out.write(md + "\n")
    return written
