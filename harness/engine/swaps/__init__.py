"""The swap installers, engine side: for each swap of the registry (harness.config.swaps), the
module of the same name here holds `install(ctx)`, which patches vLLM when vLLM's processes
call it (harness.engine.impls). Importing this package never imports vLLM: installers import it
when they run.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from typing import Any, Protocol

from harness.config.swaps import SWAPS

Installer = Callable[["SwapContext"], bool]


class SwapContext(Protocol):
    """What an installer gets inside a vLLM process (harness.engine.impls provides it)."""

    name: str
    logger: logging.Logger

    def active(self) -> str:
        """The choice the current pass runs (switched between passes, one-engine design)."""
        ...

    def hit(
        self, path: str, details: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
    ) -> None:
        """Report that a code path ran (what proves the choice), with what it observed: a
        mapping, or a callable giving it, called only for a path's first call in an epoch (so
        that describing a call costs the arms nothing on the others)."""
        ...

    def claim(self, owner: str, fn: Any) -> bool:
        """False when `fn` is already ours (installed once per process), else True."""
        ...

    def mark(self, fn: Any) -> None:
        """Mark a function we install, so a second install in the process is a no-op."""
        ...


def _discover() -> dict[str, Installer]:
    installers: dict[str, Installer] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        record = importlib.import_module(f"harness.config.swaps.{info.name}").SWAP
        installers[record.name] = module.install
    assert set(installers) == set(SWAPS), "every swap has one installer, of its module's name"
    return installers


INSTALLERS: dict[str, Installer] = _discover()
