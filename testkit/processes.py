"""Starting `specbench` as the tests' child process, and finding the processes a run started,
to prove none outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.lifeline import proc_stat, session_processes
from testkit import ROOT

RESULTS_LINE = "specbench: results:"  # the line `run` ends with, naming its run folder


def sigint_default() -> None:
    """preexec_fn: SIGINT at its default in the child, whatever the suite was started with. A
    background job of a non-interactive shell (`bash -c 'pytest &'`, `nohup pytest &` in a
    script) inherits SIGINT ignored; an ignored signal stays ignored across exec (Popen's
    restore_signals leaves SIGINT alone), and Python then installs no KeyboardInterrupt
    handler, so a test's Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_specbench(*args: str, **popen: Any) -> subprocess.Popen[Any]:
    """`specbench ARGS` (python -m harness.cli) started from the repository root as a test
    interrupts it: with SIGINT at its default (sigint_default). `popen`: Popen's other
    arguments (stdout, stderr, env, text, preexec_fn to start it otherwise)."""
    popen.setdefault("preexec_fn", sigint_default)
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, **popen)


def run_scenario(
    scenario: Path,
    results_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """`specbench run SCENARIO --results-dir RESULTS_DIR ARGS` (python -m harness.cli, from the
    repository root) to its end: the finished process (stdout and stderr kept) and the run
    folder its last line names (None where it named none: the run failed before it had one).
    `env`: the whole environment (default: this process's)."""
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(scenario)]
        + ["--results-dir", str(results_dir), *args],
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
        capture_output=True,
        text=True,
    )
    line = next((x for x in done.stderr.splitlines() if x.startswith(RESULTS_LINE)), None)
    return done, Path(line[len(RESULTS_LINE) :].strip()) if line is not None else None


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
    import time

    proc = start_specbench(
        "run",
        str(scenario),
        "--results-dir",
        str(results),
        "--run-id",
        "killed",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
