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
Reading goes through harness.results.run.load_run, which types what is stored here.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.atomic import write_json_atomic
from harness.errors import ResultsError
from harness.results.records import SCHEMA_VERSION, RunRecord

MANIFEST = "manifest.json"
# What readers of a manifest rely on, checked on load so a damaged one is one line: the
# scenario always, the others when present.
MANIFEST_FIELDS: dict[str, type] = {"scenario": dict, "status": str, "runs": list,
                                    "plan": dict, "fingerprint": dict}
MANIFEST_REQUIRED = ("scenario",)
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
    # 3 -> 4 only added optional fields (sweep cells); older runs are one cell.
    if version == 3:
        data, version = {**data, "schema_version": 4}, 4
    # 4 -> 5 only added optional fields (overlays, checked warm-up); older runs warmed once.
    if version == 4:
        data, version = {**data, "schema_version": 5}, 5
    # 5 -> 6 only added RunRecord.arms, filled from the record's variant when missing.
    if version == 5:
        data, version = {**data, "schema_version": 6}, 6
    # 6 -> 7 only added optional fields (per-request acceptance).
    if version == 6:
        data, version = {**data, "schema_version": 7}, 7
    # 7 -> 8 only added optional fields (step times of runs with a no-speculation arm).
    if version == 7:
        data, version = {**data, "schema_version": 8}, 8
    return data


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


def read_manifest(path: Path) -> tuple[Path, dict[str, Any]]:
    """The run folder `path` names and its manifest, migrated to this version; a damaged one
    is one line naming the file and the field (harness.results.run.load_run types it)."""
    run_dir = resolve_run_dir(path)
    manifest_path = run_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise ResultsError(f"{manifest_path}: damaged, not JSON ({why})") from None
    except OSError as exc:
        raise ResultsError(f"{manifest_path}: cannot read ({exc.strerror})") from None
    if not isinstance(manifest, dict):
        raise ResultsError(f"{manifest_path}: damaged, expected a JSON object")
    manifest = migrate_manifest(manifest, manifest_path)
    for key, kind in MANIFEST_FIELDS.items():
        if (key in manifest or key in MANIFEST_REQUIRED) and not isinstance(manifest.get(key),
                                                                              kind):
            raise ResultsError(f"{manifest_path}: damaged, its {key!r} is "
                               + ("missing" if key not in manifest else
                                  f"a {type(manifest[key]).__name__}, not a {kind.__name__}"))
    return run_dir, manifest


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
    run_dir, manifest = read_manifest(run_dir)
    if manifest.get("status") != "complete":
        raise ResultsError(f"{run_dir}: status {manifest.get('status')!r}; only a "
                           "complete run can be a baseline")
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
    raise ResultsError(f"baseline {name!r}: not found (looked for {name} and "
                       f"{baselines_dir / name}; save one with `specbench baseline save`)")


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


def mark_abandoned(results_root: Path, clean: bool = False) -> list[str]:
    """Runs under `results_root` still marked running whose specbench process is gone (killed
    by SIGKILL, the OOM killer, a CI runner): mark them abandoned and say which, with any of
    their engine processes still running (stopped when `clean`)."""
    from harness.execute.lifeline import kill_processes, pid_alive, session_processes

    found: list[str] = []
    if not results_root.is_dir():
        return found
    for manifest_path in sorted(results_root.glob(f"*/{MANIFEST}")):
        try:
            data = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        pid, status = data.get("runner_pid"), data.get("status")
        dead = isinstance(pid, int) and not pid_alive(pid)
        line = None
        if status == "running" and dead:
            data.update(status="abandoned", abandoned_unix=time.time())
            with contextlib.suppress(OSError):  # a full disk: still report it
                write_json_atomic(manifest_path, data)
            line = (f"{manifest_path.parent.name} (its specbench process {pid} is gone; "
                    f"{len(data.get('runs') or [])} finished launch(es) kept), now marked "
                    "abandoned")
        flight = data.get("in_flight")
        if status in ("running", "abandoned") and dead and isinstance(flight, dict) \
                and isinstance(flight.get("worker_pid"), int):
            left = session_processes(flight["worker_pid"], float(flight.get("started_unix", 0)))
            if left:
                shown = ", ".join(f"{p} {n}" for p, n in left)
                if clean:
                    kill_processes([p for p, _ in left])
                    tail = f"stopped its {len(left)} leftover process(es): {shown}"
                else:
                    tail = (f"{len(left)} of its processes still run ({shown}); "
                            "`specbench run --clean` stops them")
                line = f"{line}; {tail}" if line else f"{manifest_path.parent.name}: {tail}"
        if line:
            found.append(line)
    return found



