"""Forecasts from a stored run: what a target MDE needs, counted in the units whose noise the
interval is built from (blocks of one launch; whole launches when there are several)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.analysis.forecast import forecast
from harness.results.records import PassRecord, RunRecord, WorkerResult
from harness.results.store import load_results, save_manifest, save_run_record
from tests.factory import request


def shared_launch(round_: int, blocks: int, effect: float, rng: np.random.Generator,
                  start: float) -> RunRecord:
    """One engine hosting arms a and b in ABBA blocks: output throughput with a launch offset,
    this launch's own effect, and 2% pass noise (a pass: 2 requests x 5 tokens)."""
    offset = rng.normal(0, 0.08)
    passes = []
    t = start
    for b in range(blocks):
        for arm in ("a", "b", "b", "a"):
            level = offset + (effect if arm == "b" else 0.0) + rng.normal(0, 0.02)
            duration = 0.01 / math.exp(level)
            passes.append(PassRecord(repeat=len(passes), started_unix=t, duration_s=duration,
                                     requests=[request(0, 0.001, duration),
                                               request(1, 0.001, duration)],
                                     spec_decode=None, workload_hash="w", arm=arm, block=b))
            t += duration + 0.001
    key = f"a+b.r{round_}"
    return RunRecord(run_key=key, variant="a+b", round=round_, order=round_, status="ok",
                     exit_code=0, wall_s=t - start + 30,
                     result=WorkerResult(run_key=key, status="ok", passes=passes))


def test_several_launches_forecast_launches_not_blocks(tmp_path: Path) -> None:
    """2 launches x 40 blocks at a true -3% with a launch x arm interaction: the interval
    comes from the 2 launch means (MDE ~7%), so asking for '74 blocks' (what the within-launch
    block noise says) when the run already has 80 is wrong: it needs launches."""
    rng = np.random.default_rng(1)
    runs = [shared_launch(r, 40, math.log(0.97) + rng.normal(0, 0.02), rng, 1000.0 * r)
            for r in range(2)]
    run_dir = tmp_path / "two"
    save_manifest(run_dir, {
        "run_id": "two", "status": "complete", "fingerprint": {},
        "plan": {"design": "one-engine"},
        "scenario": {"name": "unit", "model": "tiny-llama", "batch_size": 2,
                     "workload": {"num_prompts": 2, "max_tokens": 5},
                     "variants": {"a": {"baseline": True}, "b": {}}}})
    for record in runs:
        save_run_record(run_dir, record)
    f = forecast(load_results(run_dir), 0.02)
    assert f.unit == "launch" and f.measured_units == 2
    assert f.measured_mde is not None and f.measured_mde > 0.02
    assert f.units_needed is None or f.units_needed > 2
