"""History and the index name every folder they leave out, one line each with why: a damaged
or missing summary (with a truncated raw record behind it), a damaged manifest, a folder with
records but no manifest, a run that did not complete; a folder damaged after it was indexed
loses its rows. The names reach a notebook (frame.attrs), the log, the CLI's stderr and a
gate's notes."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from harness.present.tables import warnings_of
from harness.results.index import history, runs
from tests.conftest import ROOT
from tests.unit.test_history import simulated


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for i, name in enumerate(["good", "torn-summary", "no-summary", "torn-manifest"]):
        simulated(root, name, 1000.0 + i, 0.0, seed=i)
    simulated(root, "stopped", 2000.0, 0.0, seed=9, status="interrupted")
    (root / "torn-summary" / "summary.json").write_text('{"status": "comp')
    # The report was never written, and a raw record is truncated.
    (root / "no-summary" / "summary.json").unlink()
    record = next((root / "no-summary" / "runs").glob("*.json"))
    record.write_text(record.read_text()[:200])
    (root / "torn-manifest" / "manifest.json").write_text('{"run_id": "torn-')
    (root / "orphan-records" / "runs").mkdir(parents=True)
    (root / "notes").mkdir()  # not a run folder: not named
    return root


def test_every_folder_left_out_is_named_with_why(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="specbench.results"):
        frame = history(store)
    assert sorted(frame["run_id"].unique()) == ["good"]
    lines: list[str] = frame.attrs["skipped"]
    assert len(lines) == 5, lines

    def line(folder: str) -> str:
        [found] = [x for x in lines if f"{store / folder}" in x]
        return found

    assert line("torn-manifest").endswith(
        "manifest.json: damaged, not JSON (Unterminated string starting at)"
    )
    assert line("orphan-records").endswith(": no manifest.json, so not a readable run")
    assert line("torn-summary").endswith(
        ": its summary.json is damaged, not JSON (Unterminated string starting at)"
    )
    no_summary = line("no-summary")
    assert ": it has no summary.json (its report was never written); " in no_summary
    assert f"{record_of(store / 'no-summary')}: invalid run record" in no_summary
    assert line("stopped").endswith(": its status is interrupted, not complete")
    assert [r.getMessage() for r in caplog.records] == [
        f"specbench: history leaves out {x}" for x in lines
    ]
    # Any status: the interrupted run is named for its missing summary instead.
    any_status = history(store, status=None).attrs["skipped"]
    assert len(any_status) == 5
    assert (
        any_status[-1] == f"{store / 'stopped'}: it has no summary.json (its report was "
        "never written)"
    )
    assert set(runs(store)["run_id"]) == {"good", "torn-summary", "no-summary", "stopped"}


def record_of(run_dir: Path) -> Path:
    return next((run_dir / "runs").glob("*.json"))


def test_a_folder_damaged_after_it_was_indexed_loses_its_rows(tmp_path: Path) -> None:
    root = tmp_path / "results"
    simulated(root, "a", 1000.0, 0.0, seed=1)
    simulated(root, "b", 1001.0, 0.0, seed=2)
    assert set(history(root)["run_id"]) == {"a", "b"}
    (root / "b" / "manifest.json").write_text("[]")
    frame = history(root)
    assert set(frame["run_id"]) == {"a"}
    assert frame.attrs["skipped"] == [
        f"{root / 'b' / 'manifest.json'}: damaged, expected a JSON object"
    ]
    assert set(runs(root)["run_id"]) == {"a"}


def test_the_history_command_prints_each_line_on_stderr(store: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "history", "--results-dir", str(store)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    told = [x for x in done.stderr.splitlines() if x.startswith("specbench: history leaves out")]
    assert len(told) == 5, done.stderr
    assert "good" in done.stdout


def test_a_gate_against_history_notes_the_folders_left_out(store: Path) -> None:
    from harness.workflow import gate_run

    latest = simulated(store, "latest", 3000.0, 0.0, seed=30)
    comparison, _ = gate_run(latest, against="history")
    assert comparison.history is not None and len(comparison.history.skipped) == 5
    left_out = [w for w in warnings_of(comparison) if w.startswith("history leaves out ")]
    assert len(left_out) == 5
    assert f"history leaves out {store / 'torn-summary'}: its summary.json is damaged" in "\n".join(
        left_out
    )
