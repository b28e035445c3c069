"""Overlays: a variant's own vLLM change -- a unified diff, or a checkout based on the installed
release -- read against the installed vLLM, classified function by function, and turned into
the OverlaySpec that vLLM's processes compile and switch between arms (harness.engine.overlay).

Parent side: stdlib `ast` and `unidiff`, no vLLM import. A change can share one engine with
the code it replaces only when every part of it is a function body (or a new helper, constant
or import) in code that runs in vLLM's workers; everything else is named with its reason.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.config.base import StrictModel
from harness.config.scenario import Scenario
from harness.errors import ScenarioError

# --- what travels in the plan (RunSpec.overlay) ------------------------------------------------


class ChangeIdentity(StrictModel):
    """Which change an arm runs: enough to tell two runs of different changes apart."""

    kind: Literal["diff", "source"] = Field(description="A unified diff, or a checkout.")
    path: str = Field(description="The diff file or the checkout, as resolved.")
    sha256: str = Field(description="diff: of its bytes; source: of the changed files.")
    commit: str | None = Field(default=None, description="A checkout's git HEAD (+dirty).")
    files: list[str] = Field(description="The changed files, relative to the vllm package.")

    def describe(self) -> str:
        what = Path(self.path).name if self.kind == "diff" else self.path
        commit = f" @ {self.commit[:12]}" + (" (dirty)" if self.commit.endswith("+dirty")
                                              else "") if self.commit else ""
        return f"{what}{commit} (sha256 {self.sha256[:12]})"


class OverlayCode(StrictModel):
    """Source to compile inside vLLM's processes, in a module's own namespace."""

    module: str = Field(description="The module, e.g. vllm.v1.spec_decode.medusa.")
    owner: str | None = Field(default=None, description="The class that owns a method.")
    name: str = Field(description="Function, method or (statements) first bound name.")
    kind: Literal["function", "statement"] = Field(
        description="function: a def to dispatch by arm; statement: a new import, constant, "
        "helper class run once in the module.")
    source: str = Field(description="The code, as in the changed file (decorators included).")
    line: int = Field(description="Its first line in the changed file.")
    file: str = Field(description="The changed file, relative to the vllm package's parent.")
    future: list[str] = Field(default_factory=list,
                              description="The changed file's __future__ features.")

    @property
    def key(self) -> str:
        """'module:Owner.name', the dispatched function's name in reports."""
        return f"{self.module}:{self.owner + '.' if self.owner else ''}{self.name}"


class ArmOverlay(StrictModel):
    """What one arm runs: its change's functions, or (no change) the installed ones."""

    variant: str
    change: ChangeIdentity | None = Field(default=None, description="None: installed vLLM.")
    code: list[OverlayCode] = Field(default_factory=list)


class OverlaySpec(StrictModel):
    """Every arm's versions of every overlaid function, for one launch."""

    arms: list[ArmOverlay]
    functions: list[str] = Field(description="Dispatched functions ('module:qualname').")
    active: str = Field(description="The arm active from the start (the launch's own).")
    vllm_location: str = Field(description="The vllm package the change was read against.")


# --- reading a change --------------------------------------------------------------------------

# Paths of a vLLM checkout that are not part of the installed package and change nothing at
# run time (a PR diff usually carries tests and docs).
INERT_TOP = ("tests/", "docs/", "benchmarks/", "examples/", ".github/", ".buildkite/",
             "tools/", ".gitignore", "README", "CONTRIBUTING", "LICENSE")
INERT_SUFFIX = (".md", ".rst")
# Generated at build time; differs between any checkout and any wheel.
GENERATED = {"vllm/_version.py"}


@dataclass
class FileChange:
    """One file of a change: path from the checkout's root (vllm/...), both texts."""

    path: str
    old: str | None  # None: the change adds the file
    new: str | None  # None: the change deletes it


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
            header = (f"@@ -{hunk.source_start},{hunk.source_length} "
                      f"+{hunk.target_start},{hunk.target_length} @@")
            at = min(max(want, pos), max(len(lines) - 1, 0))
            first_bad = next((i for i in range(len(old)) if at + i >= len(lines)
                              or not _same(lines[at + i], old[i])), 0)
            got = lines[at + first_bad].rstrip("\n") if at + first_bad < len(lines) \
                else "<end of file>"
            raise DiffError(f"{where}, hunk {number} ({header}) does not apply to the "
                            f"installed vLLM: line {at + first_bad + 1} reads {got.strip()!r}, "
                            f"the diff expects {old[first_bad].rstrip(chr(10)).strip()!r}"
                            if old else f"{where}, hunk {number} ({header}) does not apply")
        out.extend(lines[pos:found])
        out.extend(new)
        pos = found + len(old)
    out.extend(lines[pos:])
    return "".join(out)


