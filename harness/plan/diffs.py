"""Reading a variant's change: a unified diff applied in memory to the installed vLLM's files,
or a checkout compared file by file with the installed package. Stdlib and `unidiff`, no vLLM
import; what identifies the change is harness.wire.overlay.ChangeIdentity.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import ScenarioError
from harness.plan.builds import checkout_commit
from harness.wire.overlay import ChangeIdentity

# --- reading a change --------------------------------------------------------------------------

# Paths of a vLLM checkout that are not part of the installed package and change nothing at
# run time (a PR diff usually carries tests and docs).
INERT_TOP = (
    "tests/",
    "docs/",
    "benchmarks/",
    "examples/",
    ".github/",
    ".buildkite/",
    "tools/",
    ".gitignore",
    "README",
    "CONTRIBUTING",
    "LICENSE",
)
INERT_SUFFIX = (".md", ".rst")
# Generated at build time; differs between any checkout and any wheel.
GENERATED = {"vllm/_version.py"}


@dataclass
class FileChange:
    """One file of a change: path from the checkout's root (vllm/...), both texts."""

    path: str
    old: str | None  # None: the change adds the file
    new: str | None  # None: the change deletes it
    renamed_from: str | None = None  # a `git diff` rename: the installed path it moves


@dataclass
class Change:
    identity: ChangeIdentity
    files: list[FileChange]
    inert: list[str] = field(default_factory=list)  # tests, docs: no effect on the engine


def _strip_prefix(name: str) -> str:
    """'a/vllm/x.py' -> 'vllm/x.py' (git's a/ b/ prefixes; a plain path stays)."""
    if name.startswith(("a/", "b/")):
        return name[2:]
    return name


class DiffError(ScenarioError):
    pass


