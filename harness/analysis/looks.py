"""The looks of a planned series (a scenario's planned_runs): which error rate each run's look
of the runs so far is judged at, and the rule in words. Pure Python, so `specbench plan` can
say it without the statistics' numpy and scipy; harness.analysis.stats applies it."""

from __future__ import annotations

ALPHA = 0.05  # the two-sided error rate of one run's interval and of a whole planned series

# A planned series (the scenario's planned_runs: N, declared before its first run): a
# group-sequential design over the N runs with Haybittle-Peto boundaries. Every look is the
# runs so far combined (a t over runs, df = runs - 1), so the launch x arm interaction is in
# each look's error term. Looks before PLAN_FIRST_EARLY_LOOK give no verdict: the first run
# alone cannot sample that interaction (at 0.5% sd, a first look at 0.1% put the plan's A/A
# at 7.9%), and two runs (1 df) decide nothing at 0.1%. Looks PLAN_FIRST_EARLY_LOOK .. N - 1
# are each at PLAN_EARLY_ALPHA, at most PLAN_EARLY_TOTAL in all; the N-th at the rest of ALPHA
# (4.8% for N = 5, 4% from N = 13). The rates sum to ALPHA, so "stop at the first significant
# look of the plan" is false-positive at most 5% (Bonferroni: whatever the looks'
# correlation), and the last look keeps nearly the power of the fixed design (N runs, gated
# once). An early look decides only a large effect; no look past the N-th is valid.
# Measured: benchmarks/combine_rerun.py.
PLAN_EARLY_ALPHA = 0.001
PLAN_EARLY_TOTAL = 0.01
PLAN_FIRST_EARLY_LOOK = 3


def _plan_early(planned: int) -> tuple[int, float]:
    """How many early looks a plan of `planned` runs has, and each one's rate."""
    looks = max(0, planned - PLAN_FIRST_EARLY_LOOK)
    return looks, (min(PLAN_EARLY_ALPHA, PLAN_EARLY_TOTAL / looks) if looks else 0.0)


def plan_alpha(look: int, planned: int) -> float:
    """Two-sided error rate of look `look` (1 .. planned) of a series of `planned` runs; 0:
    the look gives no verdict."""
    if not 1 <= look <= planned or planned < 2:
        raise ValueError(f"look {look} of a plan of {planned} runs")
    looks, early = _plan_early(planned)
    if look == planned:
        return ALPHA - looks * early
    return early if look >= PLAN_FIRST_EARLY_LOOK else 0.0


def plan_rule(planned: int) -> str:
    """The plan's looks in words."""
    looks, early = _plan_early(planned)
    last = f"run {planned} at {100 * plan_alpha(planned, planned):.2g}%"
    if looks == 0:
        return f"only run {planned}'s look decides, at {100 * ALPHA:g}%"
    runs = "run 3" if looks == 1 else f"runs 3 to {planned - 1} each"
    return f"Haybittle-Peto: {runs} at {100 * early:.2g}%, {last}"
