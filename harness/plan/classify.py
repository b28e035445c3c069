"""The classifier: a change (harness.plan.diffs) compared with the installed vLLM
(harness.plan.vllm_source) function by function -- each part overlayable in one engine or not,
with its reason -- and the code the arms run (harness.wire.overlay.OverlayCode).

Parent side: stdlib `ast`, no vLLM import. A change can share one engine with the code it
replaces only when every part of it is a function body (or a new helper, constant or import)
in code that runs in vLLM's workers; everything else is named with its reason.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeGuard

from harness.config.platforms import (
    EAGER_WAY_OUT,
    FULL_GRAPHS,
    LAUNCH_WAY_OUT,
    PIECEWISE_WAY_OUT,
    expected_graph_mode,
)
from harness.config.scenario import Scenario
from harness.plan.capture_reach import capture_reachable, reach_of
from harness.plan.diffs import Change, FileChange
from harness.plan.vllm_source import (
    DEFS,
    Changed,
    Installed,
    Module,
    bound_names,
    class_parts,
    installed_package,
    is_type_checking,
    module_name,
    names_used,
    parse,
)
from harness.wire.overlay import OverlayCode

# --- classification ----------------------------------------------------------------------------

# Where code runs: the arm switch (collective_rpc) reaches vLLM's worker processes only.
WORKER_DIRS = (
    "vllm/v1/spec_decode/",
    "vllm/v1/worker/",
    "vllm/v1/sample/",
    "vllm/model_executor/",
    "vllm/v1/attention/",
    "vllm/attention/",
    "vllm/distributed/",
    "vllm/lora/",
)
ELSEWHERE = {
    "vllm/v1/core/": "the scheduler, in the engine core",
    "vllm/v1/engine/": "the engine core and its front end",
    # One process each, where a file of vllm/v1/engine/ says which.
    "vllm/v1/engine/core.py": "the engine core",
    "vllm/v1/engine/core_client.py": "the front end (the engine core's client)",
    "vllm/v1/engine/llm_engine.py": "the front end (LLMEngine)",
    "vllm/v1/engine/async_llm.py": "the front end (AsyncLLM)",
    "vllm/v1/engine/output_processor.py": "the front end (output processing)",
    "vllm/v1/engine/input_processor.py": "the front end (input processing)",
    "vllm/v1/engine/detokenizer.py": "the front end (detokenization)",
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
    "vllm/distributed/device_communicators/shm_broadcast.py": (
        "the engine core too (the multiproc executor broadcasts each step's work to the "
        "workers through MessageQueue)"
    ),
}
# KV connectors hold both roles; the scheduler-side methods (KVConnectorRole.SCHEDULER, listed
# under "Scheduler-side methods" in the base class) run in the engine core's scheduler.
KV_CONNECTOR_DIR = "vllm/distributed/kv_transfer/"
# Code that may run inside a torch.compile'd model forward (unless the engine is eager).
COMPILED_DIRS = ("vllm/model_executor/models/", "vllm/model_executor/layers/")
# ...except what the model runner calls on the forward's output, eagerly: the logits
# (compute_logits -> LogitsProcessor) and the draft's top tokens.
OUTSIDE_COMPILED_NAMES = {"compute_logits", "get_top_tokens", "get_top_k_tokens"}
OUTSIDE_COMPILED_CLASSES = {"LogitsProcessor"}
# Collectives the model forward calls, by file: Dynamo inlines their Python into the compiled
# forward. `always`: traced on every device; `unless_custom_op`: traced only where collectives
# are not custom ops (GroupCoordinator.use_custom_op_call: false on CPU, true on CUDA, where
# these run eagerly inside torch.ops.vllm.all_reduce & co).
INLINED_COLLECTIVES: dict[str, dict[str, set[str]]] = {
    "vllm/distributed/communication_op.py": {
        "always": {
            "tensor_model_parallel_all_reduce",
            "tensor_model_parallel_all_gather",
            "tensor_model_parallel_reduce_scatter",
        }
    },
    "vllm/distributed/parallel_state.py": {
        "always": {
            "GroupCoordinator.all_reduce",
            "GroupCoordinator.all_gather",
            "GroupCoordinator.reduce_scatter",
        },
        "unless_custom_op": {
            "GroupCoordinator._all_reduce_out_place",
            "GroupCoordinator._all_gather_out_place",
            "GroupCoordinator._reduce_scatter_out_place",
        },
    },
    "vllm/distributed/device_communicators/cpu_communicator.py": {
        "unless_custom_op": {"CpuCommunicator.all_reduce", "CpuCommunicator.all_gather"}
    },
}
CUSTOM_OP_COLLECTIVES = {"cuda"}  # devices whose platform says use_custom_op_collectives()
# Methods that run once at start-up, before the first switch between arms.
STARTUP_NAMES = {
    "__init__",
    "__new__",
    "__post_init__",
    "__init_subclass__",
    "__set_name__",
    "load_model",
    "dummy_run",
    "_dummy_run",
    "profile_run",
    "capture_model",
    "load_weights",
    "init_device",
    "compile_or_warm_up_model",
    "determine_available_memory",
    "reload_weights",
    "validate_same_kv_cache_group",
    "set_eplb_state",
    "get_model",
    "_get_model",
    "_create_draft_vllm_config",
    "_maybe_share_embeddings",
    "_maybe_share_lm_head",
    "warmup",
    "calculate_reorder_batch_threshold",
    "warming_up_model",
}
STARTUP_PREFIXES = (
    "init_",
    "_init_",
    "initialize_",
    "_initialize_",
    "load_",
    "_load_",
    "warm_up",
    "_warm_up",
    "setup_",
    "_setup_",
)
# Dummy runs (profiling, warm-up, graph capture) happen at start-up: make_dummy,
# _dummy_sampler_run, prepare_dummy_inputs, get_dummy_block_tables, maybe_dummy_run_with_lora.
DUMMY_NAME = re.compile(r"(^|_)dummy(_|$)")
CONSTRUCTORS = {"__init__", "__new__", "__post_init__"}
# Decorators that only wrap a call: re-applied to the branch's version, they change nothing else.
PLAIN_DECORATORS = {
    "staticmethod",
    "classmethod",
    "torch.inference_mode",
    "torch.no_grad",
    "override",
    "typing.override",
    "typing_extensions.override",
    "abstractmethod",
    "abc.abstractmethod",
    "contextmanager",
    "contextlib.contextmanager",
}
NUMBA_DECORATORS = {"jit", "njit", "numba.jit", "numba.njit"}
KERNEL_DECORATORS = {
    "triton.jit",
    "triton.autotune",
    "triton.heuristics",
    "triton_kernel_dispatcher_with_warmup",
    "jit",
}
COMPILE_DECORATORS = {
    "torch.compile",
    "support_torch_compile",
    "torch.jit.script",
    "functools.cache",
    "functools.lru_cache",
    "cache",
    "lru_cache",
    "functools.cached_property",
    "cached_property",
    "property",
}
# vLLM's own @config (vllm.config.utils): classes built in the parent process. A plain
# @dataclass in worker code (SpecDecodeMetadata) is not one: its methods overlay as any class's.
CONFIG_DECORATORS = {"config", "vllm.config.utils.config"}
DATACLASS_DECORATORS = {"dataclass", "dataclasses.dataclass"}
# CustomOp.dispatch_forward: with custom ops on (the default when the engine is eager), the
# platform's method runs; the others only when something it runs calls them.
# Base classes whose subclasses run inside vLLM's attention custom op
# (torch.ops.vllm.unified_attention_with_output), which torch.compile keeps opaque, and whose
# subclasses build the metadata that op reads; the draft's own graph managers capture from
# functions named so.
ATTENTION_IMPL = "AttentionImpl"
METADATA_BUILDER = "AttentionMetadataBuilder"
PLATFORM_FORWARDS = {
    "forward_native",
    "forward_cuda",
    "forward_hip",
    "forward_cpu",
    "forward_xpu",
    "forward_tpu",
    "forward_oot",
}
DISPATCHED_FORWARD = {"cpu": "forward_cpu", "cuda": "forward_cuda"}


@dataclass
class Finding:
    """One part of a change: whether it can be overlaid, and why not (or a note)."""

    file: str
    what: str
    overlayable: bool
    reason: str = ""
    # Set where the finding carries its own way out (the generic "a build per side" does not
    # fit: code the runner never runs has no proof on a build either).
    own_way_out: bool = False

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


def _future(tree: ast.Module) -> list[str]:
    return sorted(
        {
            a.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module == "__future__"
            for a in node.names
        }
    )


def _segment(text: str, node: ast.stmt) -> tuple[str, int]:
    """The statement's source with its decorators, and its first line (1-based)."""
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    assert node.end_lineno is not None
    lines = text.splitlines(keepends=True)[first - 1 : node.end_lineno]
    return "".join(lines), first


