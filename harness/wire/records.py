"""Typed records a worker sends back and the store keeps: raw per-request samples, per pass.

Every summary is computed from these (harness.results.metrics); nothing derived is stored
in their place.

SCHEMA_VERSION history (bump on any change a reader must know about; add a step to
harness.wire.manifest.Manifest.migrate when older files need it):
  1 - first version: WorkerResult with passes of RequestRecords and SpecDecodeCounters.
  2 - serve mode: RequestRecord.chunk_tokens and .sent_s, WorkerResult.server,
      RunRecord.server_log_file; plan RunSpecs gain mode and serve. All optional: version 1
      files read unchanged.
  3 - one-engine design: PassRecord.arm, .block and .impl_reports (per-pass proof); plan
      RunSpecs gain design, arms, block_order, blocks, precision; WorkerResult.stopped says
      why a precision run ended. All optional: older files read unchanged.
  4 - sweeps: RunRecord.cell and .cell_values; plan RunSpecs gain cell and cell_values, the
      plan its cells. Executors: RunRecord.node (where a Ray task ran the launch, with that
      node's fingerprint). All optional: older files read unchanged.
  5 - overlays: plan RunSpecs gain overlay (a variant's own change, every arm's code), the
      plan proof_labels and overlays (the classification); one-engine launches warm each arm
      until checked settled: WorkerResult.warmup_passes (kept, never measured) and
      .warmup_blocks / .warmup_capped. All optional: older files read unchanged.
  6 - RunRecord.arms: the arms a launch hosted (a shared one-engine launch, all of them), so
      no reader recovers them from its name; records from before it get them from the
      variant they name (a shared launch's name joins its arms with '+', which no variant
      name can contain).
  7 - per-request acceptance: RequestRecord.spec_histogram and .spec_draft_tokens (vLLM's
      per_request_spec_decode_metrics: verify steps by accepted draft tokens). Optional:
      older files read unchanged, without per-request acceptance.
  8 - no-speculation arms: PassRecord.step_times (draft, forward and the rest of the engine
      steps, timed in vLLM's worker); plan RunSpecs gain step_times. Datasets with categories:
      RequestRecord.category. Optional: older files read unchanged.
  9 - one-engine blocks are oriented at random (A B B A or B A A B, schedule.block_arms):
      WorkerResult.block_seed, the launch's draw. Optional: older files, whose odd blocks
      mirrored the even ones, read unchanged.
  10 - the platform: WorkerResult.platform (model runner, compilation and CUDA-graph modes,
      async scheduling, attention backends, as vLLM's worker read them) and .left_out (the
      optional parts the launch ran without there), and the manifest's launch entries with
      the platform. PassRecord.foreign_cpu and .load1: what else loaded the machine during
      the pass. Optional: older files read unchanged, without a platform. WorkerResult
      .prompts_as: whether text prompts were rendered with the chat template (optional).
  11 - profiles: WorkerResult.profiled, the passes profiled per arm after the measured ones
      (their trace files under the run's profiles/). Optional: older files read unchanged.
  12 - long launches: WorkerResult.passes_in_file, the measured passes a worker kept only in
      its launch's pass file (the parent reads them back into `passes`, so stored records
      say 0), and .step_times_withdrawn (the step timer's parts did not add up: every
      pass's step_times is None). Optional: older files read unchanged.
  13 - why a precision launch stopped is facts: WorkerResult.stop (PrecisionStop: the
      reason, the blocks, the target or the limit it met), worded by harness.present. Files
      before it said it in words (WorkerResult.stopped), which readers still show as written.
  14 - the speed probe: StepTimes.probes and .probe_s (a fixed Python loop timed before
      every engine step, the speed-adjusted row's covariate); plan RunSpecs
      gain speed_probe. Optional: older files read unchanged, without a probe.
  15 - the probe's twin: StepTimes.twins, .twin_s, .twin_wait_s and .probe_over_twin (the same
      loop in a process of its own, run beside every 4th probe; harness.engine.twin).
      Optional: older files read unchanged, without a twin.
  16 - the KV cache's real capacity: Platform.kv_extensible (vLLM sized it after warm-up:
      0.34's extensible KV cache) and .kv_override (num_gpu_blocks_override); under the
      extensible cache Platform.kv_blocks is the size committed after warm-up, never the
      reservation before it. Optional: older files read unchanged (their kv_blocks is what
      vLLM held at initialize_from_config).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.wire.platform import Platform

SCHEMA_VERSION = 16

RunStatus = Literal["ok", "failed", "timeout", "interrupted"]


class Record(BaseModel):
    """Base for records: unknown keys are errors, so a worker writing garbage is caught."""

    model_config = ConfigDict(extra="forbid")


class RequestRecord(Record):
    """One measured request, as the engine saw it."""

    index: int = Field(description="Position of the prompt in the workload.")
    prompt_tokens: int = Field(description="Prompt length in tokens.")
    output_tokens: int = Field(description="Generated tokens.")
    ttft_s: float | None = Field(description="Time to first token (s) since arrival.")
    e2el_s: float | None = Field(description="End-to-end latency (s) since arrival.")
    itl_s: list[float] | None = Field(
        default=None, description="Gaps between streamed chunks (s); None where not streamed."
    )
    chunk_tokens: list[int] | None = Field(
        default=None,
        description="Tokens each streamed chunk carried, first chunk included "
        "(several per chunk when drafts are accepted); None where not streamed.",
    )
    sent_s: float | None = Field(
        default=None,
        description="When the request was sent, seconds after its pass started (serve mode).",
    )
    finish_reason: str | None = Field(description="Why generation stopped.")
    output_token_ids: list[int] = Field(description="Generated token ids (for output parity).")
    error: str | None = Field(default=None, description="Set when the request failed.")
    spec_histogram: list[int] | None = Field(
        default=None,
        description="Speculative decoding, per request (vLLM's "
        "per_request_spec_decode_metrics): the verify steps that accepted j draft tokens, "
        "at index j (0..k).",
    )
    spec_draft_tokens: int | None = Field(
        default=None, description="Draft tokens proposed for this request."
    )
    category: str | None = Field(
        default=None,
        description="The prompt's category in its dataset (Spec-Bench, "
        "SPEED-Bench, a jsonl with 'category'); None where it has none.",
    )


class SpecDecodeCounters(Record):
    """Speculative-decoding counter deltas over exactly one measured pass."""

    num_drafts: int = Field(description="Draft steps (verify steps with drafts).")
    num_draft_tokens: int = Field(description="Draft tokens proposed.")
    num_accepted_tokens: int = Field(description="Draft tokens accepted.")
    accepted_per_pos: list[int] = Field(description="Accepted tokens at each draft position.")


class StepTimes(Record):
    """Model-runner steps of one measured pass, timed in vLLM's worker process (TP rank 0):
    harness.engine.steptimes. rest = step - forward - draft."""

    steps: int = Field(description="Engine steps (each runs the target model's forward once).")
    step_s: float = Field(description="Time in the steps: execute_model + sample_tokens.")
    forward_s: float = Field(
        description="The target model's forward (with speculation, the "
        "verification forward over k + 1 tokens per request)."
    )
    draft_s: float = Field(description="The drafter's work (propose_draft_token_ids).")
    probes: int | None = Field(
        default=None,
        description="Speed probes run (one before each engine step; None: the launch ran none).",
    )
    probe_s: float | None = Field(
        default=None,
        description="Their time: a fixed Python loop no change to vLLM runs, "
        "timed on the host (harness.engine.steptimes.install_probe).",
    )
    twins: int | None = Field(
        default=None,
        description="Probes the twin ran beside (every TWIN_EVERY-th; harness.engine.twin); "
        "None: no twin, or one that did not answer every time.",
    )
    twin_s: float | None = Field(
        default=None,
        description="The same loop's time in the probe's twin, a process of its own run "
        "beside those probes; None where twins is.",
    )
    twin_wait_s: float | None = Field(
        default=None,
        description="The worker's wait for the twin's answer before each probe (specbench's "
        "time, outside the steps, like probe_s; None: no probe).",
    )
    probe_over_twin: float | None = Field(
        default=None,
        description="The probe's time over its twin's, the geometric mean over the pass's "
        "pairs (the probes the twin ran beside), each pair's log ratio clipped at "
        "+-PAIR_CLIP (harness.engine.steptimes): the machine's speed cancels in it; None "
        "where twin_s is.",
    )


class ProfiledPass(Record):
    """One pass run under vLLM's torch profiler, after the measured ones (never measured)."""

    arm: str = Field(description="The arm active during the pass.")
    index: int = Field(description="Its number among the arm's profiled passes.")
    prefix: str = Field(description="The trace files' name prefix (LLM.start_profile).")
    duration_s: float = Field(description="Its wall time, profiler on.")
    paths: list[str] = Field(
        default_factory=list, description="The code paths vLLM's processes reported for it."
    )


