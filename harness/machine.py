"""One benchmark at a time per machine: a file lock in a well-known place (the system's
temporary folder, or SPECBENCH_MACHINE_LOCK), held by a run from its first launch to its end.
A second run waits, saying for whom and since when, or (no-wait) refuses in one line before any
run folder exists; `--shared-machine` takes no lock and the table says so. The kernel drops
the lock when its holder dies, however it dies, so a killed run never blocks the next.
A run on GPUs takes one lock per GPU it may use instead (beside the machine's lock file), so
runs on disjoint GPU sets of one node go on together and runs whose sets overlap take turns.

Why: on a shared 2-core machine two runs started together both finished, and neither table
said that another benchmark shared the CPUs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
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


def lock_paths(gpus: Sequence[str] | None = None) -> dict[Path, str]:
    """The lock files a run takes, each with what it guards: the machine's one, or for a run
    on GPUs (`gpus`: their UUIDs or indices) one per GPU beside it, in sorted order, so two
    runs whose sets overlap take the GPUs they share in the same order (neither holds one
    that the other holds while waiting for the rest) and runs on disjoint sets never wait."""
    base = lock_path()
    if not gpus:
        return {base: "the machine"}
    named = {
        base.with_name(
            f"{base.stem}-gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', gpu)}{base.suffix}"
        ): f"GPU {gpu}"
        for gpu in gpus
    }
    return dict(sorted(named.items()))


@dataclass
class Holding:
    """How this run used the machine: the lock (None: shared; several, comma-separated: one
    per GPU), the GPUs they guard, and how long it waited for whom."""

    path: str | None
    waited_s: float = 0.0
    waited_for: str | None = None
    gpus: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "lock": self.path,
            "shared": self.path is None,
            "waited_s": self.waited_s,
            "waited_for": self.waited_for,
            "gpus": self.gpus,
        }


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
    return (
        f"{what} (pid {info.get('pid')} on {info.get('host')}, user "
        f"{info.get('user')}) since {since}"
    )


@dataclass
class _Lock:
    """One lock file taken for a run: waits for it (saying so) or refuses, then signs it."""

    path: Path
    guards: str  # "the machine", "GPU GPU-..."
    wait: bool
    say: Callable[[str], Any]
    started: float

    def _busy(self, holder: str) -> MachineBusy:
        return MachineBusy(
            f"{self.guards} is busy: {holder} holds {self.path}; wait for it (drop --no-wait), "
            "or run beside it with --shared-machine (the table then says so)"
        )

    def _take(self, fd: int) -> str | None:
        """Flock `fd`, polling; the holder waited for, if any."""
        waited_for, last_said = None, -REMIND_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return waited_for
            except BlockingIOError:
                holder = _describe(self.path)
                if not self.wait:
                    raise self._busy(holder) from None
                now = time.monotonic()
                if waited_for is None or now - last_said >= REMIND_S:
                    per = " per GPU" if self.guards != "the machine" else ""
                    self.say(
                        f"waiting for {self.guards}: {holder} holds {self.path} (one "
                        f"benchmark at a time{per}; --shared-machine runs beside it), "
                        f"{now - self.started:.0f}s so far"
                    )
                    last_said = now
                waited_for = holder
                time.sleep(POLL_S)

    @contextlib.contextmanager
    def held(self, what: str) -> Iterator[str | None]:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: flock works on a read-only handle
            fd = os.open(self.path, os.O_RDONLY)
        try:
            waited_for = self._take(fd)
            with contextlib.suppress(OSError):  # a read-only handle cannot say who holds it
                os.ftruncate(fd, 0)
                os.pwrite(
                    fd,
                    json.dumps(
                        {
                            "pid": os.getpid(),
                            "host": socket.gethostname(),
                            "user": os.environ.get("USER") or str(os.getuid()),
                            "what": what,
                            "since_unix": time.time(),
                        }
                    ).encode(),
                    0,
                )
            yield waited_for
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextlib.contextmanager
def machine(
    what: str,
    wait: bool = True,
    shared: bool = False,
    say: Callable[[str], Any] = print,
    gpus: Sequence[str] | None = None,
) -> Iterator[Holding]:
    """Hold the machine's benchmark lock for the block (`shared`: take none; `gpus`, a run on
    those GPUs: one lock per GPU instead, all of them, so runs on other GPUs of the node go on
    beside it). Waits while another run holds one, saying so, or with `wait=False` raises
    MachineBusy naming it."""
    if shared:
        yield Holding(None)
        return
    started = time.monotonic()
    paths = lock_paths(gpus)
    with contextlib.ExitStack() as stack:
        waited = [
            stack.enter_context(_Lock(path, guards, wait, say, started).held(what))
            for path, guards in paths.items()
        ]
        yield Holding(
            ", ".join(str(p) for p in paths),
            round(time.monotonic() - started, 1),
            "; ".join(w for w in waited if w) or None,
            sorted(set(gpus)) if gpus else None,
        )