@dataclass
class _Function:
    """A changed function and where it sits, in both versions of its file."""

    path: str
    module: str
    owner: str | None
    name: str
    before: ast.FunctionDef | ast.AsyncFunctionDef | None
    fn: ast.FunctionDef | ast.AsyncFunctionDef
    old_mod: Module
    new_mod: Module
    old_class: ast.ClassDef | None
    new_class: ast.ClassDef | None


def _startup(name: str) -> bool:
    """Whether a function of this name runs only at start-up (constructors aside: some
    objects are built every step)."""
    return (
        (name in STARTUP_NAMES and name not in CONSTRUCTORS)
        or name.startswith(STARTUP_PREFIXES)
        or bool(DUMMY_NAME.search(name))
    )


def _compiled_class(cls: ast.ClassDef | None) -> bool:
    return cls is not None and any(
        "support_torch_compile" in _decorator_name(d) for d in cls.decorator_list
    )


def _plain_dataclass(cls: ast.ClassDef | None) -> bool:
    names = [_decorator_name(d) for d in cls.decorator_list] if cls else []
    return any(n in DATACLASS_DECORATORS for n in names) and not any(
        n in CONFIG_DECORATORS for n in names
    )


def _self_attributes(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }


def _new_attributes(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, old_class: ast.ClassDef | None
) -> set[str]:
    """Attributes `fn` sets on self that the installed class neither declares nor sets."""
    known = _self_attributes(old_class) if old_class else set()
    if old_class is not None:
        known |= {n for s in old_class.body for n in bound_names(s)}
    return _self_attributes(fn) - known


def _wraps_only(deco: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A decorator function that only wraps the call: one parameter, the function; each
    return gives back the function itself or a function defined inside; at decoration time
    the function is named only by those returns and by functools.wraps, and nothing is
    stored (no global, nonlocal, attribute or item assignment)."""
    params = deco.args.posonlyargs + deco.args.args
    if (
        isinstance(deco, ast.AsyncFunctionDef)
        or len(params) != 1
        or deco.args.vararg
        or deco.args.kwarg
        or deco.args.kwonlyargs
    ):
        return False
    fn = params[0].arg
    inner = {
        s.name
        for s in ast.walk(deco)
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s is not deco
    }
    if not inner:
        return False

    def top(node: ast.AST) -> Iterator[ast.AST]:
        """The decorator's own statements, not the bodies of the wrappers it defines (they run
        per call, in each arm's own version)."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for d in getattr(child, "decorator_list", []):
                    yield d
                    yield from ast.walk(d)
                continue
            yield child
            yield from top(child)

    allowed: set[int] = set()
    for node in top(deco):
        if isinstance(node, ast.Global | ast.Nonlocal):
            return False
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store):
            return False
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            if node.value.id not in inner | {fn}:
                return False
            allowed.add(id(node.value))
        elif isinstance(node, ast.Return) and node.value is not None:
            return False
        if isinstance(node, ast.Call) and _decorator_name(node.func).rpartition(".")[2] == "wraps":
            allowed |= {id(a) for a in node.args}
    return all(id(n) in allowed for n in top(deco) if isinstance(n, ast.Name) and n.id == fn)


def _imports_numba(mod: Module) -> bool:
    return any(
        isinstance(n, ast.Import | ast.ImportFrom)
        and (
            (n.module or "").split(".")[0] == "numba"
            if isinstance(n, ast.ImportFrom)
            else any(a.name.split(".")[0] == "numba" for a in n.names)
        )
        for n in ast.walk(mod.tree)
    )


