"""Where a model-runner step's time goes, timed inside vLLM's worker processes; and the
engine's heartbeat (install_heartbeat, at the end), the stall watchdog's sign of life.

Installed by the plugin when SPECBENCH_STEP_TIMES=1: it wraps the model runner's methods and
adds up, in this process, since it started:
- steps and step_s: execute_model + sample_tokens, one engine step (prefill or decode);
- forward_s: the target model's forward inside the step (with speculation, the verification
  forward over k + 1 tokens per request);
- draft_s: the drafter's work inside the step.
The rest of a step (input preparation, logits, sampling or rejection, bookkeeping) is
step_s - forward_s - draft_s. The worker reads the totals through collective_rpc before and
after each measured pass (their difference is the pass's).

The wrap points differ by runner (both from vLLM's source; harness.config.vllm_internals):
- V1 (vllm/v1/worker/gpu_model_runner.py; the CPU runner inherits it): _model_forward is the
  forward, propose_draft_token_ids the draft.
- V2 (vllm/v1/worker/gpu/model_runner.py; vllm/v1/worker/cpu/model_runner.py subclasses it):
  the forward is inline in execute_model, from step_timing.forward_start() to
  kv_connector.finish_forward() (FULL replay, PIECEWISE or eager alike), so those two calls
  start and stop it; the draft is the speculator's prepare_propose (0.34) and propose, whose
  class is known once the runner has built it (wrapped at its first sample_tokens).

How a call is timed depends on the device. On a CPU the host clock is the device's: each call
is timed with perf_counter, nothing waits. On CUDA the host returns before the device's work
ends, and synchronising around every call (8 times a step) would serialise what async
scheduling overlaps, changing what is timed: instead a pair of CUDA events is recorded on the
current stream around each call, without waiting, and the pairs are read (one wait for the
last event) when the totals are asked for, between passes. Nothing is recorded while a stream
captures a CUDA graph (a capture run is not a step, and an event there would be baked in).

The speed probe (install_probe; SPECBENCH_SPEED_PROBE=1, with the timer): before each engine
step, outside the runner's timed methods, a fixed pure-Python loop (PROBE_LOOP iterations)
that no change to vLLM runs is timed on the host: probes and probe_s add up its count and
time. It measures the machine's speed in the same passes without being part of any change
(harness.analysis.adjusted adjusts the end-to-end row by it); 75-110 µs a step on this CPU.
Not a torch kernel: a 48 x 48 torch matmul timed beside it ran 9.5% faster in the demo's
optimized arm than in its baseline (the torch runtime's state after the step differs by
arm), while the loop did not move (docs/measurements.md). Its twin (harness.engine.twin,
TwinnedProbe) runs the same loop at the same moment in a process of its own: each probe's
ratio to its twin's run adds up in pair_log, the check of the probe in which the machine's
speed cancels.
"""

from __future__ import annotations

import collections
import functools
import math
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# The probe's loop lives with its twin, which runs it in a process that imports that module
# alone; read from here too (testkit.patches.speed_probe).
from harness.engine.twin import PROBE_LOOP as PROBE_LOOP
from harness.engine.twin import Twin
from harness.engine.twin import probe_loop as probe_loop

# Totals of this process (one vLLM worker, one TP rank).
TOTALS: dict[str, float] = {
    "steps": 0.0,
    "step_s": 0.0,
    "forward_s": 0.0,
    "draft_s": 0.0,
    "probes": 0.0,
    "probe_s": 0.0,
    "twins": 0.0,
    "twin_s": 0.0,
    "pair_log": 0.0,
    "twin_asked": 0.0,
    "twin_wait_s": 0.0,  # the worker's wait for the twin's "go", before each probe
}
# A probe over its twin's run, log, clipped at this: a twin that another process held up on
# its core (the engine's front end, on this 2-core CPU) takes 20-60% longer now and then.
PAIR_CLIP = 0.10
# The twin runs beside every TWIN_EVERY-th probe: the worker's wait for its answer took about
# 100 µs a time inside vLLM here (3% of the demo's pass at every probe); a quarter of the pairs
# still check the probe to +-0.3% over 60 blocks.
TWIN_EVERY = 4
# Which runner method adds to which total (execute_model and sample_tokens both to step_s).
TIMED = {
    "execute_model": "step_s",
    "sample_tokens": "step_s",
    "_model_forward": "forward_s",
    "propose_draft_token_ids": "draft_s",
}

