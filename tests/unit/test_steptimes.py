"""The step timer's two clocks (issue 33, item 5). On CUDA each timed call gets a pair of events
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
