"""The results folder: one directory per run, written atomically as each launch finishes.

    results/<run-id>/manifest.json         versioned: scenario, plan, fingerprint, builds,
                                           the index of finished launches
    results/<run-id>/runs/NNN-<key>.json   one RunRecord per launch (raw per-request samples)
    results/<run-id>/logs/<key>.log        worker (and server) logs
    results/<run-id>/work/                 the workers' specs, reports and scratch
    results/<run-id>/superseded/           records of launches a resume ran again
    and, derived from those by harness.present.outputs: summary.json, table.md|.txt,
    passes|requests(|sweep).parquet, figures/, report.html, gate.*

An interrupted run leaves a manifest with status "interrupted" and every finished launch.
The manifest is harness.wire.manifest.Manifest (it writes, reads and migrates itself);
reading a whole run goes through harness.results.run.load_run.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from harness.atomic import write_json_atomic
from harness.errors import ResultsError
from harness.wire.manifest import MANIFEST, Manifest
from harness.wire.records import RunRecord

# Kept free in each run folder while it runs, released when the disk fills, so the manifest
# can still say how the run ended.
RESERVE = ".space-reserve"
RESERVE_BYTES = 1 << 20


def reserve_space(run_dir: Path) -> None:
    (run_dir / RESERVE).write_bytes(b"\0" * RESERVE_BYTES)


def release_space(run_dir: Path) -> None:
    (run_dir / RESERVE).unlink(missing_ok=True)


def new_run_id(scenario_name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{scenario_name}-{stamp}-{secrets.token_hex(2)}"


def run_file(run_dir: Path, record: RunRecord) -> Path:
    return run_dir / "runs" / f"{record.order:03d}-{record.run_key}.json"


def save_run_record(run_dir: Path, record: RunRecord) -> Path:
    path = run_file(run_dir, record)
    write_json_atomic(path, record.model_dump(mode="json"))
    return path


def read_records(run_dir: Path) -> list[RunRecord]:
    """Every launch's record in a run folder, in file (launch) order."""
    runs = []
    for file in sorted((run_dir / "runs").glob("*.json")):
        try:
            runs.append(RunRecord.model_validate_json(file.read_bytes()))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ResultsError(f"{file}: invalid run record ({loc}: {first['msg']})") from None
    return runs


DEFAULT_BASELINES = Path("baselines")


def save_baseline(run_dir: Path, name: str, baselines_dir: Path = DEFAULT_BASELINES) -> Path:
    """Copy a run's manifest and raw run records into `baselines_dir/name`: a self-contained
    results folder (copyable as a CI artifact) that `specbench gate --against` reads."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ResultsError(f"--name {name!r}: use letters, digits, '-', '_' and '.' only")
    run_dir, manifest = Manifest.read(run_dir)
    if manifest.status != "complete":
        raise ResultsError(
            f"{run_dir}: status {manifest.status!r}; only a complete run can be a baseline"
        )
    target = baselines_dir / name
    tmp = baselines_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(run_dir / MANIFEST, tmp / MANIFEST)
    shutil.copytree(run_dir / "runs", tmp / "runs")
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    return target


def resolve_baseline(name: str, baselines_dir: Path = DEFAULT_BASELINES) -> Path:
    """A saved baseline by name, or a path to any results folder."""
    for candidate in (Path(name), baselines_dir / name):
        if (candidate / MANIFEST).is_file():
            return candidate
    raise ResultsError(
        f"baseline {name!r}: not found (looked for {name} and "
        f"{baselines_dir / name}; save one with `specbench baseline save`)"
    )


SUPERSEDED = "superseded"  # records of launches a resume ran again (kept, out of the stats)


def supersede(run_dir: Path, keep: set[str]) -> list[Path]:
    """Move the records of launches not in `keep` (run keys) to run_dir/superseded/, named by
    when they moved: a resumed run runs them again, and the raw records stay."""
    moved = []
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for file in sorted((run_dir / "runs").glob("*.json")):
        try:
            key = json.loads(file.read_text()).get("run_key")
        except (OSError, ValueError, AttributeError):
            key = None
        if key in keep:
            continue
        target = run_dir / SUPERSEDED / f"{file.stem}.{stamp}.json"
        target.parent.mkdir(exist_ok=True)
        file.replace(target)
        moved.append(target)
    return moved
