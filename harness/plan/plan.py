"""Pure expansion of a Scenario into the ordered RunSpecs that will launch, one per process.

No engine imports and no I/O beyond resolving the base folder: `specbench plan` and the tests
call this on any machine.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.config.base import StrictModel
from harness.config.catalog import IMPLEMENTATION_CONFIG, parse_implementation
from harness.config.scenario import (
    GateSpec,
    Precision,
    Scenario,
    ServeSettings,
    Workload,
    scenario_hash,
)
from harness.config.sweep import Cell, sweep_cells
from harness.errors import ScenarioError
from harness.plan.overlay import Overlays, OverlaySpec, refusal, resolve_overlays

Design = Literal["one-engine", "launch-per-arm"]


class ArmSpec(StrictModel):
    """One arm hosted by a shared (one-engine) launch."""

    variant: str = Field(description="Variant name.")
    baseline: bool = Field(description="Whether this is the baseline variant.")
    implementation: str | None = Field(description="What this arm's passes must prove ran: "
                                        "'name:choice' of a swap, or 'patch:module:function'.")
    switch: str | None = Field(
        default=None, description="What the switch makes active for this arm when it differs "
        "from `implementation` ('patch:on' or 'patch:off' for a switchable patch).",
    )

    @property
    def switch_to(self) -> str | None:
        return self.switch or self.implementation


class RunSpec(StrictModel):
    """One engine launch: a variant in a round, with everything the worker needs."""

    run_key: str = Field(description="Stable id within a run: '<variant>.r<round>'.")
    order: int = Field(description="Launch position in the plan (0-based).")
    variant: str = Field(description="Variant name.")
    baseline: bool = Field(description="Whether this is the baseline variant.")
    round: int = Field(description="Round index (0-based).")
    repeats: int = Field(description="Measured passes in this launch.")
    warmup: int = Field(description="Warm-up requests before the first measured pass.")
    device: str = Field(description="cpu or cuda.")
    engine_args: dict[str, Any] = Field(
        description="LLM(...) keywords; model names may still be built-in names."
    )
    implementation: str | None = Field(description="'name:choice' swapped in the workers.")
    env: dict[str, str] = Field(description="Environment from the scenario and the variant.")
    workload: Workload = Field(description="The workload of each measured pass.")
    timeout_s: float = Field(description="Wall-clock limit for the worker process.")
    mode: Literal["offline", "serve"] = Field(
        default="offline", description="offline engine in the worker, or a vLLM server."
    )
    serve: ServeSettings | None = Field(
        default=None, description="Serve-mode load, concurrency resolved (serve mode only)."
    )
    design: Design = Field(
        default="launch-per-arm", description="launch-per-arm: this launch runs one variant; "
        "one-engine: it hosts every arm in `arms` and switches between passes."
    )
    arms: list[ArmSpec] = Field(
        default_factory=list, description="one-engine: the arms this launch hosts."
    )
    block_order: list[str] = Field(
        default_factory=list, description="one-engine: the arm of each pass of one balanced "
        "block (e.g. A B B A); each block draws the order of its first half at random "
        "(A B B A or B A A B): schedule.block_arms."
    )
    blocks: int = Field(
        default=0, description="one-engine: blocks to run (with precision: the minimum)."
    )
    precision: Precision | None = Field(
        default=None, description="one-engine: add blocks until this precision or budget."
    )
    gates: GateSpec | None = Field(
        default=None, description="precision until: gates: the tolerances the MDEs must reach."
    )
    patch: str | None = Field(
        default=None, description="'package.module:function' installed in vLLM's processes.",
    )
    python: str | None = Field(
        default=None, description="The interpreter (or environment folder) of another vLLM "
        "build this launch runs under, as an absolute path; None: specbench's own.",
    )
    overlay: OverlaySpec | None = Field(
        default=None, description="Variants' own changes overlaid on vLLM's functions in "
        "this launch: every arm's version of each, switched like a swap.")
    step_times: bool = Field(
        default=False, description="Time the model runner's steps in vLLM's worker "
        "processes (the draft, the target's forward, the rest) per pass: where a speedup over "
        "the no-speculation arm goes (offline runs with such an arm).")
    cell: str | None = Field(
        default=None, description="Sweeps: the cell this launch belongs to ('c03').")
    cell_values: dict[str, Any] = Field(
        default_factory=dict, description="Sweeps: the cell's values (field path -> value).")

    def record_fields(self) -> dict[str, Any]:
        """What every record of this launch repeats of it: its key, arm, round, place and
        sweep cell."""
        return {"run_key": self.run_key, "variant": self.variant,
                "arms": [arm.variant for arm in self.arms] or [self.variant],
                "round": self.round, "order": self.order, "cell": self.cell,
                "cell_values": self.cell_values or None}

    @property
    def expected_passes(self) -> int:
        """Passes a complete launch returns (at least, under precision)."""
        return self.blocks * len(self.block_order) if self.design == "one-engine" else self.repeats


class PlanCell(StrictModel):
    """One cell of a sweep as the plan lists it."""

    id: str = Field(description="'c00', 'c01', ... in grid order; prefixes its run keys.")
    values: dict[str, Any] = Field(description="Field path -> the cell's value.")
    label: str = Field(description="The values in one line.")


class Plan(StrictModel):
    """Everything a run will launch, in order: the contract the runner and its executor get.
    Each RunSpec is complete on its own (engine arguments, environment, workload, design);
    the scenario rides along for the manifest and the comparison (stored there, not here)."""

    scenario_name: str
    design: Design = "launch-per-arm"
    scenario_hash: str
    baseline: str
    candidates: list[str]
    runs: list[RunSpec]
    base_dir: str = Field(default=".", description="Folder that relative paths (workload "
                          "file, local models) resolve against: the scenario file's.")
    scenario_file: str | None = Field(default=None, description="The scenario file, if any.")
    cells: list[PlanCell] = Field(
        default_factory=list, description="Sweeps: the cells, in grid order (launches run in "
        "an order that spreads drift over them; see runs).")
    proof_labels: dict[str, str | None] = Field(
        default_factory=dict, description="Variant -> what its vLLM processes must prove "
        "they ran, where the plan decides it (an overlaid change: 'overlay:<variant>').")
    overlays: dict[str, list[str]] = Field(
        default_factory=dict, description="Variant -> its change's classification, one line "
        "per part ('file: what — why'), as `specbench plan` prints it.")
    scenario: Scenario = Field(exclude=True, description="The validated scenario.")


def engine_args_for(scenario: Scenario, variant_name: str) -> dict[str, Any]:
    """The LLM(...) keywords of one variant: common settings, then the variant's overrides."""
    variant = scenario.variants[variant_name]
    args: dict[str, Any] = {
        "model": scenario.model,
        "dtype": scenario.dtype,
        "tensor_parallel_size": scenario.tensor_parallel_size,
        "max_num_seqs": scenario.batch_size,
        "seed": scenario.workload.seed,
        # Needed for per-request timestamps and the spec-decode counters.
        "disable_log_stats": False,
        # Every pass replays the same prompts: with the prefix cache on, passes after the
        # first would skip prefill and measure something else. Scenarios may turn it back on.
        "enable_prefix_caching": False,
    }
    if scenario.max_model_len is not None:
        args["max_model_len"] = scenario.max_model_len
    args.update(scenario.engine)
    args.update(variant.engine)

    if scenario.draft is not None and variant.speculation:
        spec: dict[str, Any] = {
            "method": scenario.draft.method,
            "num_speculative_tokens": scenario.draft.num_speculative_tokens,
        }
        if scenario.draft.model is not None:
            spec["model"] = scenario.draft.model
        spec.update(scenario.draft.config)
        spec.update(variant.speculative_config)
        if variant.implementation is not None:
            # The scenario validator already refused overrides that contradict these.
            spec.update(IMPLEMENTATION_CONFIG.get(parse_implementation(variant.implementation), {}))
        args["speculative_config"] = spec
        # Per-request acceptance (vLLM refuses the flag without speculation, so only here);
        # the same scheduler event as the aggregate counters.
        args.setdefault("per_request_spec_decode_metrics", "summary")
    return args


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


