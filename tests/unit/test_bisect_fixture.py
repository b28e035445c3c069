"""The bisect fixture's checkout (testkit/bisect_repo.py) against the installed vLLM:
its root is the installed files, every commit's change against the release tag can be
overlaid, each commit changes the one function it says, and the slowdown lands at its commit
and stays. No engine."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from harness.plan.classify import classify
from harness.plan.commits import commit_diffs, commit_range, release_base
from harness.plan.diffs import installed_version, read_diff
from testkit.bisect_repo import EDITS, FILES, SLOWDOWN_S, make_repo

PROPOSE = "vllm.v1.spec_decode.medusa:MedusaProposer.propose"


def _vllm_root() -> Path | None:
    spec = importlib.util.find_spec("vllm")
    return Path(spec.origin).parent if spec and spec.origin else None


VLLM = _vllm_root()
pytestmark = pytest.mark.skipif(VLLM is None, reason="needs the installed vLLM's files")


def _qualified(edit_file: str, function: str) -> str:
    return f"vllm.{edit_file.removesuffix('.py').replace('/', '.')}:{function}"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    dest = tmp_path_factory.mktemp("fixture") / "vllm-checkout"
    assert VLLM is not None
    return dest, make_repo(dest, VLLM, slow_commit=3)


def test_root_is_the_installed_release(checkout: tuple[Path, list[str]]) -> None:
    dest, shas = checkout
    assert VLLM is not None
    version = installed_version(VLLM)
    assert version is not None
    assert release_base(dest, version, None) == shas[0]
    assert commit_range(dest, f"v{version}", "main") == shas
    assert len(shas) == 1 + len(EDITS)
    listed = subprocess.run(
        ["git", "-C", str(dest), "ls-tree", "-r", "--name-only", shas[0]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert listed == sorted(f"vllm/{f}" for f in FILES)
    for f in FILES:
        shown = subprocess.run(
            ["git", "-C", str(dest), "show", f"{shas[0]}:vllm/{f}"], capture_output=True, check=True
        ).stdout
        assert shown == (VLLM / f).read_bytes()


def test_every_commit_is_overlayable_and_changes_its_function(
    checkout: tuple[Path, list[str]], tmp_path: Path
) -> None:
    dest, shas = checkout
    assert VLLM is not None
    cands = commit_diffs(dest, shas[0], shas, tmp_path)
    assert cands[0].diff is None
    seen: list[str] = []
    for number, (cand, edit) in enumerate(zip(cands[1:], EDITS, strict=True), 1):
        assert cand.diff is not None
        classified = classify(read_diff(cand.diff, VLLM), VLLM, False, "cpu")
        assert classified.overlayable, [f.line() for f in classified.blockers]
        seen.append(_qualified(edit.file, edit.function))
        # Cumulative: each commit's change is the earlier ones' plus its own function.
        assert sorted(classified.functions) == sorted(set(seen)), number
        assert cand.subject.startswith(edit.subject)
        slow = f"+        settled = time.perf_counter() + {SLOWDOWN_S!r}\n"
        assert (slow in cand.diff.read_text()) == (number >= 3), number


def test_no_slowdown_and_fewer_commits(tmp_path: Path) -> None:
    assert VLLM is not None
    shas = make_repo(tmp_path / "r", VLLM, slow_commit=None, n_commits=2, slowdown_s=0.25)
    assert len(shas) == 3
    diff = subprocess.run(
        ["git", "-C", str(tmp_path / "r"), "diff", shas[0], shas[-1]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "settle" not in diff
    with pytest.raises(ValueError, match="slow_commit"):
        make_repo(tmp_path / "s", VLLM, slow_commit=3, n_commits=2)


def test_a_slowdown_in_proportion_to_the_step_is_overlayable(tmp_path: Path) -> None:
    assert VLLM is not None
    shas = make_repo(tmp_path / "r", VLLM, slow_commit=2, n_commits=3, slow_fraction=0.05)
    (cand,) = commit_diffs(tmp_path / "r", shas[0], shas[2:3], tmp_path / "cache")
    assert cand.diff is not None
    text = cand.diff.read_text()
    assert "+            settled = now + 0.05 * (now - last)\n" in text
    classified = classify(read_diff(cand.diff, VLLM), VLLM, False, "cpu")
    assert classified.overlayable, [f.line() for f in classified.blockers]
    assert PROPOSE in classified.functions
