"""Finding the processes a run started, to prove none outlives it."""

from __future__ import annotations

import os
from pathlib import Path

from harness.lifeline import proc_stat, session_processes


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is dead for our purpose)."""
    return proc_stat(pid) is not None


def sessions_of(path: Path) -> set[int]:
    """Sessions of live processes whose environment mentions `path` (the runner puts the run
    folder in each worker's environment; every worker leads its own session, which its server
    and engine processes join: vLLM's setproctitle overwrites their environ, not their sid)."""
    found = set()
    needle = str(path).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            blob = (proc / "environ").read_bytes()
        except OSError:
            continue
        stat = proc_stat(proc.name)
        if needle in blob and stat is not None and stat[1] != os.getsid(0):
            found.add(stat[1])
    return found


def processes_in(sessions: set[int]) -> list[str]:
    """Live processes in any of `sessions`, as 'pid name'."""
    return [f"{pid} {name}" for sid in sessions for pid, name in session_processes(sid)]


def kill_once_engine_runs(scenario: Path, results: Path, timeout_s: float = 240) -> set[int]:
    """Start `specbench run SCENARIO`, SIGKILL it as soon as a vLLM engine core runs in one of
    its launches' sessions, and return those sessions (for the caller to check they empty)."""
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir",
         str(results), "--run-id", "killed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root, env={**os.environ})
    sessions: set[int] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while not any("EngineCor" in p for p in processes_in(sessions)):  # comm: 15 chars
            assert proc.poll() is None, "specbench ended before the engine started"
            assert time.monotonic() < deadline, "the engine never started"
            time.sleep(0.5)
            sessions |= sessions_of(results)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return sessions


def wait_gone(sessions: set[int], timeout_s: float = 30) -> None:
    """Assert every process of `sessions` is gone within `timeout_s`."""
    import time

    deadline = time.monotonic() + timeout_s
    while processes_in(sessions):
        assert time.monotonic() < deadline, f"left running: {processes_in(sessions)}"
        time.sleep(0.5)
