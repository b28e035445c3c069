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
import os
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


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


def guard_process_group() -> None:
    """In the worker (a session and group leader): SIGTERM, from the runner's cleanup or from a
    dead parent, ends the whole group at once, so no engine process is left behind."""

    def end_group(signum: int, frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end_group)
