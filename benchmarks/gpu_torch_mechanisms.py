"""Torch-level measurements for a GPU machine that has torch but no vLLM:
the mechanisms behind seed 000 (the Medusa proposer) and the step timer, without an engine.
Prints one table and one line; finishes within --budget-s (default 240 s) by construction.

1. Seed 000's Medusa draft, both arms as vLLM's V1 runner runs them (synchronous scheduling):
   - both: the runner's bookkeeping waits for the step's sampled tokens before Medusa drafts
     (Medusa drafts after bookkeeping: gpu_model_runner.py, draft_after_bookkeeping;
     RejectionSampler.parse_output's `.cpu()` of the `[batch, heads + 1]` sampled ids); then
     H heads' logits are computed (a ResBlock and an lm_head per head, H `[batch, vocab]`).
   - baseline `.tolist()` (the pre-PR propose, as harness/engine/swaps/medusa_proposer.py
     reproduces it; vLLM 0.32's medusa.py has the PR merged): per head
     `logits[h].argmax(-1).tolist()`, H blocking device->host copies, then a Python
     transpose of the lists to `[batch][head]`.
   - optimized (vLLM 0.32: medusa.py's propose, gpu_model_runner's
     _copy_draft_token_ids_to_cpu and _get_draft_token_ids_cpu): the argmaxes stacked into one
     `[batch, heads]` tensor, copied non-blocking on a side stream into pinned host memory, an
     event recorded; the scheduler's take waits on that event once per step and reads the
     pinned buffer.
   Per batch size: each arm's wall time per step (the arms alternate within each repeat) and
   the ratio to the baseline (the median of the per-repeat ratios).
2. The step timer (harness/engine/steptimes.py): a stand-in step of four timed calls
   (execute_model holding the forward, sample_tokens holding the draft: 8 events a step), in
   three arms interleaved in every repeat: untimed, CUDA events (recorded without waiting,
   read once after the pass, as EventClock does) and synchronised (a device sync and a host
   clock around each call). The timer's cost is the median of the paired differences (arm
   minus untimed, same repeat) with its interval; the events' own reading of the step is a
   row too (to set against the untimed wall).

    python benchmarks/gpu_torch_mechanisms.py [--heads 3] [--vocab 32000] [--hidden 4096]
    python benchmarks/gpu_torch_mechanisms.py --device cpu   # a dry run on small shapes

Needs CUDA: without it, one line says so and it exits 3, unless --device cpu asks for a dry
run (CPU figures say nothing about a GPU). Intervals: distribution-free order-statistic 95%
intervals for a median (at least 95% coverage from 6 repeats; fewer give min..max). The
default head count is the GPU Medusa scenario's num_speculative_tokens (3). Python's stdlib
and torch only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "gpu-mistral-medusa.yaml"
SCENARIO_HEADS = 3  # its draft.num_speculative_tokens, when the file is not beside the script
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# CUDA defaults: Mistral-7B-Instruct-v0.2 (hidden 4096, vocab 32000), the scenario's model.
GPU_DEFAULTS = {
    "batches": BATCHES,
    "hidden": 4096,
    "vocab": 32000,
    "size": 1024,
    "steps": 100,
    "repeats": 15,
    "warmup": 10,
}
CPU_DEFAULTS = {
    "batches": (1, 4, 16),
    "hidden": 64,
    "vocab": 1024,
    "size": 64,
    "steps": 10,
    "repeats": 9,
    "warmup": 2,
}
MAX_STEPS, MAX_REPEATS, MAX_BUDGET_S = 500, 41, 280.0
MIN_REPEATS = 2  # a cell stops adding repeats past its share of the budget, never below this
EXIT_NO_CUDA = 3


def scenario_heads(path: Path = SCENARIO) -> int:
    """The GPU Medusa scenario's head count (draft.num_speculative_tokens), read without yaml;
    SCENARIO_HEADS when the file is not there."""
    try:
        text = path.read_text()
    except OSError:
        return SCENARIO_HEADS
    found = re.search(r"^\s*num_speculative_tokens:\s*(\d+)", text, re.M)
    return int(found.group(1)) if found else SCENARIO_HEADS


# ---------------------------------------------------------------- statistics (stdlib only)


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the order-statistic interval for the median, the widest symmetric
    pair of order statistics whose binomial coverage is at least `level` (min..max when n is
    too small for that)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")

    def below(j: int) -> float:  # P(Binomial(n, 1/2) <= j)
        return sum(math.comb(n, i) for i in range(j + 1)) / 2.0**n

    k = 1  # 1-based: the interval is the k-th smallest .. the k-th largest
    while k < (n + 1) // 2 and 2.0 * below(k) <= 1.0 - level:
        k += 1
    return statistics.median(xs), xs[k - 1], xs[n - k]


# ---------------------------------------------------------------- the device, as a parameter


class HostEvent:
    """torch.cuda.Event's interface on the host clock (a CPU dry run)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.at - self.at) * 1000.0  # milliseconds, as CUDA's