class ImplReport(Record):
    """What a vLLM process (engine core or TP worker) says actually ran for a swap."""

    implementation: str
    choice: str
    path: str | None = Field(description="The first code path that executed.")
    paths: dict[str, int] = Field(default_factory=dict, description="Code path -> calls.")
    matches_choice: bool | None = Field(
        default=None, description="Every path that ran is one the chosen implementation takes."
    )
    pid: int
    ppid: int | None = None
    tp_rank: int | None = None
    calls: int | None = None
    first_call_unix: float | None = None
    written_unix: float | None = None
    error: str | None = Field(default=None, description="Why the swap could not be installed.")
    details: dict[str, object] = Field(
        default_factory=dict, description="Further facts the process reported (tp_size, ...)."
    )

    @classmethod
    def from_raw(cls, data: dict[str, object]) -> ImplReport:
        """A report as the plugin wrote it: known keys are fields, the rest are details."""
        known = {k: v for k, v in data.items() if k in cls.model_fields}
        details = {k: v for k, v in data.items() if k not in cls.model_fields}
        return cls.model_validate({**known, "details": details})


class PassRecord(Record):
    """One measured pass over the workload inside an engine launch."""

    repeat: int = Field(description="Pass index within the launch (0-based).")
    started_unix: float = Field(description="Wall clock at the start of the pass.")
    duration_s: float = Field(description="Wall time of the pass (all requests).")
    requests: list[RequestRecord] = Field(description="Per-request samples.")
    spec_decode: SpecDecodeCounters | None = Field(
        description="Counter deltas for this pass; None without speculation."
    )
    workload_hash: str = Field(description="Hash of the prompts of this pass.")
    arm: str | None = Field(
        default=None, description="one-engine design: the variant active in this pass."
    )
    block: int | None = Field(
        default=None, description="one-engine design: the balanced block this pass belongs to."
    )
    impl_reports: list[ImplReport] | None = Field(
        default=None,
        description="one-engine design: what each vLLM process reported running "
        "during exactly this pass (None where no swap is switched).",
    )
    foreign_cpu: float | None = Field(
        default=None,
        description="The share of the machine's CPUs (0..1) that processes "
        "other than the launch's own kept busy during the pass (/proc; "
        "harness.engine.contention); None where it could not be read.",
    )
    load1: float | None = Field(
        default=None, description="The 1-minute load average when the pass ended."
    )
    step_times: StepTimes | None = Field(
        default=None,
        description="Where the pass's engine steps spent their time (runs with a "
        "no-speculation arm; None otherwise).",
    )


