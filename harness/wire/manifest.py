"""manifest.json, the one file that says what a run folder is: its scenario, plan, fingerprint,
builds and the index of finished launches. One class writes it (Manifest.save), reads it
(Manifest.read: the folder, its JSON, each older schema version migrated, the fields readers
rely on checked) and migrates it (Manifest.migrate), as asv's Results and pyperf's Run own
theirs. Fields this version reads are typed; fields written by other versions are kept as they
are (extra="allow"), so a manifest read and saved again loses nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.atomic import write_json_atomic
from harness.errors import ResultsError
from harness.wire.overlay import OverlaySpec
from harness.wire.platform import Platform
from harness.wire.records import SCHEMA_VERSION

MANIFEST = "manifest.json"
# What readers of a manifest rely on, checked on load so a damaged one is one line: the
# scenario always, the others when present.
MANIFEST_FIELDS: dict[str, type] = {
    "scenario": dict,
    "status": str,
    "runs": list,
    "plan": dict,
    "fingerprint": dict,
}
MANIFEST_REQUIRED = ("scenario",)


class Stored(BaseModel):
    """Base of what a manifest holds: fields this version reads are typed; fields written by
    other versions are kept as they are."""

    model_config = ConfigDict(extra="allow")


class LaunchEntry(Stored):
    """One launch in the manifest's index of finished launches."""

    run_key: str
    status: str
    platform: Platform | None = None  # what the launch's engine ran on (wire.platform)


class InFlight(Stored):
    """The launch running now: the worker whose session a later run checks for leftovers,
    should this run die."""

    run_key: str
    worker_pid: int
    started_unix: float = 0.0


class StoredPlan(Stored):
    """The plan as the run stored it (harness.wire.spec.Plan, written by whichever version
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
        for run in self.runs:
            if run.get("overlay"):
                return OverlaySpec.model_validate(run["overlay"])
        return None


class Manifest(Stored):
    """manifest.json at this schema version. `manifest["key"]` reads the stored JSON as
    written, for notebooks."""

    schema_version: int = SCHEMA_VERSION
    run_id: str | None = None
    status: str | None = None
    scenario: dict[str, Any]
    scenario_hash: str | None = None
    scenario_file: str | None = None
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    device_env: dict[str, Any] = Field(default_factory=dict)
    builds: dict[str, Any] = Field(default_factory=dict)
    plan: StoredPlan = Field(default_factory=StoredPlan)
    runs: list[LaunchEntry] = Field(default_factory=list)
    in_flight: InFlight | None = None
    timings: dict[str, Any] | None = None
    created_unix: float | None = None
    finished_unix: float | None = None
    abandoned_unix: float | None = None
    runner_pid: int | None = None
    error: str | None = None
    resumed: list[dict[str, Any]] = Field(default_factory=list)  # each resume: when, from what
    # How the run used the machine (harness.machine.Holding): its lock, or shared; waits.
    machine: dict[str, Any] | None = None

    def __getitem__(self, key: str) -> Any:
        return self.model_dump(mode="json")[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.model_dump(mode="json").get(key, default)

    def save(self, run_dir: Path) -> None:
        """Write run_dir/manifest.json atomically, at this schema version: what was set (by
        the runner, or read from the file), nothing filled in by default."""
        self.schema_version = SCHEMA_VERSION
        data = self.model_dump(mode="json", exclude_unset=True)
        write_json_atomic(run_dir / MANIFEST, {"schema_version": SCHEMA_VERSION, **data})

    @staticmethod
    def migrate(data: dict[str, Any], source: Path) -> dict[str, Any]:
        """Bring an older manifest up to SCHEMA_VERSION step by step; refuse newer ones."""
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ResultsError(f"{source}: no integer schema_version; not a specbench manifest")
        if version > SCHEMA_VERSION:
            raise ResultsError(
                f"{source}: schema_version {version} is newer than this specbench understands "
                f"({SCHEMA_VERSION}); upgrade specbench"
            )
        # One step per version; every step so far only added optional fields, read as
        # defaults: 1 -> 2 serve mode; 2 -> 3 the one-engine design (older runs are
        # launch-per-arm); 3 -> 4 sweep cells (older runs are one cell); 4 -> 5 overlays and
        # the checked warm-up (older runs warmed once); 5 -> 6 RunRecord.arms (filled from the
        # record's variant); 6 -> 7 per-request acceptance; 7 -> 8 step times; 8 -> 9 each
        # block's orientation seed; 9 -> 10 the platform and contention; 10 -> 11 profiles.
        return {**data, "schema_version": SCHEMA_VERSION}

    @classmethod
    def read(cls, path: Path) -> tuple[Path, Manifest]:
        """The run folder `path` names (a run folder, its manifest, or a results folder: then
        its newest run) and its manifest, migrated to this version and typed; a damaged one is
        one line naming the file and the field."""
        run_dir = resolve_run_dir(path)
        manifest_path = run_dir / MANIFEST
        try:
            data = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise ResultsError(f"{manifest_path}: damaged, not JSON ({why})") from None
        except OSError as exc:
            raise ResultsError(f"{manifest_path}: cannot read ({exc.strerror})") from None
        if not isinstance(data, dict):
            raise ResultsError(f"{manifest_path}: damaged, expected a JSON object")
        data = cls.migrate(data, manifest_path)
        for key, kind in MANIFEST_FIELDS.items():
            if (key in data or key in MANIFEST_REQUIRED) and not isinstance(data.get(key), kind):
                raise ResultsError(
                    f"{manifest_path}: damaged, its {key!r} is "
                    + (
                        "missing"
                        if key not in data
                        else f"a {type(data[key]).__name__}, not a {kind.__name__}"
                    )
                )
        try:
            return run_dir, cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ResultsError(f"{manifest_path}: damaged, its {loc!r}: {first['msg']}") from None


def resolve_run_dir(path: Path) -> Path:
    """Accept a run folder, its manifest, or a results folder (then the newest run)."""
    if path.is_file() and path.name == MANIFEST:
        return path.parent
    if (path / MANIFEST).is_file():
        return path
    if path.is_dir():
        runs = sorted(
            (p for p in path.iterdir() if (p / MANIFEST).is_file()),
            key=lambda p: (p / MANIFEST).stat().st_mtime,
        )
        if runs:
            return runs[-1]
    raise ResultsError(f"{path}: no specbench results here (no {MANIFEST})")
