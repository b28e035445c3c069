"""The plan's types: what a run will launch (Plan), one launch (RunSpec) and the arms a
shared launch hosts (ArmSpec). The runner hands them to its executor and the worker reads its
RunSpec back from disk, so they live in the bottom layer; harness.plan.plan builds them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.config.base import StrictModel
from harness.config.scenario import GateSpec, Precision, Scenario, ServeSettings, Workload
from harness.wire.overlay import OverlaySpec

Design = Literal["one-engine", "launch-per-arm"]


class ArmSpec(StrictModel):
    """One arm hosted by a shared (one-engine) launch."""

    variant: str = Field(description="Variant name.")
    baseline: bool = Field(description="Whether this is the baseline variant.")
    implementation: str | None = Field(
        description="What this arm's passes must prove ran: "
        "'name:choice' of a swap, or 'patch:module:function'."
    )
    switch: str | None = Field(
        default=None,
        description="What the switch makes active for this arm when it differs "
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
        default="launch-per-arm",
        description="launch-per-arm: this launch runs one variant; "
        "one-engine: it hosts every arm in `arms` and switches between passes.",
    )
    arms: list[ArmSpec] = Field(
        default_factory=list, description="one-engine: the arms this launch hosts."
    )
    block_order: list[str] = Field(
        default_factory=list,
        description="one-engine: the arm of each pass of one balanced "
        "block (e.g. A B B A); each block draws the order of its first half at random "
        "(A B B A or B A A B): schedule.block_arms.",
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
        default=None,
        description="'package.module:function' installed in vLLM's processes.",
    )
    python: str | None = Field(
        default=None,
        description="The interpreter (or environment folder) of another vLLM "
        "build this launch runs under, as an absolute path; None: specbench's own.",
    )
    overlay: OverlaySpec | None = Field(
        default=None,
        description="Variants' own changes overlaid on vLLM's functions in "
        "this launch: every arm's version of each, switched like a swap.",
    )
    model_runner: Literal["auto", "V1", "V2"] = Field(
        default="auto",
        description="The model runner asked of vLLM (auto: vLLM's choice); "
        "V2 on device cpu runs under Triton's interpreter (harness.config.interpreter).",
    )
    step_times: bool = Field(
        default=False,
        description="Time the model runner's steps in vLLM's worker "
        "processes (the draft, the target's forward, the rest) per pass: where a speedup over "
        "the no-speculation arm goes (offline runs with such an arm).",
    )
    speed_probe: bool = Field(
        default=False,
        description="Time the speed probe before every engine step in vLLM's "
        "worker (with step_times): a fixed Python loop no change runs, the covariate "
        "of the speed-adjusted row.",
    )
    profile_passes: int = Field(
        default=0,
        description="Passes per arm profiled with vLLM's torch profiler after the "
        "measured ones (never measured); 0: none.",
    )
    cell: str | None = Field(
        default=None, description="Sweeps: the cell this launch belongs to ('c03')."
    )
    cell_values: dict[str, Any] = Field(
        default_factory=dict, description="Sweeps: the cell's values (field path -> value)."
    )

    def record_fields(self) -> dict[str, Any]:
        """What every record of this launch repeats of it: its key, arm, round, place and
        sweep cell."""
        return {
            "run_key": self.run_key,
            "variant": self.variant,
            "arms": [arm.variant for arm in self.arms] or [self.variant],
            "round": self.round,
            "order": self.order,
            "cell": self.cell,
            "cell_values": self.cell_values or None,
        }

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
    base_dir: str = Field(
        default=".",
        description="Folder that relative paths (workload "
        "file, local models) resolve against: the scenario file's.",
    )
    scenario_file: str | None = Field(default=None, description="The scenario file, if any.")
    cells: list[PlanCell] = Field(
        default_factory=list,
        description="Sweeps: the cells, in grid order (launches run in "
        "an order that spreads drift over them; see runs).",
    )
    proof_labels: dict[str, str | None] = Field(
        default_factory=dict,
        description="Variant -> what its vLLM processes must prove "
        "they ran, where the plan decides it (an overlaid change: 'overlay:<variant>').",
    )
    overlays: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Variant -> its change's classification, one line "
        "per part ('file: what — why'), as `specbench plan` prints it.",
    )
    scenario: Scenario = Field(exclude=True, description="The validated scenario.")
