"""benchmarks/gpu_torch_mechanisms.py on CPU tensors (small shapes): the Medusa baseline's H
blocking .tolist() calls against the optimized path's one wait, the step timer's interleaved
arms, the table's rows, the order-statistic interval, the bounds on its runtime, and the
one-line exit 3 without CUDA. No GPU here: the CUDA path is the same code with torch.cuda's
events, streams and pinned memory (Device)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml

from tests.conftest import ROOT, SCENARIOS

SCRIPT = ROOT / "benchmarks" / "gpu_torch_mechanisms.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_torch_mechanisms", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gtm = _load()
Device: Any = gtm.Device
HostEvent: Any = gtm.HostEvent
CPU = gtm.Device("cpu")
SMALL = [
    "--device",
    "cpu",
    "--batches",
    "1,3",
    "--hidden",
    "16",
    "--vocab",
    "50",
    "--size",
    "16",
    "--steps",
    "2",
    "--repeats",
    "6",
    "--warmup",
    "1",
]


def _heads(name: str) -> int:
    return int(yaml.safe_load((SCENARIOS / name).read_text())["draft"]["num_speculative_tokens"])


def test_default_heads_are_the_scenarios() -> None:
    assert _heads("gpu-mistral-medusa.yaml") == _heads("cpu-medusa-proposer.yaml") == 3
    assert gtm.scenario_heads() == 3
    assert gtm.parse_args(["--device", "cpu"]).heads == 3
    assert gtm.parse_args([]).heads == 3
    assert gtm.scenario_heads(ROOT / "no-such-file.yaml") == gtm.SCENARIO_HEADS


@pytest.fixture
def tolist_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shape of every tensor .tolist() is called on."""
    calls: list[tuple[int, ...]] = []
    original = torch.Tensor.tolist

    def tolist(self: torch.Tensor) -> Any:
        calls.append(tuple(self.shape))
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    return calls


@pytest.mark.parametrize("heads", [1, 3, 5])
def test_the_baseline_calls_tolist_once_per_head(
    tolist_calls: list[tuple[int, ...]], heads: int
) -> None:
    batch = 4
    m = gtm.medusa_setup(CPU, batch, gtm.medusa_weights(CPU, heads, hidden=16, vocab=50))
    drafts = gtm.medusa_step_tolist(m)
    # The bookkeeping's wait for the sampled ids, then one blocking .tolist() per head.
    assert tolist_calls == [(batch, heads + 1)] + [(batch,)] * heads
    assert len(drafts) == batch and all(len(row) == heads for row in drafts)

    tolist_calls.clear()
    on_device = gtm.medusa_step_device(m)
    # The same wait, then one read of the [batch, heads] pinned buffer after the event.
    assert tolist_calls == [(batch, heads + 1), (batch, heads)]
    assert on_device == drafts  # the same drafts either way (hidden states unchanged)
    expected = torch.stack([logit.argmax(dim=-1) for logit in gtm._head_logits(m)], dim=1)
    assert drafts == expected.tolist()


