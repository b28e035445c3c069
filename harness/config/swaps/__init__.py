"""The swap registry, parent side: one module per implementation swap in this package, each
declaring a `SWAP` record: its choices, the draft methods and vLLM versions it works on, the
config each choice forces, and the code paths whose report proves each choice ran. Pure data:
the parent validates scenarios and judges proof against it without importing vLLM.

Adding a swap is adding a module here and its installer, of the same module name, in
harness.engine.swaps (which imports vLLM inside vLLM's processes).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

from harness.config.platforms import Unsupported


@dataclass(frozen=True)
class Swap:
    """One implementation swap, as its module declares it (its installer: harness.engine.swaps,
    in the module of the same name)."""

    name: str
    choices: dict[str, str]  # choice -> what it runs
    methods: tuple[str, ...]  # speculative methods it applies to
    vllm: str  # the vLLM versions its installer was written against (PEP 440 specifier)
    proves: dict[str, frozenset[str]]  # choice -> code paths whose report proves it ran
    forces: dict[str, dict[str, object]] = field(default_factory=dict)  # choice -> spec keys
    # The model runners and CUDA-graph modes its code does not work under (checked per launch
    # against the platform the engine reports: harness.wire.platform.refusals).
    unsupported: tuple[Unsupported, ...] = ()
    # The part of the engine step its code runs in (a key of config.scenario.PART_ROWS): the
    # table marks that row as the change's own. None: not one part.
    part: str | None = None
    # What of the change that part's row leaves out (said beside the row's delta), if any.
    part_leaves_out: str | None = None


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


def describe_registry() -> list[str]:
    """The registry as `specbench implementations` lists it: each swap, then each choice a
    variant can name ('name:choice'), with the speculative_config it forces."""
    lines = []
    for name, swap in SWAPS.items():
        lines.append(f"{name}  (methods: {', '.join(swap.methods)}; vLLM {swap.vllm})")
        for choice, text in swap.choices.items():
            forced = swap.forces.get(choice)
            extra = f" [sets {', '.join(f'{k}={v}' for k, v in forced.items())}]" if forced else ""
            lines.append(f"  {name}:{choice:<10} {text}{extra}")
    return lines
