"""Re-running a comparison until it is significant, with and without `gate --combine`: A/A
false-positive rates and power of the shipped comparison (`compare_run`) and the shipped
combination (`repeats.combined`, each run a launch, its interval anytime-valid across runs:
stats.across_runs) over stored runs written as `specbench run` writes them.

    .venv/bin/python benchmarks/combine_rerun.py [--trials 300] [--runs 5 20]
        [--effects 0 -0.02 -0.05] [--interaction 0.0] [--seed 0] [--estimator [--pass-noise 0.02]]

Each run is one simulated one-engine launch (testkit.stored.shared_launch: 30 A B B A
blocks, 2% pass noise, launches 8% apart in speed: machine speed moves both arms at once),
its effect `effect` plus a launch x arm interaction drawn per run (sd `--interaction`).
Policies, each stopping at the first significant output-throughput row, at most N runs:
- one run: the first run alone;
- re-run: each run judged alone;
- combine, fixed 95%: the first run alone, then all runs so far combined, each combination
  judged by the fixed-sample t interval (what `gate --combine` did before);
- combine, anytime (shipped): the same, judged by the shipped combined interval;
- fixed design: all N runs combined once, at 5% (decided before the first run);
- planned N (shipped, planned_runs: N): the first run alone, then all runs so far combined,
  each look judged by the plan's interval (stats.plan_alpha: Haybittle-Peto, 0.1% before
  the N-th look, the rest of 5% at it), stopping at the first significant look.
Power counts significant results in the effect's direction. Intervals are Wilson 95%.

`--estimator`: the same runs as per-pass arrays straight into the shipped estimator
(stats.arm_delta, each run a launch, then stats.across_runs as repeats.combined applies it),
without writing and loading run folders: about 50 times faster, for many runs and trials;
`--pass-noise` (estimator only) sets the pass noise, e.g. 0.08 for serve-like block noise, where
one run cannot resolve -2% and power differs between the designs.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy import special as spsp  # noqa: E402

from harness.analysis.compare import compare_run  # noqa: E402
from harness.analysis.comparison import Comparison  # noqa: E402
from harness.analysis.repeats import combined  # noqa: E402
from harness.analysis.stats import RUNS_ALPHA, DeltaEstimate, across_runs, arm_delta  # noqa: E402
from harness.results.run import Run, load_run  # noqa: E402
from testkit.stored import stored  # noqa: E402

POLICIES = (
    "one run",
    "re-run",
    "combine, fixed 95%",
    "combine, anytime (shipped)",
    "horizon: 1% at run N only",
    "fixed design",
    "planned N (shipped)",
)
PLANNED = "planned N (shipped)"
# Not a policy to ship: the first run at 5%, then the whole later budget (RUNS_ALPHA) spent on
# the N-th combination alone, which is valid only for a horizon declared before the first run.
# Bonferroni spending of the same budget over looks 2..N, however weighted, found less at N
# runs in a normal model of the runs (40,000 trials), so it shows what re-weighting the
# anytime sequence could gain at most (estimator mode only; docs/statistics.md).
HORIZON = "horizon: 1% at run N only"


def throughput(comparison: Comparison) -> DeltaEstimate:
    cand = comparison.candidates[0]
    return next(r for r in cand.rows if r.key == "output_throughput").estimate


def found(est: DeltaEstimate, effect: float, fixed: bool = False) -> bool:
    """Significant (in the effect's direction, when there is one); `fixed`: by the
    fixed-sample 95% t interval on the same estimate, whatever the shipped one is."""
    if fixed:
        if est.se is None or est.df is None or not est.se > 0:
            return False
        t = abs(math.log1p(est.delta)) / est.se
        sig = t > float(spsp.stdtrit(est.df, 0.975))
    else:
        sig = est.significant
    return sig and (effect == 0 or (est.delta < 0) == (effect < 0))


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


class Trial:
    """One sequence of up to `n` runs of one comparison, each policy judged as it comes."""

    def __init__(self, root: Path, seed: int, n: int, effect: float, interaction: float):
        self.root, self.seed, self.n, self.effect = root, seed, n, effect
        self.interaction = interaction
        self.runs: list[Run] = []
        self.hit = dict.fromkeys(POLICIES, False)
        self.looks = dict.fromkeys(POLICIES, 0)

    def add_run(self) -> Run:
        import numpy as np

        k = len(self.runs)
        rng = np.random.default_rng([self.seed, k])
        shift = math.log1p(self.effect) + (
            rng.normal(0, self.interaction) if self.interaction else 0.0
        )
        run = load_run(
            stored(self.root, f"r{k}", 100.0 * (k + 1), self.seed * 1000 + k, effect=shift)
        )
        self.runs.append(run)
        return run

    def judge(self, policy: str, hit: bool, k: int) -> None:
        if not self.hit[policy]:
            self.looks[policy] = k
            self.hit[policy] = hit

    def play(self, want_rerun: bool) -> None:
        for k in range(1, self.n + 1):
            run = self.add_run()
            open_combine = not (
                self.hit["combine, fixed 95%"] and self.hit["combine, anytime (shipped)"]
            )
            if self.n > 1 and not self.hit[PLANNED]:
                # The same runs as a series planned for n: its scenario says so.
                planned = replace(
                    run, scenario=run.scenario.model_copy(update={"planned_runs": self.n})
                )
                est = throughput(combined(planned, self.runs[:-1])[0])
                self.judge(PLANNED, found(est, self.effect), k)
            if k == 1:
                alone = found(throughput(compare_run(run)), self.effect)
                self.judge("one run", alone, 1)
                self.judge("re-run", alone, 1)
                self.judge("combine, fixed 95%", alone, 1)
                self.judge("combine, anytime (shipped)", alone, 1)
            else:
                if want_rerun and not self.hit["re-run"]:
                    self.judge("re-run", found(throughput(compare_run(run)), self.effect), k)
                if open_combine or k == self.n:
                    est = throughput(combined(run, self.runs[:-1])[0])
                    self.judge("combine, fixed 95%", found(est, self.effect, fixed=True), k)
                    self.judge("combine, anytime (shipped)", found(est, self.effect), k)
                    if k == self.n:
                        self.judge("fixed design", found(est, self.effect, fixed=True), k)
            if self.n == 1:
                self.judge("fixed design", self.hit["one run"], 1)


class EstimatorTrial(Trial):
    """A Trial whose runs are per-pass arrays (the stored runs' noise: 30 A B B A blocks, 2%
    pass noise, launches 8% apart), judged by stats.arm_delta and stats.across_runs."""

    pass_noise = 0.02

    def __init__(self, root: Path, seed: int, n: int, effect: float, interaction: float):
        import numpy as np

        super().__init__(root, seed, n, effect, interaction)
        self.rng = np.random.default_rng(seed)
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add_pass_arrays(self) -> None:
        import numpy as np

        k = len(self.parts)
        blocks = 30
        shift = math.log1p(self.effect) + (
            self.rng.normal(0, self.interaction) if self.interaction else 0.0
        )
        cand = np.tile(np.array([False, True, True, False]), blocks)
        y = self.rng.normal(0, 0.08) + shift * cand + self.rng.normal(0, self.pass_noise, len(cand))
        block = np.repeat(np.arange(blocks), 4)
        self.parts.append((np.exp(y), cand, np.full(len(y), k), np.full(len(y), k), block))

    def estimate(
        self, runs: int, alpha: float | None = None, planned: int | None = None
    ) -> DeltaEstimate:
        import numpy as np

        cols = [np.concatenate([p[i] for p in self.parts[:runs]]) for i in range(5)]
        est = arm_delta(cols[0], cols[1], cols[2], cols[3], cols[4], "relative", "one-engine")
        return across_runs(est, runs, alpha, planned)

    def play(self, want_rerun: bool) -> None:
        for k in range(1, self.n + 1):
            self.add_pass_arrays()
            if self.n > 1 and not self.hit[PLANNED]:
                self.judge(PLANNED, found(self.estimate(k, planned=self.n), self.effect), k)
            if k == 1:
                alone = found(self.estimate(1), self.effect)
                for p in (
                    "one run",
                    "re-run",
                    "combine, fixed 95%",
                    "combine, anytime (shipped)",
                    HORIZON,
                ):
                    self.judge(p, alone, 1)
                continue
            if k == self.n and not self.hit[HORIZON]:
                self.judge(HORIZON, found(self.estimate(k, RUNS_ALPHA), self.effect), k)
            if want_rerun and not self.hit["re-run"]:
                saved, self.parts = self.parts, self.parts[-1:]  # the last run alone
                self.judge("re-run", found(self.estimate(1), self.effect), k)
                self.parts = saved
            if (
                self.hit["combine, fixed 95%"]
                and self.hit["combine, anytime (shipped)"]
                and self.hit[PLANNED]
                and k < self.n
            ):
                continue
            est = self.estimate(k)
            self.judge("combine, fixed 95%", found(est, self.effect, fixed=True), k)
            self.judge("combine, anytime (shipped)", found(est, self.effect), k)
            if k == self.n:
                self.judge("fixed design", found(est, self.effect, fixed=True), k)


def cell(
    n: int, effect: float, trials: int, interaction: float, seed: int, fast: bool = False
) -> None:
    hits = dict.fromkeys(POLICIES, 0)
    looks = dict.fromkeys(POLICIES, 0)
    start = time.monotonic()
    for trial in range(trials):
        with tempfile.TemporaryDirectory() as tmp:
            kind = EstimatorTrial if fast else Trial
            t = kind(Path(tmp), seed * 100_000 + trial, n, effect, interaction)
            t.play(want_rerun=effect == 0)
        for p in POLICIES:
            hits[p] += t.hit[p]
            looks[p] += t.looks[p]
    what = "A/A false positives" if effect == 0 else f"power at {100 * effect:+g}%"
    path = (
        f"stats.arm_delta + across_runs, pass noise {100 * EstimatorTrial.pass_noise:g}%"
        if fast
        else "stored runs, compare_run + combined"
    )
    print(
        f"\n{path}: at most {n} runs, {what}, interaction sd {100 * interaction:g}%, "
        f"{trials} trials "
        f"({time.monotonic() - start:.0f} s):"
    )
    for p in POLICIES:
        if (
            (p == "re-run" and effect != 0)
            or (p == HORIZON and not fast)
            or (p == PLANNED and n < 2)
        ):
            continue
        low, high = wilson(hits[p], trials)
        print(
            f"  {p:28s} {100 * hits[p] / trials:5.1f}% [{low:.1f}, {high:.1f}]  "
            f"mean runs looked at {looks[p] / trials:.1f}"
        )
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--runs", type=int, nargs="+", default=[5])
    parser.add_argument("--effects", type=float, nargs="+", default=[0.0])
    parser.add_argument("--interaction", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--estimator",
        action="store_true",
        help="per-pass arrays into the shipped estimator (no run folders)",
    )
    parser.add_argument(
        "--pass-noise", type=float, default=0.02, help="pass noise sd (log scale; --estimator only)"
    )
    args = parser.parse_args()
    EstimatorTrial.pass_noise = args.pass_noise
    for n in args.runs:
        for effect in args.effects:
            cell(n, effect, args.trials, args.interaction, args.seed, args.estimator)
    return 0


if __name__ == "__main__":
    sys.exit(main())
