"""Every classification fixture the planner lets through installs in a process with the real
vLLM imported, as the plugin installs it in each of vLLM's processes: no planned overlay may
fail in every process at launch (a NameError from a statement run too early, a module that
does not exist, a method of a class that is not there). One fork per fixture, after importing
vLLM once, so each installs into a clean copy of the same modules."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import pytest

from harness.plan.diffs import read_diff
from harness.plan.overlay import Overlays
from tests.unit.test_overlay_classify import EXPECTED, FIXTURES, ROOT, classified

pytestmark = [
    pytest.mark.integration,
    pytest.mark.engine_free,  # vLLM imported, no engine
    pytest.mark.skipif(ROOT is None, reason="no vLLM installed"),
]

OVERLAYABLE = sorted(n for n, e in EXPECTED.items() if e.get("overlayable"))


def _install_in_a_fork(spec: dict[str, object]) -> str | None:
    """Install `spec` in a forked child of this process; None, or what the install raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: install, report, leave without running the parent's teardown
        os.close(read)
        try:
            from harness.engine import overlay

            overlay.install(spec, lambda key, facts: None, lambda: "base")
            message = b""
        except BaseException:  # noqa: BLE001 - whatever the install raises is the finding
            message = traceback.format_exc().encode()
        os.write(write, message[-4000:])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        got = pipe.read().decode()
    os.waitpid(pid, 0)
    return got or None


@pytest.fixture(scope="module")
def vllm_imported() -> None:
    """vLLM's modules the fixtures touch, imported once before forking (as in its workers)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import importlib

    assert ROOT is not None
    modules = set()
    for name in OVERLAYABLE:
        for f in read_diff(FIXTURES / name, ROOT).files:
            if f.path.endswith(".py") and f.old is not None and f.new is not None:
                modules.add(f.path.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
    for module in sorted(modules):
        importlib.import_module(module)
    assert "vllm" in sys.modules


@pytest.mark.usefixtures("vllm_imported")
@pytest.mark.parametrize("name", OVERLAYABLE)
def test_a_planned_overlay_installs_with_real_vllm(name: str) -> None:
    assert ROOT is not None
    got = classified(name)
    assert got.overlayable
    if not got.code:
        return  # an A/A (comments only): nothing to install
    spec = json.loads(
        Overlays(Path(ROOT), {"branch": got}, compiled=False)
        .spec(["base", "branch"], active="base")
        .model_dump_json()
    )
    assert _install_in_a_fork(spec) is None, name