@dataclass(frozen=True)
class _Changed:
    """One changed file as _Classifier.compare reads it: the installed and the changed module,
    the changed text, its __future__ imports, and why its import-time code is out of the
    switch's reach (None: it is within it)."""

    path: str
    module: str
    old: Module
    new: Module
    new_text: str
    future: list[str]
    reach: str | None


class _Classifier:
    """Compares the installed and the changed version of each file of a change."""

    def __init__(
        self,
        change: Change,
        installed: Installed,
        compiled: bool,
        device: str,
        variant: str | None = None,
        graphs: str = "NONE",
    ) -> None:
        self.change = change
        self.installed = installed
        self.compiled = compiled
        self.device = device
        self.graphs = graphs  # the CUDA-graph mode the launch will run under
        # Where a refusal points for a build: the variant's own python: field when known.
        self.build_field = f"variants.{variant}.python" if variant else "the variant's python:"
        self.findings: list[Finding] = []
        self.code: list[OverlayCode] = []
        self.changed_reach: dict[tuple[str, str], str] | None = None

    def no(self, file: str, what: str, reason: str) -> None:
        self.findings.append(Finding(file, what, False, reason))

    def yes(self, file: str, what: str, note: str = "") -> None:
        self.findings.append(Finding(file, what, True, note))

    def run(self) -> Classified:
        for path in self.change.inert:
            self.yes(
                path, "not part of the installed vllm package", "no effect on the engine (ignored)"
            )
        for f in self.change.files:
            self.file(f)
        return Classified(self.change, self.findings, self.code)

    def file(self, f: FileChange) -> None:
        path = f.path
        if f.renamed_from is not None and f.renamed_from.startswith("vllm/"):
            self.no(
                f.renamed_from,
                f"module renamed to {path}",
                "vLLM's imports name the old "
                "path, and an overlay only replaces functions of modules vLLM already has: "
                "a moved module needs a build",
            )
            return
        if not path.startswith("vllm/"):
            self.no(
                path,
                "build or native source outside the vllm package",
                "not Python in the vllm package (C++/CUDA, build files): needs a build",
            )
            return
        if not path.endswith(".py") or f.new == "?":
            self.no(
                path,
                "non-Python file",
                "C++, CUDA, Triton sources, templates and data are not overlaid: needs a build",
            )
            return
        if f.old is None:
            self.no(
                path,
                "new module",
                "overlays change functions of modules vLLM already has; a new module needs a build",
            )
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
                    return (
                        "a config class cannot be overlaid: its fields, methods and "
                        "validators run in the parent process (__post_init__), before "
                        "and outside the workers the arm switch reaches"
                    )
                return (
                    f"runs in {where}, which the arm switch (collective_rpc to the "
                    "workers) never reaches: overlays in one engine are for code that "
                    "runs in vLLM's workers"
                )
        if worker >= 0:
            return None
        return (
            "not known to run only in vLLM's workers (the arm switch reaches only "
            "them): overlays in one engine are for worker code"
        )

    def compare(self, path: str, old_text: str, new_text: str, reach: str | None) -> None:
        old, new = parse(old_text, path, "installed"), parse(new_text, path, "changed")
        if _dump(old.tree) == _dump(new.tree):
            self.yes(
                path,
                "only comments or formatting change",
                "the arms run identical code: this run is an A/A",
            )
            return
        module = module_name(path)
        future = _future(new.tree)
        if future != _future(old.tree):
            self.no(path, "__future__ imports change", "they change how the whole module compiles")
        # Import-time statements with effects (registrations, calls, blocks).
        old_other = {_dump(s) for s in old.other}
        for stmt in new.other:
            if _dump(stmt) not in old_other:
                self.no(
                    path,
                    f"module-level statement at line {stmt.lineno} ({_first_line(new_text, stmt)})",
                    "runs once at import, with side effects no switch can undo",
                )
        changed = _Changed(path, module, old, new, new_text, future, reach)
        self.imports(changed)
        self.constants(changed)
        self.functions(path, module, None, old.functions, new.functions, old, new, future, reach)
        self.classes(changed)

    def imports(self, c: _Changed) -> None:
        old, new, path = c.old, c.new, c.path
        for name, stmt in new.imports.items():
            before = old.imports.get(name)
            if before is not None and _dump(before) == _dump(stmt):
                continue
            if (
                name in old.imports
                or name in old.functions
                or name in old.classes
                or name in old.assigns
            ):
                self.no(
                    path,
                    f"import rebinds {name}",
                    "the installed module already binds "
                    "that name; both arms share the module's globals",
                )
            elif c.reach is None:
                self.add_statement(c.module, path, name, c.new_text, stmt, c.future, "new import")
            else:  # it runs at import where the switch never reaches, and nothing uses it there
                self.no(path, f"new import {name}", c.reach)

    def constants(self, c: _Changed) -> None:
        old, new, path = c.old, c.new, c.path
        for name, stmt in new.assigns.items():
            before = old.assigns.get(name)
            if before is not None and _dump(before) == _dump(stmt):
                continue
            if before is not None or name in old.functions or name in old.classes:
                users = self.installed.importers(c.module, name, path)
                also = (
                    f"; {len(users)} module(s) import it by value ({', '.join(users[:3])})"
                    if users
                    else ""
                )
                self.no(
                    path,
                    f"module constant {name} changes",
                    "both arms read the same module global, so its value cannot differ "
                    f"by arm{also}",
                )
            elif c.reach is None:
                missing = _undefined_names(stmt, new)
                if missing:
                    self.no(
                        path,
                        f"new module constant {name}",
                        f"it names {missing[0]}, "
                        "which the changed module defines nowhere: a NameError when it "
                        "runs at install",
                    )
                    continue
                self.add_statement(
                    c.module, path, name, c.new_text, stmt, c.future, "new module constant"
                )
            else:
                self.no(path, f"new module constant {name}", c.reach)

    def classes(self, c: _Changed) -> None:
        old, new, path = c.old, c.new, c.path
        for name, cls in new.classes.items():
            before = old.classes.get(name)
            if before is None:
                if c.reach is not None:
                    self.no(path, f"new class {name}", c.reach)
                elif cls.decorator_list:
                    self.no(
                        path,
                        f"new class {name}",
                        "decorated (@"
                        f"{_decorator_name(cls.decorator_list[0])}): decorators may "
                        "register or compile it at import",
                    )
                else:
                    self.add_statement(
                        c.module, path, name, c.new_text, cls, c.future, "new helper class"
                    )
                continue
            if _dump(before) == _dump(cls):
                continue
            self.klass(path, c.module, before, cls, old, new, c.future, c.reach)
        for name in old.classes.keys() - new.classes.keys():
            self.deleted(path, c.module, name, new, "class")

    def klass(
        self,
        path: str,
        module: str,
        old: ast.ClassDef,
        new: ast.ClassDef,
        old_mod: Module,
        new_mod: Module,
        future: list[str],
        reach: str | None,
    ) -> None:
        name = new.name
        decorators = [_decorator_name(d) for d in new.decorator_list]
        is_config = path.startswith("vllm/config/") or any(
            d in CONFIG_DECORATORS for d in decorators
        )
        if [_dump(b) for b in old.bases] != [_dump(b) for b in new.bases] or [
            _dump(k) for k in old.keywords
        ] != [_dump(k) for k in new.keywords]:
            self.no(
                path,
                f"{name}: base classes change",
                "a class's layout cannot change under live instances",
            )
        if [_dump(d) for d in old.decorator_list] != [_dump(d) for d in new.decorator_list]:
            self.no(path, f"{name}: class decorators change", "they run once, at import")
        old_methods, old_rest = class_parts(old)
        new_methods, new_rest = class_parts(new)
        old_fields = {_dump(s): s for s in old_rest}
        for stmt in new_rest:
            if _dump(stmt) in old_fields:
                continue
            names = bound_names(stmt)
            label = names[0] if names else _first_line(new_mod.text, stmt)
            if is_config and isinstance(stmt, ast.AnnAssign):
                self.no(
                    path,
                    f"{name} gains field {label}"
                    if label not in {bound_names(s)[0] for s in old_rest if bound_names(s)}
                    else f"{name}: field {label} changes",
                    "a config class cannot be overlaid",
                )
            elif "__slots__" in names:
                self.no(
                    path,
                    f"{name}: __slots__ change",
                    "a class's layout cannot change under live instances",
                )
            else:
                known = {n for s in old_rest for n in bound_names(s)}
                self.no(
                    path,
                    f"{name}: class attribute {label} {'changes' if label in known else 'added'}",
                    "a class's layout cannot change under live instances",
                )
        removed = {_dump(s) for s in new_rest}
        for stmt in old_rest:
            if _dump(stmt) not in removed and not any(
                bound_names(s) == bound_names(stmt) for s in new_rest
            ):
                names = bound_names(stmt)
                self.no(
                    path,
                    f"{name}: class attribute {names[0] if names else '?'} removed",
                    "a class's layout cannot change under live instances",
                )
        if is_config:
            for meth in sorted(set(new_methods) | set(old_methods)):
                a, b = old_methods.get(meth), new_methods.get(meth)
                if a is None or b is None or _dump(a) != _dump(b):
                    self.no(
                        path,
                        f"{name}.{meth} changes",
                        "a config class cannot be "
                        "overlaid: its methods and validators run in the parent process "
                        "(__post_init__) when the engine is configured",
                    )
            return
        if reach is not None and name in self.installed.worker_process_classes(path):
            reach = None  # this class of an executor's file lives in each worker process
        self.functions(
            path, module, name, old_methods, new_methods, old_mod, new_mod, future, reach, old, new
        )

    def functions(
        self,
        path: str,
        module: str,
        owner: str | None,
        old: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
        new: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
        old_mod: Module,
        new_mod: Module,
        future: list[str],
        reach: str | None,
        old_class: ast.ClassDef | None = None,
        new_class: ast.ClassDef | None = None,
    ) -> None:
        prefix = f"{owner}." if owner else ""
        for name, fn in new.items():
            before = old.get(name)
            if before is not None and _dump(before) == _dump(fn):
                continue
            what = f"{prefix}{name}" + (" (new)" if before is None else ": body changed")
            site = _Function(
                path, module, owner, name, before, fn, old_mod, new_mod, old_class, new_class
            )
            notes: list[str] = []
            problem = reach or self.function_problem(site, notes)
            if problem:
                self.no(path, what, problem)
                continue
            notes += self.function_notes(site)
            source, line = _segment(new_mod.text, fn)
            self.code.append(
                OverlayCode(
                    module=module,
                    owner=owner,
                    name=name,
                    kind="function",
                    source=source,
                    line=line,
                    file=path,
                    future=future,
                )
            )
            self.yes(path, what, "; ".join(notes))
        for name in old.keys() - new.keys():
            self.deleted(
                path, module, f"{prefix}{name}", new_mod, "method" if owner else "function"
            )

    def function_problem(self, f: _Function, notes: list[str]) -> str | None:
        """Why a changed function of worker code cannot be dispatched per arm (None: it can;
        `notes` gains what is worth saying about it)."""
        fn, before, name = f.fn, f.before, f.name
        if f.path.startswith(KV_CONNECTOR_DIR) and (
            name in self.installed.kv_scheduler_methods() or (f.owner or "").endswith("Scheduler")
        ):
            return (
                "a KV connector's scheduler-side method (KVConnectorRole.SCHEDULER): it "
                "runs in the engine core's scheduler, which the arm switch (collective_rpc "
                "to the workers) never reaches"
            )
        if before is not None and [_dump(d) for d in before.decorator_list] != [
            _dump(d) for d in fn.decorator_list
        ]:
            return "its decorators change (they run once, at import)"
        problem = self.decorator_problem(f)
        if problem:
            return problem
        problem = self.startup_problem(f, notes) or self.loop_problem(f)
        if problem:
            return problem
        problem = self.shadowed(f)
        if problem:
            return problem
        if self.compiled:
            problem = self.compiled_problem(f, notes)
            if problem:
                return problem
        if (
            isinstance(fn, ast.AsyncFunctionDef) != isinstance(before, ast.AsyncFunctionDef)
            and before is not None
        ):
            return "changes between def and async def"
        problem = self.full_graph_problem(f, notes) if self.graphs in FULL_GRAPHS else None
        return problem or self.capture_problem(f, notes)

    def loop_problem(self, f: _Function) -> str | None:
        """A loop that a process enters once and never leaves while the engine runs (a
        worker's busy loop): its frame keeps the version it started with."""
        loops = [
            s
            for s in f.fn.body
            if isinstance(s, ast.While)
            and isinstance(s.test, ast.Constant)
            and s.test.value is True
        ]
        if not loops:
            return None
        where = (
            f"each worker process ({f.owner})"
            if f.owner in self.installed.worker_process_classes(f.path)
            else "its process"
        )
        return (
            f"a loop entered once at start-up in {where} (while True, line "
            f"{loops[0].lineno}): the running frame never returns, so it keeps the "
            "installed version in both arms and no switch reaches it; needs "
            f"launch-per-arm on a build ({self.build_field})"
        )

    def full_graph_problem(self, f: _Function, notes: list[str]) -> str | None:
        """Code whose effect FULL CUDA graphs record at capture and replay in both arms: the
        attention op's kernels, the metadata the graphs were captured from, and whatever a
        capture call reaches (capture_reach: the speculator's draft loop, the draft and target
        models' forward, compute_logits and get_top_tokens, the hooks around a capture)."""
        ways = f"{EAGER_WAY_OUT}; {PIECEWISE_WAY_OUT}; or {LAUNCH_WAY_OUT} on a build"
        mode = f"FULL CUDA graphs (cudagraph_mode {self.graphs})"
        if self.attention_impl(f):
            return (
                f"runs inside the attention op, which {mode} capture: replay runs the "
                f"capture-time arm's kernels in both arms; {ways}"
            )
        if (
            f.new_class is not None
            and self.installed.class_chain(f.path, f.new_class, METADATA_BUILDER) is not None
        ):
            return (
                f"an attention metadata builder: {mode} are captured from the metadata "
                f"it builds at capture (build_for_cudagraph_capture), and replay keeps "
                f"what that build chose in both arms; {ways}"
            )
        caller = self.captured_from(f)
        if caller:
            return (
                f"runs while CUDA graphs are captured ({caller}): under {mode} replay "
                f"keeps its capture-time version in both arms; {ways}"
            )
        notes.append(f"not called from a CUDA-graph capture ({self.graphs})")
        return None

    def attention_impl(self, f: _Function) -> bool:
        return (
            f.new_class is not None
            and self.installed.class_chain(f.path, f.new_class, ATTENTION_IMPL) is not None
        )

    def captured_from(self, f: _Function) -> str | None:
        """The capture path that reaches the changed function (capture_reach), in the
        installed vLLM or, where the change adds the way (a new helper, a new call), in the
        changed one: both arms' versions are recorded at capture."""
        key = (f.path, f"{f.owner}.{f.name}" if f.owner else f.name)
        found = capture_reachable(self.installed).get(key)
        if found is None:
            if self.changed_reach is None:
                changed = {c.path: c.new for c in self.change.files if c.path.endswith(".py")}
                self.changed_reach = reach_of(Changed(self.installed, changed))
            found = self.changed_reach.get(key)
        return found

    def decorator_problem(self, f: _Function) -> str | None:
        numba = _imports_numba(f.new_mod)
        for d in (_decorator_name(d) for d in f.fn.decorator_list):
            last = d.rpartition(".")[2]
            if numba and (d in NUMBA_DECORATORS or last in NUMBA_DECORATORS):
                return (
                    f"a numba function (@{d}): numba compiles it at its first call, and "
                    "numba-compiled callers bind the compiled function at their own "
                    "compile time; a Python dispatcher cannot be called from nopython "
                    "code, so it cannot switch it per pass"
                )
            if d in KERNEL_DECORATORS or last in {k.rpartition(".")[2] for k in KERNEL_DECORATORS}:
                if self.device == "cpu":
                    return (
                        f"a Triton kernel or its dispatcher (@{d}): on this CPU vLLM's "
                        "C++ fallbacks replace it after plugins load, so a body change "
                        "would silently have no effect"
                    )
                return (
                    f"a Triton kernel or its dispatcher (@{d}): compiled and registered "
                    "once, not per call"
                )
            if d in COMPILE_DECORATORS or last in {
                c.rpartition(".")[2] for c in COMPILE_DECORATORS
            }:
                return (
                    f"@{d} compiles, caches or wraps it as a descriptor once: a "
                    "dispatcher cannot switch it per call"
                )
            if "register" in last.lower():
                return f"@{d} registers it at import: the registry keeps the installed one"
            if d not in PLAIN_DECORATORS and not self.wraps_only(f.path, d):
                return (
                    f"@{d} is not known to be a plain call wrapper (it may compile, "
                    "cache or register)"
                )
        return None

    def wraps_only(self, path: str, decorator: str) -> bool:
        """Whether vLLM's own decorator `decorator` (as the module at `path` names it) only
        wraps the call: read from its definition, it returns the function or a wrapper it
        defines, and keeps the function nowhere else at decoration time (vLLM's
        with_gpu_sync_check, eager_break_during_capture). Applied anew to each arm's version,
        it changes nothing else."""
        found = self.installed.resolve_function(path, decorator)
        return found is not None and _wraps_only(found[1])

    def startup_problem(self, f: _Function, notes: list[str]) -> str | None:
        name = f.name
        if name in CONSTRUCTORS:
            if (
                name != "__new__"
                and _plain_dataclass(f.new_class)
                and not _new_attributes(f.fn, f.old_class)
            ):
                notes.append(
                    "constructor of a plain dataclass, sets no new attribute: the "
                    "launch checks it runs in the measured passes"
                )
                return None
            return (
                "the class's layout (attributes set at construction) changes: instances "
                "are built at start-up, before any switch; needs launch-per-arm on a "
                f"build ({self.build_field})"
            )
        if _startup(name):
            what = (
                " (dummy runs: profiling, warm-up, graph capture)"
                if DUMMY_NAME.search(name) and name not in STARTUP_NAMES
                else ""
            )
            return (
                f"runs only at start-up{what}, before any switch between arms: needs "
                f"launch-per-arm on a build ({self.build_field})"
            )
        caller = self.only_called_from(name, lambda chain: any(_startup(c) for c in chain))
        if caller:
            return (
                f"runs only at start-up (called only from {caller}), before any switch "
                f"between arms: needs launch-per-arm on a build ({self.build_field})"
            )
        return None

    def only_called_from(self, name: str, where: Callable[[tuple[str, ...]], bool]) -> str | None:
        """The caller, when every use of `name` in the package (as changed) is inside code
        `where` accepts: 'Class.method' of the first. None when any use is elsewhere, at
        import, or there is none."""
        changed = {f.path: f.new for f in self.change.files if f.path.endswith(".py")}
        first = None
        for chain in self.installed.uses(name, changed):
            if name in chain:  # inside its own definition: a recursive call
                continue
            if not chain or not where(chain):
                return None
            first = first or ".".join(chain[-2:])
        return first

    def shadowed(self, f: _Function) -> str | None:
        """Why the platform never runs this method: its own class overrides it, or
        CustomOp.dispatch_forward picks another forward_* that never reaches it."""
        if f.owner is None:
            return None
        if self.device == "cpu":
            for cls, where, defined in self.installed.cpu_overrides().get(f.owner, []):
                if f.name in defined and where != f.path:
                    return (
                        f"shadowed on this platform: {cls}.{f.name} ({where}) overrides "
                        "it, so the changed version never runs here"
                    )
        dispatched = DISPATCHED_FORWARD.get(self.device)
        if (
            f.name not in PLATFORM_FORWARDS
            or self.compiled
            or f.new_class is None
            or dispatched is None
        ):
            return None  # compiled: custom ops default off, forward_native is traced
        chain = self.installed.class_chain(f.path, f.new_class, "CustomOp")
        if chain is None:
            return None
        methods: dict[str, tuple[str, str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for where, klass in reversed(chain):  # nearest definition wins
            for meth, fn in class_parts(klass)[0].items():
                methods[meth] = (klass.name, where, fn)
        runs = {m for m in methods if m not in PLATFORM_FORWARDS} | {dispatched}
        if dispatched not in methods and dispatched == "forward_cpu":
            runs.add("forward_native")  # CustomOp.forward_cpu calls forward_native
        todo = list(runs)
        while todo:
            meth = todo.pop()
            if meth in methods:
                for n in ast.walk(methods[meth][2]):
                    if (
                        isinstance(n, ast.Attribute)
                        and n.attr in PLATFORM_FORWARDS
                        and n.attr not in runs
                    ):
                        runs.add(n.attr)
                        todo.append(n.attr)
        if f.name in runs:
            return None
        owner, where, _ = methods.get(
            dispatched, ("CustomOp", "vllm/model_executor/custom_op.py", None)
        )
        return (
            f"shadowed on this platform: CustomOp.dispatch_forward runs "
            f"{owner}.{dispatched} ({where}) on {self.device} (custom ops are on when the "
            f"engine is eager), and nothing it runs calls {f.name}, so the changed version "
            "never runs here"
        )

    def compiled_problem(self, f: _Function, notes: list[str]) -> str | None:
        qualname = f"{f.owner}.{f.name}" if f.owner else f.name
        traced = INLINED_COLLECTIVES.get(f.path, {})
        if qualname in traced.get("always", set()) or (
            qualname in traced.get("unless_custom_op", set())
            and self.device not in CUSTOM_OP_COLLECTIVES
        ):
            why = (
                "collectives are custom ops here, and it wraps one"
                if self.device in CUSTOM_OP_COLLECTIVES
                else f"on {self.device.upper()} collectives are not custom ops"
            )
            return (
                f"Dynamo inlines it into the compiled forward ({why}), freezing one "
                "arm's version (this scenario is not enforce_eager; set "
                "engine.enforce_eager: true to overlay it, or give a build)"
            )
        if qualname in traced.get("unless_custom_op", set()):
            notes.append(
                "runs eagerly inside its torch.ops.vllm collective on this device, "
                "outside the compiled graph"
            )
            return None
        inside = (
            f.path.startswith(COMPILED_DIRS)
            or f.name == "forward"
            or (_compiled_class(f.new_class))
        )
        if not inside:
            return None
        if self.attention_impl(f):
            notes.append(
                "runs inside vLLM's attention custom op "
                "(torch.ops.vllm.unified_attention_with_output), which torch.compile "
                "keeps opaque: eager in every arm"
            )
            return None
        if (
            f.owner in self.installed.architectures()
            and not _compiled_class(f.new_class)
            and f.name not in OUTSIDE_COMPILED_NAMES
        ):
            notes.append(
                f"runs outside the compiled forward: {f.owner} is a model class "
                "vLLM's model registry names, which the runner calls eagerly; "
                "torch.compile wraps only its @support_torch_compile submodule; the "
                "launch fails by name if it is ever traced"
            )
            return None
        outside = f.owner in OUTSIDE_COMPILED_CLASSES or f.name in OUTSIDE_COMPILED_NAMES
        caller = (
            None
            if outside
            or _compiled_class(f.new_class)
            or f.name == "forward"
            or f.name.startswith("forward_")
            else self.only_called_from(
                f.name,
                lambda chain: any(
                    c in OUTSIDE_COMPILED_NAMES | OUTSIDE_COMPILED_CLASSES or _startup(c)
                    for c in chain
                ),
            )
        )
        if outside or caller:
            notes.append(
                (
                    "runs outside the compiled forward"
                    + (f" (called only from {caller})" if caller else "")
                )
                + "; the launch fails by "
                "name if it is ever traced"
            )
            return None
        return (
            "code inside a compiled forward: torch.compile traces it once, freezing "
            "one arm's version (this scenario is not enforce_eager; set "
            "engine.enforce_eager: true to overlay it, or give a build)"
        )

    def capture_problem(self, f: _Function, notes: list[str]) -> str | None:
        """Copies of the function made at import, in its module and in its importers: a
        rebound shape is a note, any other copy keeps the installed version."""
        captures = _captures(f.new_mod, f.name, f.owner, _statement_dumps(f.old_mod.tree))
        imported = f.owner or f.name  # an importer names the class, or the function
        for user in self.installed.importers(f.module, imported, f.path):
            captures += [
                replace(c, file=user)
                for c in _captures(self.installed.module(user), f.name, f.owner)
            ]
        for c in captures:
            if c.holder is not None and not c.new:
                return c.note()
        notes.extend(c.note() for c in captures)
        return None

    def function_notes(self, f: _Function) -> list[str]:
        notes = []
        owner, name = f.owner, f.name
        body = ast.Module(body=f.fn.body, type_ignores=[])
        if owner and any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "super"
            and not n.args
            for n in ast.walk(body)
        ):
            notes.append(
                "zero-argument super(): compiled inside a class of the same name, "
                "__class__ bound to the real class"
            )
        if owner and any(
            isinstance(n, ast.Attribute) and n.attr.startswith("__") and not n.attr.endswith("__")
            for n in ast.walk(body)
        ):
            notes.append(f"name-mangled attributes: compiled inside class {owner}")
        if f.old_class is not None:
            for n in ast.walk(f.old_class):
                if (
                    isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Attribute)
                    and n.value.attr == name
                    and isinstance(n.value.value, ast.Name)
                    and n.value.value.id == "self"
                ):
                    target = ast.unparse(n.targets[0])
                    notes.append(
                        f"bound at init ({target} = self.{name}, line {n.lineno}): "
                        "the dispatcher is in place before any instance exists, so "
                        "that binding dispatches too"
                    )
                    break
        if owner is None:
            users = self.installed.importers(f.module, name, f.path)
            if users:
                notes.append(
                    f"imported by value into {len(users)} module(s) ("
                    f"{', '.join(users[:3])}{', ...' if len(users) > 3 else ''}): "
                    "each importer is rebound"
                )
        return notes

    def deleted(self, path: str, module: str, qualname: str, new: Module, kind: str) -> None:
        # An overlay adds dispatchers and never removes anything: whatever still names the
        # deleted function (a caller, an importer; for a deleted override, every caller of the
        # base class's method) would reach the installed one in the changed arm too.
        name = qualname.rpartition(".")[2]
        method = "." in qualname
        own = (
            names_used(new.tree)
            if method
            else {n.id for n in ast.walk(new.tree) if isinstance(n, ast.Name)}
        )
        where = ["this module"] if name in own else []
        if not method:  # importers by value first: the surest reference
            where += self.installed.importers(module, name, path)
        changed = {f.path: f.new for f in self.change.files if f.path.endswith(".py")}
        where += [p for p in self.installed.referrers(name, path, changed) if p not in where]
        if where:
            self.no(
                path,
                f"{kind} {qualname} deleted",
                f"still referenced ("
                f"{', '.join(where[:3])}{', ...' if len(where) > 3 else ''}): an overlay "
                "cannot remove it, so the changed arm would still reach the installed one",
            )
        else:
            self.yes(
                path,
                f"{kind} {qualname} deleted",
                "unreferenced: the installed one "
                "stays for the base arm, the changed code never calls it",
            )

    def add_statement(
        self,
        module: str,
        path: str,
        name: str,
        text: str,
        stmt: ast.stmt,
        future: list[str],
        what: str,
    ) -> None:
        source, line = _segment(text, stmt)
        if any(c.kind == "statement" and c.module == module and c.line == line for c in self.code):
            return  # one import statement binding several names
        self.code.append(
            OverlayCode(
                module=module,
                name=name,
                kind="statement",
                source=source,
                line=line,
                file=path,
                future=future,
            )
        )
        self.yes(path, f"{what} {name}")