def _same(have: str, want: str) -> bool:
    return have.rstrip("\r\n") == want.rstrip("\r\n")


def read_diff(diff: Path, vllm_root: Path) -> Change:
    """A unified diff against the installed vLLM (`git diff`, a PR's .diff) applied in memory
    to the installed files. A hunk that does not apply is one line naming file and hunk."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    where = f"diff {diff}"
    try:
        raw = diff.read_bytes()
    except OSError as exc:
        raise DiffError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        patch = PatchSet(raw.decode("utf-8"))
    except (UnicodeDecodeError, UnidiffParseError) as exc:
        raise DiffError(f"{where}: not a unified diff ({exc})") from None
    if not patch:
        raise DiffError(f"{where}: no file changes in it (is it a unified diff?)")
    files: list[FileChange] = []
    inert: list[str] = []
    for pf in patch:
        path = _strip_prefix(pf.target_file if not pf.is_removed_file else pf.source_file)
        if pf.is_rename:
            path = _strip_prefix(pf.target_file)
        if _inert(path):
            inert.append(path)
            continue
        if not path.startswith("vllm/") or pf.is_binary_file:
            files.append(FileChange(path, None if pf.is_added_file else "", "?"))
            continue
        installed = vllm_root.parent / (_strip_prefix(pf.source_file)
                                        if pf.is_rename else path)
        if pf.is_added_file:
            old = None
        elif not installed.is_file():
            raise DiffError(f"{where}: {path} is not in the installed vLLM ({vllm_root})")
        else:
            old = installed.read_text(encoding="utf-8")
        new = None if pf.is_removed_file else apply_hunks(old or "", pf, f"{where}: {path}")
        files.append(FileChange(path, old, new))
    identity = ChangeIdentity(kind="diff", path=str(diff.resolve()),
                              sha256=hashlib.sha256(raw).hexdigest(),
                              files=sorted(f.path for f in files))
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
        raise ScenarioError(f"{where}: neither a vLLM checkout (no vllm/__init__.py) nor a "
                            "folder laid out like the vllm package (no __init__.py)")
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
            f"{tag}) or give the branch as a diff (git diff {tag}...branch)")
    digest = hashlib.sha256()
    for f in changed:
        digest.update(f.path.encode() + b"\0" + (f.new or "").encode() + b"\0")
    from harness.plan.builds import checkout_commit

    commit = checkout_commit(package)
    identity = ChangeIdentity(kind="source", path=str(source.resolve()),
                              sha256=digest.hexdigest(), commit=commit,
                              files=[f.path for f in changed])
    return Change(identity, changed)


# --- classification ----------------------------------------------------------------------------

# Where code runs: the arm switch (collective_rpc) reaches vLLM's worker processes only.
WORKER_DIRS = ("vllm/v1/spec_decode/", "vllm/v1/worker/", "vllm/v1/sample/",
               "vllm/model_executor/", "vllm/v1/attention/", "vllm/attention/",
               "vllm/distributed/", "vllm/lora/")
ELSEWHERE = {
    "vllm/v1/core/": "the scheduler, in the engine core",
    "vllm/v1/engine/": "the engine core and its front end",
    "vllm/engine/": "the front end",
    "vllm/entrypoints/": "the front end (LLM, API server)",
    "vllm/v1/executor/": "the executor, in the engine core",
    "vllm/v1/metrics/": "the front end's stats loggers",
    "vllm/benchmarks/": "the benchmark client",
    "vllm/config/": "the config classes",
    # Inside worker folders, but not worker code: the longest matching prefix decides.
    "vllm/v1/spec_decode/metrics.py": "the scheduler (acceptance counts) and the front end's "
                                      "stats loggers",
    "vllm/model_executor/models/registry.py": "the model registry, read when the engine is "
                                              "configured and at model load",
}
# Code that may run inside a torch.compile'd model forward (unless the engine is eager).
COMPILED_DIRS = ("vllm/model_executor/models/", "vllm/model_executor/layers/")
# Methods that run once at start-up, before the first switch between arms.
STARTUP_NAMES = {"__init__", "__new__", "__post_init__", "__init_subclass__", "__set_name__",
                 "load_model", "dummy_run", "_dummy_run", "profile_run", "capture_model",
                 "load_weights", "init_device", "compile_or_warm_up_model",
                 "determine_available_memory", "reload_weights", "validate_same_kv_cache_group",
                 "set_eplb_state", "get_model", "_get_model", "_create_draft_vllm_config",
                 "_maybe_share_embeddings", "_maybe_share_lm_head", "warmup"}
STARTUP_PREFIXES = ("init_", "_init_", "initialize_", "_initialize_", "load_", "_load_",
                    "warm_up", "_warm_up", "setup_", "_setup_")
# Decorators that only wrap a call: re-applied to the branch's version, they change nothing else.
PLAIN_DECORATORS = {"staticmethod", "classmethod", "torch.inference_mode", "torch.no_grad",
                    "override", "typing.override", "typing_extensions.override",
                    "abstractmethod", "abc.abstractmethod"}
KERNEL_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics",
                     "triton_kernel_dispatcher_with_warmup", "jit"}
COMPILE_DECORATORS = {"torch.compile", "support_torch_compile", "torch.jit.script",
                      "functools.cache", "functools.lru_cache", "cache", "lru_cache",
                      "functools.cached_property", "cached_property", "property"}
# vLLM's own @config (vllm.config.utils): classes built in the parent process. A plain
# @dataclass in worker code (SpecDecodeMetadata) is not one: its methods overlay as any class's.
CONFIG_DECORATORS = {"config", "vllm.config.utils.config"}


@dataclass
class Finding:
    """One part of a change: whether it can be overlaid, and why not (or a note)."""

    file: str
    what: str
    overlayable: bool
    reason: str = ""

    def line(self) -> str:
        return f"{self.file}: {self.what}" + (f" — {self.reason}" if self.reason else "")


@dataclass
class Classified:
    """A change classified: every finding, and (when all are overlayable) the code to run."""

    change: Change
    findings: list[Finding]
    code: list[OverlayCode]

    @property
    def overlayable(self) -> bool:
        return all(f.overlayable for f in self.findings)

    @property
    def blockers(self) -> list[Finding]:
        return [f for f in self.findings if not f.overlayable]

    @property
    def functions(self) -> list[str]:
        return [c.key for c in self.code if c.kind == "function"]


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    try:
        return ast.unparse(target)
    except Exception:  # pragma: no cover - ast.unparse handles every expression
        return "?"


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def _module_name(path: str) -> str:
    mod = path.removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


def _future(tree: ast.Module) -> list[str]:
    return sorted({a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                   and node.module == "__future__" for a in node.names})


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING", "typing.TYPE_CHECKING")


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
        node.value.value, str)


def _segment(text: str, node: ast.stmt) -> tuple[str, int]:
    """The statement's source with its decorators, and its first line (1-based)."""
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    assert node.end_lineno is not None
    lines = text.splitlines(keepends=True)[first - 1:node.end_lineno]
    return "".join(lines), first