class Device:
    """What the measurements need of a device: syncs, events, a side stream, host buffers."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.dtype = torch.float16 if self.cuda else torch.float32

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def event(self, timing: bool = False) -> Any:
        return self.torch.cuda.Event(enable_timing=timing) if self.cuda else HostEvent(timing)

    def side_stream(self) -> Any:
        return self.torch.cuda.Stream(self.device) if self.cuda else None

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return self.torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def wait_current(self, stream: Any) -> None:
        """`stream` waits for the work queued so far on the current stream."""
        if self.cuda:
            stream.wait_stream(self.torch.cuda.current_stream(self.device))

    def host_buffer(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.torch.empty(shape, dtype=dtype, pin_memory=self.cuda)

    def name(self) -> str:
        if self.cuda:
            return f"cuda ({self.torch.cuda.get_device_name(self.device)})"
        return "cpu (dry run: says nothing about a GPU)"


# ---------------------------------------------------------------- 1. the Medusa draft


@dataclass
class Medusa:
    """One batch size's tensors: H heads (ResBlock + lm_head each), the target's hidden
    states, the step's sampled ids, and the optimized path's pinned buffer, stream, event."""

    dev: Device
    hidden: Any  # [batch, hidden]
    res: list[Any]  # H x [hidden, hidden]
    heads: list[Any]  # H x [hidden, vocab]
    sampled: Any  # [batch, H + 1] int64, on the device
    pinned: Any  # [batch, H] int64, host (pinned on CUDA)
    stream: Any
    event: Any


def medusa_weights(
    dev: Device, heads: int, hidden: int, vocab: int, seed: int = 0
) -> tuple[list[Any], list[Any]]:
    """The heads' ResBlock and lm_head weights, made once on the device (shared by batches)."""
    torch = dev.torch
    torch.manual_seed(seed)
    scale = hidden**-0.5
    res = [
        torch.randn(hidden, hidden, device=dev.device, dtype=dev.dtype) * scale
        for _ in range(heads)
    ]
    lm = [
        torch.randn(hidden, vocab, device=dev.device, dtype=dev.dtype) * scale for _ in range(heads)
    ]
    return res, lm


def medusa_setup(dev: Device, batch: int, weights: tuple[list[Any], list[Any]]) -> Medusa:
    torch = dev.torch
    res, lm = weights
    hidden = res[0].shape[0]
    heads = len(res)
    return Medusa(
        dev=dev,
        hidden=torch.randn(batch, hidden, device=dev.device, dtype=dev.dtype),
        res=res,
        heads=lm,
        sampled=torch.zeros(batch, heads + 1, dtype=torch.long, device=dev.device),
        pinned=dev.host_buffer((batch, heads), torch.long),
        stream=dev.side_stream(),
        event=dev.event(),
    )


def _before_draft(m: Medusa) -> list[list[int]]:
    """Both arms: the step's sampled ids change on the device, and bookkeeping waits for them
    on the host before Medusa drafts (parse_output's .cpu()); the list is what it hands on."""
    m.sampled.add_(1)
    sampled: list[list[int]] = m.sampled.cpu().tolist()
    return sampled


