"""Breakable CUDA graphs, read from a vLLM's source: which models and settings get them, and the
overlays they rule out. Under them vLLM records the whole model forward, its eager Python
included (compilation mode NONE), so a model-code overlay replays its capture-time arm.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.config.catalog import BUILTIN_CONFIGS
from harness.config.scenario import BATCH_INVARIANT_ENV, Scenario
from harness.config.workload import hub_cached_config, looks_like_hub_id
from harness.errors import ScenarioError
from harness.plan.classify import (
    COMPILED_DIRS,
    OUTSIDE_COMPILED_CLASSES,
    OUTSIDE_COMPILED_NAMES,
    Classified,
    Finding,
    engine_graph_mode,
)


class Source(Protocol):
    """A vLLM's files read as source (harness.plan.vllm_support.Source): named here so that
    vllm_support may call this module."""

    label: str
    version: str

    def tree(self, module: str) -> ast.Module | None: ...


CONFIG_MODULE = "vllm.config.vllm"  # VllmConfig and the default list (vllm_internals)
DEFAULTS_FUNCTION = "default_breakable_cudagraph_architectures"
BATCH_INVARIANCE_METHOD = "_uses_breakable_cudagraph_for_batch_invariance"
SWITCH_ENV = "VLLM_USE_BREAKABLE_CUDAGRAPH"
OPT_OUT = f"env: {{{SWITCH_ENV}: '0'}} (vLLM's own opt-out)"


@dataclass(frozen=True)
class BreakableFacts:
    """What one vLLM says about breakable CUDA graphs on NVIDIA (current_platform.is_cuda())."""

    version: str
    architectures: frozenset[str]  # on by default for these (config.architectures)
    batch_invariance: bool  # VLLM_BATCH_INVARIANT=1 can turn them on (tuned bf16 shapes)
    switch_on: str | None  # the value of VLLM_USE_BREAKABLE_CUDAGRAPH that means on


def _frozensets(tree: ast.Module) -> dict[str, frozenset[str]]:
    """Module-level NAME = frozenset({"a", ...}) literals."""
    out = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value = _literal(node.value, {})
            if value is not None:
                out[node.targets[0].id] = value
    return out


def _literal(node: ast.expr, names: dict[str, frozenset[str]]) -> frozenset[str] | None:
    """A set expression of string literals, names of such sets, and unions (|)."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "frozenset" and len(node.args) == 1:
        return _literal(node.args[0], names)
    if isinstance(node, ast.Set | ast.List | ast.Tuple):
        items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(items) == len(node.elts) and all(isinstance(i, str) for i in items):
            return frozenset(str(i) for i in items)
        return None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _literal(node.left, names), _literal(node.right, names)
        return None if left is None or right is None else left | right
    return None


def _cuda_return(fn: ast.FunctionDef) -> ast.expr | None:
    """What the function returns on NVIDIA: the return under `if current_platform.is_cuda():`,
    else its last top-level return (the branch for every platform not named before it)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("is_cuda()"):
            for stmt in node.body:
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    return stmt.value
    last = [s for s in fn.body if isinstance(s, ast.Return) and s.value is not None]
    return last[-1].value if last else None


def _switch_on(source: Source) -> str | None:
    """The value vllm.envs compares VLLM_USE_BREAKABLE_CUDAGRAPH with (`== "1"`)."""
    tree = source.tree("vllm.envs")
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and SWITCH_ENV in [
            k.value for k in node.keys if isinstance(k, ast.Constant)
        ]:
            at = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            for sub in ast.walk(node.values[at.index(SWITCH_ENV)]):
                if (
                    isinstance(sub, ast.Compare)
                    and isinstance(sub.ops[0], ast.Eq)
                    and isinstance(sub.comparators[0], ast.Constant)
                ):
                    return str(sub.comparators[0].value)
    return None


def read_breakable(source: Source) -> BreakableFacts:
    """The release's rules, read from vllm/config/vllm.py and vllm/envs.py. A vLLM without
    breakable graphs has none of them; one whose rules no longer read as expected is refused
    (a silent empty list would let a recorded overlay through)."""
    tree = source.tree(CONFIG_MODULE)
    fn = None
    if tree is not None:
        fn = next(
            (
                n
                for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == DEFAULTS_FUNCTION
            ),
            None,
        )
    if tree is None or fn is None:
        return BreakableFacts(source.version, frozenset(), False, _switch_on(source))
    returned = _cuda_return(fn)
    archs = _literal(returned, _frozensets(tree)) if returned is not None else None
    if archs is None:
        raise ScenarioError(
            f"vLLM {source.version} ({source.label}): {CONFIG_MODULE}.{DEFAULTS_FUNCTION} "
            "no longer reads as a set of architecture names, so which models get breakable "
            "CUDA graphs is unknown; specbench needs updating for this release"
        )
    config = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VllmConfig"), None
    )
    invariance = config is not None and any(
        isinstance(n, ast.FunctionDef) and n.name == BATCH_INVARIANCE_METHOD for n in config.body
    )
    return BreakableFacts(source.version, archs, invariance, _switch_on(source))


_FACTS: dict[tuple[str, str], BreakableFacts] = {}


def _facts(source: Source) -> BreakableFacts:
    """read_breakable, once per source per process."""
    key = (source.label, source.version)
    if key not in _FACTS:
        _FACTS[key] = read_breakable(source)
    return _FACTS[key]


def breakable_graphs(
    source: Source,
    architectures: list[str] | tuple[str, ...],
    env: dict[str, str],
    device: str = "cuda",
    graphs: str = "FULL_AND_PIECEWISE",
) -> str | None:
    """Why a launch of a model with these config.json `architectures` and this `env` gets
    breakable CUDA graphs on `source`'s vLLM (None: it does not, or may not be told apart)."""
    if device != "cuda" or graphs == "NONE":
        return None
    facts = _facts(source)
    if SWITCH_ENV in env:
        if facts.switch_on is not None and env[SWITCH_ENV] == facts.switch_on:
            return f"env {SWITCH_ENV}={env[SWITCH_ENV]} turns breakable CUDA graphs on"
        return None  # vLLM reads the variable first: set, it decides
    hit = sorted(set(architectures) & facts.architectures)
    if hit:
        return (
            f"vLLM {facts.version} turns breakable CUDA graphs on by default on NVIDIA for "
            f"{', '.join(hit)} (vllm/config/vllm.py: {DEFAULTS_FUNCTION})"
        )
    if facts.batch_invariance and env.get(BATCH_INVARIANT_ENV) == "1":
        return (
            f"env {BATCH_INVARIANT_ENV}=1 can turn breakable CUDA graphs on in vLLM "
            f"{facts.version} (bf16, unquantized models whose layer shapes its tuned tables "
            f"hold on the GPU: VllmConfig.{BATCH_INVARIANCE_METHOD})"
        )
    return None


