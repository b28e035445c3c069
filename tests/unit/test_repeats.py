"""Repeated runs of one comparison: found in the results folder, named under the table, and
gated together with --combine, each run a launch (df = runs - 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.repeats import combined
from harness.cli import main
from harness.errors import ExitCode
from harness.present.tables import warnings_of
from harness.results.index import comparison_key, earlier_runs
from harness.results.run import load_run
from harness.results.store import save_run_record
from harness.wire.manifest import Manifest
from harness.workflow import gate_run, write_report
from testkit.stored import SCENARIO, stored


def test_earlier_runs_of_the_same_comparison_are_found_and_named(tmp_path: Path) -> None:
    first = stored(tmp_path, "r1", 100.0, 1)
    stored(tmp_path, "other-scenario", 150.0, 2, scenario_hash="h2")
    stored(tmp_path, "other-machine", 160.0, 3, cpu="cpu-y")
    second = stored(tmp_path, "r2", 200.0, 4)
    stored(tmp_path, "later", 300.0, 5)
    results = load_run(second)
    assert comparison_key(results.manifest) == comparison_key(load_run(first).manifest)
    assert earlier_runs(results) == [first]
    assert earlier_runs(load_run(first)) == []
    comparison, text = write_report(second, figures=False, fresh=True)
    assert "this comparison was run 1 time(s) before in this results folder (r1)" in text
    assert "--combine" in text
    _, first_text = write_report(first, figures=False, fresh=True)
    assert "run 1 time(s) before" not in first_text


def test_combine_treats_each_run_as_a_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        stored(tmp_path, f"r{i}", 100.0 * (i + 1), 10 + i)
    last = tmp_path / "r2"
    run = load_run(last)
    comparison, runs = combined(run, [load_run(p) for p in earlier_runs(run)])
    assert runs == 3
    row = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    assert row.estimate.error_unit == "launch" and row.estimate.error_n == 3
    assert row.estimate.df == 2.0
    assert comparison.combined == ["r0", "r1", "r2"]
    assert any(w.startswith("combined: 3 runs") for w in warnings_of(comparison))
    combined_comparison, result = gate_run(last, combine=True)
    assert combined_comparison.combined == comparison.combined and result.decisions
    # Through the CLI: the gate decides on the three runs together.
    code = main(["gate", str(last), "--combine"])
    assert code in (ExitCode.OK, ExitCode.GATE_FAILED, ExitCode.INCONCLUSIVE)
    capsys.readouterr()
    assert main(["gate", str(last), "--combine", "--against", "x"]) != ExitCode.OK
    assert "--combine gates a run with its own earlier runs" in capsys.readouterr().err


def test_combine_keeps_the_speedup_over_the_arm_without_speculation(tmp_path: Path) -> None:
    """--combine compares the runs as the normal path compares one: the no-speculation arm
    and each arm's draft tokens go in, so the 'Speedup vs no speculation' row stays."""
    from harness.present.tables import render_terminal
    from tests.unit.test_no_speculation import launches

    scenario = {
        **SCENARIO,
        "draft": {"method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 3},
        "variants": {"medusa": {"baseline": True}, "nospec": {"speculative_config": "none"}},
    }
    for i in range(2):
        run_dir = tmp_path / f"r{i}"
        Manifest.model_validate(
            {
                "run_id": f"r{i}",
                "status": "complete",
                "created_unix": 100.0 * (i + 1),
                "scenario_hash": "h1",
                "scenario": scenario,
                "fingerprint": {"cpu_model": "cpu-x", "vllm": "0.32.0"},
                "plan": {"design": "launch-per-arm"},
            }
        ).save(run_dir)
        for record in launches([1.0, 0.95 + 0.1 * i]):
            save_run_record(run_dir, record)
    run = load_run(tmp_path / "r1")
    comparison, runs = combined(run, [load_run(p) for p in earlier_runs(run)])
    assert runs == 2
    assert set(comparison.speedups) == {"medusa"}
    assert comparison.speedups["medusa"].error_n == 4  # two rounds in each of two runs
    assert [d.arm for d in comparison.decompositions] == ["medusa"]
    assert "Speedup vs no speculation" in render_terminal(comparison)


def test_a_report_reads_only_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes on earlier runs are read from the store once, when the run is made (here:
    fresh), kept in the run's across_runs.json, and a later report reads that file, not the
    store: the same notes with the earlier run gone, and no store read at all."""
    import shutil

    import harness.workflow as workflow

    stored(tmp_path, "r1", 100.0, 1)
    second = stored(tmp_path, "r2", 200.0, 2)
    _, made = write_report(second, figures=False, fresh=True)
    assert "this comparison was run 1 time(s) before in this results folder (r1)" in made
    kept = json.loads((second / workflow.ACROSS_RUNS).read_text())
    assert kept["version"] == 2 and kept["earlier"] == ["r1"] and kept["runs"] == 2
    assert [row["candidate"] for row in kept["rows"]] == ["b"]
    shutil.rmtree(tmp_path / "r1")

    def no_store(_run: object) -> list[Path]:
        raise AssertionError("a report read the run store")

    monkeypatch.setattr(workflow, "earlier_runs", no_store)
    _, again = write_report(second, figures=False)
    assert "this comparison was run 1 time(s) before in this results folder (r1)" in again
    assert "across all 2 runs" in again
    # A version-1 file kept the notes as words: a later report shows them as written.
    (second / workflow.ACROSS_RUNS).write_text(
        json.dumps({"version": 1, "earlier": ["r1"], "notes": ["an older note"]})
    )
    _, older = write_report(second, figures=False)
    assert "an older note" in older and "time(s) before" not in older
    (second / workflow.ACROSS_RUNS).unlink()
    _, bare = write_report(second, figures=False)
    assert "time(s) before" not in bare and "across all" not in bare
