"""The words for the speed-adjusted row (harness.analysis.adjusted's facts,
analysis.comparison.SpeedAdjustment): its note under the table and why it is withdrawn."""

from __future__ import annotations

import math

from harness.analysis.comparison import SpeedAdjustment


def _pct(v: float) -> str:
    return f"{100 * math.expm1(v):+.2f}%"


def withdrawal_reason(a: SpeedAdjustment, short: bool = False) -> str:
    """Why the speed-adjusted row is withdrawn (`short`: without what follows from it)."""
    assert a.withdrawn is not None
    w, c = a.withdrawn, a.withdrawn.check
    found = f"{_pct(c.mean)} [{_pct(c.low)}, {_pct(c.high)}]"
    if w.pair is None:
        return f"the {a.covariate} moved with the change ({found})" + (
            "" if short else ", so it does not measure the machine's speed alone"
        )
    margin = f"±{100 * (w.margin or 0.0):g}%"
    level = f"{100 * c.level:g}%"
    if a.twin:
        return f"the speed probe over its twin is not within {margin} ({found}, {level})" + (
            "" if short else ": the change slowed the probe itself, in vLLM's worker"
        )
    return f"the {w.pair[0]} over the {w.pair[1]} is not within {margin} ({found}, {level})" + (
        "" if short else ": the change may move a part the adjustment takes for the machine's speed"
    )


def adjustment_note(a: SpeedAdjustment) -> str:
    """The speed-adjusted row's note: why it is withdrawn, then its assumption (what it
    adjusted by, how much variance that removed, what it assumes), and its widening."""
    if a.probe:
        assumption = (
            f"speed-adjusted by the speed probe (a fixed Python loop timed before each "
            f"step; ANCOVA on {a.units} blocks, theta {a.theta:.2f}): removes "
            f"{100 * a.removed:.0f}% of the variance; assumes the change does not slow the "
            "probe itself (it runs no vLLM code, so only through the machine: a busy thread, "
            "the caches)"
        ) + _twin_check(a)
    else:
        own = f"the change ({a.part})" if a.part else "the change (its part not declared)"
        assumption = (
            f"speed-adjusted by the {a.covariate} (ANCOVA on {a.units} blocks, theta "
            f"{a.theta:.2f}): removes {100 * a.removed:.0f}% of the variance; assumes {own} "
            f"leaves the {a.covariate} alone"
        )
    if a.withdrawn is not None:
        return f"withdrawn: {withdrawal_reason(a)}; {assumption}"
    moved = "the probe's" if a.probe else "the parts'"
    return assumption + (f"; widened ±{100 * a.widen:.2f}% for {moved} own move" if a.widen else "")


def _twin_check(a: SpeedAdjustment) -> str:
    """How the probe's assumption was checked: against its twin, in whose ratio to the probe
    the machine's speed cancels, or only by the probe's own delta."""
    c = a.contrast
    if not a.twin or c is None:
        return "; checked only by its own delta (no twin ran beside it)"
    checked = "; checked against its twin (the same loop in another process at the same moment)"
    left = (
        "; what the twin cannot see: a change that slows the whole machine at those moments, "
        "which both loops take for its speed"
    )
    if a.withdrawn is not None:  # the withdrawal's line gives the ratio
        return checked + left
    found = f"{_pct(c.mean)} [{_pct(c.low)}, {_pct(c.high)}] ({100 * c.level:g}%)"
    return f"{checked}: the probe over its twin {found}{left}"
