"""Damaged results on disk, through the CLI: a raw record, a manifest, a derived file (summary,
Parquet) or the index truncated, filled with garbage bytes or missing, beside two intact runs;
and `specbench index --rebuild` killed while it writes. Each ends in one clear line and its exit
code; a derived file is made again from the raw records; nothing else is lost (every other file
byte for byte the same, history still holds the intact runs).

The runs are copies of a real stored run (results/fixtures), so no engine starts here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.results.index import INDEX_FILE, runs
from testkit.processes import start_specbench
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.engine_free]

FIXTURE = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-one-engine-small"
NAMES = ("intact-1", "victim", "intact-2")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def _copy_run(source: Path, target: Path, run_id: str, created: float) -> None:
    shutil.copytree(source, target)
    manifest = target / "manifest.json"
    data = json.loads(manifest.read_text())
    data.update(run_id=run_id, created_unix=created)
    manifest.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder of three reported runs and its index (made once per module)."""
    root = tmp_path_factory.mktemp("store") / "results"
    for i, name in enumerate(NAMES):
        _copy_run(FIXTURE, root / name, name, 1_000_000.0 + i)
        done = _cli("report", str(root / name))
        assert done.returncode == 0, done.stderr
    assert _cli("index", "--results-dir", str(root)).returncode == 0
    return root


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(INDEX_FILE)
    }


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(4096))


def _record(run_dir: Path) -> Path:
    return next((run_dir / "runs").glob("*.json"))


# name, the damage (given the victim's folder), the file it damages (relative to the
# victim), report's exit code and the one line it prints (None: report makes it again).
CASES: list[tuple[str, Callable[[Path], Path], int, str | None]] = [
    ("raw-record-truncated", lambda d: _record(d), 2, "invalid run record"),
    ("raw-record-garbage", lambda d: _record(d), 2, "invalid run record"),
    ("raw-record-missing", lambda d: _record(d), 2, "no raw record of launch(es)"),
    ("manifest-truncated", lambda d: d / "manifest.json", 2, "manifest.json: damaged"),
    ("manifest-missing", lambda d: d / "manifest.json", 2, "no specbench results here"),
    ("summary-garbage", lambda d: d / "summary.json", 0, None),
    ("passes-parquet-garbage", lambda d: d / "passes.parquet", 0, None),
    ("requests-parquet-missing", lambda d: d / "requests.parquet", 0, None),
]


def _damage(case: str, path: Path) -> None:
    if case.endswith("truncated"):
        _cut(path)
    elif case.endswith("garbage"):
        _garbage(path)
    else:
        path.unlink()


@pytest.mark.parametrize(("case", "target", "code", "line"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_file_is_one_line_and_nothing_else_is_lost(
    template: Path,
    tmp_path: Path,
    case: str,
    target: Callable[[Path], Path],
    code: int,
    line: str | None,
) -> None:
    root = tmp_path / "results"
    shutil.copytree(template, root)
    victim = root / "victim"
    damaged = target(victim)
    before = _hashes(root)
    _damage(case, damaged)
    rel = str(damaged.relative_to(root))

    # history first (it reads what is on disk, before any report repairs it): the intact
    # runs are there; the victim is there or named in one line on stderr.
    shown = _cli("history", "--results-dir", str(root))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    ids = set(runs(root)["run_id"])
    assert {"intact-1", "intact-2"} <= ids
    if "victim" not in shown.stdout:
        named = [x for x in shown.stderr.splitlines() if str(victim) in x]
        assert len(named) == 1, shown.stderr

    report = _cli("report", str(victim))
    assert report.returncode == code, report.stderr
    assert "Traceback" not in report.stderr
    after = _hashes(root)
    if line is not None:
        [error] = report.stderr.strip().splitlines()
        assert error.startswith("specbench: error: ") and line in error, error
        # A refused report rewrites nothing: every file as before but the damaged one.
        assert {k: v for k, v in after.items() if k != rel} == {
            k: v for k, v in before.items() if k != rel
        }
    else:
        # A derived file is made again from the raw records, as it was.
        assert after[rel] == before[rel] or rel.endswith("summary.json")
        if rel.endswith("summary.json"):
            assert json.loads((root / rel).read_text()) == json.loads((template / rel).read_text())
        kept = [k for k in before if not k.startswith("victim/") or "/runs/" in k]
        kept += ["victim/manifest.json"]
        assert all(after[k] == before[k] for k in kept)
    print(f"{case}: report exit {report.returncode}: {report.stderr.strip() or '(made again)'}")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad-block"])
def test_a_damaged_index_is_set_aside_and_rebuilt(
    template: Path, tmp_path: Path, damage: str
) -> None:
    root = tmp_path / "results"
    shutil.copytree(template, root)
    index = root / INDEX_FILE
    if damage == "garbage":
        _garbage(index)
    elif damage == "truncated":
        _cut(index)
    else:  # a block whose checksum no longer matches
        data = bytearray(index.read_bytes())
        data[20_000:24_000] = os.urandom(4000)
        index.write_bytes(bytes(data))
    before = _hashes(root)
    shown = _cli("history", "--results-dir", str(root))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    [line] = shown.stderr.strip().splitlines()
    assert line.startswith(f"specbench: {index} was damaged (")
    assert line.endswith("moved to index.duckdb.damaged, rebuilt from the run folders")
    assert all(name in shown.stdout for name in NAMES)
    assert set(runs(root)["run_id"]) == set(NAMES)
    assert (root / f"{INDEX_FILE}.damaged").is_file()
    assert _hashes(root) == before
    again = _cli("history", "--results-dir", str(root))
    assert again.returncode == 0 and again.stderr == ""  # the new index is whole


def test_index_rebuild_killed_while_it_writes_loses_nothing(template: Path, tmp_path: Path) -> None:
    """`index --rebuild` SIGKILLed at several moments of its write (it drops the file, then
    inserts folder after folder in one transaction): history answers afterwards, with every
    run, and no run folder changed."""
    root = tmp_path / "results"
    root.mkdir()
    for i in range(24):
        _copy_run(template / NAMES[i % 3], root / f"run-{i:02d}", f"run-{i:02d}", 2e6 + i)
    expected = {f"run-{i:02d}" for i in range(24)}
    before = _hashes(root)
    index = root / INDEX_FILE
    hit = 0
    for delay in (0.0, 0.05, 0.2, 0.5):
        assert _cli("index", "--results-dir", str(root)).returncode == 0
        assert index.is_file()
        proc = start_specbench(
            "index", "--rebuild", "--results-dir", str(root),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        while index.is_file() and proc.poll() is None:  # its first step drops the file
            time.sleep(0.005)
        time.sleep(delay)
        hit += proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        shown = _cli("history", "--results-dir", str(root))
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert set(runs(root)["run_id"]) == expected
        assert _hashes(root) == before
    print(f"killed while the rebuild wrote: {hit} of 4")
    assert hit >= 3  # the kills landed inside the rebuild, not after it
