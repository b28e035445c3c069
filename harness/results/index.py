"""The run store: every run folder of a results folder indexed in one embedded DuckDB file,
`<results>/index.duckdb`, so that history, change points, repeated comparisons and gates
against history query one table instead of re-reading every folder.

The folders stay the source of truth: the index holds what their manifest.json, summary.json
and gate.json say (the scenario and its hash, each variant's build and overlaid change, the
machine, the design, and per comparison and metric the estimate, its interval, MDE and
verdicts) and is rebuilt from them on demand (`specbench index --rebuild`). DuckDB allows one
writer at a time: indexing is best-effort (a locked index never fails a run; the folder is
indexed by the next sync, which every read does first), and a read that finds the file locked
builds the same tables in memory from the folders.

    from harness.results.index import history
    frame = history("results")                   # one row per (run, candidate, metric)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from harness.config.interpreter import interpreted
from harness.env import compat_id
from harness.errors import ResultsError
from harness.results.store import read_records
from harness.wire.manifest import MANIFEST, Manifest

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from harness.results.run import Run

logger = logging.getLogger("specbench.results")

INDEX_FILE = "index.duckdb"
# Bump when the tables change: an index of another version is rebuilt from the folders.
INDEX_VERSION = 3  # 2: runs.machine_findings; 3: runs.no_estimates, the skipped table
SUMMARY = "summary.json"
GATE = "gate.json"

RUN_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR PRIMARY KEY",
    "folder": "VARCHAR",
    "stamp": "VARCHAR",  # the files' mtimes when indexed: re-indexed when they change
    "created": "TIMESTAMP",
    "created_unix": "DOUBLE",
    "status": "VARCHAR",
    "scenario": "VARCHAR",
    "scenario_hash": "VARCHAR",
    "scenario_json": "VARCHAR",
    "design": "VARCHAR",
    "machine": "VARCHAR",  # the fingerprint's compat id: runs of one machine compare
    "cpu_model": "VARCHAR",
    "fingerprint_json": "VARCHAR",
    "vllm": "VARCHAR",
    "baseline": "VARCHAR",
    "commit": "VARCHAR",  # the candidate's change or build commit, else the baseline's
    "builds_json": "VARCHAR",
    "gate_verdict": "VARCHAR",
    # Same scenario, builds (overlaid changes included) and machine: repeats of one comparison.
    "comparison_key": "VARCHAR",
    # JSON list: how the machine was shared or loaded during the passes (a run without the
    # lock, the contention findings under its table); `history` marks such runs.
    "machine_findings": "VARCHAR",
    # Why the run gives history no estimate (no or a damaged summary.json, no comparison,
    # Model Runner V2 under Triton's interpreter); NULL when it gives some.
    "no_estimates": "VARCHAR",
}
BUILD_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "variant": "VARCHAR",
    "vllm": "VARCHAR",
    "vllm_location": "VARCHAR",
    "git": "VARCHAR",
    "dirty": "BOOLEAN",
    "python": "VARCHAR",
    "change_kind": "VARCHAR",
    "change_path": "VARCHAR",
    "change_sha256": "VARCHAR",
    "change_commit": "VARCHAR",
}
ESTIMATE_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "cell": "VARCHAR",
    "candidate": "VARCHAR",
    "baseline": "VARCHAR",
    "metric": "VARCHAR",
    "label": "VARCHAR",
    "kind": "VARCHAR",
    "higher_is_better": "BOOLEAN",
    "baseline_value": "DOUBLE",
    "candidate_value": "DOUBLE",
    "delta": "DOUBLE",
    "ci_low": "DOUBLE",
    "ci_high": "DOUBLE",
    "se": "DOUBLE",
    "df": "DOUBLE",
    "mde": "DOUBLE",
    "p_value": "DOUBLE",
    "significant": "BOOLEAN",
    "improved": "BOOLEAN",
    "exact": "BOOLEAN",
    "units": "INTEGER",
    "error_unit": "VARCHAR",
    "note": "VARCHAR",
    "gate": "VARCHAR",
}
TABLES = {"runs": RUN_COLUMNS, "builds": BUILD_COLUMNS, "estimates": ESTIMATE_COLUMNS}
# Folders of the results folder the index could not read, each with why (one line).
SKIPPED_COLUMNS: dict[str, str] = {
    "folder": "VARCHAR PRIMARY KEY",
    "stamp": "VARCHAR",
    "reason": "VARCHAR",
}


def index_path(results_root: Path) -> Path:
    return results_root / INDEX_FILE


# --- reading one folder ------------------------------------------------------------------------


def _stamp(run_dir: Path) -> str:
    parts = []
    for name in (MANIFEST, SUMMARY, GATE):
        try:
            parts.append(f"{name}:{(run_dir / name).stat().st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    return "|".join(parts)


def _read_json(path: Path) -> dict[str, Any] | None:
    return _read_json_why(path)[0]


def _read_json_why(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object file, or None and why not ('' when it does not exist)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"its {path.name} cannot be read ({exc.strerror})"
    except ValueError as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        return None, f"its {path.name} is damaged, not JSON ({why})"
    if not isinstance(data, dict):
        return None, f"its {path.name} is damaged, not a JSON object"
    return data, None


def comparison_key(manifest: Manifest) -> str | None:
    """What makes two runs the same comparison: the scenario (its hash), each variant's vLLM
    build and overlaid change, and the machine (the fingerprint's compat id)."""
    if "fingerprint" not in manifest.model_fields_set or not manifest.scenario_hash:
        return None
    builds = {
        name: {k: build.get(k) for k in ("vllm", "vllm_location", "git", "overlay")}
        for name, build in manifest.builds.items()
        if isinstance(build, dict)
    }
    blob = json.dumps(
        [manifest.scenario_hash, compat_id(manifest.fingerprint), builds], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def machine_of(manifest: Manifest) -> str | None:
    """The machine a run ran on, as the index keys it (the fingerprint's compat id)."""
    return compat_id(manifest.fingerprint) if manifest.fingerprint else None


def machine_findings(manifest: Manifest, summary: dict[str, Any]) -> list[str]:
    """What the run says about others on its machine: run without the lock
    (--shared-machine), and the contention findings of its comparison and sweep cells."""
    out = []
    if (manifest.machine or {}).get("shared"):
        out.append(
            "shared machine (--shared-machine): no lock, another benchmark may have run beside it"
        )
    comparisons = [summary.get("comparison")] + [
        c.get("comparison") for c in (summary.get("sweep") or {}).get("cells", [])
    ]
    for comparison in comparisons:
        if isinstance(comparison, dict):
            out.extend(str(x) for x in comparison.get("contention") or [])
    return list(dict.fromkeys(out))


def _commit(builds: dict[str, Any], baseline: str | None) -> str | None:
    """The commit a run stands for in a history: a candidate's overlaid change or build
    commit (what the run is about), else the baseline's."""
    order = [v for v in builds if v != baseline] + ([baseline] if baseline in builds else [])
    for variant in order:
        build = builds.get(variant) or {}
        change = build.get("overlay") or {}
        found = change.get("commit") or build.get("git")
        if found:
            return str(found)
    return None


def _estimate_rows(
    run_id: str, comparison: dict[str, Any], cell: str | None, gates: dict[tuple[str, str], str]
) -> Iterator[dict[str, Any]]:
    for cand in comparison.get("candidates", []):
        for row in cand.get("rows", []):
            est = row.get("estimate") or {}
            note = est.get("note")
            yield {
                "run_id": run_id,
                "cell": cell,
                "candidate": cand.get("name"),
                "baseline": comparison.get("baseline"),
                "metric": row.get("key"),
                "label": row.get("label"),
                "kind": est.get("kind"),
                "higher_is_better": row.get("higher_is_better"),
                "baseline_value": row.get("baseline"),
                "candidate_value": row.get("candidate"),
                "delta": est.get("delta"),
                "ci_low": est.get("ci_low"),
                "ci_high": est.get("ci_high"),
                "se": est.get("se"),
                "df": est.get("df"),
                "mde": est.get("mde"),
                "p_value": est.get("p_value"),
                "significant": est.get("significant"),
                "improved": row.get("improved"),
                # Identical in every unit (greedy acceptance, a deterministic count): known
                # exactly, so runs compare exactly.
                "exact": bool(est.get("known_exactly", note and str(note).startswith("no spread"))),
                "units": est.get("units"),
                "error_unit": est.get("error_unit"),
                "note": note,
                "gate": gates.get((str(cand.get("name")), str(row.get("key")))),
            }


def read_folder(
    run_dir: Path, manifest: Manifest | None = None
) -> dict[str, list[dict[str, Any]]] | None:
    """A run folder as the rows the index holds (None: not a readable run). `manifest`: the
    folder's manifest when the caller has it loaded already (a run just ended)."""
    rows = examine_folder(run_dir, manifest)
    return None if isinstance(rows, str) else rows


def examine_folder(
    run_dir: Path, manifest: Manifest | None = None
) -> dict[str, list[dict[str, Any]]] | str:
    """read_folder's rows, or one line saying why the folder is not a readable run."""
    if manifest is None:
        try:
            _, manifest = Manifest.read(run_dir / MANIFEST)
        except ResultsError as exc:
            return str(exc)
        except ValidationError as exc:
            return f"{run_dir / MANIFEST}: damaged ({str(exc).splitlines()[0]})"
    run_id = manifest.run_id or run_dir.name
    summary, summary_problem = _read_json_why(run_dir / SUMMARY)
    summary = summary or {}
    gate = _read_json(run_dir / GATE) or {}
    gates = {
        (str(d.get("candidate")), str(d.get("check"))): str(d.get("verdict"))
        for d in gate.get("decisions", [])
    }
    scenario = manifest.scenario
    baseline = next(
        (
            n
            for n, v in (scenario.get("variants") or {}).items()
            if isinstance(v, dict) and v.get("baseline")
        ),
        None,
    )
    fp = manifest.fingerprint
    builds = {k: v for k, v in manifest.builds.items() if isinstance(v, dict)}
    created = manifest.created_unix
    run = {
        "run_id": run_id,
        "folder": str(run_dir.resolve()),
        "stamp": _stamp(run_dir),
        "created": None
        if created is None
        else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(created)),
        "created_unix": created,
        "status": summary.get("status") or manifest.status,
        "scenario": scenario.get("name"),
        "scenario_hash": manifest.scenario_hash,
        "scenario_json": json.dumps(scenario, sort_keys=True),
        "design": manifest.plan.design,
        "machine": machine_of(manifest),
        "cpu_model": fp.get("cpu_model"),
        "fingerprint_json": json.dumps(fp, sort_keys=True),
        "vllm": fp.get("vllm"),
        "baseline": baseline,
        "commit": _commit(builds, baseline),
        "builds_json": json.dumps(builds, sort_keys=True),
        "gate_verdict": gate.get("verdict"),
        "comparison_key": comparison_key(manifest),
        "machine_findings": json.dumps(machine_findings(manifest, summary)),
        "no_estimates": None,
    }
    build_rows = []
    for variant, build in builds.items():
        git = build.get("git")
        change = build.get("overlay") or {}
        build_rows.append(
            {
                "run_id": run_id,
                "variant": variant,
                "vllm": build.get("vllm"),
                "vllm_location": build.get("vllm_location"),
                "git": git,
                "dirty": bool(git and str(git).endswith("+dirty")),
                "python": build.get("python"),
                "change_kind": change.get("kind"),
                "change_path": change.get("path"),
                "change_sha256": change.get("sha256"),
                "change_commit": change.get("commit"),
            }
        )
    estimates: list[dict[str, Any]] = []
    if interpreted(scenario.get("device"), scenario.get("model_runner")):
        # V2 under Triton's interpreter: code paths, not performance; nothing for a series.
        run["no_estimates"] = (
            "Model Runner V2 under Triton's interpreter measures code paths, not performance"
        )
        return {"runs": [run], "builds": build_rows, "estimates": estimates}
    if isinstance(summary.get("comparison"), dict):
        estimates.extend(_estimate_rows(run_id, summary["comparison"], None, gates))
    for cell in (summary.get("sweep") or {}).get("cells", []):
        estimates.extend(
            _estimate_rows(run_id, cell.get("comparison") or {}, cell.get("id"), gates)
        )
    if not estimates:
        run["no_estimates"] = _why_no_estimates(run_dir, summary_problem)
    return {"runs": [run], "builds": build_rows, "estimates": estimates}


def _why_no_estimates(run_dir: Path, summary_problem: str | None) -> str:
    """One line: why a run's summary gives no estimate, and a damaged raw record when the
    summary itself is missing or damaged (the report could not be made from it)."""
    if summary_problem is None:
        return f"its {SUMMARY} holds no estimate"
    why = summary_problem or f"it has no {SUMMARY} (its report was never written)"
    try:
        read_records(run_dir)
    except (ResultsError, OSError) as exc:
        why += f"; {str(exc).splitlines()[0]}"
    return why


def run_folders(results_root: Path) -> list[Path]:
    """Every folder directly under `results_root` that holds a manifest."""
    if not results_root.is_dir():
        return []
    return sorted(p.parent for p in results_root.glob(f"*/{MANIFEST}"))


def stray_folders(results_root: Path) -> list[Path]:
    """Folders directly under `results_root` that look like a run (records or a summary) but
    hold no manifest: the index cannot read them."""
    if not results_root.is_dir():
        return []
    return sorted(
        p
        for p in results_root.iterdir()
        if p.is_dir()
        and not (p / MANIFEST).exists()
        and ((p / "runs").is_dir() or (p / SUMMARY).is_file())
    )


# --- the database --------------------------------------------------------------------------------


class IndexLocked(Exception):
    """Another process holds the index for writing."""


def _create(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    found = con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    if found is not None and found[0] != str(INDEX_VERSION):
        for table in TABLES:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute("DROP TABLE IF EXISTS skipped")
    for table, columns in {**TABLES, "skipped": SKIPPED_COLUMNS}.items():
        cols = ", ".join(f'"{name}" {kind}' for name, kind in columns.items())
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
    con.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", [str(INDEX_VERSION)])


@contextmanager
def _connect(results_root: Path, attempts: int = 3) -> Iterator[duckdb.DuckDBPyConnection]:
    """The index, open for writing (IndexLocked after a few short waits for another writer)."""
    import duckdb

    results_root.mkdir(parents=True, exist_ok=True)
    path = index_path(results_root)
    con = None
    for attempt in range(attempts):
        try:
            con = _open(path)
            break
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            if attempt == attempts - 1:  # the lock another process holds
                raise IndexLocked(str(exc).splitlines()[0]) from None
            time.sleep(0.2 * (attempt + 1))
    assert con is not None
    try:
        yield con
    finally:
        con.close()


def _open(path: Path) -> duckdb.DuckDBPyConnection:
    """The index file, its tables created and every table read once. A damaged file (not a
    DuckDB file, cut short, a block whose checksum fails) is derived data: it is moved aside
    to `index.duckdb.damaged`, named in one line on the log, and a new one built from the
    run folders. A lock another process holds is raised (duckdb.IOException)."""
    import duckdb

    try:
        con = duckdb.connect(str(path))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise
        return _set_aside(path, exc)
    except duckdb.Error as exc:
        return _set_aside(path, exc)
    try:
        _create(con)
        for table in [*TABLES, "skipped"]:
            con.execute(f"SELECT * FROM {table}").fetchall()
    except duckdb.Error as exc:
        con.close()
        return _set_aside(path, exc)
    return con


def _set_aside(path: Path, exc: Exception) -> duckdb.DuckDBPyConnection:
    import duckdb

    damaged = path.with_name(path.name + ".damaged")
    path.replace(damaged)
    path.with_name(path.name + ".wal").unlink(missing_ok=True)
    logger.warning(
        "specbench: %s was damaged (%s): moved to %s, rebuilt from the run folders",
        path,
        str(exc).splitlines()[0],
        damaged.name,
    )
    con = duckdb.connect(str(path))
    _create(con)
    return con


def _insert(con: duckdb.DuckDBPyConnection, rows: dict[str, list[dict[str, Any]]]) -> None:
    run_id = rows["runs"][0]["run_id"]
    for table, columns in TABLES.items():
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        if rows[table]:
            names = list(columns)
            marks = ", ".join("?" for _ in names)
            con.executemany(
                f"INSERT INTO {table} VALUES ({marks})",
                [[r.get(n) for n in names] for r in rows[table]],
            )


def _sync(
    con: duckdb.DuckDBPyConnection,
    results_root: Path,
    rebuild: bool = False,
    loaded: dict[str, Manifest] | None = None,
) -> int:
    """Index the folders that are new or changed since they were indexed; forget the ones
    that are gone. `loaded`: manifests already in memory, by resolved folder. Returns how many
    folders it (re)indexed."""
    if rebuild:
        for table in [*TABLES, "skipped"]:
            con.execute(f"DELETE FROM {table}")
    known = dict(con.execute("SELECT folder, stamp FROM runs").fetchall())
    known_skipped = dict(con.execute("SELECT folder, stamp FROM skipped").fetchall())
    present = set()
    count = 0
    con.execute("BEGIN TRANSACTION")
    try:
        for folder in run_folders(results_root):
            key = str(folder.resolve())
            present.add(key)
            stamp = _stamp(folder)
            if stamp in (known.get(key), known_skipped.get(key)):
                continue
            rows = examine_folder(folder, (loaded or {}).get(key))
            con.execute("DELETE FROM skipped WHERE folder = ?", [key])
            if isinstance(rows, str):  # damaged since it was indexed: its rows go too
                _forget(con, key)
                con.execute("INSERT INTO skipped VALUES (?, ?, ?)", [key, stamp, rows])
            else:
                _insert(con, rows)
                count += 1
        for folder in stray_folders(results_root):
            key = str(folder.resolve())
            present.add(key)
            if key in known:  # its manifest went after it was indexed: its rows go too
                _forget(con, key)
            if key not in known_skipped:
                con.execute(
                    "INSERT INTO skipped VALUES (?, ?, ?)",
                    [key, "-", f"{folder}: no {MANIFEST}, so not a readable run"],
                )
        for gone in (set(known) | set(known_skipped)) - present:
            _forget(con, gone)
            con.execute("DELETE FROM skipped WHERE folder = ?", [gone])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return count


def _forget(con: duckdb.DuckDBPyConnection, folder: str) -> None:
    """Drop every row of the run indexed from `folder`."""
    ids = [
        r[0] for r in con.execute("SELECT run_id FROM runs WHERE folder = ?", [folder]).fetchall()
    ]
    for run_id in ids:
        for table in TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])


