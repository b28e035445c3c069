"""The project's own checks: ruff over the tree, mypy strict over the files pyproject.toml
names, the layering (import-linter), and benchmarks/ and testkit/ importing nothing from
tests/."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_ruff_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "harness", "tests", "benchmarks", "testkit"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_ruff_format_clean() -> None:
    """One code format: `ruff format` leaves the tree as it is."""
    paths = ["harness", "tests", "benchmarks", "testkit", "scripts", "notebooks"]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function (relative imports named
    as written, with their leading dots)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_benchmarks_import_nothing_from_tests() -> None:
    """Benchmarks and what they share with the tests (testkit/) import nothing from tests/:
    the simulators and factories both use live in testkit/."""
    files = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "testkit").glob("*.py"))
    assert len(files) > 10 and ROOT / "testkit" / "simulate.py" in files
    wrong = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in _imported(path)
        if name == "tests" or name.startswith("tests.")
    }
    assert not wrong, sorted(wrong)


def test_mypy_strict_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],  # pyproject.toml's [tool.mypy] files
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def _lint_imports(config: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--config", str(config), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_stages_import_one_way() -> None:
    """import-linter's contracts in pyproject.toml: every stage imports only the stages below
    it (imports inside functions and under TYPE_CHECKING included), and no two modules of one
    package import each other, directly or around a loop."""
    result = _lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "2 kept, 0 broken" in result.stdout


def test_the_layer_check_fails_on_an_upward_import(tmp_path: Path) -> None:
    """The check can fail: the same contracts over a copy of harness/ with one import inside a
    function pointing up (the bottom layer reading the statistics) are broken, named."""
    copy = tmp_path / "tree"
    shutil.copytree(
        ROOT / "harness", copy / "harness", ignore=shutil.ignore_patterns("__pycache__", "data")
    )
    (copy / "harness" / "wire" / "upward.py").write_text(
        "def f() -> object:\n    from harness.analysis.stats import holm\n\n    return holm\n"
    )
    (copy / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    assert "harness.wire is not allowed to import harness.analysis" in result.stdout
