"""The step timer's two clocks. On CUDA each timed call gets a pair of events
recorded without waiting, read once when the totals are asked for; here the events are a
stand-in with the same three methods on the host clock (no CUDA on this machine: the torch-level
comparison with synchronised timing is benchmarks/gpu_torch_mechanisms.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness.engine import steptimes
from harness.engine.steptimes import TOTALS, Clock, EventClock, wrap


class HostEvent:
    """torch.cuda.Event's timing interface on the host clock; counts its waits."""

    waits = 0

    def __init__(self) -> None:
        self.at: float | None = None

    def record(self) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        HostEvent.waits += 1

    def elapsed_time(self, end: HostEvent) -> float:
        assert self.at is not None and end.at is not None
        return 1000.0 * (end.at - self.at)


def _runner() -> type:
    class Runner:
        def execute_model(self) -> None:
            time.sleep(0.002)
            self._model_forward()
            self.propose_draft_token_ids()

        def sample_tokens(self) -> None:
            time.sleep(0.001)

        def _model_forward(self) -> None:
            time.sleep(0.003)

        def propose_draft_token_ids(self) -> None:
            time.sleep(0.001)

    return Runner


@pytest.fixture(autouse=True)
def _zero_totals() -> Any:
    saved = dict(TOTALS)
    TOTALS.update(dict.fromkeys(TOTALS, 0.0))
    yield
    TOTALS.update(saved)


@pytest.mark.parametrize("clock_kind", ["host", "events"])
def test_both_clocks_add_up_the_same_parts(clock_kind: str) -> None:
    clock: Clock = Clock() if clock_kind == "host" else EventClock(HostEvent)
    runner = _runner()
    wrap(runner, clock)
    wrap(runner, clock)  # a second install leaves the wrapped methods alone
    HostEvent.waits = 0
    r = runner()
    for _ in range(5):
        r.execute_model()
        r.sample_tokens()
    if clock_kind == "events":
        assert TOTALS["step_s"] == 0.0 and HostEvent.waits == 0  # nothing read or waited for
        assert len(clock.pending) == 20  # type: ignore[attr-defined]
    clock.settle()
    assert TOTALS["steps"] == 5
    assert HostEvent.waits == (1 if clock_kind == "events" else 0)
    # execute_model (>= 6 ms) + sample_tokens (>= 1 ms) per step; forward >= 3, draft >= 1.
    assert TOTALS["step_s"] >= 5 * 0.007 and TOTALS["forward_s"] >= 5 * 0.003
    assert TOTALS["draft_s"] >= 5 * 0.001
    assert TOTALS["forward_s"] + TOTALS["draft_s"] < TOTALS["step_s"]
    clock.settle()  # read again: nothing pending, nothing added
    assert TOTALS["steps"] == 5 and HostEvent.waits == (1 if clock_kind == "events" else 0)


def test_the_host_clock_is_chosen_without_cuda() -> None:
    import torch

    assert not torch.cuda.is_available()
    assert type(steptimes._clock()) is Clock


def _v2() -> tuple[type[Any], type[Any], type[Any], type[Any]]:
    """Model Runner V2's shape (0.34): the forward inline in execute_model between the step
    timing collector's forward_start and the KV connector's finish_forward; the draft in
    sample_tokens through the speculator's prepare_propose and propose."""

    class Timing:
        def forward_start(self) -> None: ...

    class Connector:
        def finish_forward(self) -> None: ...

    class Speculator:
        def prepare_propose(self) -> None:
            time.sleep(0.001)

        def propose(self) -> None:
            time.sleep(0.002)

    class Runner:
        def __init__(self) -> None:
            self.step_timing, self.kv_connector = Timing(), Connector()
            self.speculator = Speculator()

        def execute_model(self) -> None:
            time.sleep(0.005)  # input preparation
            self.step_timing.forward_start()
            time.sleep(0.003)  # the model (replay, piecewise or eager)
            self.kv_connector.finish_forward()

        def sample_tokens(self) -> None:
            time.sleep(0.001)  # sampling, rejection
            self.speculator.prepare_propose()
            self.speculator.propose()

    return Runner, Timing, Connector, Speculator


