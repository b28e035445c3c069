"""SIGTERM, SIGINT and SIGKILL of `specbench run` at each phase of a real engine's launch: while
vLLM's engine starts, during the warm-up, while measuring, and while specbench writes the
results. Afterwards no process of the launch is left (its session is empty), and the run folder
is readable: its manifest says interrupted (SIGTERM, SIGINT), or history names it with why it
leaves it out (SIGKILL: the manifest still says running; writing: the report was never written).

One engine start per case. SIGTERM while measuring (a CI job cancelled) runs in the
integration tier; the other eleven cases are in the slow tier (pytest -m slow)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.results.run import load_run
from harness.wire.progress import read_progress
from testkit.processes import processes_in, sessions_of, start_specbench, wait_gone
from tests.conftest import ROOT, SCENARIOS
from tests.faults import SLOW_WRITE_ENV, fault_env

pytestmark = pytest.mark.integration

PHASES = ("start", "warm-up", "measuring", "writing")
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL}
CI_CASE = ("SIGTERM", "measuring")


def _scenario(tmp_path: Path, phase: str) -> Path:
    """The demo, short passes; long phases except where the case signals at the end."""
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.pop("precision")
    data["workload"].update(num_prompts=4, max_tokens=16)
    # 4 prompts a pass: warm-up 'warmup / 4' passes, then 'repeats' measured ones.
    data.update(name=f"signal-{phase}", warmup=160 if phase == "warm-up" else 16, repeats=400)
    if phase == "writing":
        data["repeats"] = 4
    data["step_times"] = False
    data["speed_probe"] = False  # read with the step timer
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _stage(results: Path) -> tuple[str | None, int]:
    notes = list((results / "r" / "work").glob("*/progress.json"))
    note = read_progress(notes[0]) if notes else None
    return (None, 0) if note is None else (str(note.get("stage")), int(note.get("passes", 0)))


def _reached(phase: str, results: Path, sessions: set[int], marker: Path) -> bool:
    if phase == "start":  # vLLM's engine core runs, no pass yet
        return any("EngineCor" in p for p in processes_in(sessions)) and _stage(results)[0] is None
    if phase == "warm-up":
        return _stage(results)[0] == "warming up"
    if phase == "measuring":
        stage, passes = _stage(results)
        return stage == "measuring" and passes >= 2
    return marker.exists()


def _signal_at(phase: str, sig: signal.Signals, tmp_path: Path) -> tuple[int, str, set[int], float]:
    """Run the case's scenario, send `sig` once `phase` is reached; returns the exit code,
    stderr, the launch's sessions and the seconds from the signal to specbench's exit."""
    results = tmp_path / "results"
    marker = tmp_path / "writing"
    proc = start_specbench(
        "run", str(_scenario(tmp_path, phase)), "--results-dir", str(results), "--run-id", "r",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=fault_env({SLOW_WRITE_ENV: f"30:{marker}"} if phase == "writing" else {}),
    )  # fmt: skip
    sessions: set[int] = set()
    try:
        deadline = time.monotonic() + 900  # the machine lock may make it wait for other runs
        while not _reached(phase, results, sessions, marker):
            assert proc.poll() is None, f"ended before {phase}: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"{phase} never came"
            sessions |= sessions_of(results)
            time.sleep(0.05)
        sessions |= sessions_of(results)
        sent = time.monotonic()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=180)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stderr, sessions, took


CASES = [
    pytest.param(
        name,
        phase,
        marks=[] if (name, phase) == CI_CASE else [pytest.mark.slow],
        id=f"{name}-{phase}",
    )
    for name in SIGNALS
    for phase in PHASES
]


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_a_signal_at_each_phase_leaves_no_process_and_a_readable_folder(
    tmp_path: Path, name: str, phase: str
) -> None:
    code, stderr, sessions, took = _signal_at(phase, SIGNALS[name], tmp_path)
    results = tmp_path / "results"
    assert sessions, "no process of the launch was seen"
    wait_gone(sessions, timeout_s=30)  # SIGKILL: the worker's lifeline ends the group
    assert "Traceback" not in stderr
    run = load_run(results / "r")
    status = run.manifest.status
    history = subprocess.run(
        [sys.executable, "-m", "harness.cli", "history", "--results-dir", str(results)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert history.returncode == 0 and "Traceback" not in history.stderr, history.stderr
    named = [x for x in history.stderr.splitlines() if str(results / "r") in x]
    if name == "SIGKILL":
        assert code == -signal.SIGKILL
        assert status == ("complete" if phase == "writing" else "running")
        assert len(named) == 1, history.stderr
    elif phase == "writing":
        # The launches are done and stored; specbench ends before the report is written.
        assert code in (130, -signal.SIGTERM, 128 + signal.SIGTERM), stderr
        assert status == "complete" and not (run.path / "summary.json").exists()
        assert len(named) == 1 and "it has no summary.json" in named[0], history.stderr
        assert all(r.status == "ok" for r in run.runs)
    else:
        assert code == 130, stderr
        assert status == "interrupted"
        assert [r.status for r in run.runs] == ["interrupted"]
        assert len(named) == 1 and "interrupted" in named[0], history.stderr
        if phase == "measuring":  # the passes measured before the signal are kept, as data
            kept = run.runs[0].result
            assert kept is not None and len(kept.passes) >= 2, run.runs[0].error
            assert "before it kept in its record" in str(run.runs[0].error)
    print(
        f"{name} at {phase}: exit {code} {took:.1f} s after the signal, manifest {status}, "
        f"history: {named[0] if named else '-'}"
    )
