"""What a precision budget buys, from a launch's own timings: its start and warm-up, then its
seconds per block. A budget the warm-up ate leaves fewer blocks than an interval needs
(stats.PRECISION_MIN_BLOCKS); the table's verdict and `plan` say which budget_s would give
one, instead of printing rows without intervals. Facts only: harness.present.stops words them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.config.scenario import PRECISION_MIN_BLOCKS
from harness.wire.records import PrecisionStop, RunRecord


@dataclass(frozen=True)
class LaunchCosts:
    """One one-engine launch's seconds outside its blocks (spawn, imports, engine start,
    warm-up, shutdown) and per block (every arm twice), as it measured them."""

    overhead_s: float
    block_s: float

    def budget_for(self, blocks: int = PRECISION_MIN_BLOCKS) -> float:
        """The budget_s that measures `blocks` blocks, rounded up to 10 s."""
        return 10 * math.ceil((self.overhead_s + blocks * self.block_s) / 10)

    def blocks_within(self, budget_s: float) -> int:
        """How many blocks `budget_s` leaves after the start and warm-up."""
        return max(0, int((budget_s - self.overhead_s) // self.block_s))


def launch_costs(record: RunRecord) -> LaunchCosts | None:
    """The costs of a finished one-engine launch that measured at least one block."""
    result = record.result
    if result is None or not result.passes or result.timings.measure_s <= 0:
        return None
    blocks = len(result.passes) / (2 * max(1, len(record.arms)))
    if blocks <= 0:
        return None
    return LaunchCosts(
        overhead_s=max(0.0, record.wall_s - result.timings.measure_s),
        block_s=result.timings.measure_s / blocks,
    )


@dataclass(frozen=True)
class ShortBudget:
    """A precision launch whose budget ran out before an interval's minimum blocks: the
    budget it had, and its own costs (None: no block finished), from which the budget_s
    that would give an interval follows (LaunchCosts.budget_for)."""

    budget_s: float
    costs: LaunchCosts | None


@dataclass(frozen=True)
class LaunchStop:
    """Why a precision launch ended (its worker's PrecisionStop; `words`: a pre-13 worker's
    own words of no known form), and whether its budget was too short for an interval."""

    run_key: str
    stop: PrecisionStop | None
    words: str | None = None
    short: ShortBudget | None = None


def launch_stop(record: RunRecord) -> LaunchStop | None:
    """The stop of a precision launch that ended early; None for any other launch."""
    result = record.result
    if result is None or (result.stop is None and not result.stopped):
        return None
    return LaunchStop(
        record.run_key,
        result.stop,
        result.stopped if result.stop is None else None,
        short_budget(record),
    )


def short_budget(record: RunRecord) -> ShortBudget | None:
    """For a launch whose precision budget ran out before an interval's minimum blocks: the
    budget and its costs; None otherwise."""
    stop = record.result.stop if record.result is not None else None
    if stop is None or stop.reason != "budget" or stop.blocks >= PRECISION_MIN_BLOCKS:
        return None
    return ShortBudget(stop.budget_s or 0.0, launch_costs(record))
