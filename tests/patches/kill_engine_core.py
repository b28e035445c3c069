"""A patch that kills the vLLM process it runs in, for the test of how an engine core's death
is told: vLLM's engine core (the process that adds requests to its scheduler) ends at once with
exit code 3 (os._exit: no stack, no cleanup) when it receives the request numbered
SPECBENCH_TEST_KILL_AT_REQUEST (1-based, counted since it started), so the death falls in a
chosen pass."""

from __future__ import annotations

import os
from typing import Any

from tests.patches.engine_core_request import act_at_request

KILL_AT_ENV = "SPECBENCH_TEST_KILL_AT_REQUEST"
EXIT_CODE = 3


def install(ctx: Any) -> bool:
    return act_at_request(ctx, KILL_AT_ENV, lambda: os._exit(EXIT_CODE))
