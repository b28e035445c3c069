"""Pure expansion of a Scenario into the ordered RunSpecs that will launch, one per process.

No engine imports and no I/O beyond resolving the base folder: `specbench plan` and the tests
call this on any machine.
"""

from __future__ import annotations

import random
from pathlib import Path

from harness.config.engine_args import engine_args_for
from harness.config.scenario import (
    Cell,
    Scenario,
    ServeSettings,
    scenario_hash,
    sweep_cells,
)
from harness.errors import ScenarioError
from harness.plan.design import check_cells, resolved_design
from harness.plan.overlay import Overlays, refusal, resolve_overlays
from harness.wire.overlay import OverlaySpec
from harness.wire.spec import ArmSpec, Design, Plan, PlanCell, RunSpec


def launch_order(scenario: Scenario) -> list[tuple[str, int]]:
    """(variant, round) pairs in launch order, interleaved so drift hits every arm alike."""
    names = list(scenario.variants)
    order: list[tuple[str, int]] = []
    if scenario.interleave == "sequential":
        return [(name, r) for name in names for r in range(scenario.rounds)]
    for r in range(scenario.rounds):
        round_names = list(names)
        if scenario.interleave == "abba" and r % 2 == 1:
            round_names.reverse()
        elif scenario.interleave == "shuffle":
            random.Random(scenario.workload.seed * 1000 + r).shuffle(round_names)
        order.extend((name, r) for name in round_names)
    return order


def block_order(scenario: Scenario, round_: int) -> list[str]:
    """The arms of one balanced block in a shared launch: every arm, then the same in reverse
    (A B B A), so a linear drift inside the block hits every arm alike. The first arm is drawn
    per round (seeded), so a drift's curvature does not favour one arm in every round."""
    names = list(scenario.variants)
    random.Random(f"{scenario.workload.seed}:{round_}:block").shuffle(names)
    return names + names[::-1]


def shared_run_key(scenario: Scenario, round_: int) -> str:
    return "+".join(scenario.variants) + f".r{round_}"


def _python(scenario: Scenario, variant: str, base_dir: Path) -> str | None:
    """A variant's interpreter as an absolute path (relative ones to the scenario's folder)."""
    given = scenario.variants[variant].python
    if given is None:
        return None
    path = Path(given).expanduser()
    return str(path if path.is_absolute() else base_dir / path)


# vLLM's compile cache reloads a compiled forward without tracing it again, so an overlay's
# dispatcher in code the model compiles would never be traced (the backstop that refuses it at
# start-up never fires) and never called: it would read "ran 0 times" instead of the truth.
COMPILE_CACHE_ENV = "VLLM_DISABLE_COMPILE_CACHE"


def launch_env(scenario: Scenario, name: str, overlay: OverlaySpec | None) -> dict[str, str]:
    """A launch's environment: the scenario's, the variant's over it, and for an overlay
    vLLM's compile cache off (unless the scenario sets it), so the overlaid code is traced."""
    env = {**scenario.env, **scenario.variants[name].env}
    if overlay is not None:
        env.setdefault(COMPILE_CACHE_ENV, "1")
    return env