def _head_logits(m: Medusa) -> list[Any]:
    """Medusa's model and compute_logits: per head h + SiLU(h @ R), then its lm_head."""
    torch = m.dev.torch
    return [
        (m.hidden + torch.nn.functional.silu(m.hidden @ r)) @ w
        for r, w in zip(m.res, m.heads, strict=True)
    ]


def medusa_step_tolist(m: Medusa) -> list[list[int]]:
    """The baseline: H blocking .tolist() of H [batch] argmaxes, then a Python transpose."""
    _before_draft(m)
    logits = _head_logits(m)
    draft_tokens = [logit.argmax(dim=-1).tolist() for logit in logits]
    return [list(row) for row in zip(*draft_tokens, strict=True)]


def medusa_step_device(m: Medusa) -> list[list[int]]:
    """The optimized path: one stacked [batch, heads] tensor, a non-blocking copy to pinned
    host memory on a side stream, one event; the scheduler's take waits on it once."""
    torch = m.dev.torch
    _before_draft(m)
    logits = _head_logits(m)
    draft = torch.stack([logit.argmax(dim=-1) for logit in logits], dim=1)
    # _copy_draft_token_ids_to_cpu: the copy stream waits for the compute stream's work so
    # far (asked before switching streams: inside, the current stream is the copy stream).
    m.dev.wait_current(m.stream)
    with m.dev.on(m.stream):
        m.pinned.copy_(draft, non_blocking=True)
        m.event.record()
    m.event.synchronize()  # _get_draft_token_ids_cpu, via take_draft_token_ids
    drafts: list[list[int]] = m.pinned.tolist()
    return drafts


@dataclass
class Row:
    mechanism: str
    arm: str
    n: int
    median_us: float
    low_us: float
    high_us: float
    ratio: tuple[float, float, float] | None = None  # median, low, high; None: the baseline


class Cells:
    """Bounded repeats: each cell gets an equal share of the budget and adds repeats while
    the next one fits in it (at least MIN_REPEATS, at most `repeats`)."""

    def __init__(self, budget_s: float, cells: int) -> None:
        self.share = budget_s / max(cells, 1)

    def repeats(self, wanted: int) -> Iterator[int]:
        start = time.perf_counter()
        last = 0.0
        for r in range(wanted):
            elapsed = time.perf_counter() - start
            if r >= MIN_REPEATS and elapsed + last > self.share:
                return
            began = time.perf_counter()
            yield r
            last = time.perf_counter() - began


def _pass(dev: Device, step: Callable[[], Any], steps: int) -> float:
    """Wall seconds per step over `steps` steps, the queued work included."""
    dev.sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dev.sync()
    return (time.perf_counter() - start) / steps


def _rows(mechanism: str, arms: dict[str, list[float]], baseline: str) -> list[Row]:
    out = []
    for arm, values in arms.items():
        med, low, high = median_interval(values)
        ratio = None
        if arm != baseline:
            ratio = median_interval([v / b for v, b in zip(values, arms[baseline], strict=True)])
        out.append(Row(mechanism, arm, len(values), 1e6 * med, 1e6 * low, 1e6 * high, ratio))
    return out


def measure_medusa(
    dev: Device,
    batches: Sequence[int],
    heads: int,
    hidden: int,
    vocab: int,
    steps: int,
    repeats: int,
    warmup: int,
    cells: Cells,
) -> list[Row]:
    rows: list[Row] = []
    weights = medusa_weights(dev, heads, hidden, vocab)
    for batch in batches:
        m = medusa_setup(dev, batch, weights)
        arms: dict[str, Callable[[], Any]] = {
            ".tolist() x H": functools.partial(medusa_step_tolist, m),
            "on device, 1 wait": functools.partial(medusa_step_device, m),
        }
        for step in arms.values():
            for _ in range(warmup):
                step()
        times: dict[str, list[float]] = {name: [] for name in arms}
        for r in cells.repeats(repeats):
            order = list(arms) if r % 2 == 0 else list(reversed(arms))
            for name in order:
                times[name].append(_pass(dev, arms[name], steps))
        rows += _rows(f"medusa B={batch}", times, baseline=".tolist() x H")
        del m
    return rows


