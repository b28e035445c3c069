"""Overlays inside vLLM's processes: each arm's version of each changed function, compiled from
its source against the module's own globals, and in the function's place a dispatcher that
runs the active arm's version and counts the call (harness.engine.impls reports the counts
pass by pass, through the same switch the built-in swaps use).

The spec is harness.wire.overlay.OverlaySpec as JSON; this side reads it as plain data.
"""

from __future__ import annotations
import __future__

import ast
import functools
import importlib
import linecache
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from harness.wire.protocol import OVERLAY_TRACED

# Set on every dispatcher, so a second install in the same process is a no-op.
MARK = "__specbench_overlay__"
# Set on the dispatcher of a function the installed vLLM does not have (a change's new helper).
NEW_MARK = "__specbench_overlay_new__"


def _flags(features: list[str]) -> int:
    """The compile flags of the changed file's own __future__ imports: compile() would
    otherwise inherit this module's, and a module whose annotations name types imported only
    under TYPE_CHECKING would then fail, or one without the import would change meaning."""
    flags = 0
    for name in features:
        flags |= getattr(__future__, name).compiler_flag
    return flags


def _compile(code: dict[str, Any], module: Any) -> Any:
    """Run `code` (one def or statement at its own line numbers, so tracebacks point into the
    changed file) in a scratch namespace whose globals are the module's: the branch's function
    sees the same classes, singletons and patches as the installed one. A method is compiled
    inside a class of its owner's name, so name mangling (self.__x) and zero-argument super()
    compile as in the real class."""
    source: str = code["source"]
    line: int = code["line"]
    owner: str | None = code.get("owner")
    if owner:
        text = "\n" * max(0, line - 2) + f"class {owner}:\n" + source
    else:
        text = "\n" * (line - 1) + source
    filename = _remember(code["file"], line, source)
    compiled = compile(
        text, filename, "exec", flags=_flags(code.get("future", [])), dont_inherit=True
    )
    scratch: dict[str, Any] = {}
    exec(compiled, module.__dict__, scratch)  # noqa: S102 - the user's change, by design
    if owner is None:
        return scratch[code["name"]]
    return scratch[owner].__dict__[_attribute(owner, code["name"])]


def _remember(file: str, line: int, source: str) -> str:
    """A file name for the changed code whose lines tracebacks can show: the changed file's
    lines are not on disk here, so they are registered with linecache at their own numbers."""
    filename = f"<specbench overlay {file}>"
    entry: Any = linecache.cache.get(filename)
    lines: list[str] = list(entry[2]) if entry else []
    lines += [""] * max(0, line - 1 + len(source.splitlines()) - len(lines))
    for i, text in enumerate(source.splitlines(keepends=True)):
        lines[line - 1 + i] = text
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    return filename


def _attribute(owner: str | None, name: str) -> str:
    """The name a class body stores `name` under: a private `__x` of class `Owner` is
    `_Owner__x` (what the class's own code, and so self.__x, looks up)."""
    stripped = (owner or "").lstrip("_")
    if stripped and name.startswith("__") and not name.endswith("__"):
        return f"_{stripped}{name}"
    return name


def _function(raw: Any) -> Callable[..., Any]:
    """The callable inside a staticmethod/classmethod, else the object itself."""
    return raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw


def _bind_class_cell(raw: Any, cls: type) -> None:
    """Zero-argument super() reads the __class__ cell the compiler made for the scratch
    class: point it (through any wrappers) at the real class."""
    fn: Any = _function(raw)
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if code is not None and "__class__" in code.co_freevars:
            fn.__closure__[code.co_freevars.index("__class__")].cell_contents = cls
        fn = getattr(fn, "__wrapped__", None)


def _resolve(key: str) -> tuple[Any, Any, str]:
    """'module:Owner.name' -> (module, the class or the module that holds it, name)."""
    module_name, _, qualname = key.partition(":")
    module = importlib.import_module(module_name)
    holder: Any = module
    *owners, name = qualname.split(".")
    for owner in owners:
        holder = getattr(holder, owner)
    return module, holder, _attribute(owners[-1] if owners else None, name)


