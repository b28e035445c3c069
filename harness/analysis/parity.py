"""Greedy output parity: a candidate's generated tokens against the baseline's first pass,
prompt by prompt, and the baseline against itself."""

from __future__ import annotations

import numpy as np

from harness.analysis.comparison import Parity
from harness.results.run import arm_passes
from harness.wire.records import RunRecord


def _outputs(runs: list[RunRecord], variant: str) -> list[dict[int, list[int]]]:
    """Per pass (in launch order), prompt index -> generated token ids."""
    return [{r.index: r.output_token_ids for r in p.requests} for _, p in arm_passes(runs, variant)]


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_parity(
    runs: list[RunRecord], baseline: str, candidate: str, expected: bool = False, exact: bool = True
) -> Parity | None:
    """`exact`: whether outputs must repeat bit for bit (a CPU, or vLLM's batch-invariant
    mode); else the candidate is judged against the baseline's own repeat parity."""
    base, cand = _outputs(runs, baseline), _outputs(runs, candidate)
    if not base or not cand:
        return None
    ref = base[0]
    compared = identical = 0
    first: int | None = None
    per_pass: list[float] = []
    for outputs in cand:
        positions = [_first_divergence(ref[i], t) for i, t in outputs.items() if i in ref]
        if not positions:
            continue
        same = sum(pos is None for pos in positions)
        compared, identical = compared + len(positions), identical + same
        per_pass.append(same / len(positions))
        diverged = [pos for pos in positions if pos is not None]
        first = min([*diverged, *([] if first is None else [first])], default=None)
    own = [[ref[i] == t for i, t in outputs.items() if i in ref] for outputs in base[1:]]
    pairs = [same for one in own for same in one]
    self_identical = float(np.mean(pairs)) if pairs else None
    return Parity(
        compared,
        identical,
        first,
        self_identical,
        expected,
        exact,
        per_pass,
        [float(np.mean(one)) for one in own if one],
    )