class ServerInfo(Record):
    """The vLLM OpenAI server of a serve-mode launch."""

    url: str = Field(description="Base URL the client used (127.0.0.1, a free port).")
    command: list[str] = Field(description="The server's command line.")
    pid: int | None = Field(default=None, description="The server process id.")
    healthy_after_s: float | None = Field(
        default=None, description="Launch to the first 200 from /health; None if never."
    )
    exit_code: int | None = Field(
        default=None, description="How the server process ended (negative: signal)."
    )
    died: bool = Field(
        default=False, description="The server exited on its own before the harness stopped it."
    )
    port_retries: int = Field(
        default=0,
        description="Starts retried on a new port because another process bound "
        "the chosen one first.",
    )


class Timings(Record):
    """Where a worker's wall time went (seconds)."""

    startup_s: float = Field(
        default=0.0, description="Process spawn to the worker's main (Python + harness imports)."
    )
    import_s: float = Field(default=0.0, description="Importing vLLM and torch.")
    models_s: float = Field(default=0.0, description="Resolving/building local models.")
    engine_start_s: float = Field(
        default=0.0, description="LLM(...) construction; serve mode: server launch to /health."
    )
    warmup_s: float = Field(default=0.0, description="Warm-up requests.")
    measure_s: float = Field(default=0.0, description="Measured passes, summed.")
    shutdown_s: float = Field(default=0.0, description="Engine (or server) shutdown.")
    finish_s: float = Field(
        default=0.0, description="After shutdown: reading reports, building records."
    )