_installed = False


class Event(Protocol):
    """What the timer needs of torch.cuda.Event(enable_timing=True)."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...  # milliseconds, as CUDA gives it


class Clock:
    """Adds each timed call's duration to TOTALS."""

    def start(self) -> Any:
        """A token for stop(); None: this call is not timed."""
        return time.perf_counter()

    def stop(self, started: Any, total: str) -> None:
        TOTALS[total] += time.perf_counter() - started

    def settle(self) -> None:
        """Make TOTALS whole (the device clock's pending pairs read)."""


class EventClock(Clock):
    """Device time between events recorded on the current stream around each call, read only
    when the totals are asked for (settle): no wait inside a step."""

    def __init__(
        self, make_event: Callable[[], Event], capturing: Callable[[], bool] = lambda: False
    ) -> None:
        self.make_event = make_event
        self.capturing = capturing
        self.pending: list[tuple[Event, Event, str]] = []

    def start(self) -> Any:
        if self.capturing():  # a graph capture is no step; its events would replay
            return None
        event = self.make_event()
        event.record()
        return event

    def stop(self, started: Any, total: str) -> None:
        end = self.make_event()
        end.record()
        self.pending.append((started, end, total))

    def settle(self) -> None:
        if not self.pending:
            return
        self.pending[-1][1].synchronize()  # one stream: every earlier event is done too
        for begin, end, total in self.pending:
            TOTALS[total] += begin.elapsed_time(end) / 1000.0
        self.pending.clear()


def _clock() -> Clock:
    import torch

    if torch.cuda.is_available():
        return EventClock(
            lambda: torch.cuda.Event(enable_timing=True), torch.cuda.is_current_stream_capturing
        )
    return Clock()


def _timed(
    fn: Callable[..., Any], total: str, clock: Clock, counts_step: bool = False
) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = clock.start()
        try:
            return fn(*args, **kwargs)
        finally:
            if started is not None:
                clock.stop(started, total)
                if counts_step:  # each step runs the target's forward once
                    TOTALS["steps"] += 1

    wrapper.__specbench_step_timer__ = True  # type: ignore[attr-defined]
    return wrapper


def _wrapped(fn: Any) -> bool:
    return bool(getattr(fn, "__specbench_step_timer__", False))


def wrap(runner_class: type, clock: Clock) -> None:
    """Wrap a V1 runner class's timed methods (once: a wrapped one is left as it is)."""
    for name, total in TIMED.items():
        fn = getattr(runner_class, name)
        if not _wrapped(fn):
            setattr(
                runner_class, name, _timed(fn, total, clock, counts_step=name == "_model_forward")
            )


# Model Runner V2: the methods that make the step, and the drafter's.
V2_STEP = ("execute_model", "sample_tokens")
V2_DRAFT = ("prepare_propose", "propose")
_forward = threading.local()  # the forward's start, between forward_start and finish_forward


