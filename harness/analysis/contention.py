"""What else loaded the machine during a run's passes, as facts that
harness.present.contention words under the table: the median share of the machine's CPUs
that processes other than the launch's own used during the measured passes, its worst block,
whether that is high, and whether it lines up with one arm (a disturbance that favours one
arm is a bias the interval cannot show, not noise). Read from each pass's `foreign_cpu`
(harness.engine.contention)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from harness.results.metrics import measured_passes
from harness.wire.records import RunRecord

# Above this median share of the machine's CPUs, other work is named as a finding.
BUSY_SHARE = 0.10
# ... or in part of the run: at least this share of the passes above BUSY_SHARE.
PART_BUSY = 0.10
# An arm-aligned disturbance: the arms' per-block difference in foreign share, at this level
# (paired t over blocks; Welch over passes without blocks), and at least this large.
ALIGNED_P = 0.01
ALIGNED_MIN = 0.02


@dataclass(frozen=True)
class MachineUse:
    """How the run used the machine (harness.machine.Holding, as its manifest keeps it):
    shared (no lock taken), or how long it waited for the lock and for whom."""

    shared: bool
    waited_s: float = 0.0
    waited_for: str | None = None

    @classmethod
    def of(cls, machine: dict[str, Any] | None) -> MachineUse | None:
        """From the manifest's `machine`; None where the run took the lock without waiting
        (or predates the field): nothing to say."""
        if not machine:
            return None
        use = cls(
            bool(machine.get("shared")),
            float(machine.get("waited_s") or 0.0),
            machine.get("waited_for") or None,
        )
        return use if use.shared or use.waited_for else None


@dataclass
class Aligned:
    """A disturbance lined up with one arm: `arm`'s passes saw other processes use `points`
    (a share of the CPUs) more than the other arm's, at p-value `p`."""

    arm: str
    points: float
    p: float


@dataclass
class Load:
    """What else loaded the machine during the measured passes, as facts (shares of the
    machine's CPUs); harness.present.contention words them."""

    passes: int  # measured passes with a reading
    median: float  # their median share
    worst: float  # the worst block's mean share, or the worst pass's without blocks
    worst_block: int | None  # None: no blocks, `worst` is a pass's
    worst_launch: str | None
    # "busy": the median above BUSY_SHARE; "part": enough passes above it; None: neither.
    busy: str | None
    busy_passes: int  # passes above BUSY_SHARE
    busy_from: tuple[str, int] | None  # (launch, block) of the first block above it
    aligned: list[Aligned]


def machine_load(runs: list[RunRecord], baseline: str) -> Load | None:
    """The load facts of a run's measured passes (None: no pass has a reading)."""
    rows = [
        (p.arm or r.variant, r.run_key, p.block, p.foreign_cpu)
        for r, p in measured_passes(runs)
        if p.foreign_cpu is not None
    ]
    if not rows:
        return None
    shares = np.array([x[3] for x in rows], dtype=float)
    median = float(np.median(shares))
    blocks: dict[tuple[str, int], list[float]] = {}
    for _, key, block, share in rows:
        if block is not None:
            blocks.setdefault((key, block), []).append(share)
    worst_at: tuple[str, int] | None = None
    if blocks:
        worst_at, values = max(blocks.items(), key=lambda kv: float(np.mean(kv[1])))
        worst = float(np.mean(values))
    else:
        worst = float(shares.max())
    busy_passes = int(np.sum(shares > BUSY_SHARE))
    busy: str | None = None
    if median > BUSY_SHARE:
        busy = "busy"
    elif busy_passes >= max(2, PART_BUSY * len(rows)):
        busy = "part"
    busy_from = next(
        (at for at, values in blocks.items() if float(np.mean(values)) > BUSY_SHARE), None
    )
    aligned = []
    for arm in [a for a in sorted({x[0] for x in rows}) if a != baseline]:
        found = _aligned(rows, baseline, arm)
        if found is not None:
            diff, p = found
            aligned.append(Aligned(arm if diff > 0 else baseline, abs(diff), p))
    return Load(
        passes=len(rows),
        median=median,
        worst=worst,
        worst_block=worst_at[1] if worst_at else None,
        worst_launch=worst_at[0] if worst_at else None,
        busy=busy,
        busy_passes=busy_passes,
        busy_from=busy_from,
        aligned=aligned,
    )


def _aligned(
    rows: list[tuple[str, str, int | None, float]], baseline: str, arm: str
) -> tuple[float, float] | None:
    """(candidate − baseline foreign share, p) when it is clear and large enough, else None."""
    paired: dict[tuple[str, int], dict[str, list[float]]] = {}
    for who, key, block, share in rows:
        if block is not None and who in (baseline, arm):
            paired.setdefault((key, block), {}).setdefault(who, []).append(share)
    diffs = [
        float(np.mean(v[arm]) - np.mean(v[baseline]))
        for v in paired.values()
        if arm in v and baseline in v
    ]
    if len(diffs) >= 3:
        d = np.array(diffs)
        diff = float(d.mean())
        # The same difference in every block: as aligned as it gets (no t to compute).
        p = 0.0 if float(d.std(ddof=1)) == 0.0 else float(stats.ttest_1samp(d, 0.0).pvalue)
    else:
        cand = np.array([x[3] for x in rows if x[0] == arm])
        base = np.array([x[3] for x in rows if x[0] == baseline])
        if len(cand) < 2 or len(base) < 2:
            return None
        diff = float(cand.mean() - base.mean())
        p = (
            0.0
            if cand.std() == 0 and base.std() == 0
            else float(stats.ttest_ind(cand, base, equal_var=False).pvalue)
        )
    if math.isnan(p) or p >= ALIGNED_P or abs(diff) < ALIGNED_MIN:
        return None
    return diff, p
