"""Patch references that resolve to the wrong thing, refused before any launch: a constant,
and a function that needs more than the one context argument vLLM's processes pass."""

from __future__ import annotations

from typing import Any

NOT_A_FUNCTION = 3


def two_arguments(ctx: Any, extra: Any) -> None:
    """A patch function written for another calling convention."""
