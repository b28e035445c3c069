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
from harness.analysis.comparison import Comparison
from harness.analysis.stats import DeltaEstimate, across_runs, runs_phrase
from harness.errors import ResultsError, SpecbenchError
from harness.results.run import Run, load_run
from harness.wire.records import RunRecord


def repeat_note(earlier: list[Path]) -> str | None:
    """One line under the table when this comparison was run before."""
    if not earlier:
        return None
    names = ", ".join(p.name for p in earlier[-3:]) + (" ..." if len(earlier) > 3 else "")
    return (
        f"this comparison was run {len(earlier)} time(s) before in this results folder "
        f"({names}): re-running until one comes out significant inflates false positives "
        "(each run judged alone, up to 5 runs: 23%); `specbench gate RUN --combine` decides "
        "on all of them, each run a launch, with an interval valid however many it combines"
    )


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
    # the k-th look of an alpha-spending sequence (stats.runs_alpha), valid for any number.
    for cand in comparison.candidates:
        for row in cand.rows:
            row.estimate = across_runs(row.estimate, len(runs))
        mark_family(cand.rows, scenario.primary_metric)
    comparison.warnings.append(
        f"combined: {len(runs)} runs of this comparison ({', '.join(r.run_id for r in runs)}), "
        f"each a launch; interval {runs_phrase(len(runs))}"
    )
    return comparison, len(runs)


def across_note(results: Run, earlier: list[Path], force: bool = False) -> str | None:
    """Under the table of a run whose comparison was run before (`earlier`: those runs'
    folders): its primary metric over all the runs combined as `gate --combine` combines
    them, with its interval anytime-valid across re-runs and the looks it allows for; the
    table's own rows stay this run's fixed-sample intervals (one look)."""
    if not earlier:
        return None
    try:
        comparison, k = combined(results, [load_run(p, results.scenario) for p in earlier], force)
    except SpecbenchError as exc:
        return f"across runs: the earlier runs could not be combined ({exc})"
    key = results.scenario.primary_metric
    shown = [
        f"{cand.name} {row.label} {_delta(row.estimate)}"
        for cand in comparison.candidates
        for row in cand.rows
        if row.key == key
    ]
    if not shown:
        return None
    return (
        f"across all {k} runs of this comparison, each a launch: {'; '.join(shown)}; "
        f"interval {runs_phrase(k)}. The rows above are this run alone: fixed-sample 95% "
        "intervals (one run, one look)"
    )


def _delta(est: DeltaEstimate) -> str:
    """A combined delta with its interval, in its own unit, starred where significant."""
    scale, unit = (1.0, "pp") if est.kind == "points" else (100.0, "%")
    if est.ci_low is None or est.ci_high is None:
        why = "exact" if est.known_exactly else (est.note or "no interval")
        return f"{scale * est.delta:+.2f}{unit} ({why})"
    star = " *" if est.significant else ""
    return (
        f"{scale * est.delta:+.2f}{unit} [{scale * est.ci_low:+.2f}, "
        f"{scale * est.ci_high:+.2f}]{star}"
    )