@dataclass
class _Module:
    """The top level of one file, as the classifier compares it."""

    tree: ast.Module
    text: str
    imports: dict[str, ast.stmt] = field(default_factory=dict)  # bound name -> statement
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    assigns: dict[str, ast.stmt] = field(default_factory=dict)
    other: list[ast.stmt] = field(default_factory=list)  # statements with effects at import


def _parse(text: str, path: str, which: str) -> _Module:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise ScenarioError(f"{path}: the {which} version does not parse (line {exc.lineno}: "
                            f"{exc.msg})") from None
    mod = _Module(tree, text)
    for node in tree.body:
        if _is_docstring(node) or _is_type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _bound_names(node):
                mod.imports[name] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mod.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            mod.classes[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _bound_names(node):
            for name in _bound_names(node):
                mod.assigns[name] = node
        else:
            mod.other.append(node)
    return mod


def _class_parts(node: ast.ClassDef) -> tuple[dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                                               list[ast.stmt]]:
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    rest: list[ast.stmt] = []
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            methods[stmt.name] = stmt
        elif not (_is_docstring(stmt) or isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))):
            rest.append(stmt)  # `pass`, `...` and docstrings change nothing
    return methods, rest


def _names_used(tree: ast.AST) -> set[str]:
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
    return used


