"""The git side of bisect on real git in tmp dirs: a tiny checkout (vllm/ and tests/ beside it,
its root tagged v0.32.0), its commit range, the release base, the cached diffs and a cached
build with a trivial command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from unidiff.patch import PatchSet

from harness.errors import SpecbenchError
from harness.plan.commits import Candidate, build_commit, commit_diffs, commit_range, release_base

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


PROPOSE = "def propose(x):\n    y = x + 1\n    return y\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """root (tagged v0.32.0) -> body change -> tests only -> a second change -> main's head;
    a side branch off root."""
    repo = tmp_path_factory.mktemp("checkout")
    git(repo, "init", "-q", "-b", "main")
    shas = [
        commit(
            repo,
            {"vllm/__init__.py": "", "vllm/medusa.py": PROPOSE, "tests/test_x.py": "x = 1\n"},
            "root",
        )
    ]
    git(repo, "tag", "v0.32.0")
    shas.append(
        commit(
            repo,
            {"vllm/medusa.py": PROPOSE.replace("x + 1", "1 + x")},
            "propose: add the other way round",
        )
    )
    shas.append(commit(repo, {"tests/test_x.py": "x = 2\n"}, "tests only\n\nA body."))
    shas.append(commit(repo, {"vllm/other.py": "A = 1\n"}, "a new module"))
    git(repo, "checkout", "-q", "-b", "side", shas[0])
    commit(repo, {"vllm/medusa.py": PROPOSE + "# side\n"}, "side")
    git(repo, "checkout", "-q", "main")
    return repo, shas


def test_commit_range_is_good_to_bad_oldest_first(repo: tuple[Path, list[str]]) -> None:
    path, shas = repo
    assert commit_range(path, "v0.32.0", "main") == shas
    assert commit_range(path, shas[1], shas[3]) == shas[1:]
    assert commit_range(path, "main~1", "main~1") == [shas[2]]


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("nope", "main", "--good nope: no such commit in "),
        ("v0.32.0", "nope", "--bad nope: no such commit in "),
        ("main", "v0.32.0", "--good main is not an ancestor of --bad v0.32.0 in "),
        ("side", "main", "--good side is not an ancestor of --bad main in "),
    ],
)
def test_commit_range_errors_name_the_ref(
    repo: tuple[Path, list[str]], good: str, bad: str, message: str
) -> None:
    with pytest.raises(SpecbenchError, match=message) as info:
        commit_range(repo[0], good, bad)
    assert "\n" not in str(info.value)


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(SpecbenchError, match=f"{tmp_path}: not a git repository"):
        commit_range(tmp_path, "a", "b")


def test_release_base(repo: tuple[Path, list[str]]) -> None:
    path, shas = repo
    assert release_base(path, "0.32.0", None) == shas[0]
    assert release_base(path, "0.32.0+cpu", None) == shas[0]  # a local version's release
    assert release_base(path, "9.9.9", "main~2") == shas[1]
    with pytest.raises(SpecbenchError, match=r"no tag v9\.9\.9; give --base REF"):
        release_base(path, "9.9.9", None)
    with pytest.raises(SpecbenchError, match="version is unknown; give --base REF"):
        release_base(path, "", None)
    with pytest.raises(SpecbenchError, match="--base nope: no such commit"):
        release_base(path, "0.32.0", "nope")


def test_commit_diffs_are_the_package_change_against_base(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, shas = repo
    cands = commit_diffs(path, shas[0], shas, tmp_path)
    assert [c.sha for c in cands] == shas
    assert [c.subject for c in cands] == [
        "root",
        "propose: add the other way round",
        "tests only",
        "a new module",
    ]
    assert cands[0] == Candidate(shas[0], shas[0], "root", None, None)
    for c in cands[1:]:
        assert c.diff == tmp_path / shas[0] / f"{c.sha}.diff" and c.python is None
    # Commit 1 changed one line of vllm/medusa.py; commit 2 only tests/, so its package is
    # commit 1's; commit 3 adds a module on top. Never tests/.
    diffs = [c.diff for c in cands[1:]]
    assert all(d is not None for d in diffs)
    one_diff, two_diff, three_diff = (d for d in diffs if d is not None)
    one = PatchSet(one_diff.read_text())
    assert [f.path for f in one] == ["vllm/medusa.py"]
    assert one[0].source_file == "a/vllm/medusa.py"
    assert [ln.value for ln in one[0][0] if ln.is_removed] == ["    y = x + 1\n"]
    assert [ln.value for ln in one[0][0] if ln.is_added] == ["    y = 1 + x\n"]
    assert two_diff.read_text() == one_diff.read_text()
    three = PatchSet(three_diff.read_text())
    assert sorted(f.path for f in three) == ["vllm/medusa.py", "vllm/other.py"]
    assert three[1].is_added_file


def test_commit_diffs_are_cached_and_ignore_diff_config(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, shas = repo
    git(path, "config", "diff.noprefix", "true")
    try:
        first = commit_diffs(path, "v0.32.0", shas[:2], tmp_path)
    finally:
        git(path, "config", "--unset", "diff.noprefix")
    diff = first[1].diff
    assert diff is not None and "--- a/vllm/medusa.py" in diff.read_text()
    diff.write_text("kept\n")  # a cached diff is not rewritten ...
    assert commit_diffs(path, shas[0], shas[:2], tmp_path)[1].diff == diff
    assert diff.read_text() == "kept\n"
    diff.write_text("")  # ... unless it is empty
    commit_diffs(path, shas[0], shas[:2], tmp_path)
    assert "+    y = 1 + x" in diff.read_text()
    # Against another base, another file.
    again = commit_diffs(path, shas[1], shas[:2], tmp_path)
    assert again[1].diff is None and again[0].diff == tmp_path / shas[1] / f"{shas[0]}.diff"


# "Installs" the checkout: records where it ran and with which python, and puts the source
# folder on the venv's path, as `pip install .` puts vllm in the venv.
INSTALL = (
    'python -c "import os, pathlib, sys, sysconfig; '
    "pathlib.Path('built').write_text(os.getcwd() + '|' + sys.executable); "
    "pathlib.Path(sysconfig.get_paths()['purelib'], 'src.pth').write_text(os.getcwd())\""
    " && echo run >> ../runs"
)


def test_build_commit_runs_in_the_worktree_with_the_venv_first(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, shas = repo
    python = build_commit(path, shas[1], INSTALL, tmp_path, sys.executable)
    folder = tmp_path / "builds" / shas[1]
    assert python == str(folder / "venv" / "bin" / "python")
    cwd, executable = (folder / "src" / "built").read_text().split("|")
    assert Path(cwd) == folder / "src" and Path(executable).parent == folder / "venv" / "bin"
    assert (folder / "src" / "vllm" / "medusa.py").read_text() == PROPOSE.replace("x + 1", "1 + x")
    assert git(folder / "src", "rev-parse", "HEAD") == shas[1]
    assert (folder / "build.log").read_text().startswith(f"$ {INSTALL}\n")
    # It sees what the interpreter it came from sees (specbench's own venv: pytest, harness).
    probe = subprocess.run(
        [python, "-c", "import pytest, harness, vllm; print(vllm.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert probe.stdout.strip() == str(folder / "src" / "vllm" / "__init__.py")
    # Cached: the command does not run again.
    assert build_commit(path, shas[1], INSTALL, tmp_path, sys.executable) == python
    assert (folder / "runs").read_text() == "run\n"


def test_build_commit_failure_names_the_commit_and_log(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, shas = repo
    log = tmp_path / "builds" / shas[2] / "build.log"
    with pytest.raises(
        SpecbenchError,
        match=f"commit {shas[2][:12]}: build failed "
        rf"\(exit code 3\); see {log}",
    ):
        build_commit(path, shas[2], "echo boom; exit 3", tmp_path, sys.executable)
    assert "boom" in log.read_text()
    assert not (log.parent / "built").exists()
    # An install that leaves the venv importing another vLLM (pip install -e loses to the
    # installed one) is a failure too; then a good command in the same folder succeeds.
    with pytest.raises(SpecbenchError, match=r"imports vllm from .*, not from the build"):
        build_commit(path, shas[2], "true", tmp_path, sys.executable)
    assert build_commit(path, shas[2], INSTALL, tmp_path, sys.executable)
