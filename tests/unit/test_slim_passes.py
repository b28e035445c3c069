"""A long launch keeps its passes in its pass file, not in its worker's memory: the worker
counts them (WorkerResult.passes_in_file), its precision looks read a column store of their
rows (PassTable) and each pass's proof as it ended, and the parent reads the passes back
(harness.execute.local.with_passes_from_file). Checked against the in-memory path through
the shipped measure_launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.config.scenario import Precision
from harness.engine.schedule import measure_launch, precision_status
from harness.execute.local import with_passes_from_file
from harness.results.metrics import PassTable, pass_head, pass_row, passes_frame
from harness.wire.progress import read_kept_passes
from harness.wire.protocol import PASSES_ENV
from harness.wire.records import PassRecord, RunRecord, WorkerResult
from harness.wire.spec import ArmSpec, RunSpec
from testkit.simulate import Parts, PartsLaunch, shared_run


def _launch(
    run: RunSpec, slim: bool, seed: int = 3, check: Any = None
) -> tuple[WorkerResult, list[PassRecord]]:
    """measure_launch over simulated passes with step times and counters; also returns every
    measured pass as it was made."""
    sim = PartsLaunch(Parts(), np.random.default_rng(seed))
    arms = {a.variant: a for a in run.arms}
    made: list[PassRecord] = []

    def measure(i: int, arm: str | None, block: int | None) -> PassRecord:
        record = sim.measure(i, arms[arm or run.variant], block or 0)
        made.append(record)
        return record

    result = WorkerResult(run_key=run.run_key, status="ok")
    result.stop, _ = measure_launch(
        run, measure, None, lambda _c: [[]], None, 1, 7, result, slim=slim, check_pass=check
    )
    return result, made[len(result.warmup_passes) :]


def _record(run: RunSpec, passes: list[PassRecord]) -> RunRecord:
    return RunRecord(
        run_key=run.run_key,
        variant=run.variant,
        arms=[a.variant for a in run.arms],
        round=run.round,
        order=run.order,
        status="ok",
        wall_s=1.0,
        result=WorkerResult(run_key=run.run_key, status="ok", passes=passes),
    )


def test_the_column_store_gives_passes_frames_frame() -> None:
    """PassTable.frame() is passes_frame over the same passes: values, dtypes and column
    order; a pass with other columns (no step times) is kept whole, in its place; `keep`
    drops the marked rows."""
    run = shared_run(8, step_times=True)
    sim = PartsLaunch(Parts(), np.random.default_rng(0))
    arms = {a.variant: a for a in run.arms}
    passes = [sim.measure(i, arms["opt" if i % 2 else "base"], i // 4) for i in range(40)]
    passes[17] = passes[17].model_copy(update={"step_times": None})
    table = PassTable()
    for p in passes:
        head = pass_head(
            run.run_key, p.arm or run.variant, run.round, run.cell, run.order, p.block, p.repeat
        )
        table.add(head, pass_row(p))
    want = passes_frame([_record(run, passes)])
    pd.testing.assert_frame_equal(table.frame(), want[list(table.frame().columns)])
    assert set(table.frame().columns) == set(want.columns)
    keep = [i % 5 != 0 for i in range(40)]
    pd.testing.assert_frame_equal(
        table.frame(keep),
        want[keep].reset_index(drop=True)[list(table.frame().columns)],
    )


def test_a_slim_precision_launch_looks_and_stops_as_the_in_memory_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slim launch holds no pass in its result and counts them all in passes_in_file; it
    stops where the in-memory one does (here: its block cap); the parent reads back exactly
    the passes it made, in order; and a look over the column store says what
    precision_status says over the passes themselves."""
    run = shared_run(12, Precision(mde=0.004, budget_s=3600, max_blocks=60), step_times=True)
    monkeypatch.setenv(PASSES_ENV, str(tmp_path / "mem.jsonl"))
    whole, made_whole = _launch(run, slim=False)
    monkeypatch.setenv(PASSES_ENV, str(tmp_path / "slim.jsonl"))
    slim, made_slim = _launch(run, slim=True)
    assert slim.passes == [] and slim.passes_in_file == len(made_slim) == len(whole.passes)
    assert slim.stop == whole.stop and slim.stop is not None
    assert (slim.stop.reason, slim.stop.blocks) == ("max_blocks", 60)
    assert with_passes_from_file(slim, tmp_path / "slim.jsonl") is None
    assert slim.passes == made_slim and slim.passes_in_file == 0
    # The looks agree on the same passes: the column store's against precision_status's.
    rows = PassTable()
    for p in made_slim:
        head = pass_head(
            run.run_key, p.arm or run.variant, run.round, run.cell, run.order, p.block, p.repeat
        )
        rows.add(head, pass_row(p))
    assert precision_status(run, [], 1, 7, frame=rows.frame()) == precision_status(
        run, made_slim, 1, 7
    )
    assert made_whole == whole.passes


