"""The seam of the test patches that end or block vLLM's engine core in a chosen pass:
EngineCore.add_request wrapped to call `act` at the request numbered by an environment
variable (1-based, counted since the process started), each request reported as a hit."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any


def act_at_request(ctx: Any, env: str, act: Callable[[], None]) -> bool:
    """Install the wrapper (once per process: ctx.claim); False where another patch holds it."""
    from vllm.v1.engine.core import EngineCore

    original = EngineCore.add_request
    if not ctx.claim("EngineCore.add_request", original):
        return False
    act_at = int(os.environ.get(env, "1"))
    received = 0

    @functools.wraps(original)
    def add_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal received
        received += 1
        ctx.hit("engine_core.add_request", {"received": received})
        if received >= act_at:
            act()
        return original(self, *args, **kwargs)

    ctx.mark(add_request)
    setattr(EngineCore, "add_request", add_request)  # noqa: B010
    return True
