"""The git side of `specbench bisect`: a vLLM checkout's commits good..bad, each one's change
against the installed release as a cached unified diff, and a cached build of a commit whose
change cannot be overlaid. Only git and the user's build command run here; nothing imports vLLM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.atomic import atomic_path, write_text_atomic
from harness.errors import SpecbenchError

# The package: a checkout's tests/, docs/, csrc/ beside it are not what the overlay runs.
PACKAGE = ":(top)vllm/"
BUILT = "built"  # the marker of a finished build, holding the commit's sha


@dataclass(frozen=True)
class Candidate:
    """One point of a bisect: a commit (or an interpreter) and how its code reaches vLLM."""

    ref: str  # as the user gave it, or the sha
    sha: str  # full
    subject: str  # first line of the commit message
    diff: Path | None  # the commit's whole change against the base; None for the base itself
    python: str | None  # an interpreter that runs it (the interpreter list, or a build)
    overlayable: bool = False  # whether `diff` can be overlaid in one engine (classified)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise SpecbenchError(f"cannot run git ({exc.strerror})") from None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def _check_repo(repo: Path) -> None:
    out = _git(repo, "rev-parse", "--git-dir")
    if out.returncode != 0:
        raise SpecbenchError(f"{repo}: not a git repository ({_last_line(out.stderr)})")


def _resolve(repo: Path, ref: str, what: str) -> str:
    out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if out.returncode != 0:
        raise SpecbenchError(f"{what} {ref}: no such commit in {repo}")
    return out.stdout.strip()


def commit_range(repo: Path, good: str, bad: str) -> list[str]:
    """Full shas from `good` to `bad` inclusive, oldest first, along bad's first parents."""
    _check_repo(repo)
    good_sha = _resolve(repo, good, "--good")
    bad_sha = _resolve(repo, bad, "--bad")
    if _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode != 0:
        raise SpecbenchError(f"--good {good} is not an ancestor of --bad {bad} in {repo}")
    out = _git(
        repo, "rev-list", "--reverse", "--ancestry-path", "--first-parent", f"{good_sha}..{bad_sha}"
    )
    if out.returncode != 0:
        raise SpecbenchError(
            f"--good {good} --bad {bad}: git rev-list failed ({_last_line(out.stderr)})"
        )
    return [good_sha, *out.stdout.split()]


