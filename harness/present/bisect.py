"""A bisect's answer in words (`specbench bisect` prints it, bisect.md keeps it): the culprit
and its own step, what lies beside it, or why it stayed UNKNOWN, then every comparison that led
there. The decisions are harness.analysis.bisection's; harness.bisect runs them."""

from __future__ import annotations

import math
from pathlib import Path

from harness.analysis.bisection import GOOD, Change, Interval, Measured, Outcome

# What SAME and DIFFERENT say about a candidate: where it lies against half the step, not
# whether it changed (a commit with a third of the step is on good's side).
SIDE_WORDS = {"SAME": "good's side", "DIFFERENT": "bad's side", "UNKNOWN": "UNKNOWN"}


def delta_of(m: Measured) -> str:
    return delta_iv(m.interval)


def delta_iv(iv: Interval) -> str:
    if iv.low == iv.high == iv.delta:
        return f"{100 * iv.delta:+.2f}% (exact)"
    if not (iv.low == iv.low and iv.high == iv.high):  # NaN: no interval
        return f"{100 * iv.delta:+.2f}% (no interval)"
    return f"{100 * iv.delta:+.2f}% [{100 * iv.low:+.2f}, {100 * iv.high:+.2f}]"


def _part(out: Outcome, change: Change) -> list[str]:
    """One part beside a culprit: what it holds, with its interval."""
    c = out.candidates
    ref = GOOD if change.lo == 0 else c[change.lo].ref[:12]
    where = (
        f"{ref}..{c[change.hi].ref[:12]}"
        if change.hi - change.lo > 1
        else f"{c[change.hi].ref[:12]} (against {ref})"
    )
    size = delta_iv(change.interval)
    half = 100 * out.threshold / 2
    if change.verdict == "STEP" and change.culprit is not None:
        k = change.culprit
        own = Interval(*(change.culprit_step or [math.nan] * 3))
        return [
            f"  {where}: a further step, {size}: culprit {c[k].ref} {c[k].subject}, its "
            f"own step {delta_iv(own)} (against its parent)"
        ]
    if change.verdict == "STEP":
        return [
            f"  {where}: a further step, {size}, not narrowed to one commit within the "
            "budget (add --tries)"
        ]
    if change.verdict == "NONE":
        return [
            f"  {where}: no further step of {half:.1f}% or more: {size} (a smaller one "
            "may lie there)"
        ]
    if change.verdict == "UNCHECKED":
        return [f"  {where}: not checked: the budget of runs was spent ({size} so far)"]
    if change.verdict == "NOT ASKED":
        return [
            f"  {where}: not checked for a further step: {size} from what was measured "
            "anyway (--check-beside 3 measures it, at about one engine run a round)"
        ]
    return [
        f"  {where}: undecided: {size} (a step of up to "
        f"{100 * max(abs(change.low), abs(change.high)):.1f}% may lie there)"
    ]


def render_outcome(out: Outcome) -> str:
    """The bisect's answer and the comparisons that led there. SAME is written as what it
    is: on good's side of half the step (closer to good than to bad), never "the same"."""
    c = out.candidates
    lines = []
    if out.verdict == "CULPRIT" and out.culprit is not None:
        culprit = c[out.culprit]
        measured = [m for s in out.steps for m in s.measured if m.index == out.culprit]
        lines.append(f"culprit: {culprit.ref} {culprit.subject}")
        if out.culprit_step is not None:
            lines.append(
                f"  its own step ({out.metric}, against its parent): {delta_of(out.culprit_step)}"
            )
        if measured:
            lines.append(f"  {out.metric} against good ({c[0].ref[:12]}): {delta_of(measured[-1])}")
        if out.culprit - 1 > 0:
            parent = [m for s in out.steps for m in s.measured if m.index == out.culprit - 1]
            shown = f": {delta_of(parent[-1])} against good" if parent else ""
            lines.append(
                f"  its parent {c[out.culprit - 1].ref[:12]} is closer to good than "
                f"to bad (within half the step){shown}; that is not no change"
            )
        else:
            lines.append("  its parent is good itself")
        if out.changes:
            lines.append("beside it (each part's change from every measurement against good):")
            for change in out.changes:
                lines += _part(out, change)
    elif out.verdict == "NO CHANGE":
        lines.append(
            f"no commit differs by {100 * out.threshold / 2:.1f}% or more: good "
            f"against bad {delta_of(out.step) if out.step else ''} (pooled over its "
            f"looks; decided at {out.looks_z:.2f} standard errors, the error rate "
            "spent across them); a smaller change may lie in the range"
        )
    elif out.lo >= out.hi:
        lines.append(
            f"UNKNOWN: not one change: {c[out.lo].ref[:12]} measures as good after "
            f"{c[out.hi].ref[:12]} measured as bad (a change undone later, or noise; "
            "bisect a narrower range)"
        )
    else:
        lines.append(
            f"UNKNOWN: could not decide between {c[out.lo].ref[:12]} and "
            f"{c[out.hi].ref[:12]} within the budget (add --tries or --budget)"
        )
    lines.append("")
    lines.append(
        f"comparisons ({out.metric}, each candidate against good; good's side: closer "
        "to good than to bad, within half the step; bad's side: beyond it; run "
        f"folders under {out.folder / 'runs'}):"
    )
    for s in out.steps:
        for m in s.measured:
            lines.append(
                f"  {c[m.index].ref[:12]:<12}  {delta_of(m):<28} "
                f"{SIDE_WORDS[m.verdict]:<11} {s.design}, {Path(s.folder).name}"
            )
    return "\n".join(lines) + "\n"
