"""Tie a worker's process group to the specbench process that started it: when specbench dies,
even by SIGKILL (the OOM killer, a CI runner ending the job), the worker and everything in its
group (vLLM's engine core, TP workers, an API server) die with it.

The runner asks the kernel to send the worker SIGTERM when its parent dies (PR_SET_PDEATHSIG,
set between fork and exec); the worker turns SIGTERM into SIGKILL for its whole group. Linux
only; elsewhere the runner's own group kill on Ctrl-C, SIGTERM and timeouts still applies.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
# Asks a process of a launch for its Python stacks (a stalled launch, before it is ended).
DUMP_SIGNAL = signal.SIGUSR1
# How often the worker's watchdog looks for its parent.
WATCHDOG_S = 1.0


def die_with_parent() -> None:
    """preexec_fn for the runner's Popen: SIGTERM this child when the parent dies."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _end_group(code: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(code)


def guard_process_group() -> None:
    """In the worker (a session and group leader): SIGTERM, from the runner's cleanup or from a
    dead parent, ends the whole group at once, so no engine process is left behind. A watchdog
    thread also ends it when the parent is gone without a signal arriving (the death signal is
    tied to the thread that forked, and is cleared by a set-uid exec)."""

    def end_group(signum: int, frame: Any) -> None:
        _end_group(128 + signum)

    signal.signal(signal.SIGTERM, end_group)
    dump_stacks_on_signal()
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_S)
        _end_group(128 + signal.SIGTERM)

    if parent != 1:
        threading.Thread(target=watch, name="specbench-parent-watchdog", daemon=True).start()


def dump_stacks_on_signal() -> None:
    """DUMP_SIGNAL writes every thread's Python stack to stderr (the launch's log), in C, so
    also while the main thread is stuck; called in the worker and, through the plugin, in
    each of vLLM's processes."""
    with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):
        faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True)


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` handles `sig` (its SigCgt mask): a process that does not would
    die of DUMP_SIGNAL rather than answer it. Linux only; elsewhere False."""
    from pathlib import Path

    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@functools.cache
def _boot_time() -> float:
    from pathlib import Path

    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def proc_stat(pid: int | str) -> tuple[str, int, float] | None:
    """(command name, session id, start time in unix seconds) of a live, non-zombie process;
    None when it is gone (or this is not Linux)."""
    from pathlib import Path

    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return name, int(fields[3]), _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def session_processes(sid: int, started_after: float = 0.0) -> list[tuple[int, str]]:
    """Live processes of session `sid` (a worker leads its own session, which vLLM's engine
    core, TP workers and API server join) started after `started_after` (unix seconds; guards
    against a reused pid), as (pid, command name). Linux only; elsewhere nothing is found."""
    from pathlib import Path

    proc = Path("/proc")
    if not proc.is_dir():
        return []
    found = []
    for entry in proc.iterdir():
        stat = proc_stat(entry.name) if entry.name.isdigit() else None
        if stat is not None and stat[1] == sid and stat[2] + 1.0 >= started_after:
            found.append((int(entry.name), stat[0]))
    return sorted(found)


def kill_processes(pids: list[int]) -> None:
    """SIGKILL each of `pids` (leftovers of a dead run: nothing of theirs is worth keeping)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _answers(send: Callable[[int, int], None], target: int) -> bool:
    """Whether a process (os.kill) or process group (os.killpg) exists: signal 0 asks."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    return _answers(os.kill, pid)


def group_alive(pgid: int) -> bool:
    return _answers(os.killpg, pgid)