class PrecisionStop(Record):
    """Why a precision launch stopped adding blocks (schedule.drive_shared_launch)."""

    reason: Literal["target", "max_blocks", "budget"] = Field(
        description="target: the precision target was reached at a look; max_blocks: the "
        "block limit; budget: the next block would have ended past budget_s."
    )
    blocks: int = Field(description="Blocks measured when it stopped.")
    metric: str | None = Field(
        default=None,
        description="until: mde: the row whose MDE was the target; None: until: gates "
        "(every gated metric's MDE at most its tolerance).",
    )
    mde: float | None = Field(default=None, description="until: mde: the target MDE (fraction).")
    reached_mde: float | None = Field(
        default=None,
        description="target: the worst MDE of the row the looks showed (`metric`, "
        "else output_throughput) at the stop; None: not estimable.",
    )
    max_blocks: int | None = Field(default=None, description="max_blocks: the limit.")
    budget_s: float | None = Field(default=None, description="budget: the budget (s).")

    @property
    def shown_metric(self) -> str:
        """The row whose MDE the looks showed: the targeted one, else output throughput."""
        return self.metric or "output_throughput"


class WorkerResult(Record):
    """Everything one worker process sends back (also written for failures it caught)."""

    schema_version: int = SCHEMA_VERSION
    run_key: str
    status: RunStatus
    error: str | None = None
    passes: list[PassRecord] = Field(default_factory=list)
    impl_reports: list[ImplReport] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    engine_versions: dict[str, str] = Field(
        default_factory=dict, description="vllm/torch versions as imported in the worker."
    )
    worker_pid: int | None = Field(
        default=None, description="The worker's own pid (reports come from other processes)."
    )
    resolved_models: dict[str, str] = Field(
        default_factory=dict, description="Model names -> folders the engine loaded."
    )
    server: ServerInfo | None = Field(default=None, description="Serve mode: the server.")
    stop: PrecisionStop | None = Field(
        default=None, description="Precision runs: why the worker stopped adding blocks."
    )
    stopped: str | None = Field(
        default=None,
        description="Files before schema 13: `stop` in words, as the worker wrote them.",
    )
    warmup_passes: list[PassRecord] = Field(
        default_factory=list,
        description="One-engine: the warm-up blocks' passes, run until "
        "the arms' difference stopped settling (schedule.warm_until_settled); kept as raw "
        "records, never measured.",
    )
    warmup_blocks: int = Field(default=0, description="One-engine: warm-up blocks run.")
    warmup_capped: bool = Field(
        default=False, description="One-engine: warm-up hit its cap still settling."
    )
    block_seed: int | None = Field(
        default=None,
        description="One-engine: the seed of every block's orientation (A B B A "
        "or B A A B, drawn per block: schedule.block_arms).",
    )
    platform: Platform | None = Field(
        default=None,
        description="The platform vLLM's worker processes reported once the "
        "engine was built (rank 0's; the ranks agree, or the launch is refused).",
    )
    left_out: list[str] = Field(
        default_factory=list,
        description="Optional parts this launch ran without on its "
        "platform (an optional feature a platform declares it lacks), each with why and the "
        "ways out.",
    )
    profiled: list[ProfiledPass] = Field(
        default_factory=list, description="Passes profiled per arm after the measured ones."
    )
    prompts_as: str | None = Field(
        default=None,
        description="How the prompts were sent: rendered with the tokenizer's "
        "chat template, raw, or token ids (engine.chat); None in older files.",
    )
    passes_in_file: int = Field(
        default=0,
        ge=0,
        description="Measured passes kept only in the launch's pass file, not in `passes` "
        "(a worker's memory stays flat however long it measures); the parent reads them "
        "back, so a stored record says 0.",
    )
    step_times_withdrawn: bool = Field(
        default=False,
        description="The step timer's parts did not add up on this machine (the line is "
        "in left_out): no pass keeps its step_times.",
    )

    @model_validator(mode="after")
    def _stop_from_words(self) -> WorkerResult:
        if self.stop is None and self.stopped:  # written before schema 13
            self.stop = stop_from_words(self.stopped)
        return self


