"""The registry of every vLLM internal specbench touches, as pure data (no vLLM or torch import).

Each entry names one thing of vLLM's source that specbench imports, calls, wraps, patches, sets,
reads, launches or reasons about, where vLLM defines it, and the specbench feature that breaks
without it (FEATURES). A source checker reads a vLLM version's files with `ast` (no import) and
verifies every entry against them, so that a new vLLM release says before any engine starts
which features it breaks. Written against vLLM 0.32.0; every entry exists there.

How an entry reads:
- module: the dotted module that DEFINES it (vllm/a/b.py or vllm/a/b/__init__.py), not the
  module specbench imports it from when that one only re-exports it (`from vllm import LLM`
  names vllm.entrypoints.llm.LLM here).
- qualname: "" for kind "module" (the module itself); "Class" for a class; "function" for a
  top-level def; "Class.method" for a method (a def in the class body, @overload, @property
  and @classmethod included); "Class.attr" for an attribute.
- kind "attribute": a class attribute or field (an annotation or assignment in the class body:
  dataclass, pydantic, msgspec, TypedDict fields, enum members) or an instance attribute
  assigned in any method of that class (`self.NAME = ...`, `self.NAME: T = ...`, or a tuple
  target holding `self.NAME`). A qualname without a dot is a module-level name: an assignment
  or annotation at the module's top level, `if TYPE_CHECKING:` blocks included (vllm.envs
  declares each environment variable that way, and reads it from `environment_variables`).
- params: the parameter names specbench relies on, self excluded: those it passes by keyword,
  or the positional ones its wrapper names, in order. For a class, the keywords its constructor
  gets: parameters of its __init__, or, where it has none (dataclass, pydantic model, msgspec
  Struct, TypedDict), its fields. None: specbench passes whatever vLLM passes (*args,
  **kwargs), or the thing is not called.
- where: the specbench files that depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Internal:
    feature: str  # which specbench feature needs it, one of FEATURES' keys
    module: str  # dotted module where vLLM defines it
    qualname: str  # name inside the module: "Class", "Class.method", "function", "Class.attr"
    kind: Literal["module", "class", "function", "method", "attribute"]
    params: tuple[str, ...] | None = None  # parameter names relied on (self excluded), None: any
    where: str = ""  # the specbench file(s) that use it, e.g. "harness/engine/steptimes.py"
    # Other modules that define it in other vLLM versions (where specbench does not import it
    # by module, e.g. a CLI flag's dataclass): found in any of them counts.
    moved: tuple[str, ...] = ()
    # The model runner the entry belongs to: "V1" or "V2" where a feature reaches each runner
    # at its own points (the support matrix then has a row per runner), None: both.
    runner: Literal["V1", "V2"] | None = None
    # Used only where the installed vLLM has it (checked at run time, as the extensible KV
    # cache's wrap point, which 0.34 added): absent is no failure; present, it must hold.
    optional: bool = False


FEATURES: dict[str, str] = {  # feature key -> one line saying what breaks without it
    "swap medusa-proposer": (
        "the medusa-proposer swap cannot install or switch MedusaProposer.propose per pass"
    ),
    "swap tp-argmax-reduction": (
        "the tp-argmax-reduction swap cannot set the flag per call or prove which argmax ran"
    ),
    "swap v2-draft-handoff": (
        "the v2-draft-handoff swap cannot force V2's host copy of the drafts or prove where "
        "they went"
    ),
    "overlay plugin": (
        "vLLM's processes never load specbench's plugin, so no swap, overlay or step timer "
        "installs, and arms cannot switch between passes (collective_rpc) or be attributed"
    ),
    "step timer": "passes of a run with a no-speculation arm have no step, forward and draft times",
    "spec-decode metrics": "acceptance counters (per pass and per request) read as missing or zero",
    "request records": (
        "offline per-request records lose their TTFT, E2EL, token ids and finish reasons"
    ),
    "datasets": (
        "the worker cannot cross-check spec_bench/speed_bench prompts against vLLM's readers"
    ),
    "engine arguments": (
        "scenarios cannot be validated against vLLM's arguments, or launch with specbench's "
        "fixed settings (stats on, prefix cache off, per-request acceptance)"
    ),
    "engine attributes": (
        "a dead engine core hangs the launch until its timeout instead of failing with how it ended"
    ),
    "offline engine": "offline mode cannot build the engine, generate, or call its worker RPCs",
    "serve": (
        "serve mode cannot start vLLM's server, send its load, switch arms in it or read its "
        "acceptance"
    ),
    "device environment": (
        "device: cpu launches lose their KV-cache size, target device and TP core binding"
    ),
    "platform": (
        "launches cannot read their model runner, compilation and CUDA-graph modes, so every "
        "launch with a swap, a switched patch or the step timer is refused (measured blind "
        "otherwise)"
    ),
    "change classifier": (
        "planning/bisecting a variant's change misjudges where changed code runs (workers, "
        "engine core, compiled forward), so an overlay is allowed where it cannot switch"
    ),
    "breakable CUDA graphs": (
        "planning cannot tell which models and settings get breakable CUDA graphs, which "
        "record the model's eager Python, so a model-code overlay is planned where replay "
        "keeps one arm's version"
    ),
    "built-in models": "vLLM cannot load the built-in tiny EAGLE draft specbench builds",
    "built-in Medusa model": "vLLM cannot load the built-in tiny Medusa heads specbench builds",
    "selftest overlay": (
        "specbench selftest cannot overlay a host-side drafter function to prove the overlay "
        "switch on this machine"
    ),
}

_SWAP_MEDUSA = "harness/engine/swaps/medusa_proposer.py"
_SWAP_TP = "harness/engine/swaps/tp_argmax_reduction.py"
_SWAP_HANDOFF = "harness/engine/swaps/v2_draft_handoff.py"
_PLUGIN = "harness/engine/plugin.py"
_OVERLAY = "harness/engine/overlay.py"
_STEPS = "harness/engine/steptimes.py"
_WORKER = "harness/engine/worker.py"
_SERVE = "harness/engine/serve_worker.py"
_LOADGEN = "harness/engine/loadgen.py"
_ARGSPEC = "harness/engine/argspec.py"
_ENGINE_ARGS = "harness/config/engine_args.py"
_CLASSIFY = "harness/plan/classify.py"
_SOURCE = "harness/plan/vllm_source.py"
_PLATFORM = "harness/engine/platform.py"
_BREAKABLE = "harness/plan/breakable.py"


def _attributes(
    feature: str,
    module: str,
    owner: str,
    names: tuple[str, ...],
    where: str,
    runner: Literal["V1", "V2"] | None = None,
) -> tuple[Internal, ...]:
    """Attributes of one class that one feature reads."""
    return tuple(
        Internal(feature, module, f"{owner}.{name}", "attribute", where=where, runner=runner)
        for name in names
    )


_SELFTEST = "harness/plan/selftest_probes.py, harness/selftest.py"

INTERNALS: tuple[Internal, ...] = (
    # --- swap medusa-proposer ----------------------------------------------------------------
    Internal(
        "swap medusa-proposer",
        "vllm.v1.spec_decode.medusa",
        "MedusaProposer",
        "class",
        where=_SWAP_MEDUSA,
    ),
    # vLLM's runner calls it by keyword; the baseline replaces it with these parameters.
    Internal(
        "swap medusa-proposer",
        "vllm.v1.spec_decode.medusa",
        "MedusaProposer.propose",
        "method",
        ("num_speculative_tokens", "target_hidden_states", "sampling_metadata", "slot_mappings"),
        _SWAP_MEDUSA,
    ),
    Internal(
        "swap medusa-proposer",
        "vllm.v1.spec_decode.medusa",
        "MedusaProposer.num_speculative_tokens",
        "attribute",
        where=_SWAP_MEDUSA,
    ),
    Internal(
        "swap medusa-proposer",
        "vllm.v1.spec_decode.medusa",
        "MedusaProposer.model",
        "attribute",
        where=_SWAP_MEDUSA,
    ),
    # self.model(hidden) and self.model.compute_logits(blocks): one tensor per head.
    Internal(
        "swap medusa-proposer",
        "vllm.model_executor.models.medusa",
        "Medusa.forward",
        "method",
        ("hidden_states",),
        _SWAP_MEDUSA,
    ),
    Internal(
        "swap medusa-proposer",
        "vllm.model_executor.models.medusa",
        "Medusa.compute_logits",
        "method",
        ("hidden_states",),
        _SWAP_MEDUSA,
    ),
    # The baseline returns list[list[int]]; the runner takes drafts in either form.
    Internal(
        "swap medusa-proposer",
        "vllm.v1.worker.gpu_model_runner",
        "GPUModelRunner.take_draft_token_ids",
        "method",
        (),
        _SWAP_MEDUSA,
    ),
    # --- swap tp-argmax-reduction ------------------------------------------------------------
    Internal(
        "swap tp-argmax-reduction",
        "vllm.v1.spec_decode.llm_base_proposer",
        "SpecDecodeBaseProposer._sample_draft_tokens",
        "method",
        None,
        _SWAP_TP,
        runner="V1",
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.v1.spec_decode.llm_base_proposer",
        "SpecDecodeBaseProposer.use_local_argmax_reduction",
        "attribute",
        where=_SWAP_TP,
        runner="V1",
    ),
    # V2 copies the flag into the speculator at init and reads it on every sample_draft.
    Internal(
        "swap tp-argmax-reduction",
        "vllm.v1.worker.gpu.spec_decode.speculator",
        "DraftModelSpeculator.sample_draft",
        "method",
        None,
        _SWAP_TP,
        runner="V2",
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.v1.worker.gpu.spec_decode.speculator",
        "DraftModelSpeculator.use_local_argmax_reduction",
        "attribute",
        where=_SWAP_TP,
        runner="V2",
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.model_executor.layers.logits_processor",
        "LogitsProcessor.get_top_tokens",
        "method",
        ("lm_head",),
        f"{_SWAP_TP}, {_CLASSIFY}",
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.model_executor.layers.logits_processor",
        "LogitsProcessor._get_logits",
        "method",
        ("hidden_states", "lm_head"),
        _SWAP_TP,
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.model_executor.layers.logits_processor",
        "LogitsProcessor._gather_logits",
        "method",
        None,
        _SWAP_TP,
    ),
    Internal(
        "swap tp-argmax-reduction",
        "vllm.model_executor.layers.vocab_parallel_embedding",
        "VocabParallelEmbedding.tp_size",
        "attribute",
        where=_SWAP_TP,
    ),
    # The choice forces it in speculative_config (harness.config.swaps.tp_argmax_reduction).
    Internal(
        "swap tp-argmax-reduction",
        "vllm.config.speculative",
        "SpeculativeConfig.use_local_argmax_reduction",
        "attribute",
        where=f"harness/config/swaps/tp_argmax_reduction.py, {_SWAP_TP}",
    ),
    # EAGLE drafts through SpecDecodeBaseProposer._sample_draft_tokens (inherited).
    Internal(
        "swap tp-argmax-reduction",
        "vllm.v1.spec_decode.eagle",
        "EagleProposer",
        "class",
        where=_SWAP_TP,
        runner="V1",
    ),
    # --- swap v2-draft-handoff ----------------------------------------------------------------
    # V2 keeps drafts on the device; set_draft_tokens copies them to the host only for
    # structured outputs, get_draft_tokens hands the scheduler lists or placeholders.
    Internal(
        "swap v2-draft-handoff",
        "vllm.v1.worker.gpu.spec_decode.utils",
        "DraftTokensHandler.set_draft_tokens",
        "method",
        ("input_batch", "draft_tokens"),
        _SWAP_HANDOFF,
        runner="V2",
    ),
    Internal(
        "swap v2-draft-handoff",
        "vllm.v1.worker.gpu.spec_decode.utils",
        "DraftTokensHandler.get_draft_tokens",
        "method",
        (),
        _SWAP_HANDOFF,
        runner="V2",
    ),
    *_attributes(
        "swap v2-draft-handoff",
        "vllm.v1.worker.gpu.spec_decode.utils",
        "DraftTokensHandler",
        ("req_ids", "num_draft_tokens", "draft_tokens_np"),
        _SWAP_HANDOFF,
        "V2",
    ),
    Internal(
        "swap v2-draft-handoff",
        "vllm.v1.worker.gpu.input_batch",
        "InputBatch.req_ids",
        "attribute",
        where=_SWAP_HANDOFF,
        runner="V2",
    ),
    # --- overlay plugin (plugin, swaps' installation, overlays, the arm switch) ---------------
    # The entry point group vLLM loads in its main, engine-core and worker processes
    # (pyproject.toml [project.entry-points."vllm.general_plugins"]).
    Internal(
        "overlay plugin",
        "vllm.plugins",
        "DEFAULT_PLUGINS_GROUP",
        "attribute",
        where=f"pyproject.toml, harness/plan/builds.py, {_PLUGIN}",
    ),
    Internal("overlay plugin", "vllm.plugins", "load_general_plugins", "function", (), _PLUGIN),
    # Methods added by name (specbench_switch_epoch, specbench_step_times), reached through
    # collective_rpc; the wrapper forwards other names to its worker.
    Internal(
        "overlay plugin",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase",
        "class",
        where=f"{_PLUGIN}, {_STEPS}",
    ),
    Internal(
        "overlay plugin",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase.__getattr__",
        "method",
        ("attr",),
        _PLUGIN,
    ),
    # The plugin installs a swap, the step timer and the platform reader where vLLM builds a
    # worker: inside this method, or just before it runs (harness.engine.plugin). Without it
    # they would install nowhere.
    Internal(
        "overlay plugin",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase.init_worker",
        "method",
        None,
        _PLUGIN,
    ),
    # The stall watchdog's heartbeat wraps it: every engine step enters the model runner here
    # (checked in 0.32, 0.33 and 0.34's source). Without it a stuck step is found only by the
    # pass bounds (harness.execute.progress). The speed probe (speed_probe: true) runs before
    # it, outside the runner's timed parts; without it the passes carry no probe and the
    # speed-adjusted row falls back to the step parts.
    Internal(
        "overlay plugin",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase.execute_model",
        "method",
        None,
        _STEPS,
    ),
    Internal(
        "overlay plugin",
        "vllm.distributed.parallel_state",
        "get_tensor_model_parallel_rank",
        "function",
        (),
        "harness/engine/impls.py",
    ),
    Internal("overlay plugin", "vllm.platforms", "current_platform", "attribute", where=_OVERLAY),
    Internal(
        "overlay plugin", "vllm.platforms.interface", "Platform.is_cpu", "method", (), _OVERLAY
    ),
    Internal(
        "overlay plugin", "vllm.platforms.interface", "Platform.is_cuda", "method", (), _OVERLAY
    ),
    Internal(
        "overlay plugin", "vllm.platforms.interface", "Platform.is_rocm", "method", (), _OVERLAY
    ),
    Internal(
        "overlay plugin", "vllm.platforms.interface", "Platform.is_xpu", "method", (), _OVERLAY
    ),
    Internal(
        "overlay plugin", "vllm.platforms.interface", "Platform.is_tpu", "method", (), _OVERLAY
    ),
    # What shadows an idle overlaid forward_native (overlay.shadowed, classify.shadowed).
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp",
        "class",
        where=f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.dispatch_forward",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_native",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_cpu",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_cuda",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_hip",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_xpu",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_tpu",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    Internal(
        "overlay plugin",
        "vllm.model_executor.custom_op",
        "CustomOp.forward_oot",
        "method",
        None,
        f"{_OVERLAY}, {_CLASSIFY}",
    ),
    # --- step timer ----------------------------------------------------------------------------
    # V1: the four timed methods (the CPU runner inherits them from GPUModelRunner).
    *(
        Internal(
            "step timer",
            "vllm.v1.worker.gpu_model_runner",
            f"GPUModelRunner.{name}",
            "method",
            None,
            _STEPS,
            runner="V1",
        )
        for name in ("execute_model", "sample_tokens", "_model_forward", "propose_draft_token_ids")
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.gpu_model_runner",
        "GPUModelRunner",
        "class",
        where=_STEPS,
        runner="V1",
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.cpu_model_runner",
        "CPUModelRunner",
        "class",
        where=f"{_STEPS}, {_OVERLAY}",
        runner="V1",
    ),
    # V2: the step's two methods; the forward from the step timing collector's forward_start
    # to the KV connector's finish_forward (inline in execute_model); the speculator's
    # propose (and prepare_propose, 0.34's, where the class has it), found through the
    # runner's speculator attribute.
    *(
        Internal(
            "step timer",
            "vllm.v1.worker.gpu.model_runner",
            f"GPUModelRunner.{name}",
            "method",
            None,
            _STEPS,
            runner="V2",
        )
        for name in ("execute_model", "sample_tokens")
    ),
    *_attributes(
        "step timer",
        "vllm.v1.worker.gpu.model_runner",
        "GPUModelRunner",
        ("speculator", "step_timing", "kv_connector"),
        _STEPS,
        "V2",
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.gpu.async_utils",
        "StepTimingCollector.forward_start",
        "method",
        (),
        _STEPS,
        runner="V2",
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.gpu.kv_connector",
        "KVConnector.finish_forward",
        "method",
        (),
        _STEPS,
        runner="V2",
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.gpu.spec_decode.speculator",
        "BaseSpeculator.propose",
        "method",
        None,
        _STEPS,
        runner="V2",
    ),
    Internal(
        "step timer",
        "vllm.v1.worker.cpu.model_runner",
        "CPUModelRunner",
        "class",
        where=_STEPS,
        runner="V2",
    ),
    # --- platform ----------------------------------------------------------------------------
    Internal(
        "platform",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase.initialize_from_config",
        "method",
        None,
        _PLATFORM,
    ),
    *_attributes(
        "platform",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase",
        ("worker", "global_rank"),
        _PLATFORM,
    ),
    *_attributes(
        "platform",
        "vllm.config.compilation",
        "CompilationConfig",
        ("mode", "cudagraph_mode", "cudagraph_capture_sizes"),
        _PLATFORM,
    ),
    *_attributes(
        "platform", "vllm.config.scheduler", "SchedulerConfig", ("async_scheduling",), _PLATFORM
    ),
    Internal(
        "platform",
        "vllm.config.compilation",
        "CUDAGraphMode",
        "class",
        where="harness/config/platforms.py",
    ),
    # --- platform: the KV cache's real capacity ------------------------------------------------
    # CacheConfig.num_gpu_blocks as each worker holds it: set by Worker.initialize_from_config,
    # and under the extensible KV cache (0.34 on CUDA) reset by extend_kv_cache to the size
    # measured after warm-up (until then a reservation). num_gpu_blocks_override pins it,
    # and on 0.34 switches the extensible cache off (VllmConfig._resolve_extensible_kv_cache).
    *_attributes(
        "platform",
        "vllm.config.cache",
        "CacheConfig",
        ("num_gpu_blocks", "num_gpu_blocks_override"),
        f"{_PLATFORM}, harness/execute/runner.py",
    ),
    Internal(
        "platform",
        "vllm.config.cache",
        "CacheConfig.enable_extensible_kv_cache",
        "attribute",
        where=_PLATFORM,
        optional=True,
    ),
    Internal(
        "platform",
        "vllm.v1.worker.worker_base",
        "WorkerWrapperBase.extend_kv_cache",
        "method",
        ("num_blocks",),
        _PLATFORM,
        optional=True,
    ),
    # V2 is told by the runner's module (harness/engine/platform.py: platform_of).
    Internal(
        "platform",
        "vllm.v1.worker.gpu.model_runner",
        "GPUModelRunner",
        "class",
        where=_PLATFORM,
        runner="V2",
    ),
    Internal(
        "platform",
        "vllm.v1.worker.gpu_model_runner",
        "GPUModelRunner.attn_groups",
        "attribute",
        where=_PLATFORM,
        runner="V1",
    ),
    Internal(
        "platform",
        "vllm.v1.worker.gpu.model_runner",
        "GPUModelRunner.attn_groups",
        "attribute",
        where=_PLATFORM,
        runner="V2",
    ),
    # --- spec-decode metrics -----------------------------------------------------------------
    Internal(
        "spec-decode metrics", "vllm.entrypoints.llm", "LLM.get_metrics", "method", (), _WORKER
    ),
    Internal(
        "spec-decode metrics", "vllm.v1.metrics.reader", "Metric.name", "attribute", where=_WORKER
    ),
    Internal("spec-decode metrics", "vllm.v1.metrics.reader", "Counter", "class", where=_WORKER),
    Internal(
        "spec-decode metrics", "vllm.v1.metrics.reader", "Counter.value", "attribute", where=_WORKER
    ),
    Internal("spec-decode metrics", "vllm.v1.metrics.reader", "Vector", "class", where=_WORKER),
    Internal(
        "spec-decode metrics", "vllm.v1.metrics.reader", "Vector.values", "attribute", where=_WORKER
    ),
    # Registers vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens /
    # _num_accepted_tokens_per_pos (label "position"), read offline and from /metrics.
    Internal(
        "spec-decode metrics",
        "vllm.v1.spec_decode.metrics",
        "SpecDecodingProm",
        "class",
        where=f"{_WORKER}, {_LOADGEN}",
    ),
    # Per request: CompletionOutput.spec_decode_metrics (offline), metrics.speculative_decoding
    # (served).
    Internal(
        "spec-decode metrics",
        "vllm.outputs",
        "CompletionOutput.spec_decode_metrics",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.v1.metrics.stats",
        "RequestSpecDecodeMetrics.histogram",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.v1.metrics.stats",
        "RequestSpecDecodeMetrics.num_draft_tokens",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.entrypoints.generate.base.protocol",
        "PerRequestMetrics.speculative_decoding",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.entrypoints.generate.base.protocol",
        "SpeculativeDecodingMetrics.acceptance_histogram",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.entrypoints.generate.base.protocol",
        "SpeculativeDecodingMetrics.num_draft_tokens",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "spec-decode metrics",
        "vllm.engine.arg_utils",
        "EngineArgs.per_request_spec_decode_metrics",
        "attribute",
        where=_ENGINE_ARGS,
    ),
    # --- request records (offline outputs) ---------------------------------------------------
    Internal(
        "request records", "vllm.outputs", "RequestOutput.outputs", "attribute", where=_WORKER
    ),
    Internal(
        "request records", "vllm.outputs", "RequestOutput.metrics", "attribute", where=_WORKER
    ),
    Internal(
        "request records",
        "vllm.outputs",
        "RequestOutput.prompt_token_ids",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "request records", "vllm.outputs", "CompletionOutput.token_ids", "attribute", where=_WORKER
    ),
    Internal(
        "request records",
        "vllm.outputs",
        "CompletionOutput.finish_reason",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "request records",
        "vllm.v1.metrics.stats",
        "RequestStateStats.first_token_latency",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "request records",
        "vllm.v1.metrics.stats",
        "RequestStateStats.first_token_ts",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "request records",
        "vllm.v1.metrics.stats",
        "RequestStateStats.last_token_ts",
        "attribute",
        where=_WORKER,
    ),
    # --- datasets ----------------------------------------------------------------------------
    Internal(
        "datasets",
        "vllm.benchmarks.datasets.datasets",
        "",
        "module",
        where=f"{_WORKER}, harness/config/datasets.py",
    ),
    Internal("datasets", "vllm.benchmarks.datasets.datasets", "SpecBench", "class", where=_WORKER),
    Internal("datasets", "vllm.benchmarks.datasets.datasets", "SpeedBench", "class", where=_WORKER),
    # SpecBench/SpeedBench take **kwargs and pass these on to the base class.
    Internal(
        "datasets",
        "vllm.benchmarks.datasets.datasets",
        "BenchmarkDataset.__init__",
        "method",
        ("dataset_path", "disable_shuffle"),
        _WORKER,
    ),
    Internal(
        "datasets",
        "vllm.benchmarks.datasets.datasets",
        "BenchmarkDataset.data",
        "attribute",
        where=_WORKER,
    ),
    # Popped from SpeedBench's **kwargs (the dataset_subset= keyword specbench passes).
    Internal(
        "datasets",
        "vllm.benchmarks.datasets.datasets",
        "SpeedBench.dataset_subset",
        "attribute",
        where=_WORKER,
    ),
    # --- engine arguments --------------------------------------------------------------------
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs",
        "class",
        where=f"{_ARGSPEC}, harness/config/vllm_args.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig",
        "class",
        where=f"{_ARGSPEC}, harness/config/vllm_args.py",
    ),
    # argspec reads LLM(...)'s own keywords from its signature; the worker calls LLM(**args).
    Internal(
        "engine arguments",
        "vllm.entrypoints.llm",
        "LLM.__init__",
        "method",
        None,
        f"{_ARGSPEC}, {_WORKER}",
    ),
    Internal(
        "engine arguments",
        "vllm._version",
        "__version__",
        "attribute",
        where=f"{_ARGSPEC}, {_WORKER}, harness/plan/diffs.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.model",
        "attribute",
        where=f"{_ENGINE_ARGS}, {_WORKER}",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.dtype",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.tensor_parallel_size",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py, {_WORKER}",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.pipeline_parallel_size",
        "attribute",
        where="harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.max_num_seqs",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.max_num_batched_tokens",
        "attribute",
        where="harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.max_model_len",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.seed",
        "attribute",
        where=_ENGINE_ARGS,
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.disable_log_stats",
        "attribute",
        where=f"{_ENGINE_ARGS}, {_SERVE}",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.enable_prefix_caching",
        "attribute",
        where=_ENGINE_ARGS,
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.speculative_config",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py, {_WORKER}",
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.enforce_eager",
        "attribute",
        where=_CLASSIFY,
    ),
    Internal(
        "engine arguments",
        "vllm.engine.arg_utils",
        "EngineArgs.compilation_config",
        "attribute",
        where=f"{_CLASSIFY}, {_ARGSPEC}",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.method",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py, harness/doctor.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.num_speculative_tokens",
        "attribute",
        where=f"{_ENGINE_ARGS}, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.model",
        "attribute",
        where=f"{_ENGINE_ARGS}, {_WORKER}, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.rejection_sample_method",
        "attribute",
        where="harness/config/scenario.py, harness/plan/preflight.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.synthetic_acceptance_rates",
        "attribute",
        where="harness/config/scenario.py",
    ),
    Internal(
        "engine arguments",
        "vllm.config.speculative",
        "SpeculativeConfig.synthetic_acceptance_length",
        "attribute",
        where="harness/config/scenario.py",
    ),
    # --- engine attributes (the offline engine core's death) --------------------------------
    Internal(
        "engine attributes", "vllm.entrypoints.llm", "LLM.llm_engine", "attribute", where=_WORKER
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.llm_engine",
        "LLMEngine.engine_core",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.core_client",
        "MPClient.resources",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.core_client",
        "MPClient.utility_results",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.core_client",
        "SyncMPClient.outputs_queue",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.core_client",
        "BackgroundResources.engine_manager",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.core_client",
        "BackgroundResources.engine_dead",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes",
        "vllm.v1.engine.utils",
        "CoreEngineProcManager.processes",
        "attribute",
        where=_WORKER,
    ),
    Internal(
        "engine attributes", "vllm.v1.engine.exceptions", "EngineDeadError", "class", where=_WORKER
    ),
    # --- offline engine ----------------------------------------------------------------------
    Internal("offline engine", "vllm.entrypoints.llm", "LLM", "class", where=_WORKER),
    Internal(
        "offline engine",
        "vllm.entrypoints.llm",
        "LLM.generate",
        "method",
        ("prompts", "sampling_params", "use_tqdm"),
        _WORKER,
    ),
    Internal(
        "offline engine",
        "vllm.entrypoints.llm",
        "LLM.collective_rpc",
        "method",
        ("method", "args"),
        _WORKER,
    ),
    Internal(
        "offline engine",
        "vllm.sampling_params",
        "SamplingParams",
        "class",
        ("max_tokens", "ignore_eos", "temperature", "seed"),
        _WORKER,
    ),
    Internal(
        "offline engine", "vllm.inputs.llm", "TokensPrompt", "class", ("prompt_token_ids",), _WORKER
    ),
    # --- serve -------------------------------------------------------------------------------
    Internal("serve", "vllm.entrypoints.openai.api_server", "", "module", where=_SERVE),
    # vLLM's CLI (`vllm serve`), which serve starts where the module above is deprecated and a
    # distribution named vllm is installed (serve_worker.server_entry).
    Internal("serve", "vllm.entrypoints.cli.main", "main", "function", (), _SERVE),
    Internal(
        "serve", "vllm.entrypoints.cli.serve", "ServeSubcommand.name", "attribute", where=_SERVE
    ),
    Internal(
        "serve", "vllm.entrypoints.launchers.api_server.entry", "main", "function", (), _SERVE
    ),
    # The server's --host and --port flags (0.33 moved FrontendArgs to entrypoints.common).
    Internal(
        "serve",
        "vllm.entrypoints.launchers.cli_args",
        "FrontendArgs.host",
        "attribute",
        where=_SERVE,
        moved=("vllm.entrypoints.common.cli_args",),
    ),
    Internal(
        "serve",
        "vllm.entrypoints.launchers.cli_args",
        "FrontendArgs.port",
        "attribute",
        where=_SERVE,
        moved=("vllm.entrypoints.common.cli_args",),
    ),
    Internal(
        "serve", "vllm.engine.arg_utils", "EngineArgs.served_model_name", "attribute", where=_SERVE
    ),
    # store_true flags without a --no- form (serve_worker.STORE_TRUE_ONLY).
    Internal(
        "serve",
        "vllm.engine.arg_utils",
        "EngineArgs.aggregate_engine_logging",
        "attribute",
        where=_SERVE,
    ),
    Internal(
        "serve",
        "vllm.engine.arg_utils",
        "EngineArgs.data_parallel_multi_port_external_lb",
        "attribute",
        where=_SERVE,
    ),
    Internal("serve", "vllm.envs", "VLLM_SERVER_DEV_MODE", "attribute", where=_SERVE),
    Internal(
        "serve", "vllm.entrypoints.serve.instrumentator.health", "health", "function", None, _SERVE
    ),
    Internal(
        "serve",
        "vllm.entrypoints.serve.instrumentator.metrics",
        "attach_router",
        "function",
        None,
        f"{_SERVE}, {_LOADGEN}",
    ),
    Internal(
        "serve",
        "vllm.entrypoints.serve.dev.rpc.api_router",
        "collective_rpc",
        "function",
        None,
        _SERVE,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.api_router",
        "create_completion",
        "function",
        None,
        f"{_SERVE}, {_LOADGEN}",
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionRequest",
        "class",
        (
            "model",
            "prompt",
            "max_tokens",
            "temperature",
            "ignore_eos",
            "stream",
            "stream_options",
            "return_token_ids",
            "seed",
        ),
        _LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.generate.base.protocol",
        "StreamOptions",
        "class",
        ("include_usage",),
        _LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionStreamResponse.choices",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionStreamResponse.usage",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionStreamResponse.metrics",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionResponseStreamChoice.token_ids",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.openai.completion.protocol",
        "CompletionResponseStreamChoice.finish_reason",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.serve.engine.protocol",
        "UsageInfo.prompt_tokens",
        "attribute",
        where=_LOADGEN,
    ),
    Internal(
        "serve",
        "vllm.entrypoints.serve.engine.protocol",
        "UsageInfo.completion_tokens",
        "attribute",
        where=_LOADGEN,
    ),
    # Arrival times of `vllm bench serve`, reused; it yields (request, rate) pairs.
    Internal(
        "serve",
        "vllm.benchmarks.serve",
        "get_request",
        "function",
        ("input_requests", "request_rate", "burstiness"),
        _SERVE,
    ),
    # --- device environment ------------------------------------------------------------------
    Internal(
        "device environment",
        "vllm.envs",
        "VLLM_TARGET_DEVICE",
        "attribute",
        where="harness/execute/local.py",
    ),
    Internal(
        "device environment",
        "vllm.envs",
        "VLLM_CPU_KVCACHE_SPACE",
        "attribute",
        where="harness/execute/local.py",
    ),
    Internal(
        "device environment",
        "vllm.envs",
        "VLLM_CPU_OMP_THREADS_BIND",
        "attribute",
        where="harness/execute/local.py",
    ),
    # --- change classifier (plan, bisect: vLLM read as source) ------------------------------
    # Where code runs, by package (classify.WORKER_DIRS, ELSEWHERE, KV_CONNECTOR_DIR,
    # COMPILED_DIRS).
    Internal("change classifier", "vllm.v1.spec_decode", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.worker", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.sample", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.model_executor", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.model_executor.models", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.model_executor.layers", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.attention", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.distributed", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.distributed.kv_transfer", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.lora", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.core", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.engine", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.engine", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.entrypoints", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.executor", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.metrics", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.benchmarks", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.config", "", "module", where=_CLASSIFY),
    Internal("change classifier", "vllm.v1.spec_decode.metrics", "", "module", where=_CLASSIFY),
    Internal(
        "change classifier", "vllm.model_executor.models.registry", "", "module", where=_CLASSIFY
    ),
    Internal(
        "change classifier",
        "vllm.distributed.device_communicators.shm_broadcast",
        "MessageQueue",
        "class",
        where=_CLASSIFY,
    ),
    # KV connectors: the scheduler-side methods (below the "Scheduler-side methods" banner of
    # KVConnectorBase_V1, and SupportsHMA's) run in the engine core.
    Internal(
        "change classifier",
        "vllm.distributed.kv_transfer.kv_connector.v1.base",
        "KVConnectorBase_V1",
        "class",
        where=f"{_SOURCE}, {_CLASSIFY}",
    ),
    Internal(
        "change classifier",
        "vllm.distributed.kv_transfer.kv_connector.v1.base",
        "SupportsHMA",
        "class",
        where=f"{_SOURCE}, {_CLASSIFY}",
    ),
    Internal(
        "change classifier",
        "vllm.distributed.kv_transfer.kv_connector.v1.base",
        "KVConnectorRole.SCHEDULER",
        "attribute",
        where=_CLASSIFY,
    ),
    # Collectives Dynamo inlines into the compiled forward (classify.INLINED_COLLECTIVES).
    Internal(
        "change classifier",
        "vllm.distributed.communication_op",
        "tensor_model_parallel_all_reduce",
        "function",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.communication_op",
        "tensor_model_parallel_all_gather",
        "function",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.communication_op",
        "tensor_model_parallel_reduce_scatter",
        "function",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator.all_reduce",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator.all_gather",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator.reduce_scatter",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator._all_reduce_out_place",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator._all_gather_out_place",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator._reduce_scatter_out_place",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.parallel_state",
        "GroupCoordinator.use_custom_op_call",
        "attribute",
        where=_CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.platforms.interface",
        "Platform.use_custom_op_collectives",
        "method",
        (),
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.device_communicators.cpu_communicator",
        "CpuCommunicator.all_reduce",
        "method",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.distributed.device_communicators.cpu_communicator",
        "CpuCommunicator.all_gather",
        "method",
        None,
        _CLASSIFY,
    ),
    # Run eagerly on the forward's output (classify.OUTSIDE_COMPILED_*).
    Internal(
        "change classifier",
        "vllm.model_executor.layers.logits_processor",
        "LogitsProcessor",
        "class",
        where=_CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.model_executor.layers.logits_processor",
        "LogitsProcessor.get_top_k_tokens",
        "method",
        None,
        _CLASSIFY,
    ),
    # Decorators the classifier recognizes by name.
    Internal("change classifier", "vllm.config.utils", "config", "function", None, _CLASSIFY),
    Internal(
        "change classifier",
        "vllm.compilation.decorators",
        "support_torch_compile",
        "function",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.model_executor.warmup.jit_warmup_triton_helper",
        "triton_kernel_dispatcher_with_warmup",
        "function",
        None,
        _CLASSIFY,
    ),
    Internal(
        "change classifier",
        "vllm.config.compilation",
        "CompilationConfig.mode",
        "attribute",
        where=_CLASSIFY,
    ),
    # --- breakable CUDA graphs (plan: vLLM read as source, harness/plan/breakable.py) --------
    # The architectures on by default per platform (the NVIDIA branch, or the last return),
    # VllmConfig's switch (the env variable first, then the defaults, then batch invariance).
    Internal(
        "breakable CUDA graphs",
        "vllm.config.vllm",
        "default_breakable_cudagraph_architectures",
        "function",
        (),
        _BREAKABLE,
    ),
    Internal(
        "breakable CUDA graphs",
        "vllm.config.vllm",
        "DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES",
        "attribute",
        where=_BREAKABLE,
    ),
    Internal(
        "breakable CUDA graphs",
        "vllm.config.vllm",
        "VllmConfig._maybe_enable_breakable_cudagraph",
        "method",
        (),
        _BREAKABLE,
    ),
    Internal(
        "breakable CUDA graphs",
        "vllm.config.vllm",
        "VllmConfig._uses_breakable_cudagraph_for_batch_invariance",
        "method",
        (),
        _BREAKABLE,
    ),
    Internal(
        "breakable CUDA graphs",
        "vllm.envs",
        "VLLM_USE_BREAKABLE_CUDAGRAPH",
        "attribute",
        where=_BREAKABLE,
    ),
    Internal(
        "breakable CUDA graphs", "vllm.envs", "VLLM_BATCH_INVARIANT", "attribute", where=_BREAKABLE
    ),
    # --- built-in models ---------------------------------------------------------------------
    # config.json architectures ["MedusaModel"] -> ("medusa", "Medusa"); an EAGLE draft's
    # LlamaForCausalLM -> EagleLlamaForCausalLM ("llama_eagle") under method "eagle".
    Internal(
        "built-in models",
        "vllm.model_executor.models.registry",
        "_SPECULATIVE_DECODING_MODELS",
        "attribute",
        where="harness/engine/models.py, harness/config/catalog.py",
    ),
    Internal(
        "built-in Medusa model",
        "vllm.model_executor.models.medusa",
        "Medusa",
        "class",
        where="harness/engine/models.py, harness/engine/fit.py",
    ),
    Internal(
        "built-in models",
        "vllm.model_executor.models.llama_eagle",
        "EagleLlamaForCausalLM",
        "class",
        where="harness/engine/models.py, harness/engine/fit.py",
    ),
    # --- selftest overlay ---------------------------------------------------------------------
    # Host-side functions each runner calls on every drafting step, outside any CUDA graph:
    # the selftest overlays one with a change that changes nothing (harness.plan.selftest_probes).
    Internal(
        "selftest overlay",
        "vllm.v1.spec_decode.llm_base_proposer",
        "SpecDecodeBaseProposer.propose",
        "method",
        where=_SELFTEST,
        runner="V1",
    ),
    Internal(
        "selftest overlay",
        "vllm.v1.worker.gpu.spec_decode.utils",
        "DraftTokensHandler.set_draft_tokens",
        "method",
        where=_SELFTEST,
        runner="V2",
    ),
)
# The selftest's overlay targets, in the order it tries them.
SELFTEST_HOST_SIDE: tuple[Internal, ...] = tuple(
    i for i in INTERNALS if i.feature == "selftest overlay"
)