def _inherited(cls: type, name: str) -> Any:
    for klass in cls.__mro__[1:]:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _rebind(original: Any, dispatcher: Any) -> list[str]:
    """Point every reference to `original` that import-time code left behind at `dispatcher`,
    and name each: a module global (`from m import f`, `alias = f`) in any module; and in the
    modules of the changed package, values of module-level dicts, lists and sets, a module-level
    `functools.partial(f, ...)`, default arguments of functions and methods (`def g(x=f)`), and
    class bodies (`class B: m = f`, a method copied by value into another class)."""
    rebinder = _Rebinder(original, dispatcher)
    for mod_name, mod in list(sys.modules.items()):
        namespace = getattr(mod, "__dict__", None)
        if isinstance(namespace, dict):
            rebinder.module(mod_name, namespace)
    return rebinder.rebound


class _Rebinder:
    """One _rebind: `original`, the plain function that replaces it, the package whose modules
    are searched deep, and what has been rebound so far."""

    def __init__(self, original: Any, dispatcher: Any) -> None:
        self.original = original
        self.plain = _function(dispatcher)
        self.package = (getattr(self.plain, "__module__", "") or "").split(".")[0]
        self.rebound: list[str] = []

    def module(self, mod_name: str, namespace: dict[str, Any]) -> None:
        """Every global of one module: rebound when it is `original`; searched inside when
        the module is the changed package's."""
        package = self.package
        deep = bool(package) and (mod_name == package or mod_name.startswith(package + "."))
        for attr, value in list(namespace.items()):
            where = f"{mod_name}.{attr}"
            if value is self.original:
                namespace[attr] = self.plain
                self.rebound.append(where)
            elif deep:
                self.inside(namespace, attr, value, mod_name, where)

    def inside(
        self, namespace: dict[str, Any], attr: str, value: Any, mod_name: str, where: str
    ) -> None:
        """References held inside one global of the changed package's module."""
        original, plain = self.original, self.plain
        if isinstance(value, dict) and any(v is original for v in value.values()):
            for k in [k for k, v in value.items() if v is original]:
                value[k] = plain
            self.rebound.append(f"{where} (dict)")
        elif isinstance(value, list) and any(v is original for v in value):
            value[:] = [plain if v is original else v for v in value]
            self.rebound.append(f"{where} (list)")
        elif isinstance(value, set) and original in value:
            value.discard(original)
            value.add(plain)
            self.rebound.append(f"{where} (set)")
        elif isinstance(value, functools.partial) and value.func is original:
            namespace[attr] = functools.partial(plain, *value.args, **value.keywords)
            self.rebound.append(f"{where} (partial)")
        elif isinstance(value, type) and value.__module__ == mod_name:
            self.class_body(value, where)
        elif callable(value) and getattr(value, "__module__", None) == mod_name:
            self.defaults(value, where)

    def class_body(self, cls: type, where: str) -> None:
        for name, member in list(vars(cls).items()):
            replaced = self.swap(member)
            if replaced is not None:
                setattr(cls, name, replaced)
                self.rebound.append(f"{where}.{name} (class body)")
            elif callable(_function(member)):
                self.defaults(member, f"{where}.{name}")

    def swap(self, value: Any) -> Any:
        """`value` with `original` replaced, or None when it is no reference to it."""
        if value is self.original:
            return self.plain
        if isinstance(value, staticmethod | classmethod) and value.__func__ is self.original:
            return type(value)(self.plain)
        return None

    def defaults(self, fn: Any, where: str) -> None:
        original, plain = self.original, self.plain
        fn = _function(fn)
        found = getattr(fn, "__defaults__", None)
        if found and any(d is original for d in found):
            fn.__defaults__ = tuple(plain if d is original else d for d in found)
            self.rebound.append(f"{where} (default argument)")
        kw = getattr(fn, "__kwdefaults__", None)
        if kw and any(v is original for v in kw.values()):
            fn.__kwdefaults__ = {k: plain if v is original else v for k, v in kw.items()}
            self.rebound.append(f"{where} (default argument)")


Hit = Callable[[str, dict[str, Any]], None]


class OverlayTraced(RuntimeError):
    """A dispatcher reached while torch.compile traces or a CUDA graph captures: the graph
    would freeze one arm's version, and its counters would replay as constants. The launch
    then fails naming the function, never recording a constant; its message starts with
    OVERLAY_TRACED, which the parent finds in the launch's log
    (harness.wire.protocol.overlay_refusal)."""


def _graph_check() -> Callable[[], str | None]:
    """A cheap per-call test: None eagerly; else what is freezing the call into a graph."""
    try:
        import torch
    except ImportError:  # pragma: no cover - harness/engine always has torch
        return lambda: None
    compiling = torch.compiler.is_compiling
    if torch.cuda.is_available():
        capturing = torch.cuda.is_current_stream_capturing

        def check() -> str | None:
            if compiling():
                return "torch.compile traced it into the compiled forward"
            if capturing():
                return "a CUDA graph captured it"
            return None

        return check
    return lambda: "torch.compile traced it into the compiled forward" if compiling() else None