class _Installed:
    """The installed vllm package's sources, searched for importers of a name."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cache  # noqa: B019 - one instance per classification, dropped with it
    def texts(self) -> dict[str, str]:
        out = {}
        for p in self.root.rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            try:
                out[f"vllm/{p.relative_to(self.root).as_posix()}"] = p.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        return out

    def module(self, path: str) -> _Module:
        """An installed file's top level, parsed."""
        return _parse(self.texts()[path], path, "installed")

    def referrers(self, name: str, skip: str, changed: dict[str, str | None]) -> list[str]:
        """Files other than `skip` whose code names `name` (a variable, an attribute, an
        import), read in their changed version where the change has one."""
        found = []
        texts = {**self.texts(), **changed}
        for path, text in texts.items():
            if text is None or path == skip or name not in text:  # None: the change deletes it
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            imported = {a.name.rpartition(".")[2] for n in ast.walk(tree)
                        if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
            if name in _names_used(tree) or name in imported:
                found.append(path)
                if len(found) > 3:  # enough to name (three, then "...")
                    break
        return found

    def importers(self, module: str, name: str, skip: str) -> list[str]:
        """Files that bind `name` from `module` by value (`from module import name`)."""
        found = []
        for path, text in self.texts().items():
            if path == skip or name not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            here = _module_name(path)
            package = here if path.endswith("__init__.py") else here.rpartition(".")[0]
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1]
                                    + ([base] if base else []))
                if base == module and any(a.name == name for a in node.names):
                    found.append(path)
                    break
        return found


