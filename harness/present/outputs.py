"""The files a stored run's analysis is written to: the comparison as table.txt, table.md and
a versioned summary.json, the per-pass / per-request Parquet, figures (and report.html), and a
gate's files. Takes the Run and its analysis as computed once (harness.workflow); derives
nothing from disk.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.comparison import Comparison
from harness.analysis.gate import GateResult
from harness.analysis.sweep_comparison import SweepComparison
from harness.atomic import atomic_path, write_json_atomic, write_text_atomic
from harness.present import vllm_bench
from harness.present.contention import load_findings, load_line, machine_use_line
from harness.present.figures import markdown_links, write_figures
from harness.present.page import report_page
from harness.present.stops import stop_line
from harness.present.tables import (
    platform_line,
    render_gate_junit,
    render_gate_markdown,
    render_markdown,
    render_sweep_markdown,
    render_sweep_terminal,
    render_terminal,
    warnings_of,
)
from harness.results.run import Run

# summary.json history (bump when a reader must know; readers refuse newer ones):
#   1 - first versioned summary: run_id, status, comparison (with design, unit, variance
#       components, discarded/unproven passes), timings.
#   2 - sweeps: "sweep" (cells, each with its comparison, and the break-even lines) in place
#       of "comparison"; runs without a sweep are unchanged.
#   3 - a comparison carries facts that present words: "setup" and "warmups" are objects
#       (were lines), "unrealistic_acceptance" (reasons) replaces "acceptance_note", and
#       "load", "interpreted", "mixed_workloads", "left_out", "tp_in_one_launch" and
#       "kv_blocks" are new; the words stay in "warnings", "machine_load" and "contention".
#   4 - why each precision launch stopped is "stops" (objects: run_key, the worker's stop
#       with its reason and blocks, the short budget's costs); "stopped" keeps the lines.
#       "machine" is an object (shared, waited_s, waited_for; was a line, now
#       "machine_use"). What a comparison knows beyond its run is facts: "compared_anyway",
#       "builds_differ", "combined" (run ids), "across" (earlier runs, all combined) and
#       "history" (what a gate against history read); "warnings" keeps every line.
#       "platforms" (launch -> its Platform) and "prompts" (a list) are facts; "platform"
#       keeps the line. An estimate's "findings" are objects (each with its "kind") and it
#       gains "no_spread"; a row gains "adjustment" (the speed-adjusted row's facts).
#   5 - a row's "adjustment" gains "probe": the speed-adjusted row was adjusted by the
#       speed probe (the scenario's speed_probe), not by step parts.
#   6 - a row's "adjustment" gains "twin" (the speed probe was checked against its twin, the
#       same loop run beside it in a process of its own: harness.engine.twin) and "contrast"
#       (the checked pair's ratio at 90%: the probe over its twin, or the step parts' pair;
#       null where none was checked).
#   7 - a comparison gains "planned" (the scenario's planned_runs: its combined estimates
#       are that plan's look) and "across" gains "planned" likewise; an estimate's "alpha"
#       may be 0 (a look of the plan that gives no verdict).
SUMMARY_VERSION = 7


def summary(run: Run, comparison: Comparison | SweepComparison) -> dict[str, Any]:
    """The machine-readable comparison of a stored run (of each cell, for a sweep)."""
    if isinstance(comparison, SweepComparison):
        key, data = "sweep", comparison.to_dict()
        for cell, raw in zip(comparison.cells, data["cells"], strict=True):
            _with_words(cell.comparison, raw["comparison"])
    else:
        key, data = "comparison", _with_words(comparison, comparison.to_dict())
    return {
        "summary_version": SUMMARY_VERSION,
        "run_id": run.run_id,
        "status": run.manifest.status,
        key: data,
        "timings": run.manifest.timings,
    }


def _with_words(comparison: Comparison, data: dict[str, Any]) -> dict[str, Any]:
    """A comparison's dict with the lines its facts are read by: every warning, the machine's
    load line and its findings (`contention`, which the run store keeps for `history`)."""
    data["warnings"] = warnings_of(comparison)
    data["machine_load"] = load_line(comparison.load) if comparison.load is not None else None
    data["contention"] = load_findings(comparison.load)
    data["stopped"] = [stop_line(stop) for stop in comparison.stops]
    data["platform"] = platform_line(comparison)
    data["machine_use"] = (
        machine_use_line(comparison.machine) if comparison.machine is not None else None
    )
    return data


def write_parquet(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def write_outputs(
    run: Run,
    analysis: Comparison | SweepComparison,
    html: bool = False,
    figures: bool = True,
    rows: str = "pr",
    github_summary: bool = False,
) -> str:
    """Write table.txt, table.md (linking the figures), summary.json, the Parquet frames and
    figures/*.png|svg beside the run's records; with `html`, also the self-contained
    report.html (`figures=False`: no figures, as after Ctrl-C, when a prompt exit matters
    more; `specbench report` draws them later). Returns the terminal table. A sweep gets its
    summary table, break-even and one table per cell, the tidy sweep.parquet and its own
    figures. The Parquet frames are derived from the raw records, which stay the source of
    truth. `rows`: the tables' rows (pr, all or keys; summary.json keeps every row either
    way); `github_summary`: the Markdown also goes to the job summary (write_pr_comment)."""
    fingerprint = run.manifest.fingerprint or None
    sweep = analysis if isinstance(analysis, SweepComparison) else None
    if sweep is not None:
        text = render_sweep_terminal(sweep)
        markdown = render_sweep_markdown(sweep, fingerprint, rows)
    else:
        assert isinstance(analysis, Comparison)
        text = render_terminal(analysis, rows=rows)
        markdown = render_markdown(analysis, fingerprint, rows)
    write_text_atomic(run.path / "table.txt", text)
    write_json_atomic(run.path / "summary.json", summary(run, analysis))
    write_parquet(run.path / "passes.parquet", run.passes)
    write_parquet(run.path / "requests.parquet", run.requests)
    vllm_bench.write_results(
        run,
        analysis if isinstance(analysis, Comparison) else None,
        [(c.id, c.comparison) for c in sweep.cells] if sweep is not None else [],
        write_json_atomic,
    )
    if sweep is not None:
        write_parquet(run.path / "sweep.parquet", sweep.frame())
    pngs: list[Path] = []
    if figures or html:
        try:
            pngs = write_figures(run, sweep, analysis if isinstance(analysis, Comparison) else None)
        except Exception as exc:  # a figure must never cost the tables
            print(f"specbench: figures not drawn: {type(exc).__name__}: {exc}", file=sys.stderr)
    write_text_atomic(run.path / "table.md", markdown + markdown_links(pngs, run.path))
    if html:
        write_text_atomic(run.path / "report.html", report_page(run, analysis, pngs))
    if github_summary:
        write_pr_comment(run.path, markdown)
    return text


PR_COMMENT = "pr-comment.md"


def pr_comment_target(run_dir: Path) -> Path:
    """Where write_pr_comment puts the Markdown: $GITHUB_STEP_SUMMARY when set (a GitHub
    Actions step), else pr-comment.md in the run folder."""
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return Path(step_summary) if step_summary else run_dir / PR_COMMENT


def write_pr_comment(run_dir: Path, markdown: str) -> Path:
    """The table's Markdown (without the figure links, which point into the run folder)
    appended to the job summary, or written to pr-comment.md; returns where it went."""
    target = pr_comment_target(run_dir)
    if target.name == PR_COMMENT and target.parent == run_dir:
        write_text_atomic(target, markdown)
    else:
        with target.open("a", encoding="utf-8") as out:
            out.write(markdown + "\n")
    return target


def write_gate_files(
    run_dir: Path,
    comparison: Comparison,
    result: GateResult,
    junit: Path | None = None,
    markdown: Path | None = None,
    inconclusive_fails: bool = False,
) -> list[Path]:
    """gate.json, gate.md and gate.junit.xml in the run folder (and copies where asked); the
    Markdown is appended to $GITHUB_STEP_SUMMARY when that is set."""
    md = render_gate_markdown(result, comparison)
    xml = render_gate_junit(result, comparison, inconclusive_fails)
    written = []
    for path, text in (
        (run_dir / "gate.md", md),
        (run_dir / "gate.junit.xml", xml),
        (markdown, md),
        (junit, xml),
    ):
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
