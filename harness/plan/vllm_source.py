"""The installed vLLM, read as source: where the baseline's interpreter has it (vllm_location),
and its files parsed and searched for the users, importers and subclasses of a name
(Installed), with the AST helpers the classifier shares. Stdlib `ast`, no vLLM import.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Protocol

from harness.errors import ScenarioError
from harness.plan.builds import interpreter, probe

# The KV connector base class, whose methods listed under "Scheduler-side methods" run in the
# engine core's scheduler (KVConnectorRole.SCHEDULER); harness.plan.classify refuses them.
KV_CONNECTOR_BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
KV_SCHEDULER_MARK = "Scheduler-side methods"


def module_name(path: str) -> str:
    mod = path.removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


def bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


@dataclass
class Module:
    """The top level of one file, as the classifier compares it."""

    tree: ast.Module
    text: str
    imports: dict[str, ast.stmt] = field(default_factory=dict)  # bound name -> statement
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    assigns: dict[str, ast.stmt] = field(default_factory=dict)
    other: list[ast.stmt] = field(default_factory=list)  # statements with effects at import


def parse(text: str, path: str, which: str) -> Module:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise ScenarioError(
            f"{path}: the {which} version does not parse (line {exc.lineno}: {exc.msg})"
        ) from None
    mod = Module(tree, text)
    for node in tree.body:
        if _is_docstring(node) or is_type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in bound_names(node):
                mod.imports[name] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mod.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            mod.classes[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign) and bound_names(node):
            for name in bound_names(node):
                mod.assigns[name] = node
        else:
            mod.other.append(node)
    return mod


def class_parts(
    node: ast.ClassDef,
) -> tuple[dict[str, ast.FunctionDef | ast.AsyncFunctionDef], list[ast.stmt]]:
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    rest: list[ast.stmt] = []
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            methods[stmt.name] = stmt
        elif not (
            _is_docstring(stmt)
            or isinstance(stmt, ast.Pass)
            or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        ):
            rest.append(stmt)  # `pass`, `...` and docstrings change nothing
    return methods, rest


def names_used(tree: ast.AST) -> set[str]:
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
    return used


def import_base(node: ast.ImportFrom, path: str) -> str:
    """The module a `from ... import` in `path` reads, relative imports resolved."""
    base = node.module or ""
    if not node.level:
        return base
    here = module_name(path)
    package = here if path.endswith("__init__.py") else here.rpartition(".")[0]
    parts = package.split(".")
    return ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))


DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# The model registry's tables (architecture -> (module, class)), and the class a worker process
# wraps its worker in.
MODEL_REGISTRY = "vllm/model_executor/models/registry.py"
WORKER_WRAPPER = "WorkerWrapperBase"
CAPTURE_NAME = re.compile(r"(^|_)capture($|_)")  # capture, capture_model, _capture_graphs


def module_of(stmt: ast.stmt, name: str, path: str) -> str | None:
    """The module an import statement binds to `name` ('import a.b as m', 'from a import b')."""
    if isinstance(stmt, ast.Import):
        return next((a.name for a in stmt.names if (a.asname or a.name) == name), None)
    if isinstance(stmt, ast.ImportFrom):
        alias = next((a.name for a in stmt.names if (a.asname or a.name) == name), None)
        return f"{import_base(stmt, path)}.{alias}" if alias else None
    return None


def base_name(base: ast.expr) -> str:
    """A base class's own name: `a.B` and `B[T]` (a generic's parameters) both name B."""
    target = base.value if isinstance(base, ast.Subscript) else base
    return ast.unparse(target).rpartition(".")[2]


@lru_cache(maxsize=1024)
def _tree(text: str) -> ast.Module:
    """A file's parse, shared by every search of one classification (and of a sweep's): the
    same installed files are searched for each changed function's users and importers."""
    return ast.parse(text)


def _uses_in_text(text: str, name: str) -> Iterator[tuple[str, ...]]:
    if name not in text or not re.search(rf"\b{re.escape(name)}\b", text):
        return
    try:
        tree = _tree(text)
    except SyntaxError:
        return
    yield from _uses_in(tree, name)


