"""harness.api, the notebook and script surface, on committed real-run fixtures: each name
gives what the CLI gives for the same run."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness import api
from harness.analysis.compare import compare_run
from harness.analysis.crossrun import compare_runs
from harness.present.tables import render_markdown, render_sweep_terminal, render_terminal
from harness.workflow import gate_run, write_report
from tests.conftest import ROOT

FIXTURES = ROOT / "results" / "fixtures"


def _rows(comparison: api.Comparison) -> list[tuple[str, float]]:
    return [(r.key, r.estimate.delta) for c in comparison.candidates for r in c.rows]


def test_load_compare_and_table_match_the_library(tmp_path: Path) -> None:
    folder = tmp_path / "cpu-medusa-small"
    shutil.copytree(FIXTURES / "cpu-medusa-small", folder)
    run = api.load_run(tmp_path)  # a results folder: its newest run
    assert run.path == folder and not run.passes.empty and not run.requests.empty
    comparison = api.compare(run)
    assert isinstance(comparison, api.Comparison)
    assert _rows(comparison) == _rows(compare_run(run))
    assert api.table(comparison) == render_terminal(comparison, rows="pr")
    assert api.table(comparison, markdown=True) == render_markdown(comparison, rows="pr")
    assert api.table(comparison, rows="all") == render_terminal(comparison)
    # Against another run: the crossrun comparison, candidate first as the CLI names them.
    other = api.compare(folder, against=FIXTURES / "cpu-medusa-small")
    assert isinstance(other, api.Comparison)
    assert _rows(other) == _rows(compare_runs(api.load_run(FIXTURES / "cpu-medusa-small"), run))


def test_gate_and_history(tmp_path: Path) -> None:
    folder = tmp_path / "cpu-medusa-small"
    shutil.copytree(FIXTURES / "cpu-medusa-small", folder)
    comparison, result = api.gate(folder)
    _, expected = gate_run(folder)
    assert [(d.check, d.verdict) for d in result.decisions] == [
        (d.check, d.verdict) for d in expected.decisions
    ]
    assert api.history(tmp_path).empty  # estimates are indexed from a run's report
    write_report(folder, figures=False)
    series = api.history(tmp_path, metric="output_throughput")
    assert set(series["run_id"]) == {api.load_run(folder).run_id}
    assert set(series["metric"]) == {"output_throughput"}


def test_a_sweep_compares_cell_by_cell() -> None:
    sweep = api.compare(FIXTURES / "cpu-eagle-tp2-sweep-small")
    assert isinstance(sweep, api.SweepComparison) and sweep.cells
    assert api.table(sweep) == render_sweep_terminal(sweep)
