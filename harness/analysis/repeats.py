"""Repeated runs of one comparison: the earlier runs in a results folder of the same scenario,
builds (overlaid changes included) and machine, the note a table gets when there are any, and
the comparison of all of them together, each run a launch, so that a gate can decide on all
of them instead of the last (the launch x arm interaction then stays in the error term).

Re-running until one comes out significant inflates false positives (each run judged alone:
25% at up to 5 runs, benchmarks/combine_rerun.py); the combined interval over k runs is
anytime-valid across re-runs (stats.across_runs), so combining after every run does not.
The earlier runs come from the run store (harness.results.index.earlier_runs); nothing here
reads or writes it.
"""

from __future__ import annotations

from pathlib import Path

from harness.analysis.compare import compare_run, mark_family
from harness.analysis.comparison import AcrossRow, AcrossRuns, Comparison
from harness.analysis.stats import across_runs
from harness.errors import ResultsError, SpecbenchError
from harness.results.run import Run, load_run
from harness.wire.records import RunRecord


def combined(results: Run, earlier: list[Run], force: bool = False) -> tuple[Comparison, int]:
    """This run and `earlier` runs of the same comparison (harness.results.index.earlier_runs
    finds them), compared as one run whose launches they are (df from the runs: the interaction
    between runs and arms stays in the error term), by the builder a single run's comparison
    uses (compare_run; `force`: as there). Returns the comparison and how many runs it
    combines."""
    scenario = results.scenario
    if scenario.sweep is not None:
        raise ResultsError(f"{results.path}: a sweep; --combine judges one A/B")
    runs: list[Run] = [*earlier, results]
    planned = scenario.planned_runs
    if planned is not None and len(runs) > planned:
        raise ResultsError(
            f"{results.path}: run {len(runs)} of a comparison planned for {planned} runs "
            f"(planned_runs): no look past the plan's last is valid, and its verdict was "
            f"{runs[planned - 1].run_id}'s; to go on, plan a new series (another "
            "planned_runs makes it another comparison)"
        )
    records: list[RunRecord] = []
    offset = 0
    for run in runs:
        span = max((r.order for r in run.runs), default=-1) + 1
        rounds = max((r.round for r in run.runs), default=-1) + 1
        for r in run.runs:
            records.append(
                r.model_copy(
                    update={
                        "run_key": f"{run.run_id}/{r.run_key}",
                        "order": r.order + offset,
                        "round": r.round + offset,
                    }
                )
            )
        offset += max(span, rounds)
    # The normal path's builder, so nothing the scenario declares (its no-speculation arm,
    # each arm's draft tokens, its setup, builds and overlays) is left out.
    comparison = compare_run(results, force, records)
    # Combining after every run is re-running until significant: the interval over k runs is
    # the k-th look of an alpha-spending sequence (stats.runs_alpha), valid for any number,
    # or of the scenario's plan (stats.plan_alpha), valid up to its last.
    for cand in comparison.candidates:
        for row in cand.rows:
            row.estimate = across_runs(row.estimate, len(runs), planned=planned)
        mark_family(cand.rows, scenario.primary_metric)
    comparison.combined = [r.run_id for r in runs]
    comparison.planned = planned
    return comparison, len(runs)


def across_runs_of(results: Run, earlier: list[Path], force: bool = False) -> AcrossRuns:
    """The earlier runs of `results`'s comparison (`earlier`: their folders), and its primary
    metric over all the runs combined as `gate --combine` combines them, with its interval
    anytime-valid across re-runs (a planned series: the plan's look, the first run's too);
    the table's own rows stay this run's fixed-sample intervals (one look)."""
    planned = results.scenario.planned_runs
    found = AcrossRuns(earlier=[p.name for p in earlier], planned=planned)
    if not earlier and planned is None:
        return found
    try:
        comparison, found.runs = combined(
            results, [load_run(p, results.scenario) for p in earlier], force
        )
    except SpecbenchError as exc:
        found.failed = str(exc)
        return found
    key = results.scenario.primary_metric
    found.rows = [
        AcrossRow(
            cand.name,
            row.label,
            row.estimate.kind,
            row.estimate.delta,
            row.estimate.ci_low,
            row.estimate.ci_high,
            row.estimate.significant,
            row.estimate.known_exactly,
            row.estimate.note,
        )
        for cand in comparison.candidates
        for row in cand.rows
        if row.key == key
    ]
    return found
