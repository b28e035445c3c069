"""The words for what a comparison knows beyond its own run: differences a --force went past,
two builds compared on purpose, runs combined by `gate --combine`, the earlier runs of the
same comparison (and all of them combined), and what a gate against history read. The facts
are harness.analysis.comparison's (AcrossRuns, HistoryLook and the Comparison's fields)."""

from __future__ import annotations

from harness.analysis.comparison import AcrossRow, AcrossRuns, Comparison, HistoryLook
from harness.analysis.stats import runs_phrase


def _names(earlier: list[str]) -> str:
    """The earlier runs' names, the last three at most."""
    return ", ".join(earlier[-3:]) + (" ..." if len(earlier) > 3 else "")


def repeat_line(earlier: list[str]) -> str:
    """This comparison was run before: re-running until significant inflates false
    positives, and how to decide on all of them."""
    names = _names(earlier)
    return (
        f"this comparison was run {len(earlier)} time(s) before in this results folder "
        f"({names}): re-running until one comes out significant inflates false positives "
        "(each run judged alone, up to 5 runs: 23%); `specbench gate RUN --combine` decides "
        "on all of them, each run a launch, with an interval valid however many it combines"
    )


def combined_delta(row: AcrossRow) -> str:
    """A combined delta with its interval, in its own unit, starred where significant."""
    scale, unit = (1.0, "pp") if row.kind == "points" else (100.0, "%")
    if row.ci_low is None or row.ci_high is None:
        why = "exact" if row.known_exactly else (row.note or "no interval")
        return f"{scale * row.delta:+.2f}{unit} ({why})"
    star = " *" if row.significant else ""
    return (
        f"{scale * row.delta:+.2f}{unit} [{scale * row.ci_low:+.2f}, "
        f"{scale * row.ci_high:+.2f}]{star}"
    )


def plan_line(earlier: list[str], planned: int) -> str:
    """This run is one look of a planned series: which, and what decides."""
    look = len(earlier) + 1
    before = f" (after {_names(earlier)})" if earlier else ""
    return (
        f"run {look} of {planned} planned (planned_runs){before}: the "
        "plan's verdict is the line below, the runs so far combined, each a launch; "
        "`run --gate` and `gate` judge it"
    )


def across_lines(across: AcrossRuns) -> list[str]:
    """The earlier runs, and the primary metric over all of them combined (a planned
    series: the plan's look, from its first run)."""
    if across.kept:
        return across.kept
    if not across.earlier and across.planned is None:
        return []
    if across.planned is not None and across.past_plan:
        last = across.earlier[across.planned - 1]
        return [
            f"this comparison was planned for {across.planned} runs (planned_runs) and ran "
            f"them: its verdict was the look of {last}; this run is past the plan, so no "
            "look combines it (a new series needs another planned_runs, another comparison)"
        ]
    if across.planned is not None:
        lines = [plan_line(across.earlier, across.planned)]
    else:
        lines = [repeat_line(across.earlier)]
    if across.failed is not None:
        lines.append(f"across runs: the earlier runs could not be combined ({across.failed})")
    elif across.rows:
        shown = "; ".join(f"{r.candidate} {r.label} {combined_delta(r)}" for r in across.rows)
        which = (
            "this run, the plan's first look"
            if across.runs == 1
            else f"all {across.runs} runs of this comparison, each a launch"
        )
        lines.append(
            f"across {which}: {shown}; interval {runs_phrase(across.runs, across.planned)}. "
            "The rows above are this run alone: fixed-sample 95% intervals (one run, one look)"
        )
    return lines


def history_lines(look: HistoryLook) -> list[str]:
    """What a gate against history read, and the folders it left out."""
    return [
        f"history: {look.runs} earlier run(s) of {look.scenario} on this machine",
        *(f"history leaves out {line}" for line in look.skipped),
    ]


def beyond_the_run(comparison: Comparison) -> list[str]:
    """The warnings on what the comparison knows beyond its own run, in reading order."""
    lines = [f"compared anyway: {line}" for line in comparison.compared_anyway]
    if comparison.builds_differ:
        lines.append(
            "the builds differ (on purpose, comparing two builds): "
            + ", ".join(comparison.builds_differ)
        )
    if comparison.combined:
        runs = len(comparison.combined)
        lines.append(
            f"combined: {runs} runs of this comparison ({', '.join(comparison.combined)}), "
            f"each a launch; interval {runs_phrase(runs, comparison.planned)}"
        )
    if comparison.across is not None:
        lines += across_lines(comparison.across)
    if comparison.history is not None:
        lines += history_lines(comparison.history)
    return lines