@pytest.mark.parametrize("clock_kind", ["host", "events"])
def test_model_runner_v2_is_timed_at_its_own_points(clock_kind: str) -> None:
    clock: Clock = Clock() if clock_kind == "host" else EventClock(HostEvent)
    runner, timing, connector, speculator = _v2()
    steptimes.wrap_v2(runner, timing, (connector,), clock)
    steptimes.wrap_v2(runner, timing, (connector,), clock)  # a second install changes nothing
    r = runner()
    for _ in range(4):
        r.execute_model()
        r.sample_tokens()
    clock.settle()
    assert TOTALS["steps"] == 4
    # Step: >= 8 ms + >= 4 ms; forward >= 3 ms (not the 5 ms before it); draft >= 3 ms.
    assert TOTALS["forward_s"] >= 4 * 0.003 and TOTALS["draft_s"] >= 4 * 0.003
    assert TOTALS["step_s"] >= 4 * 0.012
    assert TOTALS["forward_s"] + TOTALS["draft_s"] < TOTALS["step_s"]
    assert TOTALS["forward_s"] < 4 * 0.005  # the input preparation is not in it
    assert getattr(speculator.propose, "__specbench_step_timer__", False)


def test_a_forward_without_its_start_and_a_capture_add_nothing() -> None:
    """A finish_forward with no forward_start before it (a dummy run) adds no step; while a
    stream captures a CUDA graph no event is recorded (the capture is no step, and an event
    would be baked into the graph)."""
    capturing = [True]
    clock = EventClock(HostEvent, lambda: capturing[0])
    runner, timing, connector, _ = _v2()
    steptimes.wrap_v2(runner, timing, (connector,), clock)
    r = runner()
    r.execute_model()
    r.sample_tokens()
    assert clock.pending == [] and TOTALS["steps"] == 0
    capturing[0] = False
    r.kv_connector.finish_forward()
    clock.settle()
    assert TOTALS["steps"] == 0 and TOTALS["forward_s"] == 0.0
    r.execute_model()
    clock.settle()
    assert TOTALS["steps"] == 1 and TOTALS["forward_s"] > 0


def test_parts_that_do_not_add_up_drop_the_timer_with_the_reason() -> None:
    """The self-check a launch runs on the user's machine before its step rows are printed:
    a forward that never started (a V2 release whose forward_start moved), parts longer than
    the steps (a wrapped method nested in another), a draft missing where the launch
    speculates; consistent passes pass."""
    from harness.engine.steptimes import check_parts
    from harness.wire.records import StepTimes

    def passes(*times: tuple[int, float, float, float]) -> list[Any]:
        return [
            type(
                "P",
                (),
                {"repeat": i, "step_times": StepTimes(steps=n, step_s=s, forward_s=f, draft_s=d)},
            )()
            for i, (n, s, f, d) in enumerate(times)
        ]

    good = (10, 0.010, 0.004, 0.003)
    assert check_parts(passes(good, good), speculative=True) is None
    assert check_parts(passes((10, 0.010, 0.004, 0.0)), speculative=False) is None
    no_forward = check_parts(passes(good, (10, 0.010, 0.0, 0.003)), speculative=True)
    assert no_forward is not None and "in pass 1 (no forward" in no_forward
    assert no_forward.endswith("its rows are left out of this launch")
    nested = check_parts(passes((10, 0.010, 0.008, 0.004)), speculative=True)
    assert nested is not None and "parts longer than the steps" in nested
    missing = check_parts(passes((10, 0.010, 0.004, 0.0)), speculative=True)
    assert missing is not None and "no draft time" in missing


def test_the_speed_probe_runs_before_each_step_outside_its_timed_parts() -> None:
    """The probe wraps the step's entry: it runs first, its time goes to probe_s (never to
    the step's parts), and a pass's probes come back with its step times."""
    from harness.engine.worker import step_delta

    order: list[str] = []

    def probe() -> float:
        order.append("probe")
        return 0.25

    def step(x: int) -> int:
        order.append("step")
        return x

    before = dict(TOTALS)
    assert steptimes.probing(step, probe)(7) == 7
    assert order == ["probe", "step"]
    assert TOTALS["probes"] == before["probes"] + 1
    assert TOTALS["probe_s"] == pytest.approx(before["probe_s"] + 0.25)
    assert TOTALS["step_s"] == before["step_s"]
    assert steptimes.probe_loop() > 0
    got = step_delta(before, dict(TOTALS))
    assert got is not None and got.probes == 1 and got.probe_s == pytest.approx(0.25)
    unprobed = step_delta({**before, "probes": 0.0}, {**before, "probes": 0.0})
    assert unprobed is not None and unprobed.probes is None and unprobed.probe_s is None
