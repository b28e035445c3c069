"""The design, decided once: whether a scenario's arms share one engine (one-engine: blocks of
passes, switched between arms) or each runs in its own (launch-per-arm), and the one line
that refuses a scenario asking for what its variants cannot have. The plan takes the design
from here; nothing else decides it."""

from __future__ import annotations

from harness.config.catalog import IMPLEMENTATION_CONFIG, parse_implementation
from harness.config.scenario import Cell, Scenario
from harness.errors import ScenarioError
from harness.wire.spec import Design


def one_engine_blocker(scenario: Scenario) -> str | None:
    """Why the variants cannot share one engine (None when they can): they must differ
    at most by the choice of one implementation swap, switchable at run time."""
    base = scenario.variants[scenario.baseline]
    base_impl = parse_implementation(base.implementation)[0] if base.implementation else None
    learns = scenario.learning_drafter
    if learns is not None:
        return learns
    changes = [n for n, v in scenario.variants.items() if v.change]
    swaps = [n for n, v in scenario.variants.items() if v.implementation or v.patch]
    if changes and swaps:
        return (
            f"variants.{changes[0]}.{scenario.variants[changes[0]].change} overlays a "
            f"change and variants.{swaps[0]} swaps an implementation: one engine "
            "hosts one or the other"
        )
    for name, v in scenario.variants.items():
        if not v.speculation:
            return (
                f"variants.{name} runs without speculation: vLLM 0.32 cannot switch "
                "drafting off at run time, so it needs its own engine"
            )
        if v.engine:
            return f"variants.{name}.engine changes the engine configuration"
        if v.env:
            return f"variants.{name}.env changes the environment of the engine"
        if v.patch != base.patch and not scenario.shared_patch:
            return (
                f"variants.{name}.patch installs a patch function in its own engine "
                "(switchable: true shares one, if it reads ctx.active())"
            )
        if v.python != base.python and not v.change:
            # (a variant with its own change overlays it; python: is its fallback build)
            return f"variants.{name}.python runs another vLLM build, in its own engine"
        impl = parse_implementation(v.implementation) if v.implementation else None
        forced = IMPLEMENTATION_CONFIG.get(impl, {}) if impl else {}
        extra = sorted(set(v.speculative_config) - set(forced))
        if extra:
            return f"variants.{name}.speculative_config.{extra[0]} changes the engine configuration"
        if (impl[0] if impl else None) != base_impl:
            return (
                f"variants.{name}.implementation differs from the baseline's in the "
                "swap itself, not only its choice"
            )
    return None


def resolved_design(scenario: Scenario, blocker: str | None = None) -> Design:
    """The design `run` uses: the scenario's, or (auto) one-engine where possible. `blocker`:
    why the arms cannot share one engine beyond what the scenario says (a change that cannot
    be overlaid, harness.plan.plan.overlay_design). Refuses, in one line, one-engine asked
    for where it is not possible, and a precision run (which needs it) without it."""
    why = blocker or one_engine_blocker(scenario)
    if scenario.design == "one-engine" and why is not None:
        raise ScenarioError(f"design: one-engine is not possible: {why}")
    design: Design = (
        ("one-engine" if why is None else "launch-per-arm")
        if scenario.design == "auto"
        else scenario.design
    )
    if scenario.precision is not None and design != "one-engine":
        raise ScenarioError(
            "precision: needs the one-engine design ("
            + (why or "design: launch-per-arm was chosen")
            + ")"
        )
    return design


def check_cells(cells: list[Cell], source: str) -> None:
    """A sweep's cells share one design: each cell's (its own line where it refuses), then
    one line when they differ."""
    designs: dict[Design, str] = {}
    for cell in cells:
        try:
            designs.setdefault(resolved_design(cell.scenario), cell.label)
        except ScenarioError as exc:
            raise ScenarioError(f"{source}: sweep cell {cell.label}: {exc}") from None
    if len(designs) > 1:
        raise ScenarioError(
            f"{source}: sweep: cells differ in design ("
            + "; ".join(f"{d} at {label}" for d, label in sorted(designs.items()))
            + "); set design: launch-per-arm"
        )
