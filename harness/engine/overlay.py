"""Overlays inside vLLM's processes: each arm's version of each changed function, compiled from
its source against the module's own globals, and in the function's place a dispatcher that
runs the active arm's version and counts the call (harness.engine.impls reports the counts
pass by pass, through the same switch the built-in swaps use).

The spec is harness.plan.overlay.OverlaySpec as JSON; this side reads it as plain data.
"""

from __future__ import annotations
import __future__

import functools
import importlib
import linecache
import sys
from collections.abc import Callable
from typing import Any

# Set on every dispatcher, so a second install in the same process is a no-op.
MARK = "__specbench_overlay__"


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
    compiled = compile(text, filename, "exec", flags=_flags(code.get("future", [])),
                       dont_inherit=True)
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


def _rebind_importers(original: Any, dispatcher: Any) -> list[str]:
    """Modules that imported the function by value (`from m import f`) before the overlay
    was installed hold the original object: point each at the dispatcher."""
    rebound = []
    for name, mod in list(sys.modules.items()):
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            if value is original:
                namespace[attr] = dispatcher
                rebound.append(f"{name}.{attr}")
    return rebound


Hit = Callable[[str, dict[str, Any]], None]


def install(spec: dict[str, Any], hit: Hit,
            active: Callable[[], str]) -> dict[str, Any]:
    """Install every dispatcher of `spec`; returns facts for the reports (functions, importers
    rebound). Raises what compiling the change raises (the launch then fails with it)."""
    if spec["functions"] and all(_installed(key) for key in spec["functions"]):
        return {"overlaid": list(spec["functions"]), "rebound": {}}  # already, in this process
    modules: dict[str, Any] = {}
    done_statements: set[tuple[str, str]] = set()
    versions: dict[str, dict[str, Any]] = {key: {} for key in spec["functions"]}
    for arm in spec["arms"]:
        for code in arm["code"]:
            module = modules.setdefault(code["module"], importlib.import_module(code["module"]))
            if code["kind"] == "statement":
                ident = (code["module"], code["source"])
                if ident not in done_statements:
                    done_statements.add(ident)
                    text = "\n" * (code["line"] - 1) + code["source"]
                    filename = _remember(code["file"], code["line"], code["source"])
                    exec(compile(text, filename, "exec",  # noqa: S102
                                 flags=_flags(code.get("future", [])), dont_inherit=True),
                         module.__dict__)
                continue
            key = f"{code['module']}:{code['owner'] + '.' if code.get('owner') else ''}" \
                  f"{code['name']}"
            raw = _compile(code, module)
            if code.get("owner"):
                _bind_class_cell(raw, _resolve(key)[1])
            versions[key][arm["variant"]] = raw
    rebound: dict[str, list[str]] = {}
    for key in spec["functions"]:
        _, holder, name = _resolve(key)
        current = holder.__dict__.get(name) if isinstance(holder, type) else \
            getattr(holder, name, None)
        if getattr(_function(current), MARK, None) == key:
            continue  # installed already in this process
        installed = current if current is not None else (
            _inherited(holder, name) if isinstance(holder, type) else None)
        table = dict(versions[key])
        fallback = installed if installed is not None else next(iter(table.values()))
        for arm in spec["arms"]:
            table.setdefault(arm["variant"], fallback)
        dispatcher = _dispatcher(key, table, fallback, hit, active)
        setattr(holder, name, dispatcher)
        if not isinstance(holder, type) and current is not None:
            rebound[key] = _rebind_importers(current, dispatcher)
    return {"overlaid": list(spec["functions"]), "rebound": rebound}


def _installed(key: str) -> bool:
    _, holder, name = _resolve(key)
    current = holder.__dict__.get(name) if isinstance(holder, type) else \
        getattr(holder, name, None)
    return getattr(_function(current), MARK, None) == key


def _dispatcher(key: str, table: dict[str, Any], template: Any, hit: Hit,
                active: Callable[[], str]) -> Any:
    """A function that runs the active arm's version; staticmethod and classmethod keep
    their kind (every arm's version has the installed one's, the classifier checks)."""
    functions = {arm: _function(raw) for arm, raw in table.items()}

    returned = f"returned {key.partition(':')[2]}"

    @functools.wraps(_function(template))
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        out = functions[active()](*args, **kwargs)
        # The report keeps, per pass, what each arm's version returned (its type).
        hit(key, {returned: type(out).__name__})
        return out

    setattr(dispatch, MARK, key)
    if isinstance(template, staticmethod):
        return staticmethod(dispatch)
    if isinstance(template, classmethod):
        return classmethod(dispatch)
    return dispatch