# ---------------------------------------------------------------- 2. the step timer


class Workload:
    """A stand-in engine step: execute_model (input prep, then the forward: `forwards`
    matmuls) and sample_tokens (sampling, then the draft: 2 matmuls). Into fixed buffers:
    no allocation, and the values stay bounded however many steps run."""

    def __init__(self, dev: Device, size: int, forwards: int = 8) -> None:
        torch = dev.torch
        torch.manual_seed(1)
        self.torch = torch
        self.a = torch.randn(size, size, device=dev.device, dtype=dev.dtype) / size**0.5
        self.x = torch.randn(size, size, device=dev.device, dtype=dev.dtype)
        self.y = torch.empty_like(self.x)
        self.forwards = forwards

    def prep(self) -> None:
        self.x.clamp_(-8.0, 8.0)

    def forward(self) -> None:
        for _ in range(self.forwards):
            self.torch.matmul(self.x, self.a, out=self.y)

    def sample(self) -> None:
        self.y[0].argmax()

    def draft(self) -> None:
        for _ in range(2):
            self.torch.matmul(self.x, self.a, out=self.y)


def timer_step(w: Workload, timed: Callable[[str, Callable[[], None]], None]) -> None:
    """One step through `timed(total, call)`, nested as the runner's methods are."""

    def execute_model() -> None:
        w.prep()
        timed("forward_s", w.forward)

    def sample_tokens() -> None:
        w.sample()
        timed("draft_s", w.draft)

    timed("step_s", execute_model)
    timed("step_s", sample_tokens)


def measure_step_timer(
    dev: Device, size: int, steps: int, repeats: int, warmup: int, cells: Cells
) -> list[Row]:
    w = Workload(dev, size)

    def untimed(total: str, call: Callable[[], None]) -> None:
        call()

    pending: list[tuple[Any, Any, str]] = []

    def events(total: str, call: Callable[[], None]) -> None:  # EventClock: no wait
        begin = dev.event(timing=True)
        begin.record()
        call()
        end = dev.event(timing=True)
        end.record()
        pending.append((begin, end, total))

    def synchronised(total: str, call: Callable[[], None]) -> None:
        dev.sync()
        call()
        dev.sync()

    arms = {
        "untimed": untimed,
        "events, 8 a step": events,
        "synchronised, 8 syncs a step": synchronised,
    }
    for way in arms.values():
        for _ in range(warmup):
            timer_step(w, way)
    pending.clear()
    times: dict[str, list[float]] = {name: [] for name in arms}
    read: list[float] = []
    for r in cells.repeats(repeats):
        names = list(arms)
        order = names[r % 3 :] + names[: r % 3]
        for name in order:
            times[name].append(_pass(dev, functools.partial(timer_step, w, arms[name]), steps))
            if pending:  # settle, between passes as the worker does: not part of the step
                pending[-1][1].synchronize()
                step_ms = sum(b.elapsed_time(e) for b, e, t in pending if t == "step_s")
                read.append(step_ms / 1000.0 / steps)
                pending.clear()
    rows = _rows("step timer", times, baseline="untimed")
    base = times["untimed"]
    for name in list(arms)[1:]:
        diffs = [v - b for v, b in zip(times[name], base, strict=True)]
        med, low, high = median_interval(diffs)
        rel = median_interval([d / b for d, b in zip(diffs, base, strict=True)])
        rows.append(
            Row(
                "timer cost",
                f"{name.split(',')[0]} - untimed",
                len(diffs),
                1e6 * med,
                1e6 * low,
                1e6 * high,
                rel,
            )
        )
    med, low, high = median_interval(read)
    rows.append(
        Row(
            "events' reading",
            "step_s as read",
            len(read),
            1e6 * med,
            1e6 * low,
            1e6 * high,
            median_interval([v / b for v, b in zip(read, base, strict=True)]),
        )
    )
    return rows


# ---------------------------------------------------------------- the table

HEADER = ("mechanism", "arm", "n", "median us/step", "95% interval (us)", "ratio to baseline")


