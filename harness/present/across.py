"""The words for what a comparison knows beyond its own run: differences a --force went past,
two builds compared on purpose, runs combined by `gate --combine`, the earlier runs of the
same comparison (and all of them combined), and what a gate against history read. The facts
are harness.analysis.comparison's (AcrossRuns, HistoryLook and the Comparison's fields)."""

from __future__ import annotations

from harness.analysis.comparison import AcrossRow, AcrossRuns, Comparison, HistoryLook
from harness.analysis.stats import runs_phrase


def repeat_line(earlier: list[str]) -> str:
    """This comparison was run before: re-running until significant inflates false
    positives, and how to decide on all of them."""
    names = ", ".join(earlier[-3:]) + (" ..." if len(earlier) > 3 else "")
    return (
        f"this comparison was run {len(earlier)} time(s) before in this results folder "
        f"({names}): re-running until one comes out significant inflates false positives "
        "(each run judged alone, up to 5 runs: 23%); `specbench gate RUN --combine` decides "
        "on all of them, each run a launch, with an interval valid however many it combines"
    )


def _delta(row: AcrossRow) -> str:
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


def across_lines(across: AcrossRuns) -> list[str]:
    """The earlier runs, and the primary metric over all of them combined."""
    if across.kept:
        return across.kept
    if not across.earlier:
        return []
    lines = [repeat_line(across.earlier)]
    if across.failed is not None:
        lines.append(f"across runs: the earlier runs could not be combined ({across.failed})")
    elif across.rows:
        shown = "; ".join(f"{r.candidate} {r.label} {_delta(r)}" for r in across.rows)
        lines.append(
            f"across all {across.runs} runs of this comparison, each a launch: {shown}; "
            f"interval {runs_phrase(across.runs)}. The rows above are this run alone: "
            "fixed-sample 95% intervals (one run, one look)"
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
            f"each a launch; interval {runs_phrase(runs)}"
        )
    if comparison.across is not None:
        lines += across_lines(comparison.across)
    if comparison.history is not None:
        lines += history_lines(comparison.history)
    return lines
