"""The docs checked against the tree: every module under harness/ is named in
docs/architecture.md, every CLI command in docs/commands.md, and every kind of file or folder
a run folder can hold in results/README.md. A new module, command or file kind fails here
until its doc says what it is."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
import typer.core
import typer.main

from harness.cli import app
from harness.workflow import gate_and_write, write_report
from tests.conftest import ROOT

HARNESS = ROOT / "harness"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
COMMANDS = ROOT / "docs" / "commands.md"
RESULTS_README = ROOT / "results" / "README.md"
# The expressions that stand for a run folder where harness/ joins a name onto it.
RUN_FOLDER = {"run_dir", "run.path"}
ENTRY = re.compile(r"[\w.]+\.py$|\w+/$")


def harness_modules() -> set[str]:
    """Every .py file under harness/, relative to the package (`present/page.py`)."""
    return {p.relative_to(HARNESS).as_posix() for p in HARNESS.rglob("*.py")}


def documented_modules(text: str) -> set[str]:
    """The modules the tree block under '## Files' names, each with its package path rebuilt
    from the indentation; a folder's line names its __init__.py."""
    block = text.split("## Files", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        entries = []
        for word in line.split():
            if not ENTRY.match(word):
                break
            entries.append(word)
        parent = folders[-1][1] if folders else ""
        for entry in entries:
            if entry.endswith("/"):
                path = parent + entry
                named.add(path + "__init__.py")
                folders.append((indent, path))
            else:
                named.add(parent + entry)
    return {n.removeprefix("harness/") for n in named if n.startswith("harness/")}


def cli_commands() -> list[str]:
    """Every command of the typer app, a group's as `group sub`."""
    names: list[str] = []
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name, command in group.commands.items():
        subs = getattr(command, "commands", None)
        names += [f"{name} {sub}" for sub in subs] if subs else [name]
    return names


def command_table(text: str) -> list[str]:
    """The rows of the table under '## Commands' (a command named only in prose elsewhere
    does not count)."""
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `specbench ")]


def _constants() -> dict[str, set[str]]:
    """Module-level `NAME = "text"` assignments across harness/, by name."""
    found: dict[str, set[str]] = {}
    for path in HARNESS.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, set()).add(node.value.value)
    return found


def _first_names(node: ast.expr, constants: dict[str, set[str]]) -> set[str]:
    """The first path part(s) a joined operand gives: a literal, an f-string's literal head,
    or a module constant; nothing for a name only known at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value.split("/")[0]}
    if (
        isinstance(node, ast.JoinedStr)
        and node.values
        and isinstance(node.values[0], ast.Constant)
        and "/" in str(node.values[0].value)
    ):
        return {str(node.values[0].value).split("/")[0]}
    if isinstance(node, ast.Name):
        return {v.split("/")[0] for v in constants.get(node.id, ())}
    return set()


def names_joined_onto_run_folders() -> set[str]:
    """Each name harness/ joins directly onto a run folder (`run_dir / "logs"`,
    `run.path / FIGURE_DIR`, `run_dir / SUPERSEDED / ...`)."""
    constants = _constants()
    names: set[str] = set()
    for path in HARNESS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and ast.unparse(node.left) in RUN_FOLDER
            ):
                names |= _first_names(node.right, constants)
    return names


def rendered_run_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """What `report --html` and `gate` add to a stored run's folder (the committed fixture)."""
    monkeypatch.setenv("SPECBENCH_NO_INDEX", "1")
    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "results" / "fixtures" / "cpu-medusa-small", run_dir)
    before = {p.name for p in run_dir.iterdir()}
    write_report(run_dir, html=True)
    gate_and_write(run_dir)
    return {p.name for p in run_dir.iterdir()} - before


def undocumented(names: set[str], text: str) -> list[str]:
    """The names that no backquoted span of `text` starts with."""
    return sorted(n for n in names if f"`{n}" not in text)


def test_every_harness_module_is_named_in_the_architecture() -> None:
    documented = documented_modules(ARCHITECTURE.read_text())
    missing = sorted(harness_modules() - documented)
    assert not missing, f"docs/architecture.md's Files tree does not name: {missing}"
    stale = sorted(documented - harness_modules())
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_the_tree_reader_rebuilds_package_paths() -> None:
    text = (
        "## Files\n\n```\nharness/\n  cli.py api.py    the app\n  engine/    side\n"
        "    swaps/     installers\n      medusa_proposer.py  one\n    worker.py  w\n"
        "  errors.py   e\ntests/\n```\n"
    )
    assert documented_modules(text) == {
        "__init__.py",
        "cli.py",
        "api.py",
        "engine/__init__.py",
        "engine/swaps/__init__.py",
        "engine/swaps/medusa_proposer.py",
        "engine/worker.py",
        "errors.py",
    }


def test_every_command_is_in_the_commands_doc() -> None:
    commands = cli_commands()
    assert {"run", "support", "baseline save"} <= set(commands)
    rows = "\n".join(line for line in command_table(COMMANDS.read_text()))
    missing = [c for c in commands if f"`specbench {c}" not in rows]
    assert not missing, f"docs/commands.md's table of commands lacks: {missing}"


def test_the_scan_finds_the_names_a_run_folder_gets() -> None:
    found = names_joined_onto_run_folders()
    assert {
        "manifest.json",
        "runs",
        "logs",
        "work",
        "profiles",
        "figures",
        "superseded",
        "summary.json",
        "report.html",
        "gate.json",
    } <= found, found


def test_every_name_harness_joins_onto_a_run_folder_is_in_the_results_readme() -> None:
    missing = undocumented(names_joined_onto_run_folders(), RESULTS_README.read_text())
    assert not missing, f"results/README.md does not say what these hold: {missing}"


def test_every_file_a_report_and_a_gate_write_is_in_the_results_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = rendered_run_entries(tmp_path, monkeypatch)
    assert {"figures", "report.html", "vllm-bench", "gate.junit.xml"} <= written, written
    missing = undocumented(written, RESULTS_README.read_text())
    assert not missing, f"results/README.md does not say what these hold: {missing}"


def test_an_undocumented_name_is_reported() -> None:
    assert undocumented({"figures", "novel.bin"}, "| `figures/` | pictures |") == ["novel.bin"]


CONTRIBUTING = ROOT / "CONTRIBUTING.md"
TOP = ("harness/", "tests/", "scripts/", "scenarios/", "docs/", "results/", "testkit/", ".ci/")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(\.\w+)*(\(\))?")
PLACEHOLDER = re.compile(r"[<*]|my_swap|my-swap")


FENCE = re.compile(r"```.*?```", re.S)
COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _spans(text: str) -> list[str]:
    """The backquoted spans of a page, code blocks left out."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def test_the_paths_contributing_names_exist() -> None:
    named = {
        s
        for s in _spans(CONTRIBUTING.read_text())
        if s.startswith(TOP) and " " not in s and not PLACEHOLDER.search(s)
    }
    assert len(named) > 30, named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"


def test_the_names_contributing_gives_are_in_the_code() -> None:
    """Every identifier CONTRIBUTING.md puts in backquotes (`pass_row()`, `PART_ROWS`,
    `DeltaEstimate.exact`) is a word of the code, so a rename shows here."""
    code = " ".join(
        p.read_text()
        for folder in ("harness", "tests", "testkit", "scripts")
        for p in (ROOT / folder).rglob("*.py")
    )
    code += " ".join(p.read_text() for p in (ROOT / "scripts").glob("*.sh"))
    words = set(re.findall(r"\w+", code))
    names = {
        s
        for s in _spans(CONTRIBUTING.read_text())
        if IDENTIFIER.fullmatch(s) and not PLACEHOLDER.search(s) and not COMMIT.fullmatch(s)
    }
    assert {"pass_row()", "GATEABLE_METRICS", "PART_ROWS"} <= names
    missing = sorted(
        n for n in names if not all(part in words for part in n.removesuffix("()").split("."))
    )
    assert not missing, f"CONTRIBUTING.md names what the code does not have: {missing}"