def format_table(rows: Sequence[Row]) -> str:
    cells = [HEADER]
    for row in rows:
        sign = "+" if row.mechanism == "timer cost" else ""  # a difference's share of untimed
        ratio = (
            "1 (baseline)"
            if row.ratio is None
            else f"{row.ratio[0]:{sign}.3f} [{row.ratio[1]:{sign}.3f}, {row.ratio[2]:{sign}.3f}]"
        )
        cells.append(
            (
                row.mechanism,
                row.arm,
                str(row.n),
                f"{row.median_us:.1f}",
                f"[{row.low_us:.1f}, {row.high_us:.1f}]",
                ratio,
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    right = {2, 3}
    lines = []
    for k, c in enumerate(cells):
        lines.append(
            "  ".join(
                v.rjust(wd) if i in right else v.ljust(wd)
                for i, (v, wd) in enumerate(zip(c, widths, strict=True))
            ).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def _positive(limit: float, kind: type = int) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if not 0 < value <= limit:
            raise argparse.ArgumentTypeError(f"must be in (0, {limit}]")
        return value

    return parse


def _batches(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(",") if v.strip())
    if not values or min(values) < 1 or max(values) > 1024 or len(values) > 12:
        raise argparse.ArgumentTypeError("1 to 12 batch sizes in 1..1024, comma-separated")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: a dry run on small shapes (default: cuda, else exit 3)",
    )
    parser.add_argument(
        "--heads",
        type=_positive(16),
        default=None,
        help=f"Medusa heads (default: {SCENARIO.name}'s, {scenario_heads()})",
    )
    parser.add_argument("--batches", type=_batches, default=None)
    parser.add_argument("--hidden", type=_positive(16384), default=None)
    parser.add_argument("--vocab", type=_positive(262144), default=None)
    parser.add_argument(
        "--size", type=_positive(8192), default=None, help="matmul size, step timer part"
    )
    parser.add_argument("--steps", type=_positive(MAX_STEPS), default=None)
    parser.add_argument("--repeats", type=_positive(MAX_REPEATS), default=None)
    parser.add_argument("--warmup", type=_positive(100), default=None)
    parser.add_argument(
        "--budget-s",
        type=_positive(MAX_BUDGET_S, float),
        default=240.0,
        help="wall-clock bound of the measurements, shared equally by the "
        f"cells (at most {MAX_BUDGET_S:.0f})",
    )
    args = parser.parse_args(argv)
    defaults = GPU_DEFAULTS if args.device == "cuda" else CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.heads is None:
        args.heads = scenario_heads()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print(
            "gpu_torch_mechanisms: torch is not installed here; nothing measured", file=sys.stderr
        )
        return EXIT_NO_CUDA
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_torch_mechanisms: no CUDA device here (torch {torch.__version__}); "
            "nothing measured (run it on a GPU machine, or --device cpu for a dry run)",
            file=sys.stderr,
        )
        return EXIT_NO_CUDA
    started = time.perf_counter()
    dev = Device(args.device)
    threads = torch.get_num_threads()
    if not dev.cuda:
        torch.set_num_threads(1)  # a dry run: less contention on a shared machine
    cells = Cells(args.budget_s, len(args.batches) + 1)
    try:
        with torch.inference_mode():
            rows = measure_medusa(
                dev,
                args.batches,
                args.heads,
                args.hidden,
                args.vocab,
                args.steps,
                args.repeats,
                args.warmup,
                cells,
            )
            rows += measure_step_timer(dev, args.size, args.steps, args.repeats, args.warmup, cells)
    finally:
        torch.set_num_threads(threads)
    print(format_table(rows))
    print(
        f"device {dev.name()}; torch {torch.__version__}; {str(dev.dtype).split('.')[-1]}; "
        f"medusa: {args.heads} heads, hidden {args.hidden}, vocab {args.vocab}, batches "
        f"{','.join(map(str, args.batches))}; step timer: 8+2 matmuls of {args.size}x"
        f"{args.size} a step; {args.steps} steps a pass, {args.repeats} repeats asked "
        f"(n: done), {args.warmup} warm-up steps; total "
        f"{time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