class OrderedDevice(Device):  # type: ignore[misc]
    """A CPU device that logs the optimized path's stream and event calls in order."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.log: list[str] = []

    def wait_current(self, stream: Any) -> None:
        self.log.append("copy stream waits for the compute stream")

    def on(self, stream: Any) -> Any:
        log = self.log

        class Switch:
            def __enter__(self) -> None:
                log.append("enter copy stream")

            def __exit__(self, *exc: object) -> None:
                log.append("leave copy stream")

        return Switch()

    def event(self, timing: bool = False) -> Any:
        log = self.log

        class Event(HostEvent):  # type: ignore[misc]
            def record(self, stream: Any = None) -> None:
                log.append("record")

            def synchronize(self) -> None:
                log.append("wait")

        return Event()


def test_the_optimized_path_waits_once_after_an_ordered_copy() -> None:
    """As vLLM's _copy_draft_token_ids_to_cpu: the copy stream's wait on the compute stream is
    asked before switching to it (inside, the current stream is the copy stream itself), the
    event is recorded on the copy stream, and the take waits on it once."""
    dev = OrderedDevice()
    m = gtm.medusa_setup(dev, 2, gtm.medusa_weights(dev, 3, hidden=8, vocab=20))
    gtm.medusa_step_device(m)
    assert dev.log == [
        "copy stream waits for the compute stream",
        "enter copy stream",
        "record",
        "leave copy stream",
        "wait",
    ]
    dev.log.clear()
    gtm.medusa_step_tolist(m)
    assert dev.log == []  # the baseline waits in its .tolist() calls instead


def test_both_arms_wait_for_the_sampled_ids_before_drafting() -> None:
    m = gtm.medusa_setup(CPU, 2, gtm.medusa_weights(CPU, 3, hidden=8, vocab=20))
    gtm.medusa_step_tolist(m)
    gtm.medusa_step_device(m)
    assert m.sampled.tolist() == [[2] * 4] * 2  # each step changed them on the device


def test_a_timer_step_makes_four_timed_calls_nested_as_the_runner() -> None:
    w = gtm.Workload(CPU, 8)
    seen: list[str] = []
    depth: list[str] = []

    def timed(total: str, call: Any) -> None:
        seen.append("/".join([*depth, total]))
        depth.append(total)
        call()
        depth.pop()

    gtm.timer_step(w, timed)
    assert seen == ["step_s", "step_s/forward_s", "step_s", "step_s/draft_s"]


def test_median_interval_is_the_order_statistic_one() -> None:
    xs = [float(v) for v in range(1, 16)]  # n = 15: the 4th smallest .. the 4th largest
    assert gtm.median_interval(list(reversed(xs))) == (8.0, 4.0, 12.0)
    assert gtm.median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (3.0, 1.0, 5.0)  # n < 6: min..max
    assert gtm.median_interval([2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="no values"):
        gtm.median_interval([])


def test_cpu_dry_run_prints_one_table_and_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert gtm.main(SMALL) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == ""
    assert lines[0].split() == [
        "mechanism",
        "arm",
        "n",
        "median",
        "us/step",
        "95%",
        "interval",
        "(us)",
        "ratio",
        "to",
        "baseline",
    ]
    assert set(lines[1]) == {"-", " "}
    rows = [re.split(r"\s{2,}", line) for line in lines[2:-1]]
    assert [(row[0], row[1]) for row in rows] == [
        ("medusa B=1", ".tolist() x H"),
        ("medusa B=1", "on device, 1 wait"),
        ("medusa B=3", ".tolist() x H"),
        ("medusa B=3", "on device, 1 wait"),
        ("step timer", "untimed"),
        ("step timer", "events, 8 a step"),
        ("step timer", "synchronised, 8 syncs a step"),
        ("timer cost", "events - untimed"),
        ("timer cost", "synchronised - untimed"),
        ("events' reading", "step_s as read"),
    ]
    for row in rows:
        assert len(row) == 6, row
        assert row[2] == "6"  # n: every repeat asked ran
        median = float(row[3])
        low, high = (float(v) for v in row[4].strip("[]").split(", "))
        assert low <= median <= high
        if row[1] in (".tolist() x H", "untimed"):
            assert row[5] == "1 (baseline)"
        else:
            ratio, interval = row[5].split(" ", 1)
            low, high = (float(v) for v in interval.strip("[]").split(", "))
            assert low <= float(ratio) <= high
            assert ratio.startswith("+") == (row[0] == "timer cost")
    info = lines[-1]
    assert info.startswith("device cpu")
    for part in (
        f"torch {torch.__version__}",
        "3 heads",
        "hidden 16",
        "vocab 50",
        "batches 1,3",
        "16x16",
        "2 steps a pass",
        "6 repeats",
        "total ",
    ):
        assert part in info, part


def test_without_cuda_it_exits_3_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gtm.main([]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "no CUDA device" in err and "--device cpu" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_script_exits_3_without_cuda() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 3
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "flag", [["--repeats", "42"], ["--steps", "501"], ["--budget-s", "300"], ["--batches", "0"]]
)
def test_runtime_bounds_are_enforced(flag: list[str]) -> None:
    with pytest.raises(SystemExit):
        gtm.parse_args(flag)


def test_a_cell_stops_adding_repeats_past_its_share() -> None:
    done = []
    for r in gtm.Cells(budget_s=0.01, cells=1).repeats(10):
        done.append(r)
        time.sleep(0.02)
    assert done == list(range(gtm.MIN_REPEATS))
    assert list(gtm.Cells(budget_s=60.0, cells=1).repeats(4)) == [0, 1, 2, 3]
