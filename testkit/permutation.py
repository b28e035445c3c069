"""A/A tables from a real stored one-engine run: its arm labels swapped in whole blocks, each
block with probability 1/2, and the relabelled passes pushed through the shipped comparison
(compare_scenario, as compare_run calls it). Under relabelling the arms are exchangeable, so
every star is a false positive. Used by benchmarks/aa_permutation.py and its unit test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis.compare import compare_scenario
from harness.results.run import Run


def relabel_blocks(
    passes: pd.DataFrame, baseline: str, candidate: str, rng: np.random.Generator
) -> pd.DataFrame:
    """The passes with the two arms' labels swapped in a random half of the blocks (each
    block of each launch alone, with probability 1/2)."""
    out = passes.copy()
    keys = list(zip(out["launch"], out["block"].fillna(-1), strict=True))
    blocks = sorted(set(keys))
    swapped = {b for b, flip in zip(blocks, rng.random(len(blocks)) < 0.5, strict=True) if flip}
    flip = np.array([k in swapped for k in keys])
    arms = out["variant"].to_numpy(dtype=object)
    out["variant"] = np.where(
        flip & (arms == baseline), candidate, np.where(flip & (arms == candidate), baseline, arms)
    )
    return out


@dataclass
class Permutations:
    """What the A/A tables starred: per row, how often it was significant alone and how often
    it carried the table's star; per table, whether any row did."""

    trials: int = 0
    alone: dict[str, int] = field(default_factory=dict)  # row label -> significant alone
    starred: dict[str, int] = field(default_factory=dict)  # row label -> starred
    any_alone: int = 0  # tables with at least one noisy row significant alone
    any_star: int = 0  # tables with at least one starred row
    rows_when_any: int = 0  # starred rows summed over the tables with any
    noisy_rows: int = 0  # rows with a p-value in the last table


def permute(run: Run, trials: int, seed: int = 0) -> Permutations:
    """`trials` block-relabelled A/A tables of `run` (one-engine, one candidate)."""
    scenario = run.scenario
    baseline, candidate = scenario.baseline, scenario.candidates[0]
    rng = np.random.default_rng(seed)
    found = Permutations()
    for _ in range(trials):
        passes = relabel_blocks(run.passes, baseline, candidate, rng)
        comparison = compare_scenario(
            run.runs, scenario, run.run_id, run.design, labels=run.proof_labels, passes=passes
        )
        rows = next(c for c in comparison.candidates if c.name == candidate).rows
        noisy = [r for r in rows if r.estimate.p_value is not None and not r.estimate.known_exactly]
        found.trials += 1
        found.noisy_rows = len(noisy)
        for row in noisy:
            found.alone[row.label] = found.alone.get(row.label, 0) + row.estimate.significant
            found.starred[row.label] = found.starred.get(row.label, 0) + row.star
        stars = sum(r.star for r in rows)
        found.any_alone += any(r.estimate.significant for r in noisy)
        found.any_star += stars > 0
        found.rows_when_any += stars
    return found
