"""What the contention sampler costs (harness.engine.contention.sample, taken twice a pass, just
outside each pass's timed region): the median and 90th percentile of one sample over --n
samples on this machine, with the number of processes it read, against the demo's pass time.

    .venv/bin/python benchmarks/contention_cost.py [--n 200] [--pass-s 0.3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.engine.contention import sample  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument(
        "--pass-s",
        type=float,
        default=0.3,
        help="a pass's duration to compare with (the demo's: about 0.3 s)",
    )
    args = parser.parse_args()
    session = os.getsid(0)
    times = []
    for _ in range(args.n):
        t = time.perf_counter()
        assert sample(session) is not None
        times.append(time.perf_counter() - t)
    processes = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    median, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1]
    print(
        f"one sample: median {1e3 * median:.2f} ms, p90 {1e3 * p90:.2f} ms over {args.n} "
        f"samples, {processes} processes read; two a pass are "
        f"{100 * 2 * median / args.pass_s:.1f}% of a {args.pass_s:g} s pass, outside its "
        "timed region"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
