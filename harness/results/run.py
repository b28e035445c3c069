"""A stored run, typed and loaded once: its manifest, its launches' raw records and its
scenario, with what every later stage derives from them kept beside (the per-pass frame, the
sweep's cells). Comparison, tables, gates, figures, forecasts and sweeps all take a Run; none
of them reads the run folder or re-parses the scenario again.

    run = load_run("results/<run-id>")      # a notebook: the same object the CLI uses
    run.scenario.baseline, run.design, run.passes, run.manifest.status
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.config.scenario import Scenario, parse_scenario, scenario_hash
from harness.config.sweep import Cell, sweep_cells
from harness.errors import ResultsError
from harness.plan.plan import Design
from harness.results.records import PassRecord, RunRecord
from harness.results.store import MANIFEST, read_manifest, read_records

if TYPE_CHECKING:
    import pandas as pd

    from harness.plan.overlay import OverlaySpec

class Stored(BaseModel):
    """Base of what a manifest holds: fields this version reads are typed; fields written by
    other versions are kept as they are."""

    model_config = ConfigDict(extra="allow")


class LaunchEntry(Stored):
    """One launch in the manifest's index of finished launches."""

    run_key: str
    status: str


class StoredPlan(Stored):
    """The plan as the run stored it (harness.plan.plan.Plan, written by whichever version
    ran it): the fields later stages read."""

    design: str = "launch-per-arm"  # runs before schema 3 were all launch-per-arm
    base_dir: str | None = None
    proof_labels: dict[str, str | None] = Field(default_factory=dict)
    runs: list[dict[str, Any]] = Field(default_factory=list)  # RunSpecs, as stored

    def launches_per_cell(self) -> dict[str, int]:
        """Sweeps: cell id -> the launches the plan had for it."""
        counts: dict[str, int] = {}
        for run in self.runs:
            if run.get("cell"):
                counts[run["cell"]] = counts.get(run["cell"], 0) + 1
        return counts

    def overlay(self) -> OverlaySpec | None:
        """The variants' own changes the launches overlaid (one spec per run)."""
        from harness.plan.overlay import OverlaySpec

        for run in self.runs:
            if run.get("overlay"):
                return OverlaySpec.model_validate(run["overlay"])
        return None


class Manifest(Stored):
    """manifest.json, migrated to this version (harness.results.store.migrate_manifest).
    `manifest["key"]` reads the stored JSON as written, for notebooks."""

    schema_version: int
    run_id: str | None = None
    status: str | None = None
    scenario: dict[str, Any]
    scenario_hash: str | None = None
    scenario_file: str | None = None
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    builds: dict[str, Any] = Field(default_factory=dict)
    plan: StoredPlan = Field(default_factory=StoredPlan)
    runs: list[LaunchEntry] = Field(default_factory=list)
    timings: dict[str, Any] | None = None
    created_unix: float | None = None
    runner_pid: int | None = None
    error: str | None = None
    resumed: list[dict[str, Any]] = Field(default_factory=list)  # each resume: when, from what

    def __getitem__(self, key: str) -> Any:
        return self.model_dump(mode="json")[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.model_dump(mode="json").get(key, default)


@dataclass(eq=False)
class Run:
    """A loaded run folder (build one with load_run)."""

    path: Path
    manifest: Manifest
    runs: list[RunRecord]  # one per launch, in file order
    scenario: Scenario

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.path.name

    @property
    def design(self) -> Design:
        return "one-engine" if self.manifest.plan.design == "one-engine" else "launch-per-arm"

    @property
    def is_sweep(self) -> bool:
        return self.scenario.sweep is not None

    @property
    def proof_labels(self) -> dict[str, str | None] | None:
        """What the stored plan said each arm must prove (None: runs from before plans
        said; the scenario's swaps then decide)."""
        return dict(self.manifest.plan.proof_labels) or None

    @cached_property
    def passes(self) -> pd.DataFrame:
        """Every pass's summary, one row each (harness.analysis.metrics.passes_frame), built
        once per Run. Callers filter; none modifies it."""
        from harness.analysis.metrics import passes_frame

        return passes_frame(self.runs, self.scenario.slo)

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Every request, one row each (harness.analysis.metrics.requests_frame), built once."""
        from harness.analysis.metrics import requests_frame

        return requests_frame(self.runs)

    @cached_property
    def cells(self) -> list[Cell]:
        """The sweep's cells (a run without a sweep: one cell, itself)."""
        return sweep_cells(self.scenario, f"{self.path}/{MANIFEST}")

    def builds_described(self, labels: dict[str, str]) -> dict[str, str]:
        """label -> one line on the build each named variant ran under (runs from before
        builds were recorded have none)."""
        from harness.plan.builds import describe

        found = self.manifest.builds
        return {label: describe(found[name]) for name, label in labels.items()
                if isinstance(found.get(name), dict)}

    def overlay_notes(self) -> dict[str, str]:
        """Arm -> 'overlay: N function(s) (...) from <change>' for arms that ran their own
        change."""
        from harness.plan.overlay import describe_spec

        spec = self.manifest.plan.overlay()
        return describe_spec(spec) if spec is not None else {}


def arm_passes(runs: list[RunRecord], variant: str) -> list[tuple[RunRecord, PassRecord]]:
    """The passes of `variant` in successful launches, whichever the design (one-engine
    passes name their arm; launch-per-arm passes belong to their launch's variant)."""
    return [(run, p) for run in sorted(runs, key=lambda r: r.order)
            if run.status == "ok" and run.result is not None
            for p in run.result.passes if (p.arm or run.variant) == variant]


def load_run(path: str | Path, scenario: Scenario | None = None) -> Run:
    """Load a run folder, its manifest or a results folder (then its newest run) once.
    `scenario`: the scenario the caller already holds for this run (the one it just ran),
    used when it is the stored one, so it is not parsed again."""
    run_dir, data = read_manifest(Path(path))
    where = run_dir / MANIFEST
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ResultsError(f"{where}: damaged, its {loc!r}: {first['msg']}") from None
    if scenario is None or manifest.scenario_hash != scenario_hash(scenario):
        scenario = parse_scenario(manifest.scenario, str(where), max_cells=None)
    return Run(path=run_dir, manifest=manifest, runs=read_records(run_dir), scenario=scenario)


def stored_manifests(results_root: Path,
                     besides: Path | None = None) -> Iterator[tuple[Path, Manifest]]:
    """Every run folder directly under `results_root` with its typed manifest, damaged ones
    skipped: the scan that finds earlier runs of a comparison or a run to time a plan from,
    reading manifests only (no records, no scenario parse). `besides`: a run folder the caller
    already holds, not read again."""
    if not results_root.is_dir():
        return
    held = besides.resolve() if besides is not None else None
    for path in sorted(results_root.glob(f"*/{MANIFEST}")):
        if held is not None and path.parent.resolve() == held:
            continue
        try:
            run_dir, data = read_manifest(path)
            yield run_dir, Manifest.model_validate(data)
        except (ResultsError, ValidationError):
            continue