def _one_engine_runs(scenario: Scenario, serve: ServeSettings | None,
                     base_dir: Path, overlays: Overlays | None) -> list[RunSpec]:
    base = scenario.baseline
    patch = scenario.shared_patch
    arms = [ArmSpec(variant=n, baseline=v.baseline,
                    implementation=f"overlay:{n}" if overlays else v.proof_label,
                    switch=(f"patch:{'on' if v.patch else 'off'}" if patch else None))
            for n, v in scenario.variants.items()]
    overlay = overlays.spec(list(scenario.variants), base) if overlays else None
    blocks = -(-scenario.repeats // 2)  # each block runs every arm twice
    runs = []
    for r in range(scenario.rounds):
        runs.append(RunSpec(
            run_key=shared_run_key(scenario, r), order=r, variant="+".join(scenario.variants),
            baseline=False, round=r, repeats=blocks * 2 * len(arms), warmup=scenario.warmup,
            device=scenario.device,
            # The engine starts as the baseline is configured; the arms switch at run time.
            engine_args=engine_args_for(scenario, base),
            implementation=scenario.variants[base].implementation,
            env={**scenario.env, **scenario.variants[base].env}, workload=scenario.workload,
            timeout_s=scenario.timeout_s, mode=scenario.mode, serve=serve, design="one-engine",
            arms=arms, block_order=block_order(scenario, r), blocks=blocks,
            precision=scenario.precision,
            gates=scenario.gates if scenario.precision and scenario.precision.until == "gates"
            else None,
            python=_python(scenario, base, base_dir),
            patch=patch,
            overlay=overlay,
        ))
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
        return scenario.resolved_design
    name = next(iter(blocked))
    why = (f"variants.{name}.{scenario.variants[name].change} cannot be overlaid "
           f"({blocked[name][0].line()}); it runs on its build (python:), in its own engine")
    if scenario.design == "one-engine":
        raise ScenarioError(f"design: one-engine is not possible: {why}")
    if scenario.precision is not None:
        raise ScenarioError(f"precision: needs the one-engine design ({why})")
    return "launch-per-arm"


def proof_labels(scenario: Scenario, overlays: Overlays | None) -> dict[str, str | None]:
    """What each variant's vLLM processes must prove: an overlaid change proves its arm's
    dispatchers ran (in one engine, every arm does, the baseline's installed code included)."""
    labels = {n: v.proof_label for n, v in scenario.variants.items()}
    if overlays is None:
        return labels
    if overlay_design(scenario, overlays) == "one-engine":
        return {n: f"overlay:{n}" for n in scenario.variants}
    blocked = overlays.blocked()
    return {n: f"overlay:{n}" if n in overlays.variants and n not in blocked else label
            for n, label in labels.items()}


def _runs_of(scenario: Scenario, base_dir: Path, overlays: Overlays | None = None
             ) -> list[RunSpec]:
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
        overlay = overlays.spec([name], name) if overlays and name in overlays.variants \
            and name not in blocked else None
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
                env={**scenario.env, **variant.env},
                workload=scenario.workload,
                timeout_s=scenario.timeout_s,
                mode=scenario.mode,
                serve=serve,
                python=_python(scenario, name, base_dir),
                patch=variant.patch,
                overlay=overlay,
                step_times=scenario.no_speculation_arm is not None
                and scenario.mode == "offline",
            )
        )
    return runs