def records_model_code(path: str, owner: str | None, name: str) -> bool:
    """Whether a function runs inside the model's forward (vllm/model_executor/models|layers),
    which breakable graphs record: not what the runner calls on the forward's output."""
    return (
        path.startswith(COMPILED_DIRS)
        and name not in OUTSIDE_COMPILED_NAMES
        and (owner or "") not in OUTSIDE_COMPILED_CLASSES
    )


def _model_architectures(scenario: Scenario, base_dir: Path) -> list[str]:
    """The target's config.json architectures, its text model's included (vLLM 0.34 reads
    hf_text_config's too), where they can be read here: a built-in model, a local folder, a
    Hub id the local cache holds (otherwise vLLM resolves it at start-up; the preflight says
    what is wrong with a model it cannot read). vLLM decides from the target's config alone."""
    name = scenario.model
    config: Any = BUILTIN_CONFIGS.get(name)
    if config is None:
        path = Path(name).expanduser()
        path = (path if path.is_absolute() else base_dir / path) / "config.json"
        if not path.is_file() and looks_like_hub_id(name):
            path = hub_cached_config(name) or path
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
    if not isinstance(config, dict):
        return []
    text = config.get("text_config")
    archs = list(config.get("architectures") or [])
    if isinstance(text, dict):
        archs += list(text.get("architectures") or [])
    return [a for a in archs if isinstance(a, str)]


def breakable_findings(
    variant: str, classified: Classified, scenario: Scenario, source: Source, base_dir: Path
) -> list[Finding]:
    """A refusal per model-code function of the change where the launch gets breakable CUDA
    graphs: they record the model's eager Python at capture, so under any captured mode
    (PIECEWISE too) replay runs one arm's version in both arms."""
    code = [
        c
        for c in classified.code
        if c.kind == "function" and records_model_code(c.file, c.owner, c.name)
    ]
    if not code:
        return []
    base = scenario.variants[scenario.baseline]
    env = {**scenario.env, **base.env, **scenario.variants[variant].env}
    why = breakable_graphs(
        source,
        _model_architectures(scenario, base_dir),
        env,
        scenario.device,
        engine_graph_mode(scenario),
    )
    if why is None:
        return []
    return [
        Finding(
            c.file,
            f"{c.owner + '.' if c.owner else ''}{c.name}",
            False,
            f"model code under breakable CUDA graphs: {why}, which record the model's "
            "forward, its eager Python included, at capture, and replay keeps one arm's "
            "version in both arms under any captured cudagraph_mode (PIECEWISE too); "
            f"engine_args: {{enforce_eager: true}}, {OPT_OUT}, or launch-per-arm on a build "
            f"(variants.{variant}.python)",
            own_way_out=True,
        )
        for c in code
    ]
