"""One benchmark at a time per machine: a file lock in a well-known place (the system's
temporary folder, or SPECBENCH_MACHINE_LOCK), held by a run from its first launch to its end.
A second run waits, saying for whom and since when, or (no-wait) refuses in one line before any
run folder exists; `--shared-machine` takes no lock and the table says so. The kernel drops
the lock when its holder dies, however it dies, so a killed run never blocks the next.

Why: on a shared 2-core machine two runs started together both finished, and neither table
said that another benchmark shared the CPUs (issue 36).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ExitCode, SpecbenchError

LOCK_ENV = "SPECBENCH_MACHINE_LOCK"
POLL_S = 1.0
REMIND_S = 60.0  # while waiting, say so again this often


class MachineBusy(SpecbenchError):
    exit_code = ExitCode.BUSY


def lock_path() -> Path:
    given = os.environ.get(LOCK_ENV, "").strip()
    return Path(given) if given else Path(tempfile.gettempdir()) / "specbench-machine.lock"


@dataclass
class Holding:
    """How this run used the machine: the lock (None: shared), and how long it waited for
    whom."""

    path: str | None
    waited_s: float = 0.0
    waited_for: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"lock": self.path, "shared": self.path is None, "waited_s": self.waited_s,
                "waited_for": self.waited_for}


def _describe(path: Path) -> str:
    """Who holds the lock, from what its holder wrote into it."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another specbench run (it left no details)"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since_unix", 0)))
    what = info.get("what") or "a run"
    return (f"{what} (pid {info.get('pid')} on {info.get('host')}, user "
            f"{info.get('user')}) since {since}")


@contextlib.contextmanager
def machine(what: str, wait: bool = True, shared: bool = False,
            say: Callable[[str], Any] = print) -> Iterator[Holding]:
    """Hold the machine's benchmark lock for the block (`shared`: take none). Waits while
    another run holds it, saying so, or with `wait=False` raises MachineBusy naming it."""
    if shared:
        yield Holding(None)
        return
    path = lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: flock works on a read-only handle
        fd = os.open(path, os.O_RDONLY)
    try:
        started = time.monotonic()
        waited_for = None
        last_said = -REMIND_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _describe(path)
                if not wait:
                    raise MachineBusy(
                        f"the machine is busy: {holder} holds {path}; wait for it (drop "
                        "--no-wait), or run beside it with --shared-machine (the table then "
                        "says so)") from None
                now = time.monotonic()
                if waited_for is None or now - last_said >= REMIND_S:
                    say(f"waiting for the machine: {holder} holds {path} (one benchmark at a "
                        f"time; --shared-machine runs beside it), {now - started:.0f}s so far")
                    last_said = now
                waited_for = holder
                time.sleep(POLL_S)
        with contextlib.suppress(OSError):  # a read-only handle cannot say who holds it
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({
                "pid": os.getpid(), "host": socket.gethostname(),
                "user": os.environ.get("USER") or str(os.getuid()), "what": what,
                "since_unix": time.time()}).encode(), 0)
        yield Holding(str(path), round(time.monotonic() - started, 1), waited_for)
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
