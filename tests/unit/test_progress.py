"""Progress while a run is in flight: the worker's note, how the parent words it, and plain
lines that stay few in CI logs (stage changes, then every 30 s)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import parse_scenario
from harness.engine.schedule import measure_launch
from harness.execute.progress import LaunchView, describe
from harness.plan.plan import expand_plan
from harness.wire.progress import FINISHING, read_kept_passes, read_progress, write_progress
from harness.wire.protocol import PASSES_ENV, PROGRESS_ENV
from harness.wire.records import PassRecord, RequestRecord, WorkerResult


def _pass(i: int) -> PassRecord:
    requests = [
        RequestRecord(
            index=j,
            prompt_tokens=8,
            output_tokens=32,
            ttft_s=0.01,
            e2el_s=0.1,
            finish_reason="length",
            output_token_ids=[1],
        )
        for j in range(4)
    ]
    return PassRecord(
        repeat=i,
        started_unix=0.0,
        duration_s=0.5,
        requests=requests,
        spec_decode=None,
        workload_hash="w",
    )


def test_worker_note_and_its_wording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_data: dict[str, Any]
) -> None:
    [run] = expand_plan(parse_scenario(scenario_data)).runs
    note_file = tmp_path / "progress.json"
    write_progress("measuring", [_pass(0)], 8, False, 100.0)  # no PROGRESS_ENV: nothing
    assert not note_file.exists()
    monkeypatch.setenv(PROGRESS_ENV, str(note_file))
    write_progress("warming up", [], 8, False, None)
    note = read_progress(note_file)
    assert note is not None
    assert describe(run, 3, 12.0, note) == f"[1/3] {run.run_key}: warming up, 12s"
    assert describe(run, 3, 2.0, None) == f"[1/3] {run.run_key}: starting the engine, 2s"
    write_progress("measuring", [_pass(0), _pass(1)], 8, True, 100.0)
    note = read_progress(note_file)
    assert note is not None and note["requests"] == 8 and note["tokens_per_s"] == 256.0
    # Two passes in 10 s: six more take about 30 s; a precision run says "at least".
    assert describe(run, 3, 75.0, note, now=110.0) == (
        f"[1/3] {run.run_key}: measuring pass 2/>=8, 8 requests, 256 tok/s, 1m15s, ETA 30s at least"
    )


def test_plain_lines_on_stage_changes_and_every_30_s(scenario_data: dict[str, Any]) -> None:
    [run] = expand_plan(parse_scenario(scenario_data)).runs
    out = io.StringIO()
    view = LaunchView(1, stream=out, live=False, plain_every_s=30.0)
    note = {"stage": "measuring", "passes": 1, "expected": 8, "requests": 4}
    for elapsed in range(10):  # ten ticks, one stage: one line
        view.tick(run, float(elapsed), note if elapsed >= 5 else None)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "starting the engine" in lines[0] and "measuring" in lines[1]
    view._last_plain = (run.run_key, "measuring", -1e9)  # 30 s later
    view.tick(run, 40.0, note)
    assert len(out.getvalue().splitlines()) == 3
    view.close()


def test_the_first_measured_pass_gets_its_own_line(scenario_data: dict[str, Any]) -> None:
    """The worker says "measuring" before its first pass ends; the line with a pass count
    then follows at once, not 30 s later (a short run used to end without one: a real-engine
    test that looked for it failed when the parent's tick fell before the first pass)."""
    [run] = expand_plan(parse_scenario(scenario_data)).runs
    out = io.StringIO()
    view = LaunchView(1, stream=out, live=False, plain_every_s=30.0)
    view.tick(run, 1.0, {"stage": "measuring", "passes": 0, "expected": 8})
    view.tick(run, 2.0, {"stage": "measuring", "passes": 1, "expected": 8, "requests": 4})
    view.tick(run, 3.0, {"stage": "measuring", "passes": 2, "expected": 8, "requests": 8})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(": measuring, 1s") and ": measuring pass 1/8, 4 requests" in lines[1]


def test_the_warm_up_note_counts_its_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_data: dict[str, Any]
) -> None:
    [run] = expand_plan(parse_scenario(scenario_data)).runs
    note_file = tmp_path / "progress.json"
    monkeypatch.setenv(PROGRESS_ENV, str(note_file))
    write_progress("warming up", [], 8, False, None, warmup_passes=3, warmup_since=90.0)
    note = read_progress(note_file)
    assert note is not None and note["warmup_passes"] == 3 and note["warmup_since_unix"] == 90.0
    assert describe(run, 3, 12.0, note) == f"[1/3] {run.run_key}: warming up, 3 passes done, 12s"


def test_a_shared_launch_tells_and_keeps_each_pass_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_data: dict[str, Any]
) -> None:
    """Through the shipped schedule (measure_launch): every warm-up and measured pass is
    appended to the pass file once its reports are in, and each note counts the passes done
    so far, pass by pass (not block by block)."""
    variants = {"base": {"baseline": True}, "same": {}}  # an A/A: no switch, no proof
    [run] = expand_plan(parse_scenario({**scenario_data, "repeats": 4, "variants": variants})).runs
    assert run.design == "one-engine"
    note_file, kept = tmp_path / "progress.json", tmp_path / "passes.jsonl"
    monkeypatch.setenv(PROGRESS_ENV, str(note_file))
    monkeypatch.setenv(PASSES_ENV, str(kept))
    seen: list[tuple[str, int, int]] = []  # the note each pass starts under

    def measure(repeat: int, arm: str | None, block: int | None) -> PassRecord:
        note = read_progress(note_file)
        assert note is not None
        seen.append((note["stage"], note["warmup_passes"], note["passes"]))
        return _pass(repeat).model_copy(update={"arm": arm, "block": block})

    def switch(choice: str | None) -> list[list[dict[str, Any]]]:
        return [[]]

    result = WorkerResult(run_key=run.run_key, status="failed")
    measure_launch(run, measure, None, switch, None, 1, 7, result)
    warm, measured = len(result.warmup_passes), len(result.passes)
    assert warm >= 2 and measured == run.expected_passes
    assert seen == [("warming up", i, 0) for i in range(warm)] + [
        ("warming up" if i == 0 else "measuring", warm, i) for i in range(measured)
    ]
    kept_measured, kept_warm, bad = read_kept_passes(kept)
    assert (kept_measured, kept_warm, bad) == (result.passes, result.warmup_passes, 0)
    note = read_progress(note_file)
    assert note is not None and note["stage"] == FINISHING and note["passes"] == measured
