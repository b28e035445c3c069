"""Finding the processes a run started, to prove none outlives it."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: str) -> tuple[str, int] | None:
    """(command name, session id) of a live, non-zombie process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else (name, int(fields[3]))


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is dead for our purpose)."""
    return _stat(str(pid)) is not None


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
        stat = _stat(proc.name)
        if needle in blob and stat is not None and stat[1] != os.getsid(0):
            found.add(stat[1])
    return found


def processes_in(sessions: set[int]) -> list[str]:
    """Live processes in any of `sessions`, as 'pid name'."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            stat = _stat(proc.name)
            if stat is not None and stat[1] in sessions:
                found.append(f"{proc.name} {stat[0]}")
    return found
