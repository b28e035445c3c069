"""A comparison already in the store: `run` (and `report`) and `history` print its runs
combined with an interval anytime-valid across re-runs (stats.runs_alpha), saying which
interval that is and how many looks it allows for; a single run keeps its fixed 95% interval."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from harness.analysis.comparison import Comparison
from harness.analysis.history import build_series
from harness.analysis.repeats import combined
from harness.analysis.stats import ALPHA, runs_alpha, runs_estimate
from harness.present.history import render_history
from harness.present.tables import warnings_of
from harness.results.index import earlier_runs, history
from harness.results.run import load_run
from harness.workflow import write_report
from testkit.stored import stored


def test_runs_combined_from_their_deltas_are_a_t_over_runs_at_the_spending_level() -> None:
    deltas = [0.012, -0.004, 0.006]
    est = runs_estimate(deltas, "relative")
    assert est is not None and est.runs == 3 and est.df == 2.0
    assert est.alpha == pytest.approx(runs_alpha(3))
    x = np.log1p(deltas)
    assert est.se == pytest.approx(float(np.std(x, ddof=1)) / math.sqrt(3))
    assert est.delta == pytest.approx(math.expm1(float(x.mean())))
    assert est.ci_low is not None and est.ci_high is not None and est.se is not None
    half = (math.log1p(est.ci_high) - math.log1p(est.ci_low)) / 2
    assert half / est.se == pytest.approx(sps.t.ppf(1 - runs_alpha(3) / 2, 2), rel=1e-9)
    points = runs_estimate([1.0, 2.0], "points")
    assert points is not None and points.delta == pytest.approx(1.5) and points.runs == 2
    # One run keeps its own interval; identical runs have nothing to estimate.
    assert runs_estimate([0.01], "relative") is None
    assert runs_estimate([0.01, 0.01, 0.01], "relative") is None


def test_a_rerun_prints_its_runs_combined_and_the_looks_allowed_for(tmp_path: Path) -> None:
    for i in range(3):
        stored(tmp_path, f"r{i}", 100.0 * (i + 1), 40 + i)
    first, _ = write_report(tmp_path / "r0", figures=False, fresh=True)
    assert isinstance(first, Comparison)
    assert first.across is not None and first.across.runs == 0  # one run: its fixed interval
    assert not any("across all" in w for w in warnings_of(first))
    analysis, _ = write_report(tmp_path / "r2", figures=False, fresh=True)
    assert isinstance(analysis, Comparison)
    notes = [w for w in warnings_of(analysis) if w.startswith("across all 3 runs")]
    assert len(notes) == 1, warnings_of(analysis)
    assert analysis.across is not None and analysis.across.earlier == ["r0", "r1"]
    note = notes[0]
    assert "look 3 of any number" in note and "one run, one look" in note
    # The same interval gate --combine decides on.
    run = load_run(tmp_path / "r2")
    est = next(
        r.estimate
        for r in combined(run, [load_run(p) for p in earlier_runs(run)])[0].candidates[0].rows
        if r.key == "output_throughput"
    )
    assert est.ci_low is not None and est.ci_high is not None
    assert f"[{100 * est.ci_low:+.2f}, {100 * est.ci_high:+.2f}]" in note
    table = (tmp_path / "r2" / "table.md").read_text()
    assert "look 3 of any number" in table


def test_history_combines_the_last_runs_of_the_latest_comparison(tmp_path: Path) -> None:
    # Two runs of another comparison (scenario hash h0), then three of h1.
    for i in range(5):
        stored(tmp_path, f"r{i}", 100.0 * (i + 1), 60 + i, scenario_hash="h0" if i < 2 else "h1")
        write_report(tmp_path / f"r{i}", figures=False)
    series = next(s for s in build_series(history(tmp_path)) if s.metric == "output_throughput")
    assert series.repeats == 3
    est = series.across
    assert est is not None and est.runs == 3 and est.alpha == pytest.approx(runs_alpha(3))
    last = series.frame["delta"].to_numpy(dtype=float)[-3:]
    assert est.delta == pytest.approx(math.expm1(float(np.log1p(last).mean())))
    text = render_history([series])
    assert "across the last 3 runs of this comparison" in text
    assert "look 3 of any number" in text and "fixed-sample 95%" in text
    # A single run of its comparison: no combined line, the row's own 95% interval.
    stored(tmp_path, "r5", 600.0, 70, scenario_hash="h2")
    write_report(tmp_path / "r5", figures=False)
    alone = next(s for s in build_series(history(tmp_path)) if s.metric == "output_throughput")
    assert alone.repeats == 1 and alone.across is None
    assert "across the last" not in render_history([alone])
    assert ALPHA == 0.05
