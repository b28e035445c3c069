"""What runs while vLLM records CUDA graphs, found by reachability in its source (installed, or a
wheel's): from every capture call through the calls the source resolves, each reached function
with the call path that reaches it. Stdlib `ast`, no vLLM import; over-approximates (a false
refusal costs a launch-per-arm, a missed capture-time function a wrong number).

Capture calls: every capture-named method of worker code (a runner's `capture_model` and
`_capture_cudagraphs`, a speculator's `capture`, a graph manager's `capture`) and every
`with torch.cuda.graph(...)` block. From a capture method: what it hands over (`self._prefill`,
`self.model`), the functions it defines to be recorded (`forward_fn`), the dummy runs it gives a
graph mode (V1 records the model through `_dummy_run(n, cudagraph_runtime_mode=...)`), and the
hooks it calls around the capture (not followed further). From there every call is followed
where its target can be read from the source: `self.f` (the receiver's nearest definition and
its subclasses' overrides), `super().f`, `self.x.f` where the receiver's classes assign
`self.x = Cls(...)` or annotate it, calling a module (`self.x(...)` runs its forward or
__call__), module functions by name, and the model
(`self.model`, `model`, `self.runnable`): every class vLLM's model registry names.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harness.atomic import write_json_atomic
from harness.plan.vllm_source import (
    CAPTURE_NAME,
    MODEL_REGISTRY,
    Changed,
    Installed,
    Module,
    base_name,
    class_parts,
    import_base,
    is_type_checking,
    module_of,
)

Def = ast.FunctionDef | ast.AsyncFunctionDef
Key = tuple[str, str]  # (file, qualified name: "Class.method" or "function")
# Where capture calls are looked for: the runners, the speculators, the compilation wrappers
# (CUDAGraphWrapper, breakable graphs), model and attention code.
ROOT_DIRS = (
    "vllm/v1/worker/",
    "vllm/v1/spec_decode/",
    "vllm/compilation/",
    "vllm/model_executor/",
    "vllm/v1/attention/",
    "vllm/models/",
)
ROOT_TEXT = re.compile(r"def \w*capture|cuda\.graph\(")
# A class statement and its bases, read from the text (`class A(B, C[T]):`), to find subclasses
# without parsing every file.
CLASS_STATEMENT = re.compile(r"^[ \t]*class\s+(\w+)\s*\(([^:]*)\)\s*:", re.M)
DUMMY_NAME = re.compile(r"(^|_)dummy(_|$)")  # _dummy_run: what V1's graph capture records
# Names that hold the model (any class the model registry names) where the source cannot say
# which: the speculator's draft model, a graph manager's `model` parameter, CUDAGraphWrapper's
# runnable.
MODEL_NAMES = frozenset({"model", "draft_model", "target_model", "runnable"})
MAX_DEPTH = 10  # calls followed from a capture call
MAX_NODES = 40000
# The receivers (classes of `self`) a function is followed with: a mixin's method reached
# from hundreds of model classes resolves its attributes the same way for nearly all.
MAX_RECEIVERS = 16


@dataclass(frozen=True)
class _Node:
    path: str  # the file defining the function
    owner: str | None  # its class (None: a module function)
    fn: Def
    receiver: tuple[str, str] | None  # (file, class) of `self` where it is reached

    @property
    def key(self) -> Key:
        return self.path, f"{self.owner}.{self.fn.name}" if self.owner else self.fn.name


@dataclass(frozen=True)
class _Edge:
    how: str  # the call as written, then its target: "self.model → EagleLlamaForCausalLM.forward"
    node: _Node


class _Reach:
    """One reachability search over one view of vLLM's source."""

    def __init__(self, installed: Installed) -> None:
        self.src = installed
        self.texts = installed.texts()
        self._classes: dict[Key, ast.ClassDef | None] = {}
        self._mro: dict[Key, list[tuple[str, ast.ClassDef]]] = {}
        self._attrs: dict[Key, dict[str, list[tuple[str, ast.ClassDef]]]] = {}
        self._subs: dict[str, list[tuple[str, ast.ClassDef]]] = {}
        self._models: list[tuple[str, ast.ClassDef]] | None = None
        self._found_path: dict[Key, str] = {}
        self._defs: dict[Key, ast.ClassDef | None] = {}
        self._index: dict[str, list[Key]] | None = None  # base name -> (file, class) naming it
        self._methods: dict[int, dict[str, Def]] = {}
        self._on_models: dict[str, list[_Node]] = {}
        self._syntax: dict[int, list[tuple[ast.expr | None, str]]] = {}
        self._types: dict[int, list[tuple[str, list[str]]]] = {}

    # -- names -------------------------------------------------------------------------------

    def module(self, path: str) -> Module | None:
        if path not in self.texts:
            return None
        try:
            return self.src.module(path)
        except Exception:  # a file that does not parse reaches nothing
            return None

    def klass(self, path: str, dotted: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `dotted` names in the module at `path`: defined there, imported (under
        TYPE_CHECKING too), an alias (`Base = LlamaForCausalLM`), or `module.Class`."""
        key = (path, dotted)
        if key in self._classes:
            found = self._classes[key]
            return (self._found_path[key], found) if found is not None else None
        self._classes[key] = None  # a cycle of aliases ends here
        result = self._klass(path, dotted, depth)
        if result is not None:
            self._found_path[key] = result[0]
            self._classes[key] = result[1]
        return result

    def _klass(self, path: str, dotted: str, depth: int) -> tuple[str, ast.ClassDef] | None:
        mod = self.module(path)
        if mod is None or depth > 5:
            return None
        head, _, rest = dotted.partition(".")
        if rest:
            stmt = mod.imports.get(head) or _typing_imports(mod).get(head)
            base = module_of(stmt, head, path) if stmt is not None else None
            where = self.src.module_path(base) if base else None
            return self.klass(where, rest, depth + 1) if where else None
        if head in mod.classes:
            return path, mod.classes[head]
        stmt = mod.imports.get(head) or _typing_imports(mod).get(head)
        if isinstance(stmt, ast.ImportFrom):
            alias = next(a.name for a in stmt.names if (a.asname or a.name) == head)
            where = self.src.module_path(import_base(stmt, path))
            if where is not None:
                return self.klass(where, alias, depth + 1)
            return None
        target = _aliases(mod).get(head)
        return self.klass(path, target, depth + 1) if target else None

    def mro(self, path: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """`cls` and the classes it derives from that the source has, nearest first."""
        key = (path, cls.name)
        if key not in self._mro:
            out: list[tuple[str, ast.ClassDef]] = []
            todo = [(path, cls, 0)]
            while todo:
                where, c, depth = todo.pop(0)
                if any(c is seen for _, seen in out):
                    continue
                out.append((where, c))
                for base in c.bases if depth < 8 else []:
                    found = self.klass(where, ast.unparse(_strip_generic(base)))
                    if found is not None:
                        todo.append((*found, depth + 1))
            self._mro[key] = out
        return self._mro[key]

    def subclasses(self, path: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """The classes deriving from `cls` (by its name, transitively), found by reading the
        files that name it in a class statement."""
        seen: list[tuple[str, ast.ClassDef]] = []
        todo = [cls.name]
        names = {cls.name}
        while todo and len(seen) < 400:
            name = todo.pop()
            for where, sub in self._direct_subclasses(name):
                if sub.name not in names:
                    names.add(sub.name)
                    todo.append(sub.name)
                if not any(sub is s for _, s in seen):
                    seen.append((where, sub))
        return seen

    def base_index(self) -> dict[str, list[Key]]:
        """Base name -> the (file, class) of every class statement naming it, read from the
        text (no parse)."""
        if self._index is None:
            self._index = {}
            for path, text in self.texts.items():
                if "class " not in text:
                    continue
                for found in CLASS_STATEMENT.finditer(text):
                    for base in re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*(?:,|$)", found[2]):
                        self._index.setdefault(base, []).append((path, found[1]))
        return self._index

    def descendants_named(self, name: str) -> int:
        """How many classes derive from `name`, transitively, by the text's class statements."""
        index, seen, todo = self.base_index(), {name}, [name]
        while todo:
            for _, sub in index.get(todo.pop(), []):
                if sub not in seen:
                    seen.add(sub)
                    todo.append(sub)
        return len(seen) - 1

    def _direct_subclasses(self, name: str) -> list[tuple[str, ast.ClassDef]]:
        if name not in self._subs:
            out = []
            for path, sub in self.base_index().get(name, []):
                cls = self._class_def(path, sub)
                if cls is not None and any(base_name(b) == name for b in cls.bases):
                    out.append((path, cls))
            self._subs[name] = out
        return self._subs[name]

    def methods(self, cls: ast.ClassDef) -> dict[str, Def]:
        found = self._methods.get(id(cls))
        if found is None:
            found = self._methods[id(cls)] = class_parts(cls)[0]
        return found

    def method(self, path: str, cls: ast.ClassDef, name: str) -> tuple[str, str, Def] | None:
        """The nearest definition of `name` for instances of `cls`: (file, class, function)."""
        for where, c in self.mro(path, cls):
            fn = self.methods(c).get(name)
            if fn is not None:
                return where, c.name, fn
        return None

    def models(self) -> list[tuple[str, ast.ClassDef]]:
        """Every class vLLM's model registry names (registry.py's architecture -> (module,
        class) tables): what `self.model` may be."""
        if self._models is None:
            self._models = []
            mod = self.module(MODEL_REGISTRY)
            pairs = dict.fromkeys(_registry_pairs(mod.tree) if mod is not None else [])
            for module, name in pairs:
                where = self.src.module_path(f"vllm.model_executor.models.{module}")
                found = self.klass(where, name) if where else None
                if found is not None:
                    self._models.append(found)
        return self._models

    def attribute_classes(
        self, path: str, cls: ast.ClassDef
    ) -> dict[str, list[tuple[str, ast.ClassDef]]]:
        """Per attribute of `cls`'s instances, the classes the source says it holds:
        `self.x = Cls(...)` in any method of the class or its bases, `self.x: Cls` and a
        class-level `x: Cls` annotation."""
        key = (path, cls.name)
        if key not in self._attrs:
            out: dict[str, list[tuple[str, ast.ClassDef]]] = {}
            for where, c in self.mro(path, cls):
                types = self._types.get(id(c))
                if types is None:
                    types = self._types[id(c)] = list(_attribute_types(c))
                for attr, names in types:
                    for name in names:
                        found = self.klass(where, name)
                        if found is not None and not any(
                            found[1] is f for _, f in out.get(attr, [])
                        ):
                            out.setdefault(attr, []).append(found)
            self._attrs[key] = out
        return self._attrs[key]

    # -- calls -------------------------------------------------------------------------------

    def self_method(self, node: _Node, name: str) -> Iterator[_Node]:
        """`self.name` for the node's receiver: its nearest definition and the overrides of
        the receiver's subclasses (each reached with its own class as receiver)."""
        if node.receiver is None:
            return
        path, cls_name = node.receiver
        cls = self._class_def(path, cls_name)
        if cls is None:
            return
        found = self.method(path, cls, name)
        if found is not None:
            yield _Node(found[0], found[1], found[2], (path, cls_name))
        for where, sub in self.subclasses(path, cls):
            fn = self.methods(sub).get(name)
            if fn is not None:
                yield _Node(where, sub.name, fn, (where, sub.name))

    def _class_def(self, path: str, name: str) -> ast.ClassDef | None:
        key = (path, name)
        if key not in self._defs:
            mod = self.module(path)
            found = mod.classes.get(name) if mod is not None else None
            for node in ast.walk(mod.tree) if mod is not None and found is None else []:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    found = node
                    break
            self._defs[key] = found
        return self._defs[key]

    def on_models(self, name: str) -> list[_Node]:
        """Method `name` (`__call__`: the model called) of every registered model class."""
        if name not in self._on_models:
            self._on_models[name] = list(self.on_classes(self.models(), name))
        return self._on_models[name]

    def on_classes(self, classes: list[tuple[str, ast.ClassDef]], name: str) -> Iterator[_Node]:
        """Method `name` called on instances of `classes` (`__call__`: the instance called,
        nn.Module's __call__ running forward)."""
        for where, cls in classes:
            for meth in (name,) if name != "__call__" else ("__call__", "forward"):
                found = self.method(where, cls, meth)
                if found is not None and not found[0].startswith("torch/"):
                    yield _Node(found[0], found[1], found[2], (where, cls.name))

    def attribute(self, node: _Node, attr: str) -> list[tuple[str, ast.ClassDef]]:
        """The classes `self.attr` may hold for the node's receiver."""
        out: list[tuple[str, ast.ClassDef]] = []
        if node.receiver is not None:
            cls = self._class_def(*node.receiver)
            if cls is not None:
                out += self.attribute_classes(node.receiver[0], cls).get(attr, [])
        return out

    def edges(self, node: _Node) -> Iterator[_Edge]:
        """Every call (and hand-over of a bound method) in the node's function, nested
        functions included, resolved where the source says its target."""
        for call, attr in self.syntax(node.fn):
            if call is not None:
                yield from self.call(node, call)
            else:
                yield from self.handed(node, attr)

    def syntax(self, fn: Def) -> list[tuple[ast.expr | None, str]]:
        """A function's calls (the called expression) and the `self.x` it names without
        calling (a bound method handed over), read once per function."""
        found = self._syntax.get(id(fn))
        if found is None:
            nodes = list(ast.walk(fn))
            called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
            inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
            found = []
            for n in nodes:
                if isinstance(n, ast.Call):
                    found.append((n.func, ""))
                elif (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                    and isinstance(n.ctx, ast.Load)
                    and id(n) not in called
                    and id(n) not in inner
                ):
                    found.append((None, n.attr))
            self._syntax[id(fn)] = found
        return found

    def handed(self, node: _Node, attr: str) -> Iterator[_Edge]:
        """`self.attr` handed over (to a capture call, a callback): a bound method, or the
        model (its forward)."""
        for target in self.self_method(node, attr):
            yield _Edge(f"hands over {attr}", target)
        if attr in MODEL_NAMES:
            for target in [
                *self.on_classes(self.attribute(node, attr), "__call__"),
                *self.on_models("__call__"),
            ]:
                yield _Edge(f"hands over self.{attr} → {_name(target)}", target)

    def call(self, node: _Node, func: ast.expr) -> Iterator[_Edge]:
        """The functions a call runs: `f(...)`, `model(...)`, `self.f(...)`, `self.x(...)`,
        `super().f(...)`, `self.x.f(...)`, `model.f(...)`, `module.f(...)`."""
        if isinstance(func, ast.Name):
            yield from self.name_call(node, func.id)
            return
        if not isinstance(func, ast.Attribute):
            return
        value, name = func.value, func.attr
        if isinstance(value, ast.Name) and value.id == "self":
            yield from self.self_call(node, name)
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
        ):
            yield from self.super_call(node, name)
        elif (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "self"
        ):
            models = self.on_models(name) if value.attr in MODEL_NAMES else []
            for target in [*self.on_classes(self.attribute(node, value.attr), name), *models]:
                yield _Edge(f"calls self.{value.attr}.{name} → {_name(target)}", target)
        elif isinstance(value, ast.Name) and value.id in MODEL_NAMES:
            for target in self.on_models(name):
                yield _Edge(f"calls {value.id}.{name} → {_name(target)}", target)
        elif isinstance(value, ast.Name):
            yield from self.name_call(node, f"{value.id}.{name}")

    def name_call(self, node: _Node, name: str) -> Iterator[_Edge]:
        if name in MODEL_NAMES:
            for target in self.on_models("__call__"):
                yield _Edge(f"calls {name} → {_name(target)}", target)
            return
        found = self.src.resolve_function(node.path, name)
        if found is not None:
            yield _Edge(f"calls {name}", _Node(found[0], None, found[1], None))

    def self_call(self, node: _Node, name: str) -> Iterator[_Edge]:
        targets = list(self.self_method(node, name))
        for target in targets:
            yield _Edge(f"calls {name}", target)
        if not targets:  # an attribute called: the module's forward
            models = self.on_models("__call__") if name in MODEL_NAMES else []
            for target in [*self.on_classes(self.attribute(node, name), "__call__"), *models]:
                yield _Edge(f"calls self.{name} → {_name(target)}", target)

    def super_call(self, node: _Node, name: str) -> Iterator[_Edge]:
        if node.owner is None or node.receiver is None:
            return
        cls = self._class_def(*node.receiver)
        chain = self.mro(node.receiver[0], cls) if cls is not None else []
        after = next((i for i, (_, c) in enumerate(chain) if c.name == node.owner), None)
        for where, c in chain[after + 1 :] if after is not None else []:
            fn = self.methods(c).get(name)
            if fn is not None:
                yield _Edge(f"calls super().{name}", _Node(where, c.name, fn, node.receiver))
                return

    # -- capture calls -----------------------------------------------------------------------

    def roots(self) -> Iterator[tuple[str, _Node, bool]]:
        """(how, node, follow): what each capture call records, and the hooks around it (not
        followed: they run once, eagerly, around the capture)."""
        classes: list[tuple[str, ast.ClassDef]] = []
        for path in sorted(self.texts):
            if not path.startswith(ROOT_DIRS) or not ROOT_TEXT.search(self.texts[path]):
                continue
            mod = self.module(path)
            if mod is None:
                continue
            classes += [(path, cls) for cls in mod.classes.values()]
            for fn in mod.functions.values():
                yield from self.graph_blocks(_Node(path, None, fn, None))
        # The most derived-from first: a path is named from the shared capture (the
        # autoregressive speculators' base) rather than from one method's own.
        classes.sort(key=lambda pc: (-self.descendants_named(pc[1].name), pc[0]))
        for path, cls in classes:
            for name, fn in self.methods(cls).items():
                here = _Node(path, cls.name, fn, (path, cls.name))
                if CAPTURE_NAME.search(name):
                    yield from self.capture_method(here)
                yield from self.graph_blocks(here)

    def capture_method(self, node: _Node) -> Iterator[tuple[str, _Node, bool]]:
        where = f"{node.owner}.{node.fn.name}"
        calls = [n for n in ast.walk(node.fn) if isinstance(n, ast.Call)]
        called = {id(n.func) for n in calls}
        # A dummy run given the graph mode to run under is what V1 records
        # (`self._dummy_run(n, cudagraph_runtime_mode=...)`); V2's adaptive-verification
        # profile (`self._dummy_run(**batch)`, after the captures) runs eagerly.
        recorded = {id(n.func) for n in calls if any("graph" in (k.arg or "") for k in n.keywords)}
        inner = {id(n.value) for n in ast.walk(node.fn) if isinstance(n, ast.Attribute)}
        for n in ast.walk(node.fn):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and isinstance(n.ctx, ast.Load)
                and id(n) not in inner
            ):
                if id(n) in called:  # a hook around the capture, or a dummy run it records
                    follow = bool(DUMMY_NAME.search(n.attr)) and id(n) in recorded
                    for target in self.self_method(node, n.attr):
                        yield f"{where} calls {n.attr}", target, follow
                else:
                    for edge in self.handed(node, n.attr):
                        yield f"{where} {edge.how}", edge.node, True
        for n in ast.walk(node.fn):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n is not node.fn:
                # a function it builds to be recorded (forward_fn): its calls are recorded
                inner_node = _Node(node.path, node.owner, n, node.receiver)
                for edge in self.edges(inner_node):
                    yield f"{where} records {n.name}, which {edge.how}", edge.node, True

    def graph_blocks(self, node: _Node) -> Iterator[tuple[str, _Node, bool]]:
        """Calls inside `with torch.cuda.graph(...)`: recorded."""
        where = f"{node.owner}.{node.fn.name}" if node.owner else node.fn.name
        for n in ast.walk(node.fn):
            if not isinstance(n, ast.With | ast.AsyncWith) or not any(
                isinstance(i.context_expr, ast.Call)
                and ast.unparse(i.context_expr.func).endswith("cuda.graph")
                for i in n.items
            ):
                continue
            for stmt in n.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Call):
                        for edge in self.call(node, sub.func):
                            yield f"{where}, inside torch.cuda.graph, {edge.how}", edge.node, True

    def search(self) -> dict[Key, str]:
        found: dict[Key, str] = {}
        queue: deque[tuple[_Node, int]] = deque()
        seen: set[tuple[Key, tuple[str, str] | None]] = set()
        receivers: dict[Key, int] = {}  # receivers followed per function, bounded

        def reach(node: _Node, how: str, depth: int, follow: bool) -> None:
            found.setdefault(node.key, how)
            mark = (node.key, node.receiver)
            if not follow or mark in seen or receivers.get(node.key, 0) >= MAX_RECEIVERS:
                return
            seen.add(mark)
            receivers[node.key] = receivers.get(node.key, 0) + 1
            queue.append((node, depth))

        for how, node, follow in self.roots():
            reach(node, how, 1, follow)
        while queue and len(found) < MAX_NODES:
            node, depth = queue.popleft()
            if depth >= MAX_DEPTH:
                continue
            for edge in self.edges(node):
                reach(edge.node, f"{found[node.key]}, which {edge.how}", depth + 1, True)
        return found