class _Classifier:
    """Compares the installed and the changed version of each file of a change."""

    def __init__(self, change: Change, installed: _Installed, compiled: bool,
                 device: str) -> None:
        self.change = change
        self.installed = installed
        self.compiled = compiled
        self.device = device
        self.findings: list[Finding] = []
        self.code: list[OverlayCode] = []

    def no(self, file: str, what: str, reason: str) -> None:
        self.findings.append(Finding(file, what, False, reason))

    def yes(self, file: str, what: str, note: str = "") -> None:
        self.findings.append(Finding(file, what, True, note))

    def run(self) -> Classified:
        for path in self.change.inert:
            self.yes(path, "not part of the installed vllm package", "no effect on the "
                     "engine (ignored)")
        for f in self.change.files:
            self.file(f)
        return Classified(self.change, self.findings, self.code)

    def file(self, f: FileChange) -> None:
        path = f.path
        if not path.startswith("vllm/"):
            self.no(path, "build or native source outside the vllm package",
                    "not Python in the vllm package (C++/CUDA, build files): needs a build")
            return
        if not path.endswith(".py") or f.new == "?":
            self.no(path, "non-Python file", "C++, CUDA, Triton sources, templates and data "
                    "are not overlaid: needs a build")
            return
        if f.old is None:
            self.no(path, "new module", "overlays change functions of modules vLLM already "
                    "has; a new module needs a build")
            return
        if f.new is None:
            self.no(path, "module deleted", "a deleted module needs a build")
            return
        reach = self.reach(path)
        if reach:
            # Still parsed: a config field is worth naming as such.
            self.compare(path, f.old, f.new, reach)
            return
        self.compare(path, f.old, f.new, None)

    def reach(self, path: str) -> str | None:
        """Why code in `path` is out of the arm switch's reach (None: worker code)."""
        worker = max((len(d) for d in WORKER_DIRS if path.startswith(d)), default=-1)
        for prefix, where in sorted(ELSEWHERE.items(), key=lambda kv: -len(kv[0])):
            if path.startswith(prefix) and len(prefix) > worker:
                if prefix == "vllm/config/":
                    return ("a config class cannot be overlaid: its fields, methods and "
                            "validators run in the parent process (__post_init__), before "
                            "and outside the workers the arm switch reaches")
                return (f"runs in {where}, which the arm switch (collective_rpc to the "
                        "workers) never reaches: overlays in one engine are for code that "
                        "runs in vLLM's workers")
        if worker >= 0:
            return None
        return ("not known to run only in vLLM's workers (the arm switch reaches only "
                "them): overlays in one engine are for worker code")

    def compare(self, path: str, old_text: str, new_text: str, reach: str | None) -> None:
        old, new = _parse(old_text, path, "installed"), _parse(new_text, path, "changed")
        module = _module_name(path)
        future = _future(new.tree)
        if future != _future(old.tree):
            self.no(path, "__future__ imports change", "they change how the whole module "
                    "compiles")
        # Import-time statements with effects (registrations, calls, blocks).
        old_other = {_dump(s) for s in old.other}
        for stmt in new.other:
            if _dump(stmt) not in old_other:
                self.no(path, f"module-level statement at line {stmt.lineno} "
                        f"({_first_line(new_text, stmt)})", "runs once at import, with side "
                        "effects no switch can undo")
        # Imports.
        for name, stmt in new.imports.items():
            before = old.imports.get(name)
            if before is not None and _dump(before) == _dump(stmt):
                continue
            if name in old.imports or name in old.functions or name in old.classes \
                    or name in old.assigns:
                self.no(path, f"import rebinds {name}", "the installed module already binds "
                        "that name; both arms share the module's globals")
            elif reach is None:
                self.add_statement(module, path, name, new_text, stmt, future, "new import")
            else:  # it runs at import where the switch never reaches, and nothing uses it there
                self.no(path, f"new import {name}", reach)
        # Module constants.
        for name, stmt in new.assigns.items():
            before = old.assigns.get(name)
            if before is not None and _dump(before) == _dump(stmt):
                continue
            if before is not None or name in old.functions or name in old.classes:
                users = self.installed.importers(module, name, path)
                also = (f"; {len(users)} module(s) import it by value ("
                        f"{', '.join(users[:3])})" if users else "")
                self.no(path, f"module constant {name} changes",
                        "both arms read the same module global, so its value cannot differ "
                        f"by arm{also}")
            elif reach is None:
                self.add_statement(module, path, name, new_text, stmt, future,
                                   "new module constant")
            else:
                self.no(path, f"new module constant {name}", reach)
        # Functions.
        self.functions(path, module, None, old.functions, new.functions, old, new, future,
                       reach)
        # Classes.
        for name, cls in new.classes.items():
            before = old.classes.get(name)
            if before is None:
                if reach is not None:
                    self.no(path, f"new class {name}", reach)
                elif cls.decorator_list:
                    self.no(path, f"new class {name}", "decorated (@"
                            f"{_decorator_name(cls.decorator_list[0])}): decorators may "
                            "register or compile it at import")
                else:
                    self.add_statement(module, path, name, new_text, cls, future,
                                       "new helper class")
                continue
            if _dump(before) == _dump(cls):
                continue
            self.klass(path, module, before, cls, old, new, future, reach)
        for name in old.classes.keys() - new.classes.keys():
            self.deleted(path, module, name, new, "class")

    def klass(self, path: str, module: str, old: ast.ClassDef, new: ast.ClassDef,
              old_mod: _Module, new_mod: _Module, future: list[str],
              reach: str | None) -> None:
        name = new.name
        decorators = [_decorator_name(d) for d in new.decorator_list]
        is_config = path.startswith("vllm/config/") or any(
            d in CONFIG_DECORATORS for d in decorators)
        if [_dump(b) for b in old.bases] != [_dump(b) for b in new.bases] or \
                [_dump(k) for k in old.keywords] != [_dump(k) for k in new.keywords]:
            self.no(path, f"{name}: base classes change", "a class's layout cannot change "
                    "under live instances")
        if [_dump(d) for d in old.decorator_list] != [_dump(d) for d in new.decorator_list]:
            self.no(path, f"{name}: class decorators change", "they run once, at import")
        old_methods, old_rest = _class_parts(old)
        new_methods, new_rest = _class_parts(new)
        old_fields = {_dump(s): s for s in old_rest}
        for stmt in new_rest:
            if _dump(stmt) in old_fields:
                continue
            names = _bound_names(stmt)
            label = names[0] if names else _first_line(new_mod.text, stmt)
            if is_config and isinstance(stmt, ast.AnnAssign):
                self.no(path, f"{name} gains field {label}" if label not in
                        {_bound_names(s)[0] for s in old_rest if _bound_names(s)}
                        else f"{name}: field {label} changes",
                        "a config class cannot be overlaid")
            elif "__slots__" in names:
                self.no(path, f"{name}: __slots__ change", "a class's layout cannot change "
                        "under live instances")
            else:
                known = {n for s in old_rest for n in _bound_names(s)}
                self.no(path, f"{name}: class attribute {label} "
                        f"{'changes' if label in known else 'added'}",
                        "a class's layout cannot change under live instances")
        removed = {_dump(s) for s in new_rest}
        for stmt in old_rest:
            if _dump(stmt) not in removed and not any(
                    _bound_names(s) == _bound_names(stmt) for s in new_rest):
                names = _bound_names(stmt)
                self.no(path, f"{name}: class attribute {names[0] if names else '?'} removed",
                        "a class's layout cannot change under live instances")
        if is_config:
            for meth in sorted(set(new_methods) | set(old_methods)):
                a, b = old_methods.get(meth), new_methods.get(meth)
                if a is None or b is None or _dump(a) != _dump(b):
                    self.no(path, f"{name}.{meth} changes", "a config class cannot be "
                            "overlaid: its methods and validators run in the parent process "
                            "(__post_init__) when the engine is configured")
            return
        self.functions(path, module, name, old_methods, new_methods, old_mod, new_mod,
                       future, reach, old)

    def functions(self, path: str, module: str, owner: str | None,
                  old: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                  new: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                  old_mod: _Module, new_mod: _Module, future: list[str],
                  reach: str | None, old_class: ast.ClassDef | None = None) -> None:
        prefix = f"{owner}." if owner else ""
        for name, fn in new.items():
            before = old.get(name)
            if before is not None and _dump(before) == _dump(fn):
                continue
            what = f"{prefix}{name}" + (" (new)" if before is None else ": body changed")
            problem = self.function_problem(path, module, owner, name, before, fn, old_mod,
                                            reach)
            if problem:
                self.no(path, what, problem)
                continue
            notes = self.function_notes(fn, owner, name, old_class, old_mod, module, path)
            source, line = _segment(new_mod.text, fn)
            self.code.append(OverlayCode(module=module, owner=owner, name=name,
                                         kind="function", source=source, line=line,
                                         file=path, future=future))
            self.yes(path, what, "; ".join(notes))
        for name in old.keys() - new.keys():
            self.deleted(path, module, f"{prefix}{name}", new_mod, "method" if owner else
                         "function")

    def function_problem(self, path: str, module: str, owner: str | None, name: str,
                         before: ast.FunctionDef | ast.AsyncFunctionDef | None,
                         fn: ast.FunctionDef | ast.AsyncFunctionDef, old_mod: _Module,
                         reach: str | None) -> str | None:
        if reach is not None:
            return reach
        decorators = [_decorator_name(d) for d in fn.decorator_list]
        if before is not None and [_dump(d) for d in before.decorator_list] != \
                [_dump(d) for d in fn.decorator_list]:
            return "its decorators change (they run once, at import)"
        for d in decorators:
            last = d.rpartition(".")[2]
            if d in KERNEL_DECORATORS or last in {k.rpartition(".")[2]
                                                 for k in KERNEL_DECORATORS}:
                if self.device == "cpu":
                    return (f"a Triton kernel or its dispatcher (@{d}): on this CPU vLLM's "
                            "C++ fallbacks replace it after plugins load, so a body change "
                            "would silently have no effect")
                return (f"a Triton kernel or its dispatcher (@{d}): compiled and registered "
                        "once, not per call")
            if d in COMPILE_DECORATORS or last in {c.rpartition(".")[2]
                                                  for c in COMPILE_DECORATORS}:
                return (f"@{d} compiles, caches or wraps it as a descriptor once: a "
                        "dispatcher cannot switch it per call")
            if "register" in last.lower():
                return f"@{d} registers it at import: the registry keeps the installed one"
            if d not in PLAIN_DECORATORS:
                return (f"@{d} is not known to be a plain call wrapper (it may compile, "
                        "cache or register)")
        if name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES):
            if name in {"__init__", "__new__", "__post_init__"}:
                return ("the class's layout (attributes set at construction) changes: "
                        "instances are built at start-up, before any switch; needs "
                        "launch-per-arm on a build (variants.NAME.python)")
            return ("runs only at start-up, before any switch between arms: needs "
                    "launch-per-arm on a build (variants.NAME.python)")
        if self.compiled and (path.startswith(COMPILED_DIRS) or name == "forward"
                              or self.compiled_class(owner, old_mod)):
            return ("code inside a compiled forward: torch.compile traces it once, freezing "
                    "one arm's version (this scenario is not enforce_eager; set "
                    "engine.enforce_eager: true to overlay it, or give a build)")
        if isinstance(fn, ast.AsyncFunctionDef) != isinstance(before, ast.AsyncFunctionDef) \
                and before is not None:
            return "changes between def and async def"
        if owner is None:
            aliases = _aliases(old_mod, name)
            if aliases:
                return (f"referenced by value at import ({aliases[0]}): that copy would keep "
                        "the installed version")
            # An importer's own import-time copies (`TABLE = {"x": f}` after `from m import
            # f`) are out of reach too: only the importer's global is rebound.
            for user in self.installed.importers(module, name, path):
                aliases = _aliases(self.installed.module(user), name)
                if aliases:
                    return (f"referenced by value at import in {user} ({aliases[0]}): that "
                            "copy would keep the installed version")
        return None

    def compiled_class(self, owner: str | None, mod: _Module) -> bool:
        cls = mod.classes.get(owner or "")
        return cls is not None and any("support_torch_compile" in _decorator_name(d)
                                       for d in cls.decorator_list)

    def function_notes(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None,
                       name: str, old_class: ast.ClassDef | None, old_mod: _Module,
                       module: str, path: str) -> list[str]:
        notes = []
        body = ast.Module(body=fn.body, type_ignores=[])
        if owner and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                         and n.func.id == "super" and not n.args for n in ast.walk(body)):
            notes.append("zero-argument super(): compiled inside a class of the same name, "
                         "__class__ bound to the real class")
        if owner and any(isinstance(n, ast.Attribute) and n.attr.startswith("__")
                         and not n.attr.endswith("__") for n in ast.walk(body)):
            notes.append(f"name-mangled attributes: compiled inside class {owner}")
        if old_class is not None:
            for n in ast.walk(old_class):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) \
                        and n.value.attr == name and isinstance(n.value.value, ast.Name) \
                        and n.value.value.id == "self":
                    target = ast.unparse(n.targets[0])
                    notes.append(f"bound at init ({target} = self.{name}, line {n.lineno}): "
                                 "the dispatcher is in place before any instance exists, so "
                                 "that binding dispatches too")
                    break
        if owner is None:
            users = self.installed.importers(module, name, path)
            if users:
                notes.append(f"imported by value into {len(users)} module(s) ("
                             f"{', '.join(users[:3])}{', ...' if len(users) > 3 else ''}): "
                             "each importer is rebound")
        return notes

    def deleted(self, path: str, module: str, qualname: str, new: _Module, kind: str) -> None:
        # An overlay adds dispatchers and never removes anything: whatever still names the
        # deleted function (a caller, an importer; for a deleted override, every caller of the
        # base class's method) would reach the installed one in the changed arm too.
        name = qualname.rpartition(".")[2]
        method = "." in qualname
        own = _names_used(new.tree) if method else {
            n.id for n in ast.walk(new.tree) if isinstance(n, ast.Name)}
        where = ["this module"] if name in own else []
        if not method:  # importers by value first: the surest reference
            where += self.installed.importers(module, name, path)
        changed = {f.path: f.new for f in self.change.files if f.path.endswith(".py")}
        where += [p for p in self.installed.referrers(name, path, changed) if p not in where]
        if where:
            self.no(path, f"{kind} {qualname} deleted", f"still referenced ("
                    f"{', '.join(where[:3])}{', ...' if len(where) > 3 else ''}): an overlay "
                    "cannot remove it, so the changed arm would still reach the installed one")
        else:
            self.yes(path, f"{kind} {qualname} deleted", "unreferenced: the installed one "
                     "stays for the base arm, the changed code never calls it")

    def add_statement(self, module: str, path: str, name: str, text: str, stmt: ast.stmt,
                      future: list[str], what: str) -> None:
        source, line = _segment(text, stmt)
        if any(c.kind == "statement" and c.module == module and c.line == line
               for c in self.code):
            return  # one import statement binding several names
        self.code.append(OverlayCode(module=module, name=name, kind="statement",
                                     source=source, line=line, file=path, future=future))
        self.yes(path, f"{what} {name}")


