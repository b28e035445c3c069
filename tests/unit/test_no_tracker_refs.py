"""The tree speaks for itself: no comment, docstring or page points at an issue number of a
tracker that is not in the repository ("issue 31, item 6"); the reason goes in the text."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

FOLDERS = ["harness", "tests", "benchmarks", "testkit", "docs", "scripts", "scenarios", "notebooks"]
REF = re.compile(r"\bissues? #?\d+|\(items? \d+(?:-\d+)?\)", re.I)


def tracker_refs(text: str) -> list[str]:
    return [m.group(0) for m in REF.finditer(text)]


def test_no_file_refers_to_a_tracker_issue() -> None:
    files = subprocess.run(
        ["git", "ls-files", *FOLDERS, "README.md", "CONTRIBUTING.md", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if path.name == "test_no_tracker_refs.py":  # its own examples
            continue
        if path.suffix in {".safetensors", ".parquet", ".png", ".duckdb"} or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}: {ref}" for ref in tracker_refs(text)]
    assert not found, "say why instead of pointing at a tracker: " + "; ".join(found[:20])


def test_the_pattern_finds_what_it_should() -> None:
    assert tracker_refs("as issue 31, item 6 found (item 2); see Issue #42") == [
        "issue 31",
        "(item 2)",
        "Issue #42",
    ]
    assert tracker_refs("an issue with 3 runs; items 1 to 3 of the list") == []
