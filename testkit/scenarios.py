"""Scenarios the tests and benchmarks start from: MINIMAL, a minimal valid scenario mapping
(the tests' `scenario_data` fixture is a fresh copy of it), and fault_scenario, a scenario
file for the fake workers of the fault tests (tests/fakes/worker.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

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


def fake_model(tmp_path: Path) -> Path:
    """A folder that passes the pre-flight model checks (fake workers never load it)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 100})
    )
    (model / "model.safetensors").write_bytes(b"")
    return model


def fault_scenario(
    tmp_path: Path, modes: dict[str, str], timeout_s: float = 60, repeats: int = 2, **extra: Any
) -> Path:
    """A scenario file in `tmp_path` whose variants (the first the baseline) run the fake
    worker in the given FAKE_MODEs, on fake_model."""
    data: dict[str, Any] = {
        "name": "faults",
        "model": str(fake_model(tmp_path)),
        "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 4},
        "warmup": 0,
        "repeats": repeats,
        "timeout_s": timeout_s,
        **extra,
        "variants": {
            name: {"baseline": i == 0, "env": {"FAKE_MODE": mode}}
            for i, (name, mode) in enumerate(modes.items())
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
