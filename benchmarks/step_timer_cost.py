"""What the step timer costs (harness.engine.steptimes, installed in vLLM's worker): the time
its wrappers add to one engine step (execute_model, sample_tokens, _model_forward and
propose_draft_token_ids, each timed with the host clock as on a CPU), measured on the shipped
wrapper around methods that do nothing, against a real run's step time (median over its
passes of step_s / steps) when a run folder is given.

    .venv/bin/python benchmarks/step_timer_cost.py [--n 200000] [RUN_DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.engine import steptimes  # noqa: E402


class _Runner:
    """One engine step's four timed calls, each doing nothing."""

    def execute_model(self) -> None:
        self._model_forward()
        self.propose_draft_token_ids()

    def sample_tokens(self) -> None:
        pass

    def _model_forward(self) -> None:
        pass

    def propose_draft_token_ids(self) -> None:
        pass


def _per_step(runner: _Runner, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        runner.execute_model()
        runner.sample_tokens()
    return (time.perf_counter() - t) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", type=Path)
    parser.add_argument("--n", type=int, default=200_000)
    args = parser.parse_args()
    plain = _Runner()
    timed_class = type("Timed", (_Runner,), {})
    steptimes.wrap(timed_class, steptimes.Clock())
    timed = timed_class()
    added = statistics.median(_per_step(timed, args.n) - _per_step(plain, args.n) for _ in range(7))
    line = f"step timer: {1e6 * added:.2f} us added per engine step (median of 7 x {args.n})"
    if args.run_dir is not None:
        from harness.api import load_run

        passes = load_run(args.run_dir).passes
        timed_passes = passes.dropna(subset=["steps"])
        timed_passes = timed_passes[timed_passes["steps"] > 0]
        if timed_passes.empty:
            print(f"{args.run_dir}: no pass timed its steps", file=sys.stderr)
            return 1
        step = float((timed_passes["step_s"] / timed_passes["steps"]).median())
        line += (
            f"; {args.run_dir.name}'s median step {1e3 * step:.3f} ms over "
            f"{len(timed_passes)} passes: {100 * added / step:.3f}% of a step"
        )
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