def _uses_in(tree: ast.AST, name: str, chain: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for child in ast.iter_child_nodes(tree):
        if (isinstance(child, ast.Name) and child.id == name) or (
            isinstance(child, ast.Attribute) and child.attr == name
        ):
            yield chain
        yield from _uses_in(
            child, name, chain + (child.name,) if isinstance(child, DEFS) else chain
        )


class Installed:
    """The installed vllm package's sources, searched for importers and users of a name."""

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

    @cache  # noqa: B019
    def module(self, path: str) -> Module:
        """An installed file's top level, parsed."""
        return parse(self.texts()[path], path, "installed")

    def module_path(self, module: str) -> str | None:
        """'vllm.a.b' -> 'vllm/a/b.py' (or its package's __init__.py), if installed."""
        base = module.replace(".", "/")
        texts = self.texts()
        return next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in texts), None)

    def uses(self, name: str, changed: dict[str, str | None]) -> Iterator[tuple[str, ...]]:
        """Each place in the package (a changed file in its changed version) that names `name`
        (a call, an attribute, a variable), as the classes and functions around it, outermost
        first (() at import). Definitions of `name` are not uses. Lazy: a caller that stops
        at the first use it rejects parses only the files before it."""
        for text in {**self.texts(), **changed}.values():
            if text is not None:
                yield from _uses_in_text(text, name)

    def class_chain(
        self, path: str, cls: ast.ClassDef, stop: str
    ) -> list[tuple[str, ast.ClassDef]] | None:
        """`cls` (in `path`) and its installed ancestors below the base named `stop`, nearest
        first; None when `stop` is not among its ancestors (or one cannot be found)."""
        chain = [(path, cls)]
        for base in cls.bases:
            name = base_name(base)
            if name == stop:
                return chain
            found = self.resolve_class(path, name)
            if found is not None:
                above = self.class_chain(*found, stop)
                if above is not None:
                    return chain + above
        return None

    def resolve_class(self, path: str, name: str) -> tuple[str, ast.ClassDef] | None:
        """The class a module's `name` is: defined there or imported from vllm (re-exports
        followed a few steps)."""
        found = self._resolve(path, name, "classes", 0)
        return (found[0], found[1]) if found and isinstance(found[1], ast.ClassDef) else None

    def resolve_function(
        self,
        path: str,
        name: str,
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The module-level function a module's `name` is, found as resolve_class finds a
        class; a dotted name ('mod.fn') through an imported vllm module."""
        head, _, rest = name.partition(".")
        if rest:
            stmt = self.module(path).imports.get(head) if path in self.texts() else None
            base = module_of(stmt, head, path) if stmt is not None else None
            where = self.module_path(base) if base else None
            return self.resolve_function(where, rest) if where else None
        found = self._resolve(path, name, "functions", 0)
        return (
            (found[0], found[1])
            if found and isinstance(found[1], ast.FunctionDef | ast.AsyncFunctionDef)
            else None
        )

    def _resolve(self, path: str, name: str, kind: str, depth: int) -> tuple[str, ast.AST] | None:
        if path not in self.texts() or depth > 4:
            return None
        mod = self.module(path)
        defined: dict[str, ast.AST] = getattr(mod, kind)
        if name in defined:
            return path, defined[name]
        stmt = mod.imports.get(name)
        if isinstance(stmt, ast.ImportFrom):
            where = self.module_path(import_base(stmt, path))
            alias = next(a.name for a in stmt.names if (a.asname or a.name) == name)
            if where is not None:
                return self._resolve(where, alias, kind, depth + 1)
        return None

    @cache  # noqa: B019
    def cpu_overrides(self) -> dict[str, list[tuple[str, str, set[str]]]]:
        """Base class name -> the CPU platform's subclasses of it (cpu_model_runner.py's
        CPUModelRunner(GPUModelRunner), cpu_worker.py, cpu_communicator.py, ...): (class,
        file, the methods it defines)."""
        out: dict[str, list[tuple[str, str, set[str]]]] = {}
        for path in self.texts():
            if not path.rpartition("/")[2].startswith("cpu_"):
                continue
            for cls in self.module(path).classes.values():
                methods = set(class_parts(cls)[0])
                for base in cls.bases:
                    out.setdefault(base_name(base), []).append((cls.name, path, methods))
        return out

    @cache  # noqa: B019
    def kv_scheduler_methods(self) -> frozenset[str]:
        """The KV connector methods of the scheduler's role (KVConnectorRole.SCHEDULER): those
        the base class lists under its "Scheduler-side methods" banner, and SupportsHMA's."""
        text = self.texts().get(KV_CONNECTOR_BASE)
        if text is None or KV_SCHEDULER_MARK not in text:
            return frozenset()
        mark = text[: text.index(KV_SCHEDULER_MARK)].count("\n") + 1
        mod = self.module(KV_CONNECTOR_BASE)
        names = set()
        for cls in mod.classes.values():
            for name, fn in class_parts(cls)[0].items():
                if cls.name == "SupportsHMA" or (
                    cls.name == "KVConnectorBase_V1" and fn.lineno > mark
                ):
                    names.add(name)
        return frozenset(names)

    @cache  # noqa: B019
    def architectures(self) -> frozenset[str]:
        """The model classes vLLM's model registry names (registry.py's tables of
        architecture -> (module, class)): the classes the model runner builds and calls."""
        mod = self.module(MODEL_REGISTRY) if MODEL_REGISTRY in self.texts() else None
        if mod is None:
            return frozenset()
        return frozenset(
            v.elts[1].value
            for n in ast.walk(mod.tree)
            if isinstance(n, ast.Dict)
            for v in n.values
            if isinstance(v, ast.Tuple)
            and len(v.elts) == 2
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts)
            and isinstance(v.elts[1], ast.Constant)
            and isinstance(v.elts[1].value, str)
        )

    def ancestors(self, path: str, cls: ast.ClassDef, depth: int = 0) -> set[str]:
        """The names of `cls` and of the installed classes it derives from."""
        names = {cls.name}
        for base in cls.bases if depth < 6 else []:
            found = self.resolve_class(path, base_name(base))
            if found is not None:
                names |= self.ancestors(*found, depth + 1)
        return names

    @cache  # noqa: B019
    def worker_process_classes(self, path: str) -> frozenset[str]:
        """The classes of an executor's file that live in a worker process: each builds the
        worker it serves (`WorkerWrapperBase(...)`) and is no Executor (multiproc_executor.py's
        WorkerProc runs in each worker; UniProcExecutor builds its worker in the engine core)."""
        if path not in self.texts():
            return frozenset()
        return frozenset(
            cls.name
            for cls in self.module(path).classes.values()
            if not any("Executor" in ast.unparse(b) for b in cls.bases)
            and any(
                isinstance(n, ast.Call) and ast.unparse(n.func).endswith(WORKER_WRAPPER)
                for n in ast.walk(cls)
            )
        )

    def referrers(self, name: str, skip: str, changed: dict[str, str | None]) -> list[str]:
        """Files other than `skip` whose code names `name` (a variable, an attribute, an
        import), read in their changed version where the change has one."""
        found = []
        texts = {**self.texts(), **changed}
        for path, text in texts.items():
            if text is None or path == skip or name not in text:  # None: the change deletes it
                continue
            try:
                tree = _tree(text)
            except SyntaxError:
                continue
            imported = {
                a.name.rpartition(".")[2]
                for n in ast.walk(tree)
                if isinstance(n, ast.Import | ast.ImportFrom)
                for a in n.names
            }
            if name in names_used(tree) or name in imported:
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
                tree = _tree(text)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.ImportFrom)
                    and import_base(node, path) == module
                    and any(a.name == name for a in node.names)
                ):
                    found.append(path)
                    break
        return found