def _first_line(text: str, stmt: ast.stmt) -> str:
    line = text.splitlines()[stmt.lineno - 1].strip()
    return line if len(line) <= 60 else line[:57] + "..."


@dataclass
class _Capture:
    """A copy of a function made at import, and whether the install can reach it."""

    line: int
    text: str
    holder: str | None  # None: a shape the install rebinds; else what keeps the copy
    new: bool  # a statement the change adds: it runs after the dispatchers are installed
    file: str | None = None  # an importer's; None: the function's own module

    def note(self) -> str:
        where = (
            f"captured at import ({self.file + ', ' if self.file else ''}line "
            f"{self.line}: {self.text})"
        )
        if self.new:
            return (
                f"{where}: a new statement, run after the dispatchers are installed, so "
                "it holds the dispatcher"
            )
        if self.holder is None:
            return f"{where}: rebound to the dispatcher at install"
        return (
            f"{where} in {self.holder}: that copy keeps the installed version and cannot be rebound"
        )


PARTIALS = {"partial", "functools.partial"}
_REBOUND = ""  # _holder's answer for a shape the install rebinds


def _holder(top: ast.expr, ref: ast.expr, containers: bool) -> str | None:
    """What holds `ref` inside the expression `top` evaluated at import: _REBOUND when the
    install rebinds it (the value itself; with `containers`, inside dicts, lists, sets and
    functools.partial held by a module global), None when it is no copy (an attribute read,
    a lambda's body), else the holder's name ("a tuple", "a call to register")."""
    path = _path_to(top, ref)
    for node, child in zip(path, path[1:], strict=False):
        if isinstance(node, ast.Lambda) or (
            isinstance(node, ast.Attribute) and node.value is child
        ):
            return None
        if containers and (
            isinstance(node, ast.List | ast.Set)
            or (isinstance(node, ast.Dict) and any(v is child for v in node.values))
            or (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) in PARTIALS
                and node.args
                and node.args[0] is child
            )
        ):
            continue
        if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            return f"a {type(node).__name__.lower()}"
        if isinstance(node, ast.Call):
            return f"a call to {ast.unparse(node.func)}"
        return f"an expression ({ast.unparse(node)[:40]})"
    return _REBOUND


