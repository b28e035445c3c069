"""The metric catalogue: every metric specbench reports, in one place. Each entry says its
name and label, unit, direction, whether a count fixes it (exact) or a clock times it (noisy),
where its values come from, and whether a gate, a precision run or a scenario's primary metric
may name it. Config validates against it, results compute it, analysis and present read it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from harness.config.latency import LABELS, p_word, parse_percentile_key

# Where a metric's values come from.
REQUESTS = "vLLM's request outputs (token counts, arrival and token times) and the pass's clock"
COUNTERS = "vLLM's spec-decode counters (SpecDecodingStats), per pass"
PER_REQUEST = "vLLM's per-request spec-decode metrics (per_request_spec_decode_metrics)"
STEP_TIMER = "specbench's step timer in vLLM's worker (harness.engine.steptimes)"
STREAM = "the serve stream's chunks, per request"
SLO = "the request outputs against the scenario's slo: objectives"
ADJUSTED = "the comparison: output throughput by a part the change leaves alone"
SOURCES = (REQUESTS, COUNTERS, PER_REQUEST, STEP_TIMER, STREAM, SLO, ADJUSTED)


@dataclass(frozen=True)
class MetricDef:
    """One reported metric."""

    key: str  # column in passes_frame
    label: str  # as in the PR tables
    higher_is_better: bool
    delta: Literal["relative", "points"] = "relative"
    request_column: str | None = None  # per-request column it summarises, if any
    stat: str | None = None  # "mean", "median" or "pNN" (p99, p99.9)
    decimals: int = 2
    unit: str = ""  # of the value itself ("%" for a rate; a delta's unit comes from `delta`)
    # passes_frame columns of integer counts that fix the value: where they are the same in
    # every pass of both arms, the delta is known exactly (harness.analysis.compare).
    counts: tuple[str, ...] = ()
    source: str = ""  # where its values come from (one of SOURCES)
    gate: bool = False  # a gate may name it (gates.metrics)
    primary: bool = False  # a scenario may name it as its primary metric

    @property
    def exact(self) -> bool:
        """Fixed by integer counts (known exactly when they are the same in every unit),
        rather than timed by a clock."""
        return bool(self.counts)

    def format_value(self, value: float, digits: int = 4) -> str:
        """The value with its unit, to `digits` significant digits: '31.63%', '1.613 tokens'."""
        return f"{value:.{digits}g}" + (
            self.unit if self.unit == "%" else f" {self.unit}" if self.unit else ""
        )


def _group(
    source: str, *metrics: MetricDef, gate: bool = False, primary: bool = False
) -> tuple[MetricDef, ...]:
    """Metrics that share a source and the roles they may play."""
    return tuple(replace(m, source=source, gate=gate, primary=primary) for m in metrics)


def _latency(key: str, label: str, column: str, stat: str) -> MetricDef:
    return MetricDef(key, label, False, request_column=column, stat=stat, unit="ms")


# The parts of a pass's time (PassRecord.step_times), per engine step or per pass: gateable
# and targetable by a precision run when the scenario times its steps; never a primary metric.
COMPONENT_METRICS: tuple[MetricDef, ...] = _group(
    STEP_TIMER,
    MetricDef("draft_ms_per_step", "Draft time per step (ms)", False, unit="ms", decimals=3),
    # The drafter's time over the verification forward's, in the same pass: a machine that
    # runs a whole pass slower moves both, so the ratio keeps the drafter's own change with a
    # fraction of the noise (it reads a change of the forward too: its own row says whether
    # that moved).
    MetricDef("draft_per_forward", "Draft time per forward (ratio)", False, decimals=4),
    MetricDef(
        "forward_ms_per_step", "Verification forward per step (ms)", False, unit="ms", decimals=3
    ),
    MetricDef("rest_ms_per_step", "Rest of the step (ms)", False, unit="ms", decimals=3),
    MetricDef("outside_ms_per_pass", "Outside steps per pass (ms)", False, unit="ms"),
    MetricDef("steps_per_pass", "Engine steps per pass", False, unit="steps", decimals=1),
    gate=True,
)

# Per-request acceptance: every completed request's verify steps by accepted draft tokens.
REQUEST_ACCEPTANCE = ("spec_histograms_digest",)


def _acceptance_length(stat: str, label: str) -> MetricDef:
    """Per request (vLLM's per_request_spec_decode_metrics): the spread across requests."""
    return MetricDef(
        f"{stat}_acceptance_length",
        f"{label} acceptance length (per request)",
        True,
        request_column="acceptance_length",
        stat=stat,
        unit="tokens",
        counts=REQUEST_ACCEPTANCE,
    )


# The output-throughput delta with the machine's speed taken out by a part of the pass the
# change leaves alone (harness.analysis.adjusted; one-engine runs with step times): no column
# of the per-pass frame, the comparison builds its row. A precision run may target it.
ADJUSTED_METRIC = "output_throughput_adjusted"

# The rows of the seed PR tables, in their order, then the extra latency statistics.
METRICS: tuple[MetricDef, ...] = (
    *_group(
        REQUESTS,
        MetricDef("output_throughput", "Output throughput (tok/s)", True, unit="tok/s"),
        gate=True,
        primary=True,
    ),
    *_group(
        REQUESTS,
        MetricDef("total_throughput", "Total throughput (tok/s)", True, unit="tok/s"),
        MetricDef("request_throughput", "Request throughput (req/s)", True, unit="req/s"),
        gate=True,
        primary=True,
    ),
    *_group(
        ADJUSTED,
        MetricDef(ADJUSTED_METRIC, "Output throughput, speed-adjusted (tok/s)", True, unit="tok/s"),
    ),
    *_group(
        COUNTERS,
        MetricDef(
            "acceptance_rate",
            "Acceptance rate (%)",
            True,
            "points",
            unit="%",
            counts=("num_accepted_tokens", "num_draft_tokens"),
        ),
        # A length in tokens per verify step (bonus token included), never a percentage.
        MetricDef(
            "mean_acceptance_length",
            "Mean acceptance length",
            True,
            unit="tokens",
            counts=("num_accepted_tokens", "num_drafts"),
        ),
        gate=True,
        primary=True,
    ),
    *_group(
        PER_REQUEST,
        _acceptance_length("p10", "P10"),
        _acceptance_length("median", "Median"),
        _acceptance_length("p90", "P90"),
    ),
    *_group(
        REQUESTS,
        _latency("mean_tpot_ms", "Mean TPOT (ms)", "tpot_ms", "mean"),
        _latency("mean_itl_ms", "Mean ITL (ms)", "itl_ms", "mean"),
        _latency("mean_ttft_ms", "Mean TTFT (ms)", "ttft_ms", "mean"),
        _latency("mean_e2el_ms", "Mean E2EL (ms)", "e2el_ms", "mean"),
        _latency("median_tpot_ms", "Median TPOT (ms)", "tpot_ms", "median"),
        _latency("p99_tpot_ms", "P99 TPOT (ms)", "tpot_ms", "p99"),
        _latency("median_ttft_ms", "Median TTFT (ms)", "ttft_ms", "median"),
        _latency("p99_ttft_ms", "P99 TTFT (ms)", "ttft_ms", "p99"),
        _latency("median_e2el_ms", "Median E2EL (ms)", "e2el_ms", "median"),
        _latency("p99_e2el_ms", "P99 E2EL (ms)", "e2el_ms", "p99"),
        gate=True,
        primary=True,
    ),
    # With the scenario's slo: requests meeting every objective, per second of the pass (vLLM's
    # request_goodput) and as a share of the pass's requests (failed ones count as missed).
    *_group(
        SLO,
        MetricDef("goodput", "Goodput (req/s)", True, unit="req/s"),
        MetricDef("slo_attainment", "SLO attainment (%)", True, "points", unit="%"),
        primary=True,
    ),
    # Serve mode: how many tokens a streamed chunk carried (1 + accepted drafts per step,
    # unless the server merged steps); why ITL exceeds TPOT under speculation.
    *_group(
        STREAM,
        MetricDef("tokens_per_chunk", "Tokens per streamed chunk", True, unit="tokens"),
        gate=True,
        primary=True,
    ),
    # Where a pass's time went, from the step timer in vLLM's worker (engine.steptimes; on in
    # launches that time their steps): each arm's value with its interval on the design's
    # unit. Draft time is the proposer's; an arm without speculation has none.
    *COMPONENT_METRICS,
)
POSITION_PREFIX = "acceptance_pos_"
POSITIONS = f"{POSITION_PREFIX}*"  # every draft position's acceptance, in a gate


def position_metric(key: str) -> MetricDef:
    """The acceptance rate at one draft position (`acceptance_pos_<i>`): accepted tokens at
    that position per draft step, in %."""
    pos = int(key.rsplit("_", 1)[1])
    return MetricDef(
        key,
        f"Acceptance at position {pos} (%)",
        True,
        "points",
        unit="%",
        counts=(f"num_accepted_pos_{pos}", "num_drafts"),
        source=COUNTERS,
        gate=True,
    )


def percentile_metric(key: str) -> MetricDef | None:
    """A latency percentile by vLLM's key (`p99.9_itl_ms`, `median_itl_ms`); None for any
    other key."""
    found = parse_percentile_key(key)
    if found is None:
        return None
    name, q = found
    stat = "median" if q == 50 else f"p{p_word(q)}"
    label = f"{stat.capitalize()} {LABELS[name]} (ms)"
    # Any percentile may be gated (gates.metrics); a precision run targets the listed ones.
    return replace(_latency(key, label, f"{name}_ms", stat), source=REQUESTS, gate=True)


def metric_def(key: str) -> MetricDef | None:
    """The catalogue's entry for a metric key (a draft position's and a latency percentile's
    included); None if unknown."""
    if key.startswith(POSITION_PREFIX) and key[len(POSITION_PREFIX) :].isdigit():
        return position_metric(key)
    return next((m for m in METRICS if m.key == key), None) or percentile_metric(key)


# The keys each role may name, read from the catalogue.
STEP_PART_METRICS = tuple(m.key for m in COMPONENT_METRICS)
# A gate (globs allowed: acceptance_pos_* for every draft position).
GATEABLE_METRICS = (
    *(m.key for m in METRICS if m.gate and m.source != STEP_TIMER),
    POSITIONS,
    *STEP_PART_METRICS,
)
# A precision run (until: mde): one row each, never a glob.
PRECISION_METRICS = (*(k for k in GATEABLE_METRICS if k != POSITIONS), ADJUSTED_METRIC)
# A scenario's primary metric (one row, never a glob): the gateable ones first.
PRIMARY_METRICS = (
    *(m.key for m in METRICS if m.primary and m.gate),
    *(m.key for m in METRICS if m.primary and not m.gate),
)
