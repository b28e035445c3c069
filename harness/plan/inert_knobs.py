"""Speculative-config fields that change nothing in a vLLM version, read from its source (no
import), so a scenario that sets one is refused before any engine starts instead of
measuring an A/A. On 0.34: `speculative_config.enforce_eager` (the draft takes the target's),
`parallel_drafting` (vLLM's own warning: deprecated, no effect) and
`suffix_decoding_max_spec_factor` / `suffix_decoding_min_token_prob` (validated, never read).

A field is inert when vLLM's config says so (a "<field> is deprecated and has no effect"
message in vllm/config/speculative.py), or when nothing reads it: no `self.<field>` in
SpeculativeConfig's own methods and no `<holder>.<field>` anywhere in the package, where a
holder is a name the file binds to a SpeculativeConfig (`x = ....speculative_config`, a
parameter annotated SpeculativeConfig, or `speculative_config` itself). Reads that only check
the value (inside a raise, an assert, a log call, or the test of an `if` whose body only
raises or logs) are not reads. A field named as a string in a module-level collection of
speculative.py (options read by name, e.g. `_METHOD_SPECIFIC_OPTIONS`) or by
`getattr(x, "<field>")` counts as read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from harness.errors import ScenarioError
from harness.plan.vllm_support import Source
from harness.wire.spec import RunSpec

SPEC_FILE = "vllm/config/speculative.py"
SPEC_CLASS = "SpeculativeConfig"
_SAYS_INERT = re.compile(r"(\w+) is deprecated and has no effect")
_LOGGERS = frozenset({"logger", "log", "logging"})

_CACHE: dict[tuple[str, str, frozenset[str]], dict[str, str]] = {}


def inert_knobs(source: Source, keys: frozenset[str]) -> dict[str, str]:
    """Which of `keys` (speculative_config fields a scenario sets) change nothing in this
    version, each with why. Cached per source and keys; the package is scanned only for the
    keys SpeculativeConfig's own methods do not read, and only until each is found read."""
    cache_key = (source.label, source.version, keys)
    if cache_key not in _CACHE:
        _CACHE[cache_key] = _read(source, keys)
    return _CACHE[cache_key]


def _read(source: Source, keys: frozenset[str]) -> dict[str, str]:
    text = source.read(SPEC_FILE)
    tree = source.tree("vllm.config.speculative")
    if text is None or tree is None:
        return {}
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == SPEC_CLASS), None)
    if cls is None:
        return {}
    fields = set(_fields(cls)) & keys
    inert = {
        m.group(1): f"vLLM {source.version} says so ('{m.group(0)}')"
        for m in _SAYS_INERT.finditer(text)
        if m.group(1) in fields
    }
    left = fields - set(inert) - _reads(cls, fields, {"self"}) - _named(tree)
    for module in _modules_naming(source, left):
        left -= _reads(module, left, _holders(module))
        if not left:
            break
    unread = (
        f"nothing in vLLM {source.version} reads it (only checks of its value at most): "
        "it changes nothing"
    )
    inert.update(dict.fromkeys(sorted(left), unread))
    return inert


def _fields(cls: ast.ClassDef) -> Iterator[str]:
    """The class's own config fields (annotated, public, not ClassVar)."""
    for node in cls.body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and not node.target.id.startswith("_")
            and "ClassVar" not in ast.unparse(node.annotation)
        ):
            yield node.target.id


def _named(tree: ast.Module) -> set[str]:
    """Strings in speculative.py's module-level collections: fields read by name."""
    found: set[str] = set()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Tuple | ast.List | ast.Set):
            found |= {
                e.value
                for e in value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return found


def _modules_naming(source: Source, names: set[str]) -> Iterator[ast.Module]:
    """Every other module of the package whose text names one of `names` after a dot or in
    quotes, parsed (a prefilter: most files never mention a speculative field)."""
    if not names:
        return
    pattern = re.compile(r"[.\"']\s*(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    for path in source.paths():
        if path == SPEC_FILE:
            continue
        text = source.read(path)
        if text is None or not pattern.search(text):
            continue
        try:
            yield ast.parse(text, filename=path)
        except SyntaxError:
            continue


def _tail(node: ast.expr) -> str | None:
    """`a.b.c` -> 'c'; `x` -> 'x'."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _holders(module: ast.Module) -> set[str]:
    """Names this module binds to a SpeculativeConfig."""
    found = {"speculative_config"}
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and _tail(node.value) == "speculative_config":
            found |= {t for t in map(_tail, node.targets) if t}
        elif (
            isinstance(node, ast.AnnAssign)
            and SPEC_CLASS in ast.unparse(node.annotation)
            and _tail(node.target)
        ):
            found.add(str(_tail(node.target)))
        elif (
            isinstance(node, ast.arg)
            and node.annotation is not None
            and SPEC_CLASS in ast.unparse(node.annotation)
        ):
            found.add(node.arg)
    return found


def _is_log(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and _tail(node.func.value) in _LOGGERS
    )


def _only_checks(node: ast.If) -> bool:
    """An `if` whose body only raises or logs (a validation), with no else."""
    return not node.orelse and all(
        isinstance(s, ast.Raise | ast.Pass) or (isinstance(s, ast.Expr) and _is_log(s.value))
        for s in node.body
    )


def _checked_only(stack: list[ast.AST]) -> bool:
    """Whether the node under `stack` (outermost first) only checks a value."""
    for i, node in enumerate(stack):
        if isinstance(node, ast.Raise | ast.Assert) or _is_log(node):
            return True
        if (
            isinstance(node, ast.If)
            and i + 1 < len(stack)
            and stack[i + 1] is node.test
            and _only_checks(node)
        ):
            return True
    return False


def _reads(tree: ast.AST, names: set[str], holders: set[str]) -> set[str]:
    """The `names` this tree reads as `<holder>.<name>` or getattr(x, '<name>'), outside
    checks of the value."""
    found: set[str] = set()

    def walk(node: ast.AST, stack: list[ast.AST]) -> None:
        if (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.ctx, ast.Load)
            and _tail(node.value) in holders
            and not _checked_only(stack)
        ):
            found.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in names
        ):
            found.add(str(node.args[1].value))
        for child in ast.iter_child_nodes(node):
            walk(child, [*stack, node])

    walk(tree, [])
    return found


def check_knobs(run: RunSpec, source: Source, who: str = "") -> None:
    """Refuse, before the engine starts, a speculative_config field that changes nothing in
    the vLLM the launch runs under: the run would measure an A/A and call it a change."""
    spec = run.engine_args.get("speculative_config")
    if not isinstance(spec, dict):
        return
    inert = inert_knobs(source, frozenset(spec))
    if inert:
        key, why = next(iter(inert.items()))
        raise ScenarioError(
            f"speculative_config.{key}{who}: {why}; remove it (read from "
            f"{SPEC_FILE} and the package's source)"
        )