def _first_line(text: str, stmt: ast.stmt) -> str:
    line = text.splitlines()[stmt.lineno - 1].strip()
    return line if len(line) <= 60 else line[:57] + "..."


def _aliases(mod: _Module, name: str) -> list[str]:
    """Module-level statements that copy the function object at import (`alias = f`,
    `TABLE = {"x": f}`): a replaced module attribute would not reach those copies."""
    found = []
    for stmt in [*mod.assigns.values(), *mod.other]:
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               for n in ast.walk(stmt)):
            found.append(f"line {stmt.lineno}: {_first_line(mod.text, stmt)}")
    return found


def classify(change: Change, vllm_root: Path, compiled: bool = False,
             device: str = "cpu") -> Classified:
    """Every part of `change`, overlayable or not (with the reason), and the code to run."""
    return _Classifier(change, _installed(str(vllm_root)), compiled, device).run()


@cache
def _installed(root: str) -> _Installed:
    """One reading of an installed package per process: a sweep classifies every cell, and
    each classification would otherwise read all of vLLM's ~2,600 files again."""
    return _Installed(Path(root))


# --- scenarios ---------------------------------------------------------------------------------


def engine_is_compiled(scenario: Scenario) -> bool:
    """Whether vLLM will torch.compile the model forward (not enforce_eager, compilation on)."""
    if scenario.engine.get("enforce_eager"):
        return False
    comp = scenario.engine.get("compilation_config")
    level = comp.get("mode", comp.get("level")) if isinstance(comp, dict) else comp
    return level not in (0, "0", "NONE", "none")