def sweep_order(scenario: Scenario, cells: list[Cell],
                runs: dict[str, list[RunSpec]]) -> list[RunSpec]:
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


def expand_plan(scenario: Scenario, base_dir: Path | None = None,
                scenario_file: Path | None = None) -> Plan:
    """Scenario -> Plan: one RunSpec per (variant, round) in launch order, or (one-engine
    design) one shared RunSpec per round; a sweep does so for every cell, keys prefixed with
    the cell's id, in sweep_order. Relative paths resolve against `base_dir` (default: the
    scenario file's folder, else the current one)."""
    if base_dir is None:
        base_dir = scenario_file.parent if scenario_file is not None else Path()
    base_dir = base_dir.resolve()
    cells = sweep_cells(scenario, str(scenario_file or scenario.name))
    overlays = {c.id: resolve_overlays(c.scenario, base_dir) for c in cells}
    first = cells[0]
    if scenario.sweep is None:
        runs = _runs_of(scenario, base_dir, overlays[first.id])
    else:
        per_cell = {c.id: [r.model_copy(update={"run_key": f"{c.id}.{r.run_key}", "cell": c.id,
                                                "cell_values": c.values})
                           for r in _runs_of(c.scenario, base_dir, overlays[c.id])]
                    for c in cells}
        runs = sweep_order(scenario, cells, per_cell)
    found = overlays[first.id]
    return Plan(
        scenario_name=scenario.name,
        design=overlay_design(first.scenario, found),
        proof_labels=proof_labels(first.scenario, found),
        overlays={n: [f.line() for f in c.findings] for n, c in found.variants.items()}
        if found else {},
        scenario_hash=scenario_hash(scenario),
        baseline=scenario.baseline,
        candidates=scenario.candidates,
        runs=runs,
        base_dir=str(base_dir),
        scenario_file=str(scenario_file) if scenario_file is not None else None,
        cells=[PlanCell(id=c.id, values=c.values, label=c.label) for c in cells]
        if scenario.sweep is not None else [],
        scenario=scenario,
    )
