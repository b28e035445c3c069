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
    os.environ.setdefault(
        "SPECBENCH_MACHINE_LOCK",
        str(Path(tempfile.mkdtemp(prefix="specbench-lock-")) / "machine.lock"),
    )


@pytest.fixture
def scenario_data() -> dict[str, Any]:
    """A fresh deep copy of a valid scenario mapping to mutate."""
    return copy.deepcopy(MINIMAL)


_SESSION_START = [0.0]


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _SESSION_START[0] = time.time()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Where the tier's real-engine time went: every launch record the session's runs left
    under its temporary folder, summed by phase (a launch's WorkerResult.timings), so that
    what CI time is engine start and what is measuring is printed, not guessed."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not hasattr(config, "_tmp_path_factory"):
        return
    import json

    try:
        base = config._tmp_path_factory.getbasetemp()
    except (OSError, ValueError):
        return
    sums: dict[str, float] = {}
    launches, wall = 0, 0.0
    for path in base.glob("**/runs/*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        result = (record.get("result") or {}) if isinstance(record, dict) else {}
        timings = result.get("timings") or {}
        passes = result.get("passes") or []
        # Real vLLM engines started in this session: not a fake worker's record (no vLLM
        # version), nor a stored fixture copied into a test's folder (its passes are older).
        if (
            not isinstance(timings, dict)
            or "engine_start_s" not in timings
            or "vllm" not in (result.get("engine_versions") or {})
            or not any((p.get("started_unix") or 0) >= _SESSION_START[0] for p in passes)
        ):
            continue
        launches += 1
        wall += float(record.get("wall_s") or 0.0)
        for key, value in timings.items():
            sums[key] = sums.get(key, 0.0) + float(value or 0.0)
    if launches:
        start = sums.get("startup_s", 0) + sums.get("import_s", 0) + sums.get("engine_start_s", 0)
        terminalreporter.write_line(
            f"real engine launches that measured passes: {launches}, {wall:.0f} s in all: "
            f"start {start:.0f} s (Python, "
            f"vLLM imports {sums.get('import_s', 0):.0f} s, engine and its processes "
            f"{sums.get('engine_start_s', 0):.0f} s), warm-up {sums.get('warmup_s', 0):.0f} s, "
            f"measured {sums.get('measure_s', 0):.0f} s, shutdown "
            f"{sums.get('shutdown_s', 0):.0f} s"
        )
