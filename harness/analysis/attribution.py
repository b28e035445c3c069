"""Where a candidate's output-throughput delta comes from: the delta split into
the parts of a pass's time, from the step timer's per-pass sums (PassRecord.step_times).

A pass's time T is the sum of its parts: the drafter's time in the steps (d), the target's
verification forward (v), the rest of the steps (r = steps - d - v) and the time outside the
steps (o = duration - steps: scheduling, output processing). With N output tokens, the
candidate's throughput over the baseline's, less one, is per unit exactly

    (N_B / T_B) / (N_A / T_A) - 1 = sum over parts j of -(P_jB - P_jA) / T_B * N_B / N_A
                                    + (N_B / N_A - 1)

(A the baseline, B the candidate, each arm's mean over the unit's passes): a part that takes
longer costs its share of the candidate's pass, and more tokens per pass add theirs. The unit
is the design's: a balanced block in one engine, else a round (one launch per arm). Each
part's contribution is its mean over units with a t interval (n - 1 degrees of freedom), so
the parts add up to the mean delta exactly and each says on its own whether it moved.

With the speed probe on (the scenario's speed_probe), its time is a part of its own ("speed
probe": the same loop in both arms, so its share shows the speed that moved the arms apart,
not the change), kept out of the time outside the steps.

A change that acts outside the timed methods (or a machine that interfered between them)
shows as the time outside the steps; that is named as a finding when it is significant.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.comparison import Attribution, Factor
from harness.analysis.stats import ALPHA, Design, _t

# The parts, in reading order: key, label, how to get their seconds per pass from the frame.
PARTS = (
    ("draft", "draft time"),
    ("forward", "verification forward"),
    ("rest", "rest of the step"),
    ("outside", "outside the steps"),
    ("probe", "speed probe"),
    ("tokens", "tokens per pass"),
)
NEEDED = ("output_tokens", "duration_s", "step_s", "forward_s", "draft_s", "steps", "probe_s")


def _unit_means(frame: pd.DataFrame, design: Design) -> pd.DataFrame:
    """Each arm's mean pass per unit: rows (unit, variant), the NEEDED columns."""
    key = ["launch", "block"] if design == "one-engine" else ["round"]
    cols = [*key, "variant", *NEEDED]
    data = frame[cols].copy()
    data["unit"] = data[key].astype(str).agg("/".join, axis=1)
    return data.groupby(["unit", "variant"], sort=True)[list(NEEDED)].mean()


def _interval(key: str, label: str, values: np.ndarray) -> Factor:
    mean = float(values.mean())
    if len(values) < 2:
        return Factor(key, label, mean, None, None)
    sd = float(values.std(ddof=1))
    half = _t(len(values) - 1.0, 1 - ALPHA / 2) * sd / math.sqrt(len(values))
    return Factor(key, label, mean, mean - half, mean + half)


def attribute(
    passes: pd.DataFrame, baseline: str, candidate: str, design: Design
) -> Attribution | None:
    """The candidate's delta split into the parts (module doc); None without step times in
    every pass of both arms, or without a unit holding both."""
    frame = passes[passes["variant"].isin([baseline, candidate])]
    if "probe_s" not in frame:  # a frame from before the probe: none ran
        frame = frame.assign(probe_s=0.0)
    if (
        frame.empty
        or any(c not in frame for c in NEEDED)
        or frame[list(NEEDED)].isna().any().any()
        or not (frame["steps"] > 0).all()
        or not (frame["duration_s"] > 0).all()
        or not (frame["output_tokens"] > 0).all()
    ):
        return None
    if design == "one-engine" and frame["block"].isna().any():
        return None
    means = _unit_means(frame, design)
    units = [
        u
        for u in means.index.get_level_values(0).unique()
        if (u, baseline) in means.index and (u, candidate) in means.index
    ]
    if not units:
        return None
    a = means.loc[[(u, baseline) for u in units]].to_numpy(dtype=float)
    b = means.loc[[(u, candidate) for u in units]].to_numpy(dtype=float)
    col = {c: i for i, c in enumerate(NEEDED)}

    def parts(x: np.ndarray) -> dict[str, np.ndarray]:
        step, fwd, draft = x[:, col["step_s"]], x[:, col["forward_s"]], x[:, col["draft_s"]]
        probe = x[:, col["probe_s"]]
        return {
            "draft": draft,
            "forward": fwd,
            "rest": step - fwd - draft,
            "outside": x[:, col["duration_s"]] - step - probe,
            "probe": probe,
        }

    pa, pb = parts(a), parts(b)
    n_a, n_b = a[:, col["output_tokens"]], b[:, col["output_tokens"]]
    t_b = b[:, col["duration_s"]]
    share = {key: -(pb[key] - pa[key]) / t_b * (n_b / n_a) for key in pa}
    share["tokens"] = n_b / n_a - 1.0
    total = (n_b / t_b) / (n_a / a[:, col["duration_s"]]) - 1.0
    probed = bool((frame["probe_s"] > 0).any())
    found = [_interval(k, label, share[k]) for k, label in PARTS if k != "probe" or probed]
    measured = _interval("measured", "output throughput", total)
    significant = [
        f for f in found if f.low is not None and f.high is not None and (f.low > 0 or f.high < 0)
    ]
    # The probe runs the same loop in both arms: it carries the speed, never the change.
    changed = [f for f in significant if f.key != "probe"]
    carrier = max(changed, key=lambda f: abs(f.value)).key if changed else None
    outside = next(f for f in found if f.key == "outside")
    finding = None
    if outside in significant:
        finding = (
            f"{100 * outside.value:+.2f}% of {candidate}'s output-throughput delta "
            f"[{100 * (outside.low or 0):+.2f}, {100 * (outside.high or 0):+.2f}] is "
            "outside the timed steps: the change acts outside the drafter, the forward "
            "and the step around them (scheduling, output processing), or the machine "
            "interfered between steps"
        )
    return Attribution(
        candidate=candidate,
        baseline=baseline,
        units=len(units),
        unit="blocks" if design == "one-engine" else "rounds",
        measured=measured,
        parts=found,
        carrier=carrier,
        finding=finding,
    )
