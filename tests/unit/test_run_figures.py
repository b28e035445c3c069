"""The forest plot and the running estimate of a one-engine run (30 simulated blocks through the
shipped records): drawn, and the running estimate's last point is the table's estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.compare import compare_run, running_estimate
from harness.present.figures import forest_plot, running_estimate_figure
from harness.results.run import load_run
from harness.workflow import write_report
from tests.unit.test_history import FIXTURE, simulated


def test_running_estimate_narrows_to_the_tables_estimate(tmp_path: Path) -> None:
    run_dir = simulated(tmp_path, "r", 100.0, -0.05, seed=3)
    run = load_run(run_dir)
    comparison = compare_run(run)
    (cand,) = comparison.candidates
    row = next(r for r in cand.rows if r.key == "output_throughput")
    frame = running_estimate(run.passes, "a", "b", "output_throughput", run.design)
    assert list(frame["blocks"]) == [4, 8, 12, 16, 20, 24, 28, 30]
    last = frame.iloc[-1]
    assert last["delta"] == pytest.approx(row.estimate.delta)
    assert last["ci_low"] == pytest.approx(row.estimate.ci_low)
    widths = (frame["ci_high"] - frame["ci_low"]).to_numpy()
    assert widths[-1] < widths[0] / 2  # narrowing as blocks come in
    assert running_estimate(run.passes, "a", "b", "output_throughput", "launch-per-arm").empty
    # The comparison carries it (the figure draws, computes nothing); summary.json does not.
    assert comparison.running["b"] == frame.to_dict("records")
    assert "running" not in comparison.to_dict()
    assert running_estimate_figure(comparison, "t") is not None
    write_report(run_dir, figures=True)
    names = {p.name for p in (run_dir / "figures").glob("*.png")}
    assert {"forest.png", "running_estimate.png"} <= names
    assert "figures/forest.png" in (run_dir / "table.md").read_text()


def test_forest_plot_of_a_real_run(tmp_path: Path) -> None:
    run = load_run(FIXTURE)
    fig = forest_plot(compare_run(run), run.scenario.name)
    assert fig is not None and len(fig.axes) == 2  # relative metrics and percentage points
    fig.savefig(tmp_path / "forest.png")
    assert (tmp_path / "forest.png").stat().st_size > 10_000
