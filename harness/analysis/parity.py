"""Greedy output parity: a candidate's generated tokens against the baseline's first pass,
prompt by prompt, and the baseline against itself."""

from __future__ import annotations

import numpy as np

from harness.analysis.comparison import Parity
from harness.results.run import arm_passes
from harness.wire.records import RunRecord


def _outputs(runs: list[RunRecord], variant: str) -> list[dict[int, list[int]]]:
    """Per pass (in launch order), prompt index -> generated token ids."""
    return [{r.index: r.output_token_ids for r in p.requests}
            for _, p in arm_passes(runs, variant)]


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_parity(runs: list[RunRecord], baseline: str, candidate: str,
                  expected: bool = False) -> Parity | None:
    base, cand = _outputs(runs, baseline), _outputs(runs, candidate)
    if not base or not cand:
        return None
    ref = base[0]
    compared = identical = 0
    first: int | None = None
    for outputs in cand:
        for index, tokens in outputs.items():
            if index not in ref:
                continue
            compared += 1
            pos = _first_divergence(ref[index], tokens)
            if pos is None:
                identical += 1
            else:
                first = pos if first is None else min(first, pos)
    self_pairs = [(ref[i] == t) for outputs in base[1:] for i, t in outputs.items() if i in ref]
    self_identical = float(np.mean(self_pairs)) if self_pairs else None
    return Parity(compared, identical, first, self_identical, expected)
