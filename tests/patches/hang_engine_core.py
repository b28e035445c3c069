"""A patch that hangs the vLLM process it runs in, for the stall watchdog's test: vLLM's engine
core blocks for ever in `hang` (this file) when it receives the request numbered
SPECBENCH_TEST_HANG_AT_REQUEST (1-based, counted since it started), so the stall falls in a
chosen pass and the watchdog must name this function."""

from __future__ import annotations

import time
from typing import Any

from tests.patches.engine_core_request import act_at_request

HANG_AT_ENV = "SPECBENCH_TEST_HANG_AT_REQUEST"


def hang() -> None:
    while True:
        time.sleep(1.0)


def install(ctx: Any) -> bool:
    return act_at_request(ctx, HANG_AT_ENV, hang)
