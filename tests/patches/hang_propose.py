"""A switchable patch that blocks vLLM's drafter for ever inside its propose, for the stall
watchdog's warm-up test: the first call made while the patch's arm is active (that arm's first
warm-up pass, in a one-engine launch) blocks in `hang`. Only one launch of a run hangs: the
first to create the file SPECBENCH_TEST_HANG_STARTED_FILE names, which it does as it starts to
hang, writing the wall clock then; the run's other launches find it and go on."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

HANG_STARTED_ENV = "SPECBENCH_TEST_HANG_STARTED_FILE"


def hang() -> None:
    while True:
        time.sleep(1.0)


def _first_to_hang() -> bool:
    """Whether this call is the run's one hang (it creates the file, with the time)."""
    path = os.environ.get(HANG_STARTED_ENV)
    if not path:
        return False
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, repr(time.time()).encode())
    os.close(fd)
    return True


def install(ctx: Any) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    original = MedusaProposer.propose
    if not ctx.claim("MedusaProposer.propose", original):
        return False

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        if ctx.active() == "on":  # switchable: the baseline's passes run vLLM's own
            ctx.hit("medusa.propose.hangs")
            if _first_to_hang():
                hang()
        return original(self, *args, **kwargs)

    ctx.mark(propose)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010
    return True
