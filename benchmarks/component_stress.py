"""The component rows (draft time per step, verification forward, rest of the step, outside
steps per pass, steps per pass) and the attribution line under a component noise
structure, through the shipped code (testkit.simulate.parts_trials: the scheduler with its
checked warm-up, passes_frame, compare_metric, analysis.attribution): each part with its own
AR(1) pass noise (draft 4%, forward 3%, rest 3%, outside 8%; rho 0.5), the machine's drift,
and 1 pass in 20 stalling one part 1.4x.

    .venv/bin/python benchmarks/component_stress.py [--trials 1000] [--blocks 40] [--seed 7]
                                                    [--effect 0.05] [--precision 0.02]

Prints, per row and per attribution part: the A/A false-positive rate, and with the drafter
`--effect` slower (log), the coverage of the true value (for the draft row e^effect - 1; for
the draft part of the attribution its expected share, -(extra draft time) / the candidate's
pass time; for every other row and part 0) and the median interval half-width. About 0.09 s a
trial on this CPU. With --precision F the runs stop by the shipped precision rule when the
row's MDE reaches F (precision.metric: --metric, default draft_ms_per_step; `--blocks` is
then the minimum), and the median blocks run is printed: about 0.4 s a trial.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config.scenario import Precision  # noqa: E402
from harness.results.metrics import COMPONENT_METRICS  # noqa: E402
from testkit.simulate import Parts, parts_trials  # noqa: E402


def truths(parts: Parts, effect: float) -> dict[str, float]:
    """Each row's and part's true delta with the drafter `effect` slower (log)."""
    extra = parts.steps * parts.ms[0] * math.expm1(effect)  # ms a pass
    base = parts.steps * sum(parts.ms[:3]) + parts.ms[3]
    out = {m.key: 0.0 for m in COMPONENT_METRICS}
    out["draft_ms_per_step"] = math.expm1(effect)
    out["draft_per_forward"] = math.expm1(effect)  # the forward does not move
    out.update({f"part:{k}": 0.0 for k in ("draft", "forward", "rest", "outside", "tokens")})
    out["part:draft"] = -extra / (base + extra)
    out["part:measured"] = base / (base + extra) - 1
    return out


def flatten(trial: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in trial.items() if k not in ("attribution", "blocks", "stopped")}
    att = trial["attribution"]
    for f in [*att.parts, att.measured]:
        out[f"part:{f.key}"] = f
    return out


def summarize(
    results: list[dict[str, Any]], truth: dict[str, float]
) -> dict[str, tuple[int, float, float, float]]:
    rows: dict[str, tuple[int, float, float, float]] = {}
    for key, value in truth.items():
        ests = [r[key] for r in results if r.get(key) is not None]
        lows = [getattr(e, "ci_low", getattr(e, "low", None)) for e in ests]
        highs = [getattr(e, "ci_high", getattr(e, "high", None)) for e in ests]
        pairs = [
            (lo, hi)
            for lo, hi in zip(lows, highs, strict=True)
            if lo is not None and hi is not None
        ]
        if not pairs:
            rows[key] = (len(ests), math.nan, math.nan, math.nan)
            continue
        sig = float(np.mean([lo > 0 or hi < 0 for lo, hi in pairs]))
        cover = float(np.mean([lo <= value <= hi for lo, hi in pairs]))
        half = float(np.median([(hi - lo) / 2 for lo, hi in pairs]))
        rows[key] = (len(pairs), sig, cover, half)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--effect", type=float, default=0.05)
    parser.add_argument("--precision", type=float, default=None)
    parser.add_argument(
        "--metric",
        default="draft_ms_per_step",
        help="the row --precision targets (draft_ms_per_step, draft_per_forward)",
    )
    args = parser.parse_args()
    parts = Parts()
    precision = (
        None
        if args.precision is None
        else Precision(mde=args.precision, metric=args.metric, budget_s=1e9)
    )
    raw_aa = parts_trials(parts, args.blocks, args.trials, args.seed, precision)
    raw_eff = parts_trials(
        Parts(draft_effect=args.effect), args.blocks, args.trials, args.seed + 1, precision
    )
    aa, eff = [flatten(t) for t in raw_aa], [flatten(t) for t in raw_eff]
    if precision is not None:
        print(
            f"precision: {args.metric} MDE <= {100 * args.precision:.1f}%: median blocks "
            f"{np.median([t['blocks'] for t in raw_aa]):.0f} (A/A), "
            f"{np.median([t['blocks'] for t in raw_eff]):.0f} (drafter slower)"
        )
    got_aa = summarize(aa, truths(parts, 0.0))
    got_eff = summarize(eff, truths(parts, args.effect))
    print(
        f"{args.trials} trials a cell, {args.blocks} blocks, drafter +{args.effect:.3f} "
        "(log) in the second cell\n"
    )
    print(
        "| row or part | A/A significant | coverage, drafter slower | significant, drafter "
        "slower | median half-width |"
    )
    print("|---|---|---|---|---|")
    for key in got_aa:
        n, sig, _, _ = got_aa[key]
        _, sig_e, cover_e, half_e = got_eff[key]
        print(
            f"| {key} | {100 * sig:.2f}% | {100 * cover_e:.2f}% | {100 * sig_e:.2f}% | "
            f"{100 * half_e:.2f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
