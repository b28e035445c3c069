"""Shared test helpers: paths and a fresh copy of the minimal valid scenario mapping
(testkit.scenarios.MINIMAL)."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from testkit import ROOT
from testkit.scenarios import MINIMAL

SCENARIOS = ROOT / "scenarios"

# One benchmark at a time per machine (harness.machine): the tests in parallel (pytest-xdist,
# the unit tier: fake workers, no engine) each take their own lock, so they neither wait for
# each other nor for a benchmark on this machine; tests run one at a time (the integration
# tier, real engines) take the machine's own lock like any run, and wait for a benchmark.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("SPECBENCH_MACHINE_LOCK", str(
        Path(tempfile.mkdtemp(prefix="specbench-lock-")) / "machine.lock"))


@pytest.fixture
def scenario_data() -> dict[str, Any]:
    """A fresh deep copy of a valid scenario mapping to mutate."""
    return copy.deepcopy(MINIMAL)