def _kind(code: dict[str, Any]) -> type | None:
    """staticmethod or classmethod when a new method's source is decorated so (a dispatcher
    keeps the kind), else None."""
    tree = ast.parse(textwrap.dedent(code["source"]))
    node = tree.body[0] if tree.body else None
    for d in getattr(node, "decorator_list", []):
        name = ast.unparse(d)
        if name == "staticmethod":
            return staticmethod
        if name == "classmethod":
            return classmethod
    return None


def _key(code: dict[str, Any]) -> str:
    owner = code.get("owner")
    return f"{code['module']}:{owner + '.' if owner else ''}{code['name']}"


def install(spec: dict[str, Any], hit: Hit, active: Callable[[], str]) -> dict[str, Any]:
    """Install every dispatcher of `spec`; returns facts for the reports (functions, what was
    rebound). Raises what compiling the change raises (the launch then fails with it).

    Order matters for code that captures a function at import: first every dispatcher takes
    its function's place and every reference to the installed function that can be rebound
    (an importer's global, a dict, list or set, a partial, a default argument, a class body)
    is pointed at it; then each arm's code runs in the changed file's own order, so a new
    constant, container or default argument that names a changed or new function holds its
    dispatcher, and one that names a new helper finds it."""
    if spec["functions"] and all(_installed(key) for key in spec["functions"]):
        return {
            "overlaid": list(spec["functions"]),
            "rebound": {},
            "arm_only": _arm_only(spec, {k for k in spec["functions"] if not _new(k)}),
        }  # already, in this process
    check = _graph_check()
    codes = {_key(c): c for arm in spec["arms"] for c in arm["code"] if c["kind"] == "function"}
    tables: dict[str, dict[str, Any]] = {}
    installed: dict[str, Any] = {}
    rebound: dict[str, list[str]] = {}
    dispatchers: dict[str, Any] = {}
    for key in spec["functions"]:
        _, holder, name = _resolve(key)
        current = (
            holder.__dict__.get(name) if isinstance(holder, type) else getattr(holder, name, None)
        )
        original = (
            current
            if current is not None
            else (_inherited(holder, name) if isinstance(holder, type) else None)
        )
        kind = (
            type(original)
            if isinstance(original, staticmethod | classmethod)
            else _kind(codes[key])
            if original is None
            else None
        )
        tables[key] = {}
        dispatcher = _dispatcher(key, tables[key], original, kind, hit, active, check)
        dispatchers[key] = dispatcher
        setattr(holder, name, dispatcher)
        if original is not None:
            installed[key] = original
        else:
            setattr(_function(dispatcher), NEW_MARK, True)
        if current is not None:
            rebound[key] = _rebind(_function(current), dispatcher)
    done_statements: set[tuple[str, str]] = set()
    for arm in spec["arms"]:
        for code in sorted(arm["code"], key=lambda c: (c["module"], c["line"])):
            module = importlib.import_module(code["module"])
            if code["kind"] == "statement":
                ident = (code["module"], code["source"])
                if ident not in done_statements:
                    done_statements.add(ident)
                    text = "\n" * (code["line"] - 1) + code["source"]
                    filename = _remember(code["file"], code["line"], code["source"])
                    exec(
                        compile(
                            text,
                            filename,
                            "exec",  # noqa: S102
                            flags=_flags(code.get("future", [])),
                            dont_inherit=True,
                        ),
                        module.__dict__,
                    )
                continue
            key = _key(code)
            raw = _compile(code, module)
            if code.get("owner"):
                _bind_class_cell(raw, _resolve(key)[1])
            tables[key][arm["variant"]] = _function(raw)
    for key, table in tables.items():
        fallback = installed.get(key)
        fallback = _function(fallback) if fallback is not None else next(iter(table.values()))
        for arm in spec["arms"]:
            table.setdefault(arm["variant"], fallback)
        if key not in installed:  # a new function: its name and docs from its first version
            functools.update_wrapper(_function(dispatchers[key]), fallback)
    return {
        "overlaid": list(spec["functions"]),
        "rebound": rebound,
        "arm_only": _arm_only(spec, set(installed)),
    }


