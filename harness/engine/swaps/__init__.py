"""The swap registry: one module per implementation swap in this package, each declaring a
`SWAP` record (its choices, the draft methods and vLLM versions it works on, the config each
choice forces, the code paths that prove each choice) and the `install(ctx)` that patches vLLM.

Adding a swap is adding one module here. Importing the registry never imports vLLM (installers
import it when vLLM's processes call them), so the parent validates scenarios against it.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class SwapContext(Protocol):
    """What an installer gets inside a vLLM process (harness.engine.impls provides it)."""

    name: str
    logger: logging.Logger

    def active(self) -> str:
        """The choice the current pass runs (switched between passes, one-engine design)."""
        ...

    def hit(self, path: str, details: dict[str, Any] | None = None) -> None:
        """Report that a code path ran (what proves the choice), with what it observed."""
        ...

    def claim(self, owner: str, fn: Any) -> bool:
        """False when `fn` is already ours (installed once per process), else True."""
        ...

    def mark(self, fn: Any) -> None:
        """Mark a function we install, so a second install in the process is a no-op."""
        ...

    def planted_delay(self) -> None:
        """The test-only fault seam: sleep when SPECBENCH_FAULT_SLOW_CHOICE names this choice."""
        ...


@dataclass(frozen=True)
class Swap:
    """One implementation swap, as declared by its module."""

    name: str
    choices: dict[str, str]  # choice -> what it runs
    methods: tuple[str, ...]  # speculative methods it applies to
    vllm: str  # the vLLM versions its installer was written against (PEP 440 specifier)
    proves: dict[str, frozenset[str]]  # choice -> code paths whose report proves it ran
    install: Callable[[SwapContext], bool] = field(repr=False)
    forces: dict[str, dict[str, object]] = field(default_factory=dict)  # choice -> spec keys


def _discover() -> dict[str, Swap]:
    swaps: dict[str, Swap] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        swap = getattr(module, "SWAP", None)
        if isinstance(swap, Swap):
            assert swap.name not in swaps, f"two swaps named {swap.name}"
            assert set(swap.proves) == set(swap.choices), f"{swap.name}: proves every choice"
            swaps[swap.name] = swap
    return swaps


SWAPS: dict[str, Swap] = _discover()
