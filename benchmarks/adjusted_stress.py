"""The speed-adjusted output-throughput row under a noise model whose noise is the
machine's speed (testkit.speed: a shared AR(1) speed, lag-1 0.7, multiplying every part of a
pass, the time outside the steps 2x; each part's own noise; a launch level; drift; 1 pass in
20 stalled 1.5x), through the shipped scheduler and rows (harness.analysis.adjusted).

    .venv/bin/python benchmarks/adjusted_stress.py [--trials 500] [--blocks 60] [--seed 11]
        [--cells all|quick] [--outside-own 0.12] [--outside-stalls N]
        [--probe [--probe-own 0.10] [--twin [--twin-own 0.006]]] [--period P --period-amp A]
        [--only CELL]

With --probe every pass carries the speed probe (the scenario's speed_probe), so the row is
adjusted by it instead of by the step parts, and four cells more plant a change that slows
the probe itself by 0.5-5% (its blind spot). With --twin the probe's twin runs beside it
(harness.engine.twin): the row is checked by the probe over its twin, which a change that
reaches the probe moves and the machine's speed does not. --period adds a periodic
disturbance to the speed: a sine of P passes and amplitude A (log; its phase drawn per
launch).

Per cell: the trials; how often the adjusted row is shown (not withdrawn); its false-positive
rate (A/A cells) or coverage of the true delta, among the trials where it is shown, and
counted over all trials for "the row as read" (the adjusted row where shown, else the primary
row); the mean bias of the shown estimates; the median half-widths of both rows. Rates carry
Wilson 95% intervals. About 0.2 s a trial on this CPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.speed import Speed, speed_trials  # noqa: E402


def compensated(forward: float, model: Speed) -> tuple[float, float, float, float]:
    """Effects where the forward is `forward` (log) slower and the drafter faster by as much
    time, so the true throughput delta is 0: an A/A of the end-to-end row that touches the
    covariate."""
    d, f = model.ms[0], model.ms[1]
    draft = math.log(1 - f * math.expm1(forward) / d)
    return (draft, forward, 0.0, 0.0)


def cells(kind: str, model: Speed) -> list[tuple[str, tuple[float, float, float, float]]]:
    out = [
        ("A/A, drafter only", (0.0, 0.0, 0.0, 0.0)),
        ("drafter +10%", (math.log(1.10), 0.0, 0.0, 0.0)),
    ]
    if kind == "quick":
        return [*out, ("A/A, forward +1% (drafter pays it back)", compensated(0.01, model))]
    for f in (0.005, 0.01, 0.02):
        out.append((f"A/A, forward +{100 * f:g}% (drafter pays it back)", compensated(f, model)))
    for f in (0.005, 0.01, 0.02, 0.05):
        out.append((f"forward +{100 * f:g}%", (0.0, f, 0.0, 0.0)))
    out.append(("forward and rest +1% (the blind spot)", (0.0, 0.01, 0.01, 0.0)))
    out.append(("every part +1%, outside +2% (a slower machine)", (0.01, 0.01, 0.01, 0.02)))
    return out


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "—"
    p, z = k / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * p:.1f}% [{100 * (centre - half):.1f}, {100 * (centre + half):.1f}]"


def covers(est: object, truth: float) -> bool:
    low, high = getattr(est, "ci_low", None), getattr(est, "ci_high", None)
    return low is not None and high is not None and low <= truth <= high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--cells", choices=["all", "quick"], default="all")
    parser.add_argument(
        "--only", default=None, help="the cells whose name starts with one of these (a|b|...)"
    )
    parser.add_argument("--outside-own", type=float, default=0.12)
    parser.add_argument(
        "--outside-stalls",
        type=int,
        default=0,
        help="1 pass in N has its time outside the steps 5x (the primary row then trims)",
    )
    parser.add_argument("--probe", action="store_true", help="passes carry the speed probe")
    parser.add_argument("--probe-own", type=float, default=0.10)
    parser.add_argument("--twin", action="store_true", help="the probe's twin runs beside it")
    parser.add_argument("--twin-own", type=float, default=0.006)
    parser.add_argument("--period", type=float, default=0.0, help="passes (0: none)")
    parser.add_argument("--period-amp", type=float, default=0.015)
    args = parser.parse_args()
    base = Speed()
    base = replace(
        base,
        sigma_own=(*base.sigma_own[:3], args.outside_own),
        outside_stall_every=args.outside_stalls,
        probe_us=90.0 if args.probe else 0.0,
        probe_sigma_own=args.probe_own,
        twin=args.probe and args.twin,
        twin_sigma_own=args.twin_own,
        period=args.period,
        period_amp=args.period_amp if args.period else 0.0,
    )
    print(
        f"noise: speed sd {base.sigma_speed} (lag-1 {base.rho}), outside loading "
        f"{base.outside_loading}, own noise {base.sigma_own} (lag-1 {base.rho_own}), launch "
        f"level sd {base.launch_sd}, drift {base.drift}/500 passes, 1 in {base.stall_every} "
        f"passes {base.stall_factor}x"
        + (
            f", 1 in {base.outside_stall_every} the outside {base.outside_stall_factor}x"
            if base.outside_stall_every
            else ""
        )
        + (f", a {base.period_amp} sine of {base.period:g} passes" if base.period else "")
        + (f"; the speed probe, own noise {base.probe_sigma_own}" if args.probe else "")
        + (f"; its twin, own noise {base.twin_sigma_own} each" if base.twin else "")
        + f"; {args.blocks} blocks, {args.trials} trials a cell"
    )
    planted = [(name, effects, 0.0) for name, effects in cells(args.cells, base)]
    if args.probe and args.cells == "all":
        for slower in (0.005, 0.01, 0.02, 0.05):  # the probe's own blind spot, by its size
            name = f"drafter +10%, the probe +{100 * slower:g}% (its blind spot)"
            planted.append((name, planted[1][1], slower))
    for i, (name, effects, probe_effect) in enumerate(planted):
        if args.only is not None and not name.startswith(tuple(args.only.split("|"))):
            continue
        model = replace(base, effects=effects, probe_effect=probe_effect)
        truth = model.truth()
        res = speed_trials(model, args.blocks, args.trials, args.seed + i)
        shown = [r["adjusted"] for r in res if r["adjusted"] is not None and r["adjusted"].ci_low]
        read = [e if (e := r["adjusted"]) is not None and e.ci_low else r["primary"] for r in res]
        aa = abs(truth) < 1e-12
        what = "false positives" if aa else "coverage"
        hit_shown = sum(e.significant if aa else covers(e, truth) for e in shown)
        hit_read = sum(e.significant if aa else covers(e, truth) for e in read)
        primary = [r["primary"] for r in res]
        robust = sum(e.robust for e in primary)
        hit_primary = sum(e.significant if aa else covers(e, truth) for e in primary)
        removed = [100 * a.removed for r in res if (a := r["adjustment"]) is not None]
        print(
            f"\n{name}: truth {100 * truth:+.3f}%, {len(res)} trials; adjusted row shown "
            f"{wilson(len(shown), len(res))}; median variance removed "
            f"{np.median(removed) if removed else math.nan:.0f}%; primary stall-robust in "
            f"{robust}"
        )
        print(f"  adjusted row, where shown: {what} {wilson(hit_shown, len(shown))}")
        print(f"  the row as read (adjusted, else primary): {what} {wilson(hit_read, len(res))}")
        print(f"  primary row: {what} {wilson(hit_primary, len(res))}")
        if shown:
            bias = float(np.mean([e.delta for e in shown])) - truth
            hw_a = float(np.median([(e.ci_high - e.ci_low) / 2 for e in shown]))
            print(f"  adjusted bias {100 * bias:+.3f}%, median half-width ±{100 * hw_a:.2f}%")
        hw_p = float(np.median([(e.ci_high - e.ci_low) / 2 for e in primary if e.ci_low]))
        print(f"  primary median half-width ±{100 * hw_p:.2f}%")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
