"""One node, many users (harness.machine): a run on GPUs locks each GPU it may use, not the
whole machine, so runs on disjoint GPU sets hold their locks at once and runs whose sets
overlap take turns; a CPU run keeps the machine's one lock. The holder is another process
that keeps its locks until told to let go (no sleeps to race on a loaded machine); the GPUs
are names (no GPU here), and the runner's set comes from a stand-in nvidia-smi."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import env, machine
from harness.config.scenario import load_scenario
from harness.execute.runner import _lock_gpus
from harness.plan.plan import expand_plan
from tests.conftest import ROOT, SCENARIOS
from tests.unit.test_gpu_discovery import FAKE_SMI

HOLD = """
import json, sys
from harness.machine import machine
with machine("a test benchmark", gpus=json.loads(sys.argv[1])) as held:
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "machine.lock"
    monkeypatch.setenv(machine.LOCK_ENV, str(path))
    monkeypatch.setattr(machine, "POLL_S", 0.05)
    return path


@pytest.fixture
def holder(lock: Path, request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """Another run holding the GPUs the test names (indirect parameter; None: the machine)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, json.dumps(request.param)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.wait(timeout=60)


@pytest.mark.parametrize("holder", [["GPU-aaaa", "GPU-bbbb"]], indirect=True)
def test_runs_on_disjoint_gpu_sets_hold_their_locks_at_once(
    holder: subprocess.Popen[str], lock: Path
) -> None:
    with machine.machine("another user's run", wait=False, gpus=["GPU-dddd", "GPU-cccc"]) as held:
        assert held.gpus == ["GPU-cccc", "GPU-dddd"] and held.waited_for is None
    with machine.machine("a CPU run", wait=False) as held:  # the machine's lock is free
        assert held.gpus is None and held.path == str(lock)


@pytest.mark.parametrize("holder", [["GPU-aaaa", "GPU-bbbb"]], indirect=True)
def test_an_overlapping_gpu_set_is_refused_without_wait_and_keeps_nothing(
    holder: subprocess.Popen[str],
) -> None:
    with (
        pytest.raises(machine.MachineBusy) as busy,
        machine.machine("mine", wait=False, gpus=["GPU-cccc", "GPU-bbbb"]),
    ):
        pass
    assert str(busy.value).startswith(
        f"GPU GPU-bbbb is busy: a test benchmark (pid {holder.pid} on "
    )
    # GPU-cccc, taken before GPU-bbbb was found busy, was let go with the refusal.
    with machine.machine("next", wait=False, gpus=["GPU-cccc"]):
        pass


@pytest.mark.parametrize("holder", [["GPU-bbbb"]], indirect=True)
def test_an_overlapping_gpu_set_waits_then_holds_them_all(holder: subprocess.Popen[str]) -> None:
    said: list[str] = []
    waiting = threading.Event()
    outcome: dict[str, machine.Holding] = {}

    def say(line: str) -> None:
        said.append(line)
        waiting.set()

    def run() -> None:
        with machine.machine("mine", gpus=["GPU-bbbb", "GPU-aaaa"], say=say) as held:
            outcome["held"] = held

    thread = threading.Thread(target=run)
    thread.start()
    assert waiting.wait(timeout=60)
    assert "held" not in outcome
    release(holder)
    thread.join(timeout=60)
    held = outcome["held"]
    assert held.waited_for is not None and held.waited_for.startswith("a test benchmark")
    assert said[0].startswith(f"waiting for GPU GPU-bbbb: a test benchmark (pid {holder.pid} ")
    assert "one benchmark at a time per GPU" in said[0]


@pytest.mark.parametrize("holder", [None], indirect=True)
def test_a_gpu_run_does_not_wait_for_the_machines_lock(holder: subprocess.Popen[str]) -> None:
    with machine.machine("a GPU run", wait=False, gpus=["GPU-aaaa"]):
        pass
    with (
        pytest.raises(machine.MachineBusy, match="^the machine is busy: a test benchmark"),
        machine.machine("a CPU run", wait=False),
    ):
        pass


def test_each_gpu_has_its_own_lock_file_taken_in_sorted_order(lock: Path) -> None:
    paths = machine.lock_paths(["MIG-GPU-aaaa/1/0", "GPU-cccc", "GPU-bbbb", "GPU-cccc"])
    assert [p.name for p in paths] == [
        "machine-gpu-GPU-bbbb.lock",
        "machine-gpu-GPU-cccc.lock",
        "machine-gpu-MIG-GPU-aaaa_1_0.lock",
    ]
    assert all(p.parent == lock.parent for p in paths)
    assert list(machine.lock_paths(None)) == [lock]


def test_the_runner_locks_the_gpus_cuda_visible_devices_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text(FAKE_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(env, "PROC_GPUS", tmp_path / "no-proc")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-c6d4-0002")
    gpu_plan = expand_plan(load_scenario(SCENARIOS / "gpu-mistral-medusa.yaml"), SCENARIOS)
    assert _lock_gpus(gpu_plan) == ["MIG-c6d4-0002"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert _lock_gpus(gpu_plan) == ["GPU-bbbb-2222", "GPU-aaaa-1111"]
    cpu_plan = expand_plan(load_scenario(SCENARIOS / "cpu-medusa-proposer.yaml"), SCENARIOS)
    assert _lock_gpus(cpu_plan) is None