class Readable(Protocol):
    """A vLLM source tree's files (harness.plan.vllm_support.Source: a wheel read in place)."""

    def paths(self) -> Iterator[str]: ...

    def read(self, path: str) -> str | None: ...


class SourceFiles(Installed):
    """Another release's vllm package read as the installed one is (a wheel read in place, an
    unpacked checkout): `specbench support WHEEL --scenario` classifies against it."""

    def __init__(self, source: Readable, label: str) -> None:
        super().__init__(Path(label))
        self.source = source

    @cache  # noqa: B019
    def texts(self) -> dict[str, str]:
        out = {}
        for path in self.source.paths():
            try:
                text = self.source.read(path)
            except UnicodeDecodeError:
                continue
            if text is not None:
                out[path] = text
        return out


class Changed(Installed):
    """`base` with a change's files in their changed version (None: the change deletes it):
    what runs in the changed arm, searched as the installed package is."""

    def __init__(self, base: Installed, changed: dict[str, str | None]) -> None:
        super().__init__(base.root)
        self.base = base
        self.changed = changed

    @cache  # noqa: B019
    def texts(self) -> dict[str, str]:
        out = {p: t for p, t in self.base.texts().items() if self.changed.get(p, t) is not None}
        out.update({p: t for p, t in self.changed.items() if t is not None})
        return out

    @cache  # noqa: B019
    def module(self, path: str) -> Module:
        if path not in self.changed:
            return self.base.module(path)
        return parse(self.texts()[path], path, "changed")


@cache
def installed_package(root: str) -> Installed:
    """One reading of an installed package per process: a sweep classifies every cell, and
    each classification would otherwise read all of vLLM's ~2,600 files again."""
    return Installed(Path(root))


def vllm_location(python: str | None) -> Path:
    """The vllm package the baseline's interpreter imports (found without importing it)."""
    build = probe(interpreter(python))
    if not build.get("vllm_location"):
        raise ScenarioError(f"{interpreter(python)} has no vLLM to overlay a change on")
    return Path(build["vllm_location"])
