"""Speedup over the no-speculation arm, and where it goes.

The measured speedup of a speculative arm is its output throughput over the no-speculation
arm's, per round (a round pairs one launch of each). Per round it factors exactly into:

    speedup = (k + 1)                        ideal: every step yields k + 1 tokens
            x tau / ((k + 1) tau0)           acceptance: tokens per step, below k + 1
            x t0 / (t0 + d)                  draft cost
            x (t0 + d) / (t0 + d + v - v0)   verification: the (k + 1)-token forward's cost
                                             beyond a plain step's forward
            x other                          other overhead: what remains

with, per engine step and averaged over the launch's passes (harness.engine.steptimes): t the
step time, d the draft time, v the target's forward and o = t - d - v the rest of the step;
tau the output tokens per step; subscript 0 for the no-speculation arm (d0 = 0). Acceptance
splits into per-request acceptance, L / (k + 1) with L = 1 + accepted / drafts, and the batch
draining unevenly, tau / (L tau0): requests finishing at different steps leave the last steps
thinner than without speculation. `other` splits further into the rest of the step,
(t0 + d + v - v0) / t, and time outside the steps
(scheduling, detokenizing, the output loop): the remainder, so the factors multiply back to
the measured speedup exactly in every round. Each factor is a geometric mean over rounds,
with a t interval over rounds on its log (no interval from one round). Nothing is clamped:
a factor above 1 (a plain step slower than the rest of a speculative one) is printed as it is.

The Leviathan et al. 2023 (Theorem 3.8) speedup is printed beside it for reference, with
the measured draft cost per step c = d / t0 in place of c * k (Medusa drafts every head in
one forward) and alpha the pooled acceptance rate: (1 - alpha^(k+1)) / ((1 - alpha)(1 + c)).
It assumes verification at one plain step's cost and no other overhead.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.comparison import Decomposition, Factor
from harness.analysis.stats import ALPHA, _t

TIMING_COLUMNS = ("steps", "step_s", "forward_s", "draft_s")
# The factors in the order they multiply, and their labels.
FACTORS = (
    ("ideal", "ideal: k + 1 tokens per step"),
    ("acceptance", "acceptance"),
    ("draft", "draft cost"),
    ("verification", "verification cost"),
    ("other", "other overhead"),
)
PARTS_OF_ACCEPTANCE = (
    ("per_request", "per-request acceptance"),
    ("batch", "the batch draining unevenly"),
)
PARTS_OF_OTHER = (("rest_of_step", "rest of the step"), ("outside", "outside the steps"))


def _launch_sums(passes: pd.DataFrame) -> dict[str, float] | None:
    """One launch's passes pooled: step counts and times, tokens, wall time, and the mean
    log output throughput (the table's unit); None without step times in every pass."""
    if (
        passes.empty
        or any(c not in passes for c in TIMING_COLUMNS)
        or passes[list(TIMING_COLUMNS)].isna().any().any()
    ):
        return None
    thr = passes["output_throughput"].astype(float)
    if not (thr > 0).all() or not (passes["steps"] > 0).all():
        return None
    sums = {c: float(passes[c].sum()) for c in (*TIMING_COLUMNS, "output_tokens", "duration_s")}
    sums["log_throughput"] = float(np.log(thr).mean())
    for c in ("num_accepted_tokens", "num_draft_tokens", "num_drafts"):
        sums[c] = float(passes[c].sum()) if c in passes else 0.0
    return sums


def _factors(s: dict[str, float], b: dict[str, float], k: int) -> dict[str, float]:
    """Log factors of one round: speculative launch s against no-speculation launch b."""
    t, d, v = (s[c] / s["steps"] for c in ("step_s", "draft_s", "forward_s"))
    t0, v0 = b["step_s"] / b["steps"], b["forward_s"] / b["steps"]
    tau, tau0 = s["output_tokens"] / s["steps"], b["output_tokens"] / b["steps"]
    logs = {
        "measured": s["log_throughput"] - b["log_throughput"],
        "ideal": math.log(k + 1),
        "acceptance": math.log(tau / ((k + 1) * tau0)),
        # Acceptance length L = 1 + accepted / drafts: what each request gains per step. The
        # batch's tokens per step fall short of L x tau0 when requests finish at different
        # steps (the last ones run in thinner batches than without speculation).
        "per_request": math.log((1 + s["num_accepted_tokens"] / s["num_drafts"]) / (k + 1)),
        "draft": math.log(t0 / (t0 + d)),
        "verification": math.log((t0 + d) / (t0 + d + v - v0)),
        "rest_of_step": math.log((t0 + d + v - v0) / t),
    }
    logs["batch"] = logs["acceptance"] - logs["per_request"]
    logs["other"] = logs["measured"] - sum(logs[key] for key, _ in FACTORS[:-1])
    logs["outside"] = logs["other"] - logs["rest_of_step"]
    return logs


def _factor(key: str, label: str, logs: list[float]) -> Factor:
    x = np.asarray(logs, dtype=float)
    mean = float(x.mean())
    if len(x) < 2 or key == "ideal":
        return Factor(key, label, math.exp(mean), None, None)
    half = _t(len(x) - 1.0, 1 - ALPHA / 2) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return Factor(key, label, math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def decompose(passes: pd.DataFrame, arm: str, reference: str, k: int) -> Decomposition | None:
    """Where `arm`'s speedup over the no-speculation `reference` goes, from the per-pass
    frame (with step times); None when no round has both arms' launches with step times."""
    launches: dict[tuple[str, int], dict[str, float]] = {}
    for (variant, rnd), group in passes[passes["variant"].isin([arm, reference])].groupby(
        ["variant", "round"]
    ):
        # A round holds one launch per arm (launch-per-arm: the no-speculation arm's design).
        sums = _launch_sums(group)
        if sums is not None:
            launches[(str(variant), int(rnd))] = sums
    # A speculative launch that never drafted has no acceptance to decompose.
    rounds = sorted(
        r
        for (v, r) in launches
        if v == arm and (reference, r) in launches and launches[(v, r)]["num_drafts"] > 0
    )
    if not rounds:
        return None
    per_round = [_factors(launches[(arm, r)], launches[(reference, r)], k) for r in rounds]
    logs = {key: [f[key] for f in per_round] for key in per_round[0]}

    def pooled(variant: str, column: str) -> float:
        return sum(launches[(variant, r)][column] for r in rounds)

    steps, steps0 = pooled(arm, "steps"), pooled(reference, "steps")
    raw = {
        "step_ms": 1000 * pooled(arm, "step_s") / steps,
        "draft_ms": 1000 * pooled(arm, "draft_s") / steps,
        "forward_ms": 1000 * pooled(arm, "forward_s") / steps,
        "step0_ms": 1000 * pooled(reference, "step_s") / steps0,
        "forward0_ms": 1000 * pooled(reference, "forward_s") / steps0,
        "tokens_per_step": pooled(arm, "output_tokens") / steps,
        "tokens_per_step0": pooled(reference, "output_tokens") / steps0,
    }
    raw["rest_ms"] = raw["step_ms"] - raw["draft_ms"] - raw["forward_ms"]
    raw["rest0_ms"] = raw["step0_ms"] - raw["forward0_ms"]
    drafted, drafts = pooled(arm, "num_draft_tokens"), pooled(arm, "num_drafts")
    alpha = pooled(arm, "num_accepted_tokens") / drafted if drafted else math.nan
    acceptance_length = 1 + pooled(arm, "num_accepted_tokens") / drafts if drafts else math.nan
    c = raw["draft_ms"] / raw["step0_ms"]
    if math.isnan(alpha):
        expected = math.nan
    elif alpha == 1.0:
        expected = float(k + 1)  # the formula's limit
    else:
        expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    return Decomposition(
        arm=arm,
        reference=reference,
        k=k,
        rounds=rounds,
        measured=_factor("measured", "measured speedup", logs["measured"]),
        factors=[_factor(key, label, logs[key]) for key, label in FACTORS],
        parts_of_acceptance=[_factor(key, label, logs[key]) for key, label in PARTS_OF_ACCEPTANCE],
        parts_of_other=[_factor(key, label, logs[key]) for key, label in PARTS_OF_OTHER],
        raw=raw,
        alpha=alpha,
        acceptance_length=acceptance_length,
        draft_cost=c,
        leviathan_tokens=expected,
        leviathan_speedup=expected / (1 + c),
    )


def decomposition_frame(decompositions: list[Decomposition]) -> pd.DataFrame:
    """A comparison's decompositions as one DataFrame (notebooks): a row per arm and term,
    with its factor and 95% CI; `part_of` names the factor a part belongs to."""
    rows = [
        {
            "arm": d.arm,
            "reference": d.reference,
            "k": d.k,
            "rounds": len(d.rounds),
            "term": f.key,
            "label": f.label,
            "part_of": part_of,
            "factor": f.value,
            "ci_low": f.low,
            "ci_high": f.high,
        }
        for d in decompositions
        for f, part_of in d.terms()
    ]
    return pd.DataFrame(
        rows,
        columns=[
            "arm",
            "reference",
            "k",
            "rounds",
            "term",
            "label",
            "part_of",
            "factor",
            "ci_low",
            "ci_high",
        ],
    )
