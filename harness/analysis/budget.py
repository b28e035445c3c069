"""What a precision budget buys, from a launch's own timings: its start and warm-up, then its
seconds per block. A budget the warm-up ate leaves fewer blocks than an interval needs
(stats.PRECISION_MIN_BLOCKS); the table's verdict and `plan` say which budget_s would give
one, instead of printing rows without intervals."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.config.scenario import PRECISION_MIN_BLOCKS
from harness.wire.records import RunRecord

_SPENT = re.compile(r"time budget budget_s=(?P<budget>[\d.]+) spent after (?P<blocks>\d+) blocks")


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

    def describe(self) -> str:
        return f"start, warm-up and stop {self.overhead_s:.0f} s, {self.block_s:.1f} s a block"


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


def short_budget(record: RunRecord) -> str | None:
    """For a launch whose precision budget ran out before an interval's minimum blocks: the
    budget_s that would give one, from its own timings; None otherwise."""
    found = _SPENT.search(record.result.stopped or "") if record.result is not None else None
    if found is None or int(found.group("blocks")) >= PRECISION_MIN_BLOCKS:
        return None
    costs = launch_costs(record)
    if costs is None:
        return f"no block finished within budget_s={found.group('budget')}: give more budget_s"
    return (
        f"budget_s: {costs.budget_for():.0f} would measure the {PRECISION_MIN_BLOCKS} "
        f"blocks an interval needs ({costs.describe()}, as this launch measured them)"
    )
