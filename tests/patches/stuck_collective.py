"""A patch that blocks one tensor-parallel rank before a collective, for the fault test of a
stuck all-reduce: once the file SPECBENCH_TEST_STUCK_COLLECTIVE_FILE names exists (the test
creates it mid-run), TP rank 1 blocks for ever in `stuck` on entering its next all-reduce or
all-gather, so rank 0 waits in that collective for a partner that never comes."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

TRIGGER_ENV = "SPECBENCH_TEST_STUCK_COLLECTIVE_FILE"
STUCK_RANK = 1


def stuck() -> None:
    while True:
        time.sleep(1.0)


def _wrap(ctx: Any, cls: Any, name: str, trigger: str) -> bool:
    original = getattr(cls, name)
    if not ctx.claim(f"GroupCoordinator.{name}", original):
        return False

    @functools.wraps(original)
    def collective(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            self.world_size > 1
            and self.rank_in_group == STUCK_RANK
            and self.unique_name.startswith("tp")
            and Path(trigger).exists()
        ):
            ctx.hit(f"group.{name}.stuck", {"rank": self.rank_in_group})
            stuck()
        return original(self, *args, **kwargs)

    ctx.mark(collective)
    setattr(cls, name, collective)
    return True


def install(ctx: Any) -> bool:
    trigger = os.environ.get(TRIGGER_ENV)
    if not trigger:
        return False
    from vllm.distributed.parallel_state import GroupCoordinator

    reduce = _wrap(ctx, GroupCoordinator, "all_reduce", trigger)
    gather = _wrap(ctx, GroupCoordinator, "all_gather", trigger)
    return reduce and gather
