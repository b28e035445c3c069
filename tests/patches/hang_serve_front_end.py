"""A patch that hangs vLLM's API server, for the fault test of a serve front end that stops
answering: the server's completion handler blocks its event loop for ever (a synchronous
sleep, so /health and every stream stop too) when it receives the completion request numbered
SPECBENCH_TEST_HANG_SERVER_AT_REQUEST (1-based, counted since the server started). Installed
only in the API server process (the engine core and workers serve no HTTP)."""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any

HANG_AT_ENV = "SPECBENCH_TEST_HANG_SERVER_AT_REQUEST"


def hang() -> None:
    while True:
        time.sleep(1.0)


FRONT_ENDS = {"vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main"}


def _front_end() -> bool:
    """This process serves HTTP: vLLM's server module is its __main__ (`python -m`: runpy
    leaves it out of sys.modules under its own name) or was imported."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) in FRONT_ENDS or bool(FRONT_ENDS & sys.modules.keys())


def install(ctx: Any) -> bool:
    if not _front_end():
        return False  # the engine core and workers serve no HTTP
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

    original = OpenAIServingCompletion.create_completion
    if not ctx.claim("OpenAIServingCompletion.create_completion", original):
        return False
    hang_at = int(os.environ.get(HANG_AT_ENV, "1"))
    received = 0

    @functools.wraps(original)
    async def create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal received
        received += 1
        ctx.hit("api_server.create_completion", {"received": received})
        if received >= hang_at:
            hang()  # blocks the event loop: the whole front end stops answering
        return await original(self, *args, **kwargs)

    ctx.mark(create_completion)
    setattr(OpenAIServingCompletion, "create_completion", create_completion)  # noqa: B010
    return True
