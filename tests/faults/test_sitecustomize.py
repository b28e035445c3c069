"""The fault plugin itself, in a child Python as a run's processes start: loaded from PYTHONPATH,
inert without a fault, and patching the product modules when they are imported."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tests.faults import (
    NOOP_SWITCH_ENV,
    SLOW_CHOICE_ENV,
    STALL_BOUNDS_ENV,
    TAKEN_PORT_ENV,
    fault_env,
)


def _python(code: str, faults: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=fault_env(faults),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_without_a_fault_it_loads_and_changes_nothing() -> None:
    out = _python(
        "import sys, sitecustomize\n"
        "typing = 'typing' in sys.modules\n"  # sitecustomize imports nothing heavy
        "from harness.engine import impls, serve_worker\n"
        "print(sitecustomize.__name__, typing,\n"
        "      [type(f).__name__ for f in sys.meta_path].count('_PatchOnImport'),\n"
        "      impls.switch_epoch.__module__, serve_worker.free_port.__module__)",
        {SLOW_CHOICE_ENV: "", NOOP_SWITCH_ENV: "", TAKEN_PORT_ENV: ""},
    )
    assert out == "sitecustomize False 0 harness.engine.impls harness.engine.serve_worker"


def test_slow_choice_and_noop_switch_patch_the_swaps_on_import() -> None:
    out = _python(
        "import time\n"
        "from harness.engine.impls import switch_epoch\n"  # a name imported: the patched one
        "from harness.engine import impls\n"
        # What install() leaves (without importing vLLM): the choice active, its recorder.
        "impls._active['medusa-proposer'] = 'baseline'\n"
        "recorder = impls._Recorder('medusa-proposer', 'baseline')\n"
        "impls._recorders['medusa-proposer'] = recorder\n"
        "switch_epoch('medusa-proposer:optimized')\n"
        "print(impls._active['medusa-proposer'])\n"
        "ctx = impls._Context('medusa-proposer', recorder)\n"
        "def timed():\n"
        "    t = time.perf_counter(); ctx.hit('p'); return time.perf_counter() - t\n"
        "fast = timed()\n"
        "impls._active['medusa-proposer'] = 'optimized'\n"
        "print(fast < 0.2, timed() >= 0.3)",
        {SLOW_CHOICE_ENV: "medusa-proposer:optimized:0.3", NOOP_SWITCH_ENV: "1"},
    )
    assert out.splitlines() == ["baseline", "True True"]


def test_taken_port_is_the_first_free_port_only() -> None:
    out = _python(
        "from harness.engine import serve_worker\n"
        "print(serve_worker.free_port(), serve_worker.free_port() != 1)",
        {TAKEN_PORT_ENV: "1"},
    )
    assert out == "1 True"


def test_stall_bounds_shrink_the_watchdogs_constants() -> None:
    out = _python(
        "from harness.execute import progress\n"
        "print(progress.PASS_STALL_FLOOR_S, progress.WARMUP_STALL_S,\n"
        "      progress.ENGINE_START_STALL_S)",
        {STALL_BOUNDS_ENV: "PASS_STALL_FLOOR_S=4,WARMUP_STALL_S=7"},
    )
    assert out == "4.0 7.0 1800.0"
