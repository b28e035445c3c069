"""Test-only faults planted in a specbench run's processes (see sitecustomize here): a test
starts specbench with fault_env(...) and the faults it names."""

from __future__ import annotations

import os
from pathlib import Path

from tests.faults.sitecustomize import (
    NOOP_SWITCH_ENV,
    RENAMED_WRAP_ENV,
    SLOW_CHOICE_ENV,
    SLOW_WRITE_ENV,
    STALL_BOUNDS_ENV,
    TAKEN_PORT_ENV,
)

__all__ = [
    "FAULTS_DIR",
    "NOOP_SWITCH_ENV",
    "SLOW_CHOICE_ENV",
    "RENAMED_WRAP_ENV",
    "SLOW_WRITE_ENV",
    "STALL_BOUNDS_ENV",
    "TAKEN_PORT_ENV",
    "fault_env",
]

# First on PYTHONPATH, it makes Python load this folder's sitecustomize in every process.
FAULTS_DIR = Path(__file__).resolve().parent


def fault_env(
    faults: dict[str, str] | None = None, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment to start specbench with: `base` (default: this process's), this folder
    first on PYTHONPATH, and `faults` (variables of sitecustomize here; a fault may also be
    set in a scenario's env, reaching only that launch's processes)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(FAULTS_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    env.update(faults or {})
    return env