def vllm_location(python: str | None) -> Path:
    """The vllm package the baseline's interpreter imports (found without importing it)."""
    from harness.plan.builds import interpreter, probe

    build = probe(interpreter(python))
    if not build.get("vllm_location"):
        raise ScenarioError(f"{interpreter(python)} has no vLLM to overlay a change on")
    return Path(build["vllm_location"])


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


@dataclass
class Overlays:
    """A scenario's changes, classified: per variant that names one."""

    vllm_root: Path
    variants: dict[str, Classified]
    compiled: bool

    def blocked(self) -> dict[str, list[Finding]]:
        return {n: c.blockers for n, c in self.variants.items() if not c.overlayable}

    def spec(self, arms: list[str], active: str) -> OverlaySpec:
        """The overlay of a launch hosting `arms` (arms without a change run the installed
        code, through the same dispatchers, so their calls are proven too)."""
        functions: list[str] = []
        statements: dict[tuple[str, str], str] = {}
        out = []
        for arm in arms:
            classified = self.variants.get(arm)
            code = classified.code if classified else []
            for c in code:
                if c.kind == "function" and c.key not in functions:
                    functions.append(c.key)
                if c.kind == "statement":
                    seen = statements.setdefault((c.module, c.name), c.source)
                    if seen != c.source:
                        raise ScenarioError(
                            f"variants.{arm}: {c.file}: {c.name} is defined differently by "
                            "two arms' changes; module constants, imports and helper classes "
                            "are shared by every arm in one engine")
            out.append(ArmOverlay(variant=arm, change=classified.change.identity
                                  if classified else None, code=code))
        return OverlaySpec(arms=out, functions=functions, active=active,
                           vllm_location=str(self.vllm_root))