def wrap_v2(
    runner_class: type, timing_class: type, connector_classes: tuple[type, ...], clock: Clock
) -> None:
    """Wrap Model Runner V2: the step's two methods, the forward between the step timing
    collector's forward_start and a KV connector's finish_forward, and (at the first
    sample_tokens of a runner with a speculator) the speculator class's draft methods."""
    for name in V2_STEP:
        fn = getattr(runner_class, name)
        if not _wrapped(fn):
            setattr(runner_class, name, _timed(fn, "step_s", clock))
    inner: Any = vars(runner_class)["sample_tokens"]  # wrapped just above, in this class
    if not getattr(inner, "__specbench_draft_hook__", False):

        @functools.wraps(inner)
        def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
            speculator = getattr(self, "speculator", None)
            if speculator is not None:
                wrap_speculator(type(speculator), clock)
            return inner(self, *args, **kwargs)

        sample_tokens.__specbench_draft_hook__ = True  # type: ignore[attr-defined]
        sample_tokens.__specbench_step_timer__ = True  # type: ignore[attr-defined]
        setattr(runner_class, "sample_tokens", sample_tokens)  # noqa: B010

    start = getattr(timing_class, "forward_start")  # noqa: B009
    if not _wrapped(start):

        @functools.wraps(start)
        def forward_start(self: Any, *args: Any, **kwargs: Any) -> Any:
            _forward.started = clock.start()
            return start(self, *args, **kwargs)

        forward_start.__specbench_step_timer__ = True  # type: ignore[attr-defined]
        setattr(timing_class, "forward_start", forward_start)  # noqa: B010
    for connector in connector_classes:
        finish = connector.__dict__.get("finish_forward")
        if finish is None or _wrapped(finish):
            continue
        setattr(connector, "finish_forward", _finisher(finish, clock))  # noqa: B010


def _finisher(finish: Callable[..., Any], clock: Clock) -> Callable[..., Any]:
    @functools.wraps(finish)
    def finish_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return finish(self, *args, **kwargs)
        finally:
            started = getattr(_forward, "started", None)
            _forward.started = None
            if started is not None:
                clock.stop(started, "forward_s")
                TOTALS["steps"] += 1

    finish_forward.__specbench_step_timer__ = True  # type: ignore[attr-defined]
    return finish_forward


def wrap_speculator(speculator_class: type, clock: Clock) -> None:
    """A V2 speculator's draft methods, where its class has them (0.32: propose; 0.34 adds
    prepare_propose); once per class."""
    for name in V2_DRAFT:
        fn = getattr(speculator_class, name, None)
        if fn is not None and not _wrapped(fn):
            setattr(speculator_class, name, _timed(fn, "draft_s", clock))