def _name(node: _Node) -> str:
    return node.key[1]


def _strip_generic(base: ast.expr) -> ast.expr:
    return base.value if isinstance(base, ast.Subscript) else base


def _typing_imports(mod: Module) -> dict[str, ast.stmt]:
    """Names imported under `if TYPE_CHECKING:` (annotations name classes through them)."""
    out: dict[str, ast.stmt] = {}
    for node in mod.tree.body:
        if is_type_checking(node):
            for stmt in node.body:  # type: ignore[attr-defined]
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    for a in stmt.names:
                        out[(a.asname or a.name).split(".")[0]] = stmt
    return out


def _aliases(mod: Module) -> dict[str, str]:
    """Module-level `A = B` (B a name or a dotted name), those in an `if TYPE_CHECKING:`'s
    else branch too (what runs: `_EagleLlamaForCausalLMBase = LlamaForCausalLM`)."""
    out: dict[str, str] = {}
    body: list[ast.stmt] = []
    for node in mod.tree.body:
        body += node.orelse if is_type_checking(node) else [node]  # type: ignore[attr-defined]
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Name | ast.Attribute)
        ):
            out[stmt.targets[0].id] = ast.unparse(stmt.value)
    return out


def _annotation_names(node: ast.expr | None) -> list[str]:
    """The class names an annotation mentions (`A | None`, `Optional[A]`, `"A"`)."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _annotation_names(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return []
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name | ast.Attribute) and not isinstance(
            getattr(n, "ctx", None), ast.Store
        ):
            out.append(ast.unparse(n))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out += _annotation_names(n)
    return out


def _attribute_types(cls: ast.ClassDef) -> Iterator[tuple[str, list[str]]]:
    """(attribute, class names) from a class body: annotations and `self.x = Cls(...)`."""
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, _annotation_names(stmt.annotation)
    for fn in class_parts(cls)[0].values():
        for n in ast.walk(fn):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(n, ast.Assign):
                targets, value = n.targets, n.value
            elif isinstance(n, ast.AnnAssign):
                targets, value = [n.target], n.value
            for t in targets:
                if not (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                ):
                    continue
                names = _annotation_names(n.annotation) if isinstance(n, ast.AnnAssign) else []
                for call in ast.walk(value) if value is not None else []:
                    if isinstance(call, ast.Call) and isinstance(
                        call.func, ast.Name | ast.Attribute
                    ):
                        names.append(ast.unparse(call.func))
                yield t.attr, names


def _registry_pairs(tree: ast.Module) -> Iterator[tuple[str, str]]:
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            for v in n.values:
                if (
                    isinstance(v, ast.Tuple)
                    and len(v.elts) == 2
                    and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts
                    )
                ):
                    yield v.elts[0].value, v.elts[1].value  # type: ignore[attr-defined]


def reach_of(installed: Installed) -> dict[Key, str]:
    """Every function of `installed` that runs while CUDA graphs are captured, as (file,
    qualified name) -> the capture path that reaches it ("AutoRegressiveSpeculator.capture
    hands over _prefill, which calls _run_model, which calls self.model →
    EagleLlamaForCausalLM.forward"). Searched anew on each call."""
    return _Reach(installed).search()


@cache
def capture_reachable(installed: Installed) -> dict[Key, str]:
    """reach_of, once per package read (an installed vLLM, a wheel): every classification of
    a process shares it, and later processes read it from $SPECBENCH_CACHE/capture-reach/,
    keyed by the package's files and this search's own code (the search reads a few hundred
    files, about 10 s here)."""
    if isinstance(installed, Changed):
        return reach_of(installed)
    digest = hashlib.sha256()
    for code in _search_code():
        digest.update(code.encode("utf-8") + b"\0")
    for name, text in sorted(installed.texts().items()):
        digest.update(f"{name}\0{text}\0".encode("utf-8", "replace"))
    path = _cache_dir() / "capture-reach" / f"{digest.hexdigest()[:32]}.json"
    try:
        data = json.loads(path.read_text("utf-8"))
        if data.get("version") == CACHE_VERSION:
            return {(p, q): how for p, q, how in data["reach"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = reach_of(installed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [[p, q, how] for (p, q), how in found.items()]
        write_json_atomic(path, {"version": CACHE_VERSION, "reach": rows}, indent=None)
    except OSError:
        pass  # a read-only cache: searched again next time
    return found


CACHE_VERSION = 1


def _search_code() -> list[str]:
    """This search's own code (and the source reader it leans on): a change to either makes
    a new cache key."""
    here = Path(__file__).resolve().parent
    return [(here / name).read_text("utf-8") for name in ("capture_reach.py", "vllm_source.py")]


def _cache_dir() -> Path:
    root = os.environ.get("SPECBENCH_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "specbench"
