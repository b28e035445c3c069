"""What else loaded the machine during a run's passes, named under the table: the
median share of the machine's CPUs that processes other than the launch's own used during the
measured passes, its worst block, a finding when it is high, and a finding when it lines up
with one arm (a disturbance that favours one arm is a bias the interval cannot show, not
noise). Read from each pass's `foreign_cpu` (harness.engine.contention)."""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass
class Load:
    """The summary line and the findings."""

    line: str | None
    findings: list[str]


def machine_load(runs: list[RunRecord], baseline: str) -> Load:
    rows = [
        (p.arm or r.variant, r.run_key, p.block, p.foreign_cpu)
        for r, p in measured_passes(runs)
        if p.foreign_cpu is not None
    ]
    if not rows:
        return Load(None, [])
    shares = np.array([x[3] for x in rows], dtype=float)
    median = float(np.median(shares))
    blocks: dict[tuple[str, int], list[float]] = {}
    for _, key, block, share in rows:
        if block is not None:
            blocks.setdefault((key, block), []).append(share)
    worst = ""
    if blocks:
        (key, block), values = max(blocks.items(), key=lambda kv: float(np.mean(kv[1])))
        worst = f", worst block {block} of {key} {100 * float(np.mean(values)):.1f}%"
    else:
        worst = f", worst pass {100 * float(shares.max()):.1f}%"
    line = (
        f"other processes used a median {100 * median:.1f}% of the machine's CPUs during "
        f"the {len(rows)} measured passes{worst}"
    )
    findings = []
    busy = int(np.sum(shares > BUSY_SHARE))
    if median > BUSY_SHARE:
        findings.append(
            f"the machine was busy: other processes used a median "
            f"{100 * median:.1f}% of its CPUs during the passes (above "
            f"{100 * BUSY_SHARE:.0f}%): the interval carries their noise, and "
            "a disturbance that varies with them may bias the delta"
        )
    elif busy >= max(2, PART_BUSY * len(rows)):
        first = next(
            (
                (key, block)
                for (key, block), values in blocks.items()
                if float(np.mean(values)) > BUSY_SHARE
            ),
            None,
        )
        since = f", from block {first[1]} of {first[0]} on" if first else ""
        findings.append(
            f"the machine was busy in part of the run: other processes used more "
            f"than {100 * BUSY_SHARE:.0f}% of its CPUs in {busy} of {len(rows)} "
            f"passes{since}: those passes carry their noise"
        )
    arms = sorted({x[0] for x in rows})
    for arm in [a for a in arms if a != baseline]:
        found = _aligned(rows, baseline, arm)
        if found is not None:
            diff, p = found
            more = arm if diff > 0 else baseline
            findings.append(
                f"a disturbance lined up with {more}: other processes used "
                f"{100 * abs(diff):.1f} points more of the CPUs during its passes "
                f"(p={p:.2g}); a bias the interval cannot show, not noise"
            )
    return Load(line, findings)


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
