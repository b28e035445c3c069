"""The results folder: one directory per run, written atomically as each launch finishes.

    results/<run-id>/manifest.json       versioned: scenario, plan, fingerprint, run index
    results/<run-id>/runs/NN-<key>.json  one RunRecord per launch (raw per-request samples)
    results/<run-id>/logs/<key>.log      worker logs
    results/<run-id>/summary.json        the comparison, machine-readable
    results/<run-id>/table.md|.txt       the rendered tables

An interrupted run leaves a manifest with status "interrupted" and every finished launch.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.errors import ResultsError
from harness.records import SCHEMA_VERSION, RunRecord

MANIFEST = "manifest.json"


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def new_run_id(scenario_name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{scenario_name}-{stamp}-{secrets.token_hex(2)}"


def run_file(run_dir: Path, record: RunRecord) -> Path:
    return run_dir / "runs" / f"{record.order:03d}-{record.run_key}.json"


def save_run_record(run_dir: Path, record: RunRecord) -> Path:
    path = run_file(run_dir, record)
    write_json_atomic(path, record.model_dump(mode="json"))
    return path


def save_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    manifest = {"schema_version": SCHEMA_VERSION, **manifest}
    write_json_atomic(run_dir / MANIFEST, manifest)


def migrate_manifest(data: dict[str, Any], source: Path) -> dict[str, Any]:
    """Bring an older manifest up to SCHEMA_VERSION step by step; refuse newer ones."""
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"{source}: no integer schema_version; not a specbench manifest")
    if version > SCHEMA_VERSION:
        raise ResultsError(
            f"{source}: schema_version {version} is newer than this specbench understands "
            f"({SCHEMA_VERSION}); upgrade specbench"
        )
    # One step per version. 1 -> 2 only added optional fields (serve mode), read as defaults.
    if version == 1:
        data, version = {**data, "schema_version": 2}, 2
    # 2 -> 3 only added optional fields (one-engine design); older runs are launch-per-arm.
    if version == 2:
        data, version = {**data, "schema_version": 3}, 3
    return data


@dataclass
class RunResults:
    """A loaded results folder."""

    path: Path
    manifest: dict[str, Any]
    runs: list[RunRecord]

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id", self.path.name))


def resolve_run_dir(path: Path) -> Path:
    """Accept a run folder, its manifest, or a results folder (then the newest run)."""
    if path.is_file() and path.name == MANIFEST:
        return path.parent
    if (path / MANIFEST).is_file():
        return path
    if path.is_dir():
        runs = sorted((p for p in path.iterdir() if (p / MANIFEST).is_file()),
                      key=lambda p: (p / MANIFEST).stat().st_mtime)
        if runs:
            return runs[-1]
    raise ResultsError(f"{path}: no specbench results here (no {MANIFEST})")


def load_results(path: str | Path) -> RunResults:
    """Load a results folder (notebooks: harness.store.load_results('results/...'))."""
    run_dir = resolve_run_dir(Path(path))
    manifest_path = run_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{manifest_path}: corrupt JSON ({exc.msg})") from None
    if not isinstance(manifest, dict):
        raise ResultsError(f"{manifest_path}: expected a JSON object")
    manifest = migrate_manifest(manifest, manifest_path)
    runs = []
    for file in sorted((run_dir / "runs").glob("*.json")):
        try:
            runs.append(RunRecord.model_validate_json(file.read_text()))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ResultsError(f"{file}: invalid run record ({loc}: {first['msg']})") from None
    return RunResults(path=run_dir, manifest=manifest, runs=runs)
