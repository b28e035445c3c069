"""The plugin installs a worker's pieces (swap, step timer, platform reader) only where vLLM
builds a worker: at once inside WorkerWrapperBase.init_worker, otherwise when init_worker runs
(harness.engine.plugin._when_a_worker_starts; the real engine: test_plugin_processes.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine import plugin

worker_base = pytest.importorskip("vllm.v1.worker.worker_base")
WorkerWrapperBase = worker_base.WorkerWrapperBase


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real class's init_worker and the plugin's queue, restored after the test."""
    monkeypatch.setattr(WorkerWrapperBase, "init_worker", WorkerWrapperBase.init_worker)
    monkeypatch.setattr(plugin, "_pending", [])
    return []


def test_outside_a_worker_nothing_installs_until_init_worker_runs(fresh: list[str]) -> None:
    plugin._when_a_worker_starts([lambda: fresh.append("swap"), lambda: fresh.append("timer")])
    plugin._when_a_worker_starts([lambda: fresh.append("again")])  # register() ran twice
    assert fresh == []  # the front end: nothing imported, nothing installed
    with pytest.raises(Exception):  # noqa: B017, PT011 - a stand-in self: the original fails
        WorkerWrapperBase.init_worker(object(), [])
    assert fresh == ["swap", "timer", "again"]  # in order, before vLLM's own init_worker
    with pytest.raises(Exception):  # noqa: B017, PT011
        WorkerWrapperBase.init_worker(object(), [])
    assert fresh == ["swap", "timer", "again"]  # once per process


def test_inside_init_worker_the_pieces_install_at_once(
    fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def init_worker(self: Any, all_kwargs: list[dict[str, Any]]) -> None:
        # As in a spawned worker, where vLLM's init_worker loads the plugins.
        plugin._when_a_worker_starts([lambda: fresh.append("swap")])
        fresh.append("after")

    monkeypatch.setattr(WorkerWrapperBase, "init_worker", init_worker)
    WorkerWrapperBase.init_worker(object(), [])
    assert fresh == ["swap", "after"]
    assert WorkerWrapperBase.init_worker is init_worker  # not wrapped: nothing left to do


def test_running_sees_only_frames_on_the_stack() -> None:
    def outer() -> bool:
        return plugin._running(outer.__code__)

    assert outer()
    assert not plugin._running(outer.__code__)