def _one_engine_runs(
    scenario: Scenario, serve: ServeSettings | None, base_dir: Path, overlays: Overlays | None
) -> list[RunSpec]:
    base = scenario.baseline
    patch = scenario.shared_patch
    arms = [
        ArmSpec(
            variant=n,
            baseline=v.baseline,
            implementation=f"overlay:{n}" if overlays else v.proof_label,
            switch=(f"patch:{'on' if v.patch else 'off'}" if patch else None),
        )
        for n, v in scenario.variants.items()
    ]
    overlay = overlays.spec(list(scenario.variants), base) if overlays else None
    blocks = -(-scenario.repeats // 2)  # each block runs every arm twice
    runs = []
    for r in range(scenario.rounds):
        runs.append(
            RunSpec(
                run_key=shared_run_key(scenario, r),
                order=r,
                variant="+".join(scenario.variants),
                baseline=False,
                round=r,
                repeats=blocks * 2 * len(arms),
                warmup=scenario.warmup,
                device=scenario.device,
                # The engine starts as the baseline is configured; the arms switch at run time.
                engine_args=engine_args_for(scenario, base),
                implementation=scenario.variants[base].implementation,
                env=launch_env(scenario, base, overlay),
                workload=scenario.workload,
                timeout_s=scenario.timeout_s,
                mode=scenario.mode,
                serve=serve,
                design="one-engine",
                arms=arms,
                block_order=block_order(scenario, r),
                blocks=blocks,
                precision=scenario.precision,
                gates=scenario.gates
                if scenario.precision and scenario.precision.until == "gates"
                else None,
                python=_python(scenario, base, base_dir),
                patch=patch,
                overlay=overlay,
                step_times=scenario.times_steps,
                speed_probe=scenario.speed_probe,
                model_runner=scenario.model_runner,
                profile_passes=scenario.profile.passes if scenario.profile else 0,
            )
        )
    return runs


def overlay_design(scenario: Scenario, overlays: Overlays | None) -> Design:
    """The design once the variants' changes are classified: a change that cannot be overlaid
    runs launch-per-arm on its build (python:), and without one is refused in one line."""
    blocked = overlays.blocked() if overlays else {}
    for name, findings in blocked.items():
        variant = scenario.variants[name]
        if variant.python is None:
            raise ScenarioError(refusal(name, str(variant.change), findings))
    if not blocked:
        return resolved_design(scenario)
    name = next(iter(blocked))
    why = (
        f"variants.{name}.{scenario.variants[name].change} cannot be overlaid "
        f"({blocked[name][0].line()}); it runs on its build (python:), in its own engine"
    )
    return resolved_design(scenario, why)


def proof_labels(scenario: Scenario, overlays: Overlays | None) -> dict[str, str | None]:
    """What each variant's vLLM processes must prove: an overlaid change proves its arm's
    dispatchers ran (in one engine, every arm does, the baseline's installed code included)."""
    labels = {n: v.proof_label for n, v in scenario.variants.items()}
    if overlays is None:
        return labels
    if overlay_design(scenario, overlays) == "one-engine":
        return {n: f"overlay:{n}" for n in scenario.variants}
    blocked = overlays.blocked()
    return {
        n: f"overlay:{n}" if n in overlays.variants and n not in blocked else label
        for n, label in labels.items()
    }


def _runs_of(scenario: Scenario, base_dir: Path, overlays: Overlays | None = None) -> list[RunSpec]:
    """The launches of one A/B (a scenario without a sweep, or one sweep cell) in order."""
    serve = None
    if scenario.mode == "serve":
        serve = scenario.serve.model_copy(
            update={"concurrency": scenario.serve.concurrency or scenario.batch_size}
        )
    if overlay_design(scenario, overlays) == "one-engine":
        return _one_engine_runs(scenario, serve, base_dir, overlays)
    blocked = overlays.blocked() if overlays else {}
    runs = []
    for order, (name, r) in enumerate(launch_order(scenario)):
        variant = scenario.variants[name]
        # An overlayable change in its own engine (other settings differ too); one that
        # cannot be overlaid runs on its build alone.
        overlay = (
            overlays.spec([name], name)
            if overlays and name in overlays.variants and name not in blocked
            else None
        )
        runs.append(
            RunSpec(
                run_key=f"{name}.r{r}",
                order=order,
                variant=name,
                baseline=variant.baseline,
                round=r,
                repeats=scenario.repeats,
                warmup=scenario.warmup,
                device=scenario.device,
                engine_args=engine_args_for(scenario, name),
                implementation=variant.implementation,
                env=launch_env(scenario, name, overlay),
                workload=scenario.workload,
                timeout_s=scenario.timeout_s,
                mode=scenario.mode,
                serve=serve,
                python=_python(scenario, name, base_dir),
                patch=variant.patch,
                overlay=overlay,
                step_times=scenario.times_steps,
                speed_probe=scenario.speed_probe,
                model_runner=scenario.model_runner,
                profile_passes=scenario.profile.passes if scenario.profile else 0,
            )
        )
    return runs


def sweep_order(
    scenario: Scenario, cells: list[Cell], runs: dict[str, list[RunSpec]]
) -> list[RunSpec]:
    """A sweep's launches in an order that spreads drift: round by round, the cells in a
    seeded shuffle drawn anew each round (so no cell value, and no arm, runs all first), each
    cell's launches of that round together (its arms stay paired in time)."""
    ordered: list[RunSpec] = []
    rounds = max((r.round for cell_runs in runs.values() for r in cell_runs), default=-1) + 1
    for round_ in range(rounds):
        ids = [c.id for c in cells]
        random.Random(f"{scenario.workload.seed}:{round_}:cells").shuffle(ids)
        for cell_id in ids:
            ordered += [r for r in runs[cell_id] if r.round == round_]
    return [r.model_copy(update={"order": i}) for i, r in enumerate(ordered)]


def expand_plan(
    scenario: Scenario, base_dir: Path | None = None, scenario_file: Path | None = None
) -> Plan:
    """Scenario -> Plan: one RunSpec per (variant, round) in launch order, or (one-engine
    design) one shared RunSpec per round; a sweep does so for every cell, keys prefixed with
    the cell's id, in sweep_order. Relative paths resolve against `base_dir` (default: the
    scenario file's folder, else the current one)."""
    if base_dir is None:
        base_dir = scenario_file.parent if scenario_file is not None else Path()
    base_dir = base_dir.resolve()
    cells = sweep_cells(scenario, str(scenario_file or scenario.name))
    if scenario.sweep is not None:
        check_cells(cells, str(scenario_file or scenario.name))
    overlays = {c.id: resolve_overlays(c.scenario, base_dir) for c in cells}
    first = cells[0]
    if scenario.sweep is None:
        runs = _runs_of(scenario, base_dir, overlays[first.id])
    else:
        per_cell = {
            c.id: [
                r.model_copy(
                    update={"run_key": f"{c.id}.{r.run_key}", "cell": c.id, "cell_values": c.values}
                )
                for r in _runs_of(c.scenario, base_dir, overlays[c.id])
            ]
            for c in cells
        }
        runs = sweep_order(scenario, cells, per_cell)
    found = overlays[first.id]
    return Plan(
        scenario_name=scenario.name,
        design=overlay_design(first.scenario, found),
        proof_labels=proof_labels(first.scenario, found),
        overlays={n: [f.line() for f in c.findings] for n, c in found.variants.items()}
        if found
        else {},
        scenario_hash=scenario_hash(scenario),
        baseline=scenario.baseline,
        candidates=scenario.candidates,
        runs=runs,
        base_dir=str(base_dir),
        scenario_file=str(scenario_file) if scenario_file is not None else None,
        cells=[PlanCell(id=c.id, values=c.values, label=c.label) for c in cells]
        if scenario.sweep is not None
        else [],
        scenario=scenario,
    )