def _install_v1(clock: Clock) -> str | None:
    """V1's runner, where this vLLM has it (0.34 has none); why not, else None."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as exc:  # absent (0.34) or unimportable here
        return f"V1: {type(exc).__name__}: {exc}"
    wrap(GPUModelRunner, clock)
    return None


def _install_v2(clock: Clock) -> str | None:
    """Model Runner V2, where it imports (it needs Triton); why not, else None."""
    try:
        from vllm.v1.worker.gpu import kv_connector
        from vllm.v1.worker.gpu.async_utils import StepTimingCollector
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    except Exception as exc:  # no Triton (V1 on this CPU), or another layout
        return f"V2: {type(exc).__name__}: {exc}"
    connectors = tuple(
        c
        for c in vars(kv_connector).values()
        if isinstance(c, type) and "finish_forward" in c.__dict__
    )
    wrap_v2(GPUModelRunner, StepTimingCollector, connectors, clock)
    return None


TIMER = "the step timer (where the speedup goes)"


def check_parts(passes: list[Any], speculative: bool) -> str | None:
    """Why a launch's step times cannot be trusted (None: they can): every pass's parts must
    lie inside its steps (forward and draft positive and adding up to less than the step's own
    time, the draft only where the launch speculates). A wrap point that moved in a vLLM
    release these tests never ran (0.33, 0.34, CUDA graphs) shows here on the user's machine:
    a forward that never starts adds nothing, a wrapped method that nests in another counts
    twice. `passes`: records with .step_times (steps, step_s, forward_s, draft_s) or None."""
    timed = [(p.repeat, p.step_times) for p in passes if p.step_times is not None]
    for repeat, st in timed:
        parts = st.forward_s + st.draft_s
        why = (
            "no step"
            if st.steps <= 0
            else "no forward"
            if st.forward_s <= 0
            else "parts longer than the steps"
            if parts > st.step_s * 1.001
            else "no draft time"
            if speculative and st.draft_s <= 0
            else "draft time without speculation"
            if not speculative and st.draft_s > 0
            else None
        )
        if why is not None:
            return (
                f"{TIMER}: its parts did not add up in pass {repeat} ({why}: {st.steps} "
                f"steps, step {st.step_s * 1e3:.2f} ms, forward {st.forward_s * 1e3:.2f} "
                f"ms, draft {st.draft_s * 1e3:.2f} ms), so this vLLM's wrap points are not "
                "where the timer expects them; its rows are left out of this launch"
            )
    return None


def install() -> None:
    """Wrap the runners' methods (once per process; V1 and V2 where each imports: the one
    vLLM builds is timed) and add the read-out method to vLLM's worker wrapper. Wraps
    whatever is there now, so a swap or overlay installed first keeps its code and is timed
    too."""
    global _installed
    if _installed:
        return
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    from harness.wire.protocol import STEP_TIMES_RPC

    clock = _clock()
    missing = [why for why in (_install_v1(clock), _install_v2(clock)) if why]
    if len(missing) == 2:
        raise RuntimeError("no model runner to time: " + "; ".join(missing))

    def step_times(self: Any) -> dict[str, float]:
        clock.settle()
        if _PROBE is not None:
            _PROBE.settle()
        return dict(TOTALS)

    setattr(WorkerWrapperBase, STEP_TIMES_RPC, step_times)
    _installed = True


def probing(fn: Callable[..., Any], probe: Callable[[], float]) -> Callable[..., Any]:
    """`fn` (an engine step's entry) running and timing `probe` first, into TOTALS."""

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        TOTALS["probe_s"] += probe()
        TOTALS["probes"] += 1
        return fn(*args, **kwargs)

    step.__specbench_probe__ = True  # type: ignore[attr-defined]
    return step


def _wrap_step_entry(marker: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Wrap vLLM's worker wrapper's execute_model, the one entry of every engine step on
    either runner, with `wrap`, once per process: not where its wrapper (`marker`, which
    functools.wraps carries outward through the others) is already there."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    fn = WorkerWrapperBase.execute_model
    if not getattr(fn, marker, False):
        setattr(WorkerWrapperBase, "execute_model", wrap(fn))  # noqa: B010


class TwinnedProbe:
    """The probe with its twin (harness.engine.twin) running beside it, started at the first
    probe of the process that steps the engine, and run beside every `every`-th probe (the
    worker waits for its answer, which costs the step). Each such probe is paired with its
    twin's run: the pair's log ratio, clipped at +-PAIR_CLIP (a twin held up by another
    process on its core is not the probe's own move), adds up in TOTALS["pair_log"], the
    twin's time in "twin_s", the pairs in "twins" (the runs asked for in "twin_asked"). Where
    the twin cannot start or stops answering, the probe goes on alone (the passes from then on
    carry no twin: harness.engine.worker.step_delta)."""

    def __init__(
        self,
        start: Callable[[], Any] | None = None,
        lead: Callable[[], bool] | None = None,
        every: int = TWIN_EVERY,
    ) -> None:
        self._start = start or Twin  # Twin() starts the twin's process
        self._lead = lead or _first_rank
        self.every = every
        self.calls = 0
        self.twin: Any = None
        self.failed: str | None = None
        self.waiting: collections.deque[float] = collections.deque()  # probes not yet paired

    def __call__(self) -> float:
        if self.twin is None and self.failed is None:
            try:
                if not self._lead():  # only TP rank 0's totals are read: one twin a launch
                    self.failed = "not the first rank: no twin"
                else:
                    self.twin = self._start()
            except OSError as exc:
                self.failed = f"the probe's twin did not start: {exc}"
        self.calls += 1
        twinned = False
        if self.twin is not None and self.calls % self.every == 0:
            self._pair(self.twin.collect())
            asked = time.perf_counter()
            twinned = self.twin.start()
            TOTALS["twin_wait_s"] += time.perf_counter() - asked
            if twinned:
                TOTALS["twin_asked"] += 1
            else:
                self.failed, self.twin = "the probe's twin stopped answering", None
        own = probe_loop()
        if twinned:
            self.waiting.append(own)
        return own

    def _pair(self, twin_times: list[float]) -> None:
        for twin_s in twin_times:
            own = self.waiting.popleft()
            TOTALS["twins"] += 1
            TOTALS["twin_s"] += twin_s
            ratio = math.log(own / twin_s) if own > 0 and twin_s > 0 else 0.0
            TOTALS["pair_log"] += min(PAIR_CLIP, max(-PAIR_CLIP, ratio))

    def settle(self) -> None:
        """Pair the twin's outstanding results, as before the totals are read."""
        if self.twin is not None:
            self._pair(self.twin.collect(wait=True))


def _first_rank() -> bool:
    """Whether this process is the launch's first rank (the one whose totals are read)."""
    try:
        import torch.distributed as dist

        return not dist.is_initialized() or dist.get_rank() == 0
    except Exception:  # noqa: BLE001 - no torch.distributed here: a single process
        return True


_PROBE: TwinnedProbe | None = None


def install_probe() -> None:
    """The speed probe (with its twin) before every engine step; its totals are read with the
    step timer's."""
    global _PROBE
    if _PROBE is None:
        _PROBE = TwinnedProbe()
    probe = _PROBE
    _wrap_step_entry("__specbench_probe__", lambda fn: probing(fn, probe))


# --- the heartbeat: the stall watchdog's sign of life from inside the engine ------------------
# Installed by the plugin in every process of a launch (whether or not its steps are timed):
# vLLM's worker wrapper's execute_model, the one entry of every engine step on either runner,
# rewrites the heartbeat file (harness.wire.progress.write_heartbeat) when a step starts for
# the first time in this process and then, at most every HEARTBEAT_EVERY_S, as steps end. A
# step that never ends (a hang in the forward, the drafter, a collective) stops it, in any
# phase; the parent reads it each tick (harness.execute.progress.StallWatch).
HEARTBEAT_STEPS_KEPT = 64  # the last steps whose median the heartbeat carries


class Heartbeat:
    """This process's engine steps, told to the parent at most every `every_s`."""

    def __init__(
        self,
        write: Callable[[int, float | None], None],
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write, self.every_s, self.clock = write, every_s, clock
        self.steps = 0
        self.durations: collections.deque[float] = collections.deque(maxlen=HEARTBEAT_STEPS_KEPT)
        self._last: float | None = None

    def started(self) -> float:
        """A step starts: the first one of this process says that it runs the engine."""
        now = self.clock()
        if self._last is None:
            self._last = now
            self.write(0, None)
        return now

    def ended(self, started: float) -> None:
        now = self.clock()
        self.steps += 1
        self.durations.append(now - started)
        if self._last is None or now - self._last >= self.every_s:
            self._last = now
            self.write(self.steps, statistics.median(self.durations))


def beating(fn: Callable[..., Any], heart: Heartbeat) -> Callable[..., Any]:
    """`fn` (an engine step's entry) telling `heart` when it starts and ends."""

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        started = heart.started()
        result = fn(*args, **kwargs)
        heart.ended(started)  # a step that raised did not end well: no sign of life
        return result

    step.__specbench_heartbeat__ = True  # type: ignore[attr-defined]
    return step


def install_heartbeat() -> None:
    """Wrap vLLM's worker wrapper's execute_model with the heartbeat (once per process)."""
    from harness.wire.progress import write_heartbeat
    from harness.wire.protocol import HEARTBEAT_EVERY_S

    _wrap_step_entry(
        "__specbench_heartbeat__",
        lambda fn: beating(fn, Heartbeat(write_heartbeat, HEARTBEAT_EVERY_S)),
    )
