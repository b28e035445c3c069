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

from harness.config.scenario import Cell, Scenario, parse_scenario, scenario_hash, sweep_cells
from harness.errors import ResultsError
from harness.results.store import read_records
from harness.wire.manifest import MANIFEST, Manifest
from harness.wire.records import PassRecord, RunRecord
from harness.wire.spec import Design

if TYPE_CHECKING:
    import pandas as pd


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
        """Every pass's summary, one row each (harness.results.metrics.passes_frame), built
        once per Run. Callers filter; none modifies it."""
        from harness.results.metrics import passes_frame

        return passes_frame(self.runs, self.scenario.slo, percentiles=self.scenario.metrics.keys())

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Every request, one row each (harness.results.metrics.requests_frame), built once."""
        from harness.results.metrics import requests_frame

        return requests_frame(self.runs)

    @cached_property
    def cells(self) -> list[Cell]:
        """The sweep's cells (a run without a sweep: one cell, itself)."""
        return sweep_cells(self.scenario, f"{self.path}/{MANIFEST}")

    def builds_of(self, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
        """label -> the build record of each named variant (vllm, its distribution and
        location, git commit, python); runs from before builds were recorded have none."""
        found = self.manifest.builds
        return {
            label: found[name]
            for name, label in labels.items()
            if isinstance(found.get(name), dict)
        }


def arm_passes(runs: list[RunRecord], variant: str) -> list[tuple[RunRecord, PassRecord]]:
    """The passes of `variant` in successful launches, whichever the design (one-engine
    passes name their arm; launch-per-arm passes belong to their launch's variant)."""
    return [
        (run, p)
        for run in sorted(runs, key=lambda r: r.order)
        if run.status == "ok" and run.result is not None
        for p in run.result.passes
        if (p.arm or run.variant) == variant
    ]


def load_run(path: str | Path, scenario: Scenario | None = None) -> Run:
    """Load a run folder, its manifest or a results folder (then its newest run) once.
    `scenario`: the scenario the caller already holds for this run (the one it just ran),
    used when it is the stored one, so it is not parsed again."""
    run_dir, manifest = Manifest.read(Path(path))
    where = run_dir / MANIFEST
    if scenario is None or manifest.scenario_hash != scenario_hash(scenario):
        scenario = parse_scenario(manifest.scenario, str(where), max_cells=None)
    records = read_records(run_dir)
    have = {r.run_key for r in records}
    missing = [e.run_key for e in manifest.runs if e.run_key not in have]
    if missing:
        # A report without them would overwrite summary.json with one that lost its estimate.
        raise ResultsError(
            f"{run_dir / 'runs'}: no raw record of launch(es) {', '.join(missing)}, which "
            f"its {MANIFEST} lists as finished: the run folder is damaged"
        )
    return Run(path=run_dir, manifest=manifest, runs=records, scenario=scenario)


def stored_manifests(
    results_root: Path, besides: Path | None = None
) -> Iterator[tuple[Path, Manifest]]:
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
            yield Manifest.read(path)
        except ResultsError:
            continue
