"""Stored runs made by hand: a one-engine launch of arms a and b in ABBA blocks with a known
effect (shared_launch), and a complete run of it saved in a results folder (stored), under
SCENARIO."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.results.store import save_run_record
from harness.wire.manifest import Manifest
from harness.wire.records import PassRecord, RunRecord, WorkerResult
from testkit.factory import request

SCENARIO = {
    "name": "unit",
    "model": "tiny-llama",
    "batch_size": 2,
    "workload": {"num_prompts": 2, "max_tokens": 5},
    "variants": {"a": {"baseline": True}, "b": {}},
}


def stored(
    root: Path,
    name: str,
    created: float,
    seed: int,
    scenario_hash: str = "h1",
    cpu: str = "cpu-x",
    effect: float = math.log(0.99),
    planned_runs: int | None = None,
) -> Path:
    """A complete one-engine run `name` under `root`: one shared_launch of 30 blocks at
    `effect`, created at `created`, its comparison keyed by `scenario_hash` and `cpu`;
    `planned_runs`: its scenario's (a look of a planned series)."""
    rng = np.random.default_rng(seed)
    run_dir = root / name
    Manifest.model_validate(
        {
            "run_id": name,
            "status": "complete",
            "created_unix": created,
            "scenario_hash": scenario_hash,
            "scenario": SCENARIO
            if planned_runs is None
            else {**SCENARIO, "planned_runs": planned_runs},
            "fingerprint": {"cpu_model": cpu, "vllm": "0.32.0"},
            "builds": {
                "a": {"vllm": "0.32.0", "vllm_location": "/x", "git": None},
                "b": {"vllm": "0.32.0", "vllm_location": "/x", "git": None},
            },
            "plan": {"design": "one-engine"},
        }
    ).save(run_dir)
    save_run_record(run_dir, shared_launch(0, 30, effect, rng, 0.0))
    return run_dir


def shared_launch(
    round_: int, blocks: int, effect: float, rng: np.random.Generator, start: float
) -> RunRecord:
    """One engine hosting arms a and b in ABBA blocks: output throughput with a launch offset,
    this launch's own effect, and 2% pass noise (a pass: 2 requests x 5 tokens)."""
    offset = rng.normal(0, 0.08)
    passes: list[PassRecord] = []
    t = start
    for b in range(blocks):
        for arm in ("a", "b", "b", "a"):
            level = offset + (effect if arm == "b" else 0.0) + rng.normal(0, 0.02)
            duration = 0.01 / math.exp(level)
            passes.append(
                PassRecord(
                    repeat=len(passes),
                    started_unix=t,
                    duration_s=duration,
                    requests=[request(0, 0.001, duration), request(1, 0.001, duration)],
                    spec_decode=None,
                    workload_hash="w",
                    arm=arm,
                    block=b,
                )
            )
            t += duration + 0.001
    key = f"a+b.r{round_}"
    return RunRecord(
        run_key=key,
        variant="a+b",
        round=round_,
        order=round_,
        status="ok",
        exit_code=0,
        wall_s=t - start + 30,
        result=WorkerResult(run_key=key, status="ok", passes=passes),
    )
