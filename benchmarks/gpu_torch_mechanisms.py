"""Torch-level measurements for a GPU machine that has torch but no vLLM (issue 33, item 7):
the mechanisms behind the two seed PRs and the step timer, measured without an engine.

1. Seed 000's mechanism: a Medusa-shaped draft, `[batch, heads]` argmax over the vocabulary,
   then either `.tolist()` (a device-to-host copy and a sync every step, what the PR removes)
   or kept on the device (the next step reads the tensor). Per batch size 1..256: the median
   time per step of each, and their ratio.
2. The step timer: CUDA events recorded around each call and read once at the end of the pass,
   against `torch.cuda.synchronize()` around each call (the timer's way today, 8 syncs a
   step), on a small matmul workload launched back to back: each way's median step time, the
   difference between the two readings of the same steps, and the wall time of the whole pass
   (what the syncs cost the workload they time).

    python benchmarks/gpu_torch_mechanisms.py [--vocab 32000] [--heads 4] [--steps 200]

Needs CUDA: without it, it says so in one line and exits 3 (nothing is measured on a CPU;
the figures would say nothing about a GPU). Each figure is a median of --repeats runs of
--steps steps after a warm-up, printed with its spread (min..max of the runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _median_spread(values: list[float]) -> str:
    return (f"{1e6 * statistics.median(values):9.1f} us "
            f"[{1e6 * min(values):.1f}..{1e6 * max(values):.1f}]")


def argmax_tolist(args: argparse.Namespace) -> None:
    import torch as t  # main() checked CUDA

    dev = t.device("cuda")
    print(f"1. [batch, {args.heads}] argmax over {args.vocab} logits, per step "
          f"(median of {args.repeats} runs of {args.steps} steps [min..max])")
    print(f"{'batch':>6}  {'.tolist()':>28}  {'on device':>28}  {'ratio':>6}")
    for batch in BATCHES:
        logits = t.randn(batch, args.heads, args.vocab, device=dev, dtype=t.float16)
        drafts = t.zeros(batch, args.heads, dtype=t.long, device=dev)

        def to_list(logits: t.Tensor = logits) -> None:
            logits.argmax(dim=-1).tolist()  # device -> host, and a sync

        def on_device(logits: t.Tensor = logits, drafts: t.Tensor = drafts) -> None:
            drafts.copy_(logits.argmax(dim=-1))  # the next step reads it on the device

        per_way = {}
        for name, step in (("tolist", to_list), ("device", on_device)):
            per_way[name] = _runs(step, args)
        ratio = statistics.median(per_way["tolist"]) / statistics.median(per_way["device"])
        print(f"{batch:>6}  {_median_spread(per_way['tolist']):>28}  "
              f"{_median_spread(per_way['device']):>28}  {ratio:>5.2f}x")


def _runs(step: Callable[[], None], args: argparse.Namespace) -> list[float]:
    import torch

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    out = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()  # the queued work is part of the time
        out.append((time.perf_counter() - start) / args.steps)
    return out


def step_timer(args: argparse.Namespace) -> None:
    import torch

    dev = torch.device("cuda")
    a = torch.randn(args.size, args.size, device=dev, dtype=torch.float16)
    b = torch.randn(args.size, args.size, device=dev, dtype=torch.float16)
    calls = 4  # the timer wraps four nested calls a step

    def work() -> None:
        torch.matmul(a, b)

    print(f"\n2. step timing on {calls} matmuls of {args.size}x{args.size} a step, {args.steps} "
          f"steps a pass (median of {args.repeats} passes [min..max])")
    for _ in range(args.warmup):
        work()
    torch.cuda.synchronize()
    synced_step, synced_wall, event_step, event_wall = [], [], [], []
    for _ in range(args.repeats):
        # Synchronised: a sync before and after each call, host clocks.
        start = time.perf_counter()
        total = 0.0
        for _ in range(args.steps):
            for _ in range(calls):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                work()
                torch.cuda.synchronize()
                total += time.perf_counter() - t0
        synced_wall.append(time.perf_counter() - start)
        synced_step.append(total / args.steps)
        # Events: recorded around each call without a sync, read once at the pass's end.
        start = time.perf_counter()
        pairs = []
        for _ in range(args.steps):
            for _ in range(calls):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                work()
                e1.record()
                pairs.append((e0, e1))
        torch.cuda.synchronize()
        event_wall.append(time.perf_counter() - start)
        event_step.append(sum(e0.elapsed_time(e1) for e0, e1 in pairs) / 1000 / args.steps)
    print(f"  synchronised: step {_median_spread(synced_step)}, pass wall "
          f"{_median_spread([w / args.steps for w in synced_wall])} a step")
    print(f"  CUDA events:  step {_median_spread(event_step)}, pass wall "
          f"{_median_spread([w / args.steps for w in event_wall])} a step")
    print(f"  events / synchronised: step time "
          f"{statistics.median(event_step) / statistics.median(synced_step):.3f}, pass wall "
          f"{statistics.median(event_wall) / statistics.median(synced_wall):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--size", type=int, default=1024, help="matmul size, step timer part")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_torch_mechanisms: torch is not installed here", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("gpu_torch_mechanisms: no CUDA device here (torch "
              f"{torch.__version__}); run it on a GPU machine", file=sys.stderr)
        return 3
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    argmax_tolist(args)
    step_timer(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