def _path_to(top: ast.AST, target: ast.AST) -> list[ast.AST]:
    """The nodes from `top` down to `target`, both included ([] when not under it)."""
    if top is target:
        return [top]
    for child in ast.iter_child_nodes(top):
        below = _path_to(child, target)
        if below:
            return [top, *below]
    return []


def _captures(
    mod: Module, name: str, owner: str | None = None, installed: set[str] | None = None
) -> list[_Capture]:
    """Where the module's top level copies a function at import: `alias = f`, `T = {"x": f}`,
    `partial(f)`, `def g(x=f)`, a class body's `m = f` or `m = A.meth` (for a method: `owner`),
    `register(f)`, `(f, g)`. `installed`: the dumps of the installed file's statements (a
    statement not among them is new); None: every statement is installed."""
    scan = _CaptureScan(mod, name, owner, installed)
    scan.body(mod.tree.body, True, False)
    return scan.found


class _CaptureScan:
    """One _captures search: the function looked for, and the copies found so far."""

    def __init__(
        self, mod: Module, name: str, owner: str | None, installed: set[str] | None
    ) -> None:
        self.mod, self.name, self.owner, self.installed = mod, name, owner, installed
        self.found: list[_Capture] = []

    def is_ref(self, node: ast.AST, in_owner: bool) -> TypeGuard[ast.Name | ast.Attribute]:
        name, owner = self.name, self.owner
        if owner is None or in_owner:
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                return True
        return (
            owner is not None
            and isinstance(node, ast.Attribute)
            and node.attr == name
            and isinstance(node.value, ast.Name)
            and node.value.id == owner
        )

    def add(self, stmt: ast.stmt, top: ast.expr, containers: bool, in_owner: bool) -> None:
        for ref in [n for n in ast.walk(top) if self.is_ref(n, in_owner)]:
            holder = _holder(top, ref, containers)
            if holder is not None:
                new = self.installed is not None and _dump(stmt) not in self.installed
                self.found.append(
                    _Capture(
                        ref.lineno,
                        self.mod.text.splitlines()[ref.lineno - 1].strip(),
                        holder or None,
                        new,
                    )
                )

    def body(self, body: list[ast.stmt], module_level: bool, in_owner: bool) -> None:
        for stmt in body:
            if is_type_checking(stmt) or isinstance(stmt, ast.Import | ast.ImportFrom):
                continue
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.decorators(stmt, in_owner)
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                args = stmt.args
                for default in [*args.defaults, *(d for d in args.kw_defaults if d)]:
                    self.add(stmt, default, False, in_owner)
            elif isinstance(stmt, ast.ClassDef):
                for base in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                    self.add(stmt, base, False, in_owner)
                self.body(stmt.body, False, stmt.name == self.owner)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                self.add(stmt, stmt.value, module_level, in_owner)
            else:
                self.block(stmt, module_level, in_owner)

    def decorators(
        self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, in_owner: bool
    ) -> None:
        for d in stmt.decorator_list:
            if self.is_ref(d, in_owner):  # @f: called at import, its result kept
                self.found.append(
                    _Capture(
                        d.lineno, _first_line(self.mod.text, stmt), "a decorator application", False
                    )
                )
            else:
                self.add(stmt, d, False, in_owner)

    def block(self, stmt: ast.stmt, module_level: bool, in_owner: bool) -> None:
        """Calls, blocks: their expressions run at import, their bodies are scanned."""
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.add(stmt, child, False, in_owner)
        self.body(
            [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)],
            module_level,
            in_owner,
        )
        for handler in getattr(stmt, "handlers", []):
            self.body(handler.body, module_level, in_owner)