def test_the_parent_says_when_passes_it_was_told_of_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass file that lost lines fails the launch in one line, naming the counts."""
    run = shared_run(4, step_times=True)
    kept = tmp_path / "passes.jsonl"
    monkeypatch.setenv(PASSES_ENV, str(kept))
    result, made = _launch(run, slim=True)
    assert result.passes_in_file == len(made) == run.expected_passes
    lines = kept.read_text().splitlines()
    kept.write_text("\n".join(lines[:-2]) + "\n")
    problem = with_passes_from_file(result, kept)
    assert problem == (
        f"the worker kept {len(made)} measured passes in passes.jsonl, but {len(made) - 2} "
        "could be read back"
    )


def test_a_pass_the_file_could_not_take_stays_in_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pass file (its folder gone): every pass stays whole in the result, none counted
    as in the file, and the parent has nothing to read back."""
    run = shared_run(4, step_times=True)
    monkeypatch.setenv(PASSES_ENV, str(tmp_path / "gone" / "passes.jsonl"))
    result, made = _launch(run, slim=True)
    assert result.passes == made and result.passes_in_file == 0
    assert with_passes_from_file(result, tmp_path / "gone" / "passes.jsonl") is None


def test_step_times_withdrawn_per_pass_reach_the_passes_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step timer's check runs on each pass as it ends; the first bad pass withdraws
    every pass's step times, those read back from the file included, with its line."""
    run = shared_run(4, step_times=True)
    kept = tmp_path / "passes.jsonl"
    monkeypatch.setenv(PASSES_ENV, str(kept))

    def check(p: PassRecord) -> str | None:
        return "step timer: parts did not add up in pass 5" if p.repeat == 5 else None

    result, made = _launch(run, slim=True, check=check)
    assert result.step_times_withdrawn
    assert result.left_out == ["step timer: parts did not add up in pass 5"]
    on_disk, _, _ = read_kept_passes(kept)
    assert all(p.step_times is not None for p in on_disk)  # the file keeps what was measured
    assert with_passes_from_file(result, kept) is None
    assert len(result.passes) == len(made)
    assert all(p.step_times is None for p in result.passes)


def test_unproven_passes_enter_no_slim_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slim look drops the passes that did not prove their arm, as compare drops them:
    judged once, as each pass ended."""
    run = shared_run(12, Precision(mde=0.004, budget_s=3600, max_blocks=24), step_times=True)
    arms = [
        ArmSpec.model_validate({**a.model_dump(), "implementation": "medusa-proposer:baseline"})
        if a.baseline
        else a
        for a in run.arms
    ]
    run = run.model_copy(update={"arms": arms})
    monkeypatch.setenv(PASSES_ENV, str(tmp_path / "passes.jsonl"))
    from harness.engine.schedule import PassLog

    result = WorkerResult(run_key=run.run_key, status="ok")
    log = PassLog(run, result, slim=True, harness_pid=7)
    sim = PartsLaunch(Parts(), np.random.default_rng(1))
    by_name = {a.variant: a for a in run.arms}
    for i in range(16):
        log.measured_pass(sim.measure(i, by_name["opt" if i % 2 else "base"], i // 4))
    # No report names the baseline's implementation: its passes are all unproven.
    assert log.proven == [bool(i % 2) for i in range(16)]
    assert set(log.table.frame(log.proven)["variant"]) == {"opt"}


def test_a_launch_its_worker_ended_keeps_its_file_passes_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that ended its launch itself (an engine's death mid-measuring) says why in
    its own line: the passes it kept only in the file join its failed record without words
    appended to that line; a launch with no result still gets them, with the words."""
    from harness.execute.local import with_kept_passes

    run = shared_run(4, step_times=True)
    kept = tmp_path / "passes.jsonl"
    monkeypatch.setenv(PASSES_ENV, str(kept))
    result, made = _launch(run, slim=True)
    died = result.model_copy(
        update={"status": "failed", "error": "vLLM's engine core process died during pass 9"}
    )
    back, words = with_kept_passes(run, died, kept)
    assert words == "" and back is not None
    assert back.passes == made and back.passes_in_file == 0
    assert back.error == "vLLM's engine core process died during pass 9"
    none, said = with_kept_passes(run, None, kept)
    assert none is not None and none.passes == made
    assert said.startswith(f"{len(made)} measured passes and ")