def index_run(run_dir: Path, manifest: Manifest | None = None) -> bool:
    """Best-effort: index one run folder in its results folder's index (with any other folder
    not yet indexed); `manifest`: its manifest, when the caller holds it (not read again).
    False, and nothing lost, when another process holds the index: the next sync indexes it.
    Never raises for the index's sake."""
    import duckdb

    if os.environ.get("SPECBENCH_NO_INDEX"):
        return False
    loaded = {str(run_dir.resolve()): manifest} if manifest is not None else None
    try:
        with _connect(run_dir.parent, attempts=2) as con:
            _sync(con, run_dir.parent, loaded=loaded)
        return True
    except (IndexLocked, duckdb.Error, OSError):
        return False


def rebuild(results_root: Path) -> int:
    """Drop the index and build it again from the run folders; how many runs it holds."""
    path = index_path(results_root)
    for stale in (path, path.with_name(path.name + ".wal")):
        stale.unlink(missing_ok=True)
    with _connect(results_root) as con:
        return _sync(con, results_root)


def _frames(
    con: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None = None
) -> pd.DataFrame:
    return con.execute(query, params or []).df()


@contextmanager
def synced(
    results_root: Path, loaded: dict[str, Manifest] | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to an index that holds every folder as it is now: the file, synced first;
    or, when another process holds it, the same tables built in memory from the folders.
    `loaded`: manifests the caller holds, by resolved folder (not read again)."""
    import duckdb

    try:
        with _connect(results_root) as con:
            _sync(con, results_root, loaded=loaded)
            yield con
            return
    except IndexLocked:
        pass
    con = duckdb.connect(":memory:")
    try:
        _create(con)
        _sync(con, results_root, loaded=loaded)
        yield con
    finally:
        con.close()


HISTORY_QUERY = """
SELECT r.run_id, r.created, r.created_unix, r.status, r.scenario, r.scenario_hash, r.design,
       r.machine, r.vllm, r.commit, e.cell, e.candidate, e.baseline, e.metric, e.label, e.kind,
       e.higher_is_better, e.baseline_value, e.candidate_value, e.delta, e.ci_low, e.ci_high,
       e.se, e.df, e.mde, e.p_value, e.significant, e.improved, e.exact, e.units,
       e.error_unit, e.note, e.gate, r.gate_verdict, r.machine_findings, r.folder,
       TRY_CAST(json_extract_string(r.scenario_json, '$.planned_runs') AS INTEGER)
           AS planned_runs
FROM estimates e JOIN runs r USING (run_id)
"""


def history(
    results_root: str | Path,
    scenario: str | None = None,
    metric: str | None = None,
    candidate: str | None = None,
    status: str | None = "complete",
) -> pd.DataFrame:
    """Every indexed estimate, one row per (run, cell, candidate, metric), oldest run first:
    the series a notebook plots and `specbench history` prints. Filters: a scenario name, a
    metric key, a candidate, a run status (None: any)."""
    where, params = [], []
    for column, value in (
        ("r.scenario", scenario),
        ("e.metric", metric),
        ("e.candidate", candidate),
        ("r.status", status),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    query = HISTORY_QUERY + (" WHERE " + " AND ".join(where) if where else "")
    query += " ORDER BY r.created_unix, r.run_id, e.cell, e.candidate, e.metric"
    with synced(Path(results_root)) as con:
        frame = _frames(con, query, params)
        left_out = skipped_folders(con, scenario, status)
    # Each folder the series leave out, one line each: in the frame (a notebook reads
    # frame.attrs["skipped"]) and on specbench's log (stderr unless configured otherwise).
    frame.attrs["skipped"] = left_out
    for line in left_out:
        logger.warning("specbench: history leaves out %s", line)
    return frame


def skipped_folders(
    con: duckdb.DuckDBPyConnection, scenario: str | None = None, status: str | None = "complete"
) -> list[str]:
    """One line per folder of the results folder that gives history no estimate, with why:
    the index could not read it, its run has none, or (`status`) it did not end so.
    `scenario`: only runs of that scenario (an unreadable folder has none: always named)."""
    lines = [
        str(reason)
        for (reason,) in con.execute("SELECT reason FROM skipped ORDER BY folder").fetchall()
    ]
    where, params = [], []
    if scenario is not None:
        where.append("scenario = ?")
        params.append(scenario)
    query = (
        "SELECT folder, status, no_estimates FROM runs"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY created_unix, run_id"
    )
    for folder, run_status, none in con.execute(query, params).fetchall():
        if status is not None and run_status != status:
            lines.append(f"{folder}: its status is {run_status}, not {status}")
        elif none:
            lines.append(f"{folder}: {none}")
    return lines


def runs(results_root: str | Path) -> pd.DataFrame:
    """One row per indexed run (any status), oldest first."""
    with synced(Path(results_root)) as con:
        return _frames(con, "SELECT * FROM runs ORDER BY created_unix, run_id")


def earlier_runs_of(
    results_root: Path,
    key: str,
    created_unix: float,
    besides: str,
    loaded: dict[str, Manifest] | None = None,
) -> list[Path]:
    """Complete runs of one comparison (`key`: comparison_key) made before `created_unix`,
    oldest first, other than the run `besides`: the store's query for repeated comparisons."""
    with synced(results_root, loaded) as con:
        rows = con.execute(
            "SELECT folder FROM runs WHERE status = 'complete' AND comparison_key = ? "
            "AND created_unix < ? AND run_id <> ? ORDER BY created_unix",
            [key, created_unix, besides],
        ).fetchall()
    return [Path(folder) for (folder,) in rows]


def earlier_runs(results: Run) -> list[Path]:
    """Complete runs of the same comparison in the same results folder, made before this
    one, oldest first (the run store's query)."""
    key = comparison_key(results.manifest)
    created = results.manifest.created_unix
    if key is None or created is None:
        return []
    return earlier_runs_of(
        results.path.parent,
        key,
        created,
        results.run_id,
        {str(results.path.resolve()): results.manifest},
    )