def apply_hunks(text: str, hunks: Iterable[Any], where: str) -> str:
    """`text` with each hunk applied in order (context must match exactly; a hunk may sit at
    another line than it says, as `patch` allows, but never before the previous one)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # next unconsumed line of `lines`
    for number, hunk in enumerate(hunks, 1):
        old = [ln.value for ln in hunk if ln.is_context or ln.is_removed]
        new = [ln.value for ln in hunk if ln.is_context or ln.is_added]
        want = max(0, hunk.source_start - 1) if old else hunk.source_start
        found = None
        for offset in sorted(range(-len(lines), len(lines) + 1), key=abs):
            at = want + offset
            if at < pos or at + len(old) > len(lines):
                continue
            if all(_same(lines[at + i], old[i]) for i in range(len(old))):
                found = at
                break
        if found is None:
            header = (
                f"@@ -{hunk.source_start},{hunk.source_length} "
                f"+{hunk.target_start},{hunk.target_length} @@"
            )
            at = min(max(want, pos), max(len(lines) - 1, 0))
            first_bad = next(
                (
                    i
                    for i in range(len(old))
                    if at + i >= len(lines) or not _same(lines[at + i], old[i])
                ),
                0,
            )
            got = (
                lines[at + first_bad].rstrip("\n")
                if at + first_bad < len(lines)
                else "<end of file>"
            )
            raise DiffError(
                f"{where}, hunk {number} ({header}) does not apply to the "
                f"installed vLLM: line {at + first_bad + 1} reads {got.strip()!r}, "
                f"the diff expects {old[first_bad].rstrip(chr(10)).strip()!r}"
                if old
                else f"{where}, hunk {number} ({header}) does not apply"
            )
        out.extend(lines[pos:found])
        out.extend(new)
        pos = found + len(old)
    out.extend(lines[pos:])
    return "".join(out)


def _same(have: str, want: str) -> bool:
    return have.rstrip("\r\n") == want.rstrip("\r\n")


def read_diff(
    diff: Path, vllm_root: Path, read: Callable[[str], str | None] | None = None
) -> Change:
    """A unified diff against the installed vLLM (`git diff`, a PR's .diff) applied in memory
    to the installed files (or to the files `read` gives by path, "vllm/a.py": another
    release's, read in place). A hunk that does not apply is one line naming file and hunk."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    where = f"diff {diff}"
    try:
        raw = diff.read_bytes()
    except OSError as exc:
        raise DiffError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        # CRLF line endings (a diff saved on Windows) apply with `patch` as LF ones do.
        patch = PatchSet(raw.decode("utf-8").replace("\r\n", "\n"))
    except (UnicodeDecodeError, UnidiffParseError) as exc:
        raise DiffError(f"{where}: not a unified diff ({exc})") from None
    if not patch:
        raise DiffError(f"{where}: no file changes in it (is it a unified diff?)")
    files: list[FileChange] = []
    inert: list[str] = []
    for pf in patch:
        path = _strip_prefix(pf.target_file if not pf.is_removed_file else pf.source_file)
        source = _strip_prefix(pf.source_file)
        if _inert(path) and (not pf.is_rename or _inert(source)):
            inert.append(path)
            continue
        if pf.is_rename:
            # vLLM's imports name the old path; a moved module is a new one (needs a build).
            files.append(FileChange(path, None, None, renamed_from=source))
            continue
        if not path.startswith("vllm/") or pf.is_binary_file:
            files.append(FileChange(path, None if pf.is_added_file else "", "?"))
            continue
        installed = vllm_root.parent / path
        if pf.is_added_file:
            old = None
        elif read is not None:
            old = read(path)
            if old is None:
                raise DiffError(f"{where}: {path} is not in vLLM {vllm_root}")
        elif not installed.is_file():
            raise DiffError(f"{where}: {path} is not in the installed vLLM ({vllm_root})")
        else:
            old = installed.read_text(encoding="utf-8")
        new = None if pf.is_removed_file else apply_hunks(old or "", pf, f"{where}: {path}")
        files.append(FileChange(path, old, new))
    identity = ChangeIdentity(
        kind="diff",
        path=str(diff.resolve()),
        sha256=hashlib.sha256(raw).hexdigest(),
        files=sorted(f.path for f in files),
    )
    return Change(identity, files, sorted(inert))


def _inert(path: str) -> bool:
    return path.startswith(INERT_TOP) or path.endswith(INERT_SUFFIX)


# A checkout based on another vLLM than the installed one differs in thousands of files; a
# branch of the release differs in its own few. Past this many, refuse.
MAX_SOURCE_FILES = 40
_SKIP_PARTS = {"__pycache__"}
_SKIP_SUFFIX = (".pyc", ".so", ".pyd", ".dylib")


def _package_files(root: Path) -> dict[str, Path]:
    files = {}
    for p in root.rglob("*"):
        if p.is_file() and not _SKIP_PARTS & set(p.parts) and not p.name.endswith(_SKIP_SUFFIX):
            files[p.relative_to(root).as_posix()] = p
    return files


def installed_version(vllm_root: Path) -> str | None:
    """The installed vLLM's version from its generated _version.py (no import)."""
    try:
        text = (vllm_root / "_version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"^__version__ = version = ['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else None


def read_source(source: Path, vllm_root: Path) -> Change:
    """A vLLM checkout (a folder holding vllm/) or a folder laid out like the vllm package,
    compared file by file with the installed package; refused when it differs in more than a
    branch's own files (a checkout of another vLLM)."""
    where = f"source {source}"
    package = source / "vllm" if (source / "vllm" / "__init__.py").is_file() else source
    if not (package / "__init__.py").is_file():
        raise ScenarioError(
            f"{where}: neither a vLLM checkout (no vllm/__init__.py) nor a "
            "folder laid out like the vllm package (no __init__.py)"
        )
    theirs, ours = _package_files(package), _package_files(vllm_root)
    changed: list[FileChange] = []
    for rel in sorted(set(theirs) | set(ours)):
        path = f"vllm/{rel}"
        if path in GENERATED:
            continue
        if rel not in theirs:
            if rel.endswith(".py"):  # data files of a wheel need not be in a checkout
                changed.append(FileChange(path, ours[rel].read_text("utf-8", "replace"), None))
            continue
        new_bytes = theirs[rel].read_bytes()
        if rel in ours and ours[rel].read_bytes() == new_bytes:
            continue
        old = ours[rel].read_text("utf-8", "replace") if rel in ours else None
        changed.append(FileChange(path, old, new_bytes.decode("utf-8", "replace")))
    if len(changed) > MAX_SOURCE_FILES:
        tag = f"v{installed_version(vllm_root) or '<installed version>'}"
        raise ScenarioError(
            f"{where}: differs from the installed vLLM ({vllm_root}) in {len(changed)} files, "
            f"more than a branch's own (at most {MAX_SOURCE_FILES}): it is not based on the "
            f"installed release. Base the branch on the release tag {tag} (git rebase --onto "
            f"{tag}) or give the branch as a diff (git diff {tag}...branch)"
        )
    digest = hashlib.sha256()
    for f in changed:
        digest.update(f.path.encode() + b"\0" + (f.new or "").encode() + b"\0")
    commit = checkout_commit(package)
    identity = ChangeIdentity(
        kind="source",
        path=str(source.resolve()),
        sha256=digest.hexdigest(),
        commit=commit,
        files=[f.path for f in changed],
    )
    return Change(identity, changed)


@cache
def _read(kind: str, path: str, mtime: float, root: str) -> Change:
    return (read_diff if kind == "diff" else read_source)(Path(path), Path(root))


def read_change(kind: str, path: Path, vllm_root: Path) -> Change:
    """A change, read once per file version (sweeps classify every cell)."""
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise ScenarioError(f"{kind} {path}: {exc.strerror}") from None
    return _read(kind, str(path), mtime, str(vllm_root))
