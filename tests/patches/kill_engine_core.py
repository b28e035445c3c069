"""A patch that kills the vLLM process it runs in, for the test of how an engine core's death
is told: vLLM's engine core (the process that adds requests to its scheduler) ends at once with
exit code 3 (os._exit: no stack, no cleanup) when it receives the request numbered
SPECBENCH_TEST_KILL_AT_REQUEST (1-based, counted since it started), so the death falls in a
chosen pass."""

from __future__ import annotations

import functools
import os
from typing import Any

KILL_AT_ENV = "SPECBENCH_TEST_KILL_AT_REQUEST"
EXIT_CODE = 3


def install(ctx: Any) -> bool:
    from vllm.v1.engine.core import EngineCore

    original = EngineCore.add_request
    if not ctx.claim("EngineCore.add_request", original):
        return False
    kill_at = int(os.environ.get(KILL_AT_ENV, "1"))
    received = 0

    @functools.wraps(original)
    def add_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal received
        received += 1
        ctx.hit("engine_core.add_request", {"received": received})
        if received >= kill_at:
            os._exit(EXIT_CODE)
        return original(self, *args, **kwargs)

    ctx.mark(add_request)
    setattr(EngineCore, "add_request", add_request)  # noqa: B010
    return True