def _arm_only(spec: dict[str, Any], installed: set[str]) -> dict[str, list[str]]:
    """The functions vLLM does not have (a change's new helpers), each with the arms whose
    change defines it: only those arms can call it, so only their passes must (an arm without
    it runs the installed code, which never names it)."""
    return {
        key: [
            arm["variant"]
            for arm in spec["arms"]
            if any(c["kind"] == "function" and _key(c) == key for c in arm["code"])
        ]
        for key in spec["functions"]
        if key not in installed
    }


def _new(key: str) -> bool:
    """Whether the dispatcher at `key` stands for a function vLLM itself does not have."""
    _, holder, name = _resolve(key)
    found = holder.__dict__.get(name) if isinstance(holder, type) else getattr(holder, name, None)
    return getattr(_function(found), NEW_MARK, False)


def _installed(key: str) -> bool:
    _, holder, name = _resolve(key)
    current = holder.__dict__.get(name) if isinstance(holder, type) else getattr(holder, name, None)
    return getattr(_function(current), MARK, None) == key


def _dispatcher(
    key: str,
    functions: dict[str, Any],
    template: Any,
    kind: type | None,
    hit: Hit,
    active: Callable[[], str],
    check: Callable[[], str | None],
) -> Any:
    """A function that runs the active arm's version (`functions`, filled once every arm's
    code is compiled) and counts the call, eagerly only: traced or captured into a graph, it
    raises (OverlayTraced) instead of freezing one arm and replaying its counters. A static
    or class method keeps its kind (every arm's version has the installed one's)."""
    module, _, qualname = key.partition(":")
    returned = f"returned {qualname}"
    refused = (
        f"{OVERLAY_TRACED} {qualname} ({module}) runs inside a graph: {{}}, so one arm's "
        "version would be frozen in it and the arm switch could not reach it. Run it "
        "eagerly (engine.enforce_eager: true) or launch-per-arm on a build"
    )

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        why = check()
        if why is not None:
            raise OverlayTraced(refused.format(why))
        out = functions[active()](*args, **kwargs)
        # The report keeps, per pass, what each arm's version returned (its type).
        hit(key, {returned: type(out).__name__})
        return out

    if template is not None:
        functools.update_wrapper(dispatch, _function(template))
    setattr(dispatch, MARK, key)
    if kind is not None:
        return kind(dispatch)
    return dispatch


def _platform_forward() -> str | None:
    """The CustomOp method this platform dispatches to (CustomOp's own default of which calls
    forward_native; a class that defines its own shadows forward_native here)."""
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001 - no vLLM in this process: no platform to ask
        return None
    for name, test in (
        ("forward_cpu", "is_cpu"),
        ("forward_cuda", "is_cuda"),
        ("forward_hip", "is_rocm"),
        ("forward_xpu", "is_xpu"),
        ("forward_tpu", "is_tpu"),
    ):
        if getattr(current_platform, test, lambda: False)():
            return name
    return "forward_oot"


def shadowed(keys: list[str]) -> dict[str, str]:
    """Of the dispatched methods `keys`, those this process can show are shadowed, each with
    what shadows it: the class of a live instance resolves the name to its own override (the
    CPU model runner's _to_list over GPUModelRunner's), or, for a CustomOp's forward_native,
    the class's own forward_<platform>, which CustomOp calls on this platform instead. One
    scan of the live objects (gc) serves every key; call it only for functions that never ran."""
    import gc

    holders: dict[str, tuple[type, str]] = {}
    out: dict[str, str] = {}
    for key in keys:
        try:
            _, holder, name = _resolve(key)
        except Exception:  # noqa: BLE001 - a module that cannot be resolved shadows nothing
            continue
        if not isinstance(holder, type):
            continue
        if name == "forward_native":
            platform = _platform_forward()
            owner = next((k for k in holder.__mro__ if platform in k.__dict__), None)
            if platform and owner is not None and owner.__name__ != "CustomOp":
                out[key] = (
                    f"{owner.__name__}.{platform} ({owner.__module__}): CustomOp "
                    f"calls it instead of forward_native on this platform"
                )
                continue
        holders[key] = (holder, name)
    if not holders:
        return out
    kinds = {type(o) for o in gc.get_objects()}
    for key, (holder, name) in holders.items():
        for kind in sorted(
            (k for k in kinds if isinstance(k, type) and k is not holder and issubclass(k, holder)),
            key=lambda k: k.__qualname__,
        ):
            definer = next((k for k in kind.__mro__ if name in k.__dict__), None)
            if definer is not None and definer is not holder and issubclass(definer, holder):
                out[key] = f"{definer.__name__}.{name} ({definer.__module__}) overrides it"
                break
    return out
