"""Shared test helpers: paths and a minimal valid scenario mapping."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"

MINIMAL: dict[str, Any] = {
    "name": "unit",
    "model": "tiny-llama",
    "dtype": "float32",
    "batch_size": 4,
    "draft": {"method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 3},
    "workload": {"num_prompts": 4, "input_len": 8, "max_tokens": 8},
    "variants": {
        "base": {"baseline": True, "implementation": "medusa-proposer:baseline"},
        "opt": {"implementation": "medusa-proposer:optimized"},
    },
}


@pytest.fixture
def scenario_data() -> dict[str, Any]:
    """A fresh deep copy of a valid scenario mapping to mutate."""
    return copy.deepcopy(MINIMAL)