def _statement_dumps(tree: ast.AST) -> set[str]:
    return {_dump(n) for n in ast.walk(tree) if isinstance(n, ast.stmt)}


def _undefined_names(stmt: ast.stmt, mod: Module) -> list[str]:
    """Names a new module statement reads at import that the module defines nowhere (nor
    builtins): a NameError when the statement runs at install."""
    defined = set(dir(builtins)) | {
        "__name__",
        "__file__",
        "__doc__",
        "__spec__",
        "__package__",
        "__builtins__",
    }
    for node in mod.tree.body:
        if is_type_checking(node):
            continue  # bound only for type checkers
        defined.update(bound_names(node))
        for n in ast.walk(node) if not isinstance(node, DEFS) else ():
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
            elif isinstance(n, ast.alias):
                defined.add((n.asname or n.name).split(".")[0])
    local = {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    local |= {
        a.arg
        for n in ast.walk(stmt)
        if isinstance(n, ast.Lambda)
        for a in ast.walk(n.args)
        if isinstance(a, ast.arg)
    }
    return sorted(
        {
            n.id
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and n.id not in defined | local
        }
    )


def classify(
    change: Change,
    vllm_root: Path,
    compiled: bool = False,
    device: str = "cpu",
    variant: str | None = None,
    graphs: str = "NONE",
) -> Classified:
    """Every part of `change`, overlayable or not (with the reason), and the code to run;
    `variant` names the variant in what a refusal tells to do, `graphs` the CUDA-graph mode
    the launch will run under (engine_graph_mode)."""
    return classify_in(change, installed_package(str(vllm_root)), compiled, device, variant, graphs)


def classify_in(
    change: Change,
    installed: Installed,
    compiled: bool = False,
    device: str = "cpu",
    variant: str | None = None,
    graphs: str = "NONE",
) -> Classified:
    """classify against any vllm package read as source (another release's wheel:
    harness.plan.vllm_source.SourceFiles)."""
    return _Classifier(change, installed, compiled, device, variant, graphs).run()


def engine_graph_mode(scenario: Scenario) -> str:
    """The CUDA-graph mode the scenario's launches will run under (NONE on a CPU)."""
    return expected_graph_mode(scenario.device, scenario.engine)


# --- scenarios ---------------------------------------------------------------------------------


def engine_is_compiled(scenario: Scenario) -> bool:
    """Whether vLLM will torch.compile the model forward (not enforce_eager, compilation on)."""
    if scenario.engine.get("enforce_eager"):
        return False
    comp = scenario.engine.get("compilation_config")
    level = comp.get("mode", comp.get("level")) if isinstance(comp, dict) else comp
    return level not in (0, "0", "NONE", "none")
