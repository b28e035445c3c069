"""One pass through the flow: `specbench run --gate` loads the stored run once, parses the
scenario once, builds the per-pass frame once and computes the comparison once, and hands
that one comparison to the table, the summary, the figures and the gate. Counted with a
profile hook on the functions' code objects, so the count holds however a module imports them.

The run uses the fault-injecting fake worker (tests/fakes/worker.py) through the executor
seam: real processes, real records, no engine.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
import yaml

from harness.analysis.compare import compare_records
from harness.cli import main
from harness.config.scenario import parse_scenario
from harness.config.sweep import Sweep
from harness.execute.local import WORKER_MODULE_ENV
from harness.results.metrics import passes_frame
from harness.results.run import load_run
from harness.wire.manifest import Manifest

ROOT = Path(__file__).resolve().parents[2]
SWEEP_FIXTURE = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-sweep-small"


@contextmanager
def counting(*functions: Callable[..., Any]) -> Iterator[Counter[str]]:
    """Count the calls of `functions` made in this thread while the block runs."""
    codes: dict[CodeType, str] = {f.__code__: f.__qualname__ for f in functions}
    counts: Counter[str] = Counter(dict.fromkeys(codes.values(), 0))

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            counts[codes[frame.f_code]] += 1

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(previous)


def _scenario(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 100})
    )
    (model / "model.safetensors").write_bytes(b"")
    data = {
        "name": "one-pass",
        "model": str(model),
        "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 4},
        "warmup": 0,
        "repeats": 3,
        "rounds": 2,
        "timeout_s": 30,
        "variants": {
            "base": {"baseline": True, "env": {"FAKE_MODE": "ok"}},
            "cand": {"env": {"FAKE_MODE": "ok"}},
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_run_gate_loads_parses_frames_and_compares_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(WORKER_MODULE_ENV, "tests.fakes.worker")
    monkeypatch.setenv("FAKE_PID_DIR", str(tmp_path))
    path = _scenario(tmp_path)
    with counting(load_run, Manifest.read, parse_scenario, passes_frame, compare_records) as counts:
        code = main(
            [
                "run",
                str(path),
                "--gate",
                "--inconclusive",
                "pass",
                "--results-dir",
                str(tmp_path / "results"),
                "--run-id",
                "r",
            ]
        )
    out = capsys.readouterr()
    assert code == 0, out.err
    run_dir = tmp_path / "results" / "r"
    # The gate judged the very comparison the table shows.
    gate = json.loads((run_dir / "gate.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert gate["run_id"] == summary["run_id"] == "r" and gate["decisions"]
    assert "Output throughput" in out.out and gate["verdict"] in out.out
    assert dict(counts) == {
        "load_run": 1,
        "Manifest.read": 1,
        "parse_scenario": 1,
        "passes_frame": 1,
        "compare_records": 1,
    }


def test_a_sweeps_grid_is_expanded_once_per_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """parse_scenario validates every cell of a stored sweep; the comparison, the figures and
    the tables get those cells back instead of expanding and validating the grid again."""
    run_dir = tmp_path / SWEEP_FIXTURE.name
    shutil.copytree(SWEEP_FIXTURE, run_dir)
    with counting(Sweep.steps, load_run, parse_scenario, passes_frame) as counts:
        assert main(["report", str(run_dir)]) == 0
    assert "break-even" in capsys.readouterr().out
    assert dict(counts) == {"Sweep.steps": 1, "load_run": 1, "parse_scenario": 1, "passes_frame": 1}