# How workers before schema 13 worded why a precision launch stopped (schedule.py then).
_TARGET_WORDS = re.compile(
    r"target reached \((?:(?P<gates>every gated metric's MDE <= its tolerance)|"
    r"(?:(?P<metric>\S+) )?MDE <= ±(?P<mde>[\d.]+)%)\) after (?P<blocks>\d+) blocks: "
    r"\S+ MDE (?:±(?P<reached>[\d.]+)%|not estimable yet)"
)
_MAX_WORDS = re.compile(r"max_blocks=(?P<limit>\d+) reached")
_BUDGET_WORDS = re.compile(
    r"time budget budget_s=(?P<budget>[\d.]+) spent after (?P<blocks>\d+) blocks"
)


def stop_from_words(words: str) -> PrecisionStop | None:
    """A pre-13 worker's words on why it stopped, as facts; None for words of no known form
    (the reader then shows them as written)."""
    if found := _MAX_WORDS.fullmatch(words):
        limit = int(found["limit"])
        return PrecisionStop(reason="max_blocks", blocks=limit, max_blocks=limit)
    if found := _BUDGET_WORDS.fullmatch(words):
        budget = float(found["budget"])
        return PrecisionStop(reason="budget", blocks=int(found["blocks"]), budget_s=budget)
    if found := _TARGET_WORDS.fullmatch(words):
        by_mde = found["gates"] is None
        return PrecisionStop(
            reason="target",
            blocks=int(found["blocks"]),
            metric=(found["metric"] or "output_throughput") if by_mde else None,
            mde=float(found["mde"]) / 100 if by_mde else None,
            reached_mde=float(found["reached"]) / 100 if found["reached"] else None,
        )
    return None


class RunRecord(Record):
    """The parent's record of one launch: the worker's result plus how the process ended."""

    run_key: str
    variant: str
    arms: list[str] = Field(
        default_factory=list,
        description="The variants this launch ran: [variant], or every "
        "arm of a shared one-engine launch.",
    )
    round: int
    order: int
    cell: str | None = Field(default=None, description="Sweeps: the cell's id ('c03').")
    cell_values: dict[str, Any] | None = Field(
        default=None, description="Sweeps: the cell's values (field path -> value)."
    )
    node: dict[str, Any] | None = Field(
        default=None,
        description="Where the launch ran when not on this machine (Ray): "
        "hostname, node id and the node's environment fingerprint.",
    )
    status: RunStatus
    exit_code: int | None = None
    wall_s: float = Field(description="Process wall time as the parent measured it.")
    error: str | None = None
    log_file: str | None = Field(default=None, description="Worker log, relative to the run.")
    log_tail: str | None = Field(default=None, description="Last lines of the log on failure.")
    server_log_file: str | None = Field(
        default=None, description="Serve mode: the vLLM server's log, relative to the run."
    )
    result: WorkerResult | None = None

    @model_validator(mode="after")
    def _arms(self) -> RunRecord:
        if not self.arms:  # written before schema 6 (see the history above)
            self.arms = self.variant.split("+")
        return self
