"""Shared test helpers: paths and a fresh copy of the minimal valid scenario mapping
(testkit.scenarios.MINIMAL)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from testkit import ROOT
from testkit.scenarios import MINIMAL

SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def scenario_data() -> dict[str, Any]:
    """A fresh deep copy of a valid scenario mapping to mutate."""
    return copy.deepcopy(MINIMAL)
