"""specbench from a notebook or a script: the objects the CLI uses, under short names.

    from harness.api import compare, gate, history, load_run, table

    run = load_run("results/<run-id>")          # a run folder, its manifest, or a results folder
    run.passes, run.requests                    # one row per pass / per request (pandas)
    comparison = compare(run)                   # baseline vs candidates, as the table shows them
    print(table(comparison, markdown=True))     # the PR-description layout
    comparison, result = gate(run)              # PASS / REGRESSION / INCONCLUSIVE per metric
    series = history("results", metric="output_throughput")  # every indexed run's estimates

Everything here is also reachable under its own module; these names stay stable when the
modules behind them move.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.comparison import Comparison
from harness.analysis.gate import GateResult
from harness.analysis.sweep_comparison import SweepComparison
from harness.present.figures import delta_vs_axis
from harness.results.metrics import position_metrics
from harness.results.run import Run, load_run

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Comparison",
    "GateResult",
    "Run",
    "SweepComparison",
    "compare",
    "delta_vs_axis",
    "gate",
    "history",
    "load_run",
    "position_metrics",
    "table",
]


def _loaded(run: Run | str | Path) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def compare(
    run: Run | str | Path,
    against: Run | str | Path | None = None,
    variant: str | None = None,
    against_variant: str | None = None,
    force: bool = False,
) -> Comparison | SweepComparison:
    """The comparison `specbench report` prints: a run's candidates against its baseline (a
    sweep: every cell's, and the break-even). With `against`: `variant` of this run (default:
    its baseline) against `against_variant` of another run (default: its baseline), as
    `specbench compare AGAINST RUN` does. `force`: compare even where the machines, builds
    or workloads differ (named under the table)."""
    from harness.workflow import analyze

    run = _loaded(run)
    if against is None:
        return analyze(run, force)
    from harness.analysis.crossrun import compare_runs

    return compare_runs(_loaded(against), run, against_variant, variant, force)


def gate(
    run: Run | str | Path, against: str | None = None, combine: bool = False, force: bool = False
) -> tuple[Comparison, GateResult]:
    """The scenario's gates on a run, as `specbench gate` decides them: against its own
    baseline, a saved baseline (`against`: a name or a run folder; "history": the latest
    stable segment of the run store), or (`combine`) together with its earlier runs."""
    from harness.workflow import gate_run

    return gate_run(_loaded(run), against=against, combine=combine, force=force)


def history(
    results: str | Path = "results",
    scenario: str | None = None,
    metric: str | None = None,
    candidate: str | None = None,
    status: str | None = "complete",
) -> pd.DataFrame:
    """Every indexed estimate in a results folder, one row per (run, cell, candidate,
    metric), oldest first: the series `specbench history` prints."""
    from harness.results.index import history as indexed

    return indexed(results, scenario, metric, candidate, status)


def table(
    comparison: Comparison | SweepComparison, markdown: bool = False, rows: str = "pr"
) -> str:
    """The comparison as the terminal shows it, or (`markdown`) as a PR description; `rows`:
    pr (the verdict and the seed PRs' rows, the rest folded), all, or row keys."""
    from harness.present import tables

    if isinstance(comparison, SweepComparison):
        return (
            tables.render_sweep_markdown(comparison, rows=rows)
            if markdown
            else tables.render_sweep_terminal(comparison)
        )
    return (
        tables.render_markdown(comparison, rows=rows)
        if markdown
        else tables.render_terminal(comparison, rows=rows)
    )