def release_base(repo: Path, vllm_version: str, given: str | None) -> str:
    """The commit the diffs are taken against: `given`, else the tag v<vllm_version> (the
    installed release)."""
    _check_repo(repo)
    if given is not None:
        return _resolve(repo, given, "--base")
    tags = [f"v{vllm_version}", f"v{vllm_version.split('+')[0]}"] if vllm_version else []
    for tag in dict.fromkeys(tags):
        out = _git(repo, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
        if out.returncode == 0:
            return out.stdout.strip()
    have = f"no tag v{vllm_version}" if vllm_version else "the installed vLLM's version is unknown"
    raise SpecbenchError(
        f"{repo}: {have}; give --base REF, the commit of the installed vLLM release"
    )


def _subject(repo: Path, sha: str) -> str:
    out = _git(repo, "log", "-1", "--format=%s", sha)
    return out.stdout.strip() if out.returncode == 0 else ""


def commit_diffs(repo: Path, base: str, shas: list[str], cache: Path) -> list[Candidate]:
    """Each commit with its vllm/ change against `base` as a unified diff, written once to
    `cache/<base>/<sha>.diff` (None where the package is identical to base's)."""
    base_sha = _resolve(repo, base, "--base")
    folder = cache / base_sha
    out: list[Candidate] = []
    for sha in shas:
        path = folder / f"{sha}.diff"
        if not (path.is_file() and path.stat().st_size > 0):
            # Fixed prefixes and no textconv/external diff: the file reads the same whatever
            # the user's git config says (diff.noprefix, diff.external).
            diff = subprocess.run(
                [
                    "git",
                    "-C",
                    str(repo),
                    "diff",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--src-prefix=a/",
                    "--dst-prefix=b/",
                    base_sha,
                    sha,
                    "--",
                    PACKAGE,
                ],
                capture_output=True,
                check=False,
            )
            if diff.returncode != 0:
                raise SpecbenchError(
                    f"commit {sha}: git diff against {base_sha[:12]} failed "
                    f"({_last_line(diff.stderr.decode(errors='replace'))})"
                )
            if diff.stdout:
                with atomic_path(path) as tmp:
                    tmp.write_bytes(diff.stdout)
        has_diff = path.is_file() and path.stat().st_size > 0
        out.append(Candidate(sha, sha, _subject(repo, sha), path if has_diff else None, None))
    return out


# Where a venv's python finds what the base interpreter has. `--system-site-packages` alone is
# not enough when `python` is itself a virtual environment's (specbench's own .venv): it reaches
# the base installation's site-packages, not the environment's. addsitedir also runs the
# environment's .pth files (specbench's editable install among them); the file's name sorts
# after the venv's own .pth files, so what the build installs comes first, as it would before
# system site-packages.
BASE_PTH = "zzz-specbench-base.pth"
SITE_DIRS = "import json, site; print(json.dumps(site.getsitepackages()))"
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
# pip from the base interpreter, installing into the build's venv (which has none of its own:
# a venv's bundled setuptools would shadow the environment's and fail a --no-build-isolation
# build of vLLM, which needs a newer one).
PIP_SHIM = "#!{python}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
FIND_VLLM = "import importlib.util as u; s = u.find_spec('vllm'); print(s.origin if s else '')"


def _run(args: list[str], where: str, cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            args, capture_output=True, text=True, errors="replace", cwd=cwd, check=False
        )
    except OSError as exc:
        raise SpecbenchError(f"{where}: cannot run {args[0]} ({exc.strerror})") from None
    if out.returncode != 0:
        raise SpecbenchError(
            f"{where}: {' '.join(args[:3])} failed ({_last_line(out.stderr or out.stdout)})"
        )
    return out.stdout.strip()


def _make_venv(venv: Path, python: str, where: str) -> Path:
    """`venv`, from `python`, seeing `python`'s packages; its interpreter."""
    venv_python = venv / "bin" / "python"
    if venv_python.is_file():
        return venv_python
    site_dirs = json.loads(_run([python, "-c", SITE_DIRS], where))
    _run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], where)
    purelib = Path(_run([str(venv_python), "-c", PURELIB], where))
    lines = [f"import site; site.addsitedir({d!r})\n" for d in site_dirs]
    write_text_atomic(purelib / BASE_PTH, "".join(lines))
    pip = venv / "bin" / "pip"
    write_text_atomic(pip, PIP_SHIM.format(python=venv_python))
    pip.chmod(0o755)
    return venv_python


def _checkout(repo: Path, sha: str, src: Path, where: str) -> None:
    """A detached worktree of `sha` at `src` (kept if it already is one)."""
    if (src / ".git").exists() and _git(src, "rev-parse", "HEAD").stdout.strip() == sha:
        return
    shutil.rmtree(src, ignore_errors=True)
    _git(repo, "worktree", "prune")
    _run(["git", "-C", str(repo), "worktree", "add", "--detach", str(src), sha], where)


def build_commit(repo: Path, sha: str, command: str, cache: Path, python: str) -> str:
    """The interpreter of `sha` built by `command` (run in its worktree, its venv active), in
    `cache/builds/<sha>/`; a finished build is returned at once. A failed build raises an
    error naming the commit and its log."""
    folder = (cache / "builds" / sha).resolve()
    venv = folder / "venv"
    venv_python = venv / "bin" / "python"
    marker = folder / BUILT
    if marker.is_file() and venv_python.is_file():
        return str(venv_python)
    where = f"commit {sha[:12]}: build"
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "src"
    _checkout(repo, sha, src, where)
    _make_venv(venv, python, where)
    log = folder / "build.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    with log.open("w", encoding="utf-8") as fh:
        fh.write(f"$ {command}\n")
        fh.flush()
        try:
            code = subprocess.run(
                command,
                shell=True,
                cwd=src,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                check=False,
            ).returncode
        except OSError as exc:
            raise SpecbenchError(f"{where} could not start ({exc.strerror}); see {log}") from None
    if code != 0:
        raise SpecbenchError(f"{where} failed (exit code {code}); see {log}")
    # An editable install (pip install -e) loses to the vLLM the venv also sees: its finder
    # comes after the path entries. A build that runs the installed vLLM would measure nothing.
    found = _run([str(venv_python), "-I", "-c", FIND_VLLM], where, cwd=folder)
    if not found.startswith(str(folder) + os.sep):
        raise SpecbenchError(
            f"{where}: {venv_python} imports vllm from {found or 'nowhere'}, "
            f"not from the build in {folder} (an editable install loses to "
            f"the installed vLLM: install with `pip install . "
            f"--no-build-isolation`); see {log}"
        )
    write_text_atomic(marker, sha + "\n")
    return str(venv_python)