def resolve_overlays(scenario: Scenario, base_dir: Path) -> Overlays | None:
    """Read and classify the change of every variant that names one (diff: or source:),
    against the vLLM the baseline's interpreter runs. None when no variant names one."""
    named = {n: v for n, v in scenario.variants.items() if v.diff or v.source}
    if not named:
        return None
    base = scenario.variants[scenario.baseline]
    python = base.python
    if python is not None and not Path(python).expanduser().is_absolute():
        python = str(base_dir / python)
    root = vllm_location(python)
    compiled = engine_is_compiled(scenario)
    out: dict[str, Classified] = {}
    for name, v in named.items():
        kind, given = ("diff", v.diff) if v.diff else ("source", v.source)
        assert given is not None
        path = Path(given).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            change = read_change(kind, path, root)
            out[name] = classify(change, root, compiled, scenario.device)
        except ScenarioError as exc:
            raise ScenarioError(f"variants.{name}.{kind}: {exc}") from None
        if not change.files:
            raise ScenarioError(f"variants.{name}.{kind}: {given} changes nothing in the "
                                f"installed vLLM ({root})")
    return Overlays(root, out, compiled)


def describe_spec(spec: OverlaySpec) -> dict[str, str]:
    """Arm -> '1 function (MedusaProposer.propose) from x.diff (sha256 ...)', for the arms
    that ran a change of their own, for the table's notes."""
    out = {}
    for arm in spec.arms:
        if arm.change is None:
            continue
        names = [c.key.partition(":")[2] for c in arm.code if c.kind == "function"]
        n = len(names)
        out[arm.variant] = (f"{n} function{'s' if n != 1 else ''} ({', '.join(names)}) from "
                            f"{arm.change.describe()}")
    return out


def refusal(variant: str, kind: str, blockers: list[Finding]) -> str:
    """One line: what cannot be overlaid and what to do."""
    parts = "; ".join(f.line() for f in blockers[:4]) + (
        f" (+{len(blockers) - 4} more)" if len(blockers) > 4 else "")
    return (f"variants.{variant}.{kind}: cannot run in one engine: {parts}. Give the branch "
            f"as a build (variants.{variant}.python: an environment with it installed) to "
            "run it launch-per-arm, or change only function bodies of worker code")

