"""The words for why a precision launch stopped and what its budget bought (the facts:
harness.wire.records.PrecisionStop, harness.analysis.budget)."""

from __future__ import annotations

from harness.analysis.budget import LaunchCosts, LaunchStop, ShortBudget
from harness.config.scenario import PRECISION_MIN_BLOCKS
from harness.wire.records import PrecisionStop


def stop_words(stop: PrecisionStop) -> str:
    """Why the launch stopped: the target it reached, or the limit it met."""
    if stop.reason == "max_blocks":
        return f"max_blocks={stop.max_blocks} reached"
    if stop.reason == "budget":
        return f"time budget budget_s={stop.budget_s:g} spent after {stop.blocks} blocks"
    if stop.mde is not None:
        named = "" if stop.metric in (None, "output_throughput") else f"{stop.metric} "
        target = f"{named}MDE <= ±{100 * stop.mde:.2f}%"
    else:
        target = "every gated metric's MDE <= its tolerance"
    shown = "output-throughput" if stop.shown_metric == "output_throughput" else stop.shown_metric
    reached = (
        f"MDE ±{100 * stop.reached_mde:.2f}%"
        if stop.reached_mde is not None
        else "MDE not estimable yet"
    )
    return f"target reached ({target}) after {stop.blocks} blocks: {shown} {reached}"


def costs_phrase(costs: LaunchCosts) -> str:
    """A launch's costs outside and per block."""
    return f"start, warm-up and stop {costs.overhead_s:.0f} s, {costs.block_s:.1f} s a block"


def budget_advice(short: ShortBudget) -> str:
    """The budget_s that would have measured an interval's minimum blocks."""
    if short.costs is None:
        return f"no block finished within budget_s={short.budget_s:g}: give more budget_s"
    return (
        f"budget_s: {short.costs.budget_for():.0f} would measure the {PRECISION_MIN_BLOCKS} "
        f"blocks an interval needs ({costs_phrase(short.costs)}, as this launch measured them)"
    )


def stop_line(stop: LaunchStop) -> str:
    """The table's footnote on one launch's stop."""
    words = stop_words(stop.stop) if stop.stop is not None else (stop.words or "")
    return f"{stop.run_key}: {words}" + (
        f"; {budget_advice(stop.short)}" if stop.short is not None else ""
    )
