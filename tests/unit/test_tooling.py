"""The project's own checks: ruff over the tree, mypy strict over harness/."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "harness", "tests",
                             "benchmarks"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:]


def test_mypy_strict_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "harness"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
