"""Where the plugin installs: vLLM's front end (LLM's own process) takes nothing that vLLM
itself does not import there, while the worker that runs the model still installs the swap and
proves it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.wire.protocol import IMPL_ENV, IMPL_REPORT_DIR_ENV, STEP_TIMES_ENV
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

PROBE = Path(__file__).with_name("front_end_probe.py")
# Modules only a model runner needs: V1's and V2's runners, a proposer, specbench's swaps.
RUNNER_ONLY = (
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.v1.spec_decode.eagle",
    "harness.engine.impls",
    "harness.engine.swaps.tp_argmax_reduction",
    "harness.engine.steptimes",
)


def _probe(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE)],
        cwd=ROOT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return dict(json.loads(lines[-1].removeprefix("PROBE ")))


def test_the_front_end_imports_no_runner_and_the_worker_still_proves_the_swap(
    tmp_path: Path,
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    env = {
        IMPL_ENV: "tp-argmax-reduction:optimized",
        IMPL_REPORT_DIR_ENV: str(reports),
        STEP_TIMES_ENV: "1",
    }
    seen = _probe(env)
    modules = set(seen["modules"])
    assert "harness.engine.plugin" in modules  # vLLM loaded the plugin here
    leaked = [m for m in RUNNER_ONLY if m in modules]
    assert not leaked, f"the front end imported {leaked}"
    # The swap installed where the model runs, and its report proves the optimized path ran
    # in a process other than the front end.
    found = [json.loads(p.read_text()) for p in reports.glob("tp-argmax-reduction.*.json")]
    assert found, sorted(p.name for p in reports.iterdir())
    assert all(r["pid"] != seen["pid"] for r in found)
    assert any(r["paths"].get("eagle.local_argmax", 0) > 0 for r in found)
