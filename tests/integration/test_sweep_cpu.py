"""A real sweep on vLLM: two cells of the Medusa swap (one engine each), interrupted with SIGINT
while its second cell runs, reported as it stands (the lost cell named, no break-even), then
finished with `run --resume` without repeating the finished launch. One engine run serves every
assertion about cells in records, the sweep's tables, frame, figures and break-even."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness.analysis.sweep_comparison import compare_sweep
from harness.present.outputs import SUMMARY_VERSION
from harness.results.run import load_run
from testkit.processes import start_specbench
from tests.conftest import ROOT, SCENARIOS

# The slow tier (pytest -m slow): long real-engine runs of one feature's own path.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _scenario(tmp_path: Path) -> Path:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.update(name="sweep-it", repeats=4, warmup=4, precision=None)
    data["workload"].update(num_prompts=8, max_tokens=16)
    data["sweep"] = {"axes": {"batch_size": [2, 8]}, "break_even": {"axis": "batch_size"}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sweep")
    scenario, results = _scenario(tmp), tmp / "results"
    run_dir = results / "s"
    proc = start_specbench(
        "run",
        str(scenario),
        "--results-dir",
        str(results),
        "--run-id",
        "s",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait for the first cell's record and the second cell's worker, then interrupt.
        deadline = time.time() + 400
        while time.time() < deadline:
            manifest = run_dir / "manifest.json"
            data = json.loads(manifest.read_text()) if manifest.is_file() else {}
            if len(data.get("runs", [])) == 1 and data.get("in_flight"):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the first cell never finished")
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = sorted((run_dir / "runs").glob("*.json"))
    kept = {p.name: p.read_bytes() for p in first}
    stopped = load_run(run_dir)
    stopped_sweep = compare_sweep(stopped)
    resumed = _cli("run", "--resume", str(run_dir), "--results-dir", str(results))
    return {
        "run_dir": run_dir,
        "interrupt": (proc.returncode, err),
        "kept": kept,
        "stopped": stopped,
        "stopped_sweep": stopped_sweep,
        "resumed": resumed,
    }


def test_interrupted_sweep_keeps_the_finished_cell(
    interrupted_then_resumed: dict[str, Any],
) -> None:
    code, err = interrupted_then_resumed["interrupt"]
    assert code == 130, err
    stopped = interrupted_then_resumed["stopped"]
    assert stopped.manifest["status"] == "interrupted"
    statuses = {r.cell: r.status for r in stopped.runs}
    assert sorted(statuses.values()) == ["interrupted", "ok"]
    sweep = interrupted_then_resumed["stopped_sweep"]
    lost = next(c for c in sweep.cells if statuses[c.id] == "interrupted")
    assert lost.failed == 1 and lost.comparison.candidates[0].status == "failed"
    (line,) = sweep.break_even
    assert line.crossing is None and "not estimable, fewer than 2 cells" in line.sentence


def test_resume_finishes_without_repeating(interrupted_then_resumed: dict[str, Any]) -> None:
    resumed = interrupted_then_resumed["resumed"]
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming s: 1 of 2 launch(es) kept, 1 to run" in resumed.stderr
    run_dir: Path = interrupted_then_resumed["run_dir"]
    results = load_run(run_dir)
    assert results.manifest["status"] == "complete" and len(results.manifest["resumed"]) == 1
    assert sorted(r.status for r in results.runs) == ["ok", "ok"]
    for name, content in interrupted_then_resumed["kept"].items():
        record = json.loads(content)
        if record["status"] == "ok":  # the finished launch, byte for byte
            assert (run_dir / "runs" / name).read_bytes() == content
        else:  # the interrupted one was run again; its record kept aside
            assert [p.name.split(".")[0] for p in (run_dir / "superseded").iterdir()] == [
                name.split(".")[0]
            ]
    # Every record names its cell and the cell's values.
    assert {(r.cell, r.cell_values["batch_size"]) for r in results.runs if r.cell_values} == {
        ("c00", 2),
        ("c01", 8),
    }


def test_sweep_outputs(interrupted_then_resumed: dict[str, Any]) -> None:
    run_dir: Path = interrupted_then_resumed["run_dir"]
    table = (run_dir / "table.txt").read_text()
    assert "sweep-it sweep (s)" in table and "break-even on batch_size" in table
    for cell in ("c00", "c01"):
        assert f"#### Cell {cell}: batch_size=" in (run_dir / "table.md").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["summary_version"] == SUMMARY_VERSION and len(summary["sweep"]["cells"]) == 2
    frame = pd.read_parquet(run_dir / "sweep.parquet")
    assert {"cell", "batch_size", "candidate", "metric", "delta", "ci_low"} <= set(frame)
    tput = frame[frame["metric"] == "output_throughput"].sort_values("batch_size")
    assert tput["batch_size"].tolist() == [2, 8] and tput["delta"].notna().all()
    passes = pd.read_parquet(run_dir / "passes.parquet")
    assert set(passes["cell"]) == {"c00", "c01"}
    for name in (
        "delta_vs_batch_size",
        "throughput_over_time",
        "latency_cdf_tpot",
        "acceptance_per_position",
    ):
        assert (run_dir / "figures" / f"{name}.png").stat().st_size > 5000
    sweep = compare_sweep(load_run(run_dir))
    (line,) = sweep.break_even
    assert line.crossing is not None and line.crossing.ci_low is not None
    # Acceptance is the draft's, alike in both arms of every cell.
    for sweep_cell in sweep.cells:
        acc = next(
            r for r in sweep_cell.comparison.candidates[0].rows if r.key == "acceptance_rate"
        )
        assert acc.baseline == acc.candidate
    # The plan times itself from this run: every launch matched to the same settings.
    plan = _cli("plan", str(_scenario(run_dir.parent.parent)), "--from", str(run_dir))
    assert plan.returncode == 0, plan.stderr
    assert "(2 of 2 launch(es) matched to the same settings" in plan.stdout
