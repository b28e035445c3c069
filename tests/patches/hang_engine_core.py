"""A patch that hangs the vLLM process it runs in, for the stall watchdog's test: vLLM's engine
core blocks for ever in `hang` (this file) when it receives the request numbered
SPECBENCH_TEST_HANG_AT_REQUEST (1-based, counted since it started), so the stall falls in a
chosen pass and the watchdog must name this function."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

HANG_AT_ENV = "SPECBENCH_TEST_HANG_AT_REQUEST"


def hang() -> None:
    while True:
        time.sleep(1.0)


def install(ctx: Any) -> bool:
    from vllm.v1.engine.core import EngineCore

    original = EngineCore.add_request
    if not ctx.claim("EngineCore.add_request", original):
        return False
    hang_at = int(os.environ.get(HANG_AT_ENV, "1"))
    received = 0

    @functools.wraps(original)
    def add_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal received
        received += 1
        ctx.hit("engine_core.add_request", {"received": received})
        if received >= hang_at:
            hang()
        return original(self, *args, **kwargs)

    ctx.mark(add_request)
    setattr(EngineCore, "add_request", add_request)  # noqa: B010
    return True
