"""Records -> pandas: per-request rows and per-pass metrics.

Every number in a report is computed here from the stored raw records, for the metrics the
catalogue (harness.config.metrics) declares with their unit, direction and source.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from harness.config.latency import LATENCY_METRICS, parse_percentile_key

# The catalogue's names, for the modules that read metrics through this one.
from harness.config.metrics import COMPONENT_METRICS as COMPONENT_METRICS
from harness.config.metrics import METRICS as METRICS
from harness.config.metrics import POSITION_PREFIX as POSITION_PREFIX
from harness.config.metrics import REQUEST_ACCEPTANCE as REQUEST_ACCEPTANCE
from harness.config.metrics import MetricDef as MetricDef
from harness.config.metrics import metric_def as metric_def
from harness.config.metrics import percentile_metric as percentile_metric
from harness.config.metrics import position_metric as position_metric
from harness.config.scenario import LatencyPercentiles
from harness.wire.records import PassRecord, RequestRecord, RunRecord

if TYPE_CHECKING:
    from harness.config.scenario import SLO


_KEYS = frozenset(m.key for m in METRICS)


def chosen_percentiles(keys: Iterable[str]) -> tuple[MetricDef, ...]:
    """The latency percentiles among `keys` that METRICS does not already have (a scenario's
    metrics.keys(), a frame's columns): TTFT's, TPOT's, ITL's, E2EL's, each by percentile."""
    found = [(parse_percentile_key(k), k) for k in dict.fromkeys(keys) if k not in _KEYS]
    ordered = sorted((LATENCY_METRICS.index(f[0]), f[1], k) for f, k in found if f is not None)
    return tuple(m for *_, k in ordered if (m := percentile_metric(k)) is not None)


# What a scenario that chooses nothing reports beyond METRICS (median and P99 ITL).
DEFAULT_PERCENTILES = tuple(m.key for m in chosen_percentiles(LatencyPercentiles().keys()))


REQUEST_COLUMNS = [
    "run_key",
    "variant",
    "round",
    "cell",
    "repeat",
    "index",
    "prompt_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2el_ms",
    "chunks",
    "tokens_per_chunk",
    "sent_ms",
    "finish_reason",
    "error",
    "acceptance_length",
    "spec_steps",
    "spec_accepted",
    "spec_draft_tokens",
]


def _tpot_ms(ttft_s: float | None, e2el_s: float | None, output_tokens: int) -> float:
    """Time per output token after the first, as vLLM's serving benchmark defines it."""
    if ttft_s is None or e2el_s is None or output_tokens < 2:
        return float("nan")
    return (e2el_s - ttft_s) / (output_tokens - 1) * 1000.0


def request_acceptance(r: RequestRecord) -> tuple[float, int, int]:
    """One request's (acceptance length, verify steps, accepted draft tokens) from vLLM's
    per-request histogram; NaN, 0, 0 without one or with no verify step. The length counts the
    bonus token, as vLLM's mean_acceptance_length does."""
    hist = r.spec_histogram
    steps = sum(hist) if hist else 0
    if not hist or steps == 0:
        return float("nan"), 0, 0
    accepted = sum(j * count for j, count in enumerate(hist))
    return 1.0 + accepted / steps, steps, accepted


def measured_passes(runs: list[RunRecord]) -> Iterator[tuple[RunRecord, PassRecord]]:
    """Every measured pass of every launch that completed, with its launch, in file order."""
    for run in runs:
        if run.status == "ok" and run.result is not None:
            for p in run.result.passes:
                yield run, p


def requests_frame(runs: list[RunRecord]) -> pd.DataFrame:
    """One row per measured request of every successful launch."""
    rows = []
    for run, p in measured_passes(runs):
        for r in p.requests:
            itl = r.itl_s
            rows.append(
                {
                    "run_key": run.run_key,
                    "variant": p.arm or run.variant,
                    "round": run.round,
                    "cell": run.cell,
                    "repeat": p.repeat,
                    "index": r.index,
                    "prompt_tokens": r.prompt_tokens,
                    "output_tokens": r.output_tokens,
                    "ttft_ms": r.ttft_s * 1000.0 if r.ttft_s is not None else np.nan,
                    "tpot_ms": _tpot_ms(r.ttft_s, r.e2el_s, r.output_tokens),
                    # mean gap of this request; the pass's mean ITL weights every gap equally
                    "itl_ms": float(np.mean(itl)) * 1000.0 if itl else np.nan,
                    "e2el_ms": r.e2el_s * 1000.0 if r.e2el_s is not None else np.nan,
                    "chunks": len(r.chunk_tokens) if r.chunk_tokens is not None else np.nan,
                    "tokens_per_chunk": (
                        sum(r.chunk_tokens) / len(r.chunk_tokens) if r.chunk_tokens else np.nan
                    ),
                    "sent_ms": r.sent_s * 1000.0 if r.sent_s is not None else np.nan,
                    "finish_reason": r.finish_reason,
                    "error": r.error,
                    **dict(
                        zip(
                            ("acceptance_length", "spec_steps", "spec_accepted"),
                            request_acceptance(r),
                            strict=True,
                        )
                    ),
                    "spec_draft_tokens": (
                        r.spec_draft_tokens if r.spec_draft_tokens is not None else np.nan
                    ),
                }
            )
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def _stats(values: list[float], stats: list[str]) -> list[float]:
    """`stats` ("mean", "median", "pNN") of the finite values, NaN for none; the
    percentiles in one call (a pass's summaries were most of a precision look's time)."""
    finite = np.asarray([v for v in values if v == v], dtype=float)  # NaN != NaN
    if finite.size == 0:
        return [float("nan")] * len(stats)
    qs = [float(s[1:]) for s in stats if s not in ("mean", "median")]
    pct = iter(np.percentile(finite, qs).tolist() if qs else [])
    return [
        float(finite.mean())
        if s == "mean"
        else float(np.median(finite))
        if s == "median"
        else next(pct)
        for s in stats
    ]


def _stat(values: list[float], stat: str) -> float:
    return _stats(values, [stat])[0]


def meets_slo(r: RequestRecord, slo: SLO) -> bool:
    """`vllm bench serve --goodput`'s good request (vllm/benchmarks/serve.py,
    calculate_metrics): completed, and TTFT, TPOT and E2EL each at most its objective where
    one is given, TPOT counted as 0 for an output of one token."""
    if r.error is not None or r.ttft_s is None or r.e2el_s is None:
        return False
    tpot = _tpot_ms(r.ttft_s, r.e2el_s, r.output_tokens) if r.output_tokens > 1 else 0.0
    return all(
        value <= objective
        for value, objective in (
            (r.ttft_s * 1000.0, slo.ttft_ms),
            (tpot, slo.tpot_ms),
            (r.e2el_s * 1000.0, slo.e2el_ms),
        )
        if objective is not None
    )


@lru_cache(maxsize=16)
def _by_column(percentiles: tuple[str, ...]) -> dict[str, list[MetricDef]]:
    """The per-request metrics (METRICS' and the chosen percentiles') by the request column
    they summarise."""
    out: dict[str, list[MetricDef]] = {}
    for m in (*METRICS, *chosen_percentiles(percentiles)):
        if m.request_column is not None and m.stat is not None:
            out.setdefault(m.request_column, []).append(m)
    return out


# A pass's own row (what passes_frame computes from its requests), kept by whoever looks at a
# growing list of passes again and again: id(pass) -> (the pass, its row).
PassRows = dict[int, tuple[PassRecord, dict[str, object]]]


def pass_head(
    run_key: str,
    variant: str,
    round: int,
    cell: str | None,
    order: int,
    block: int | None,
    repeat: int,
) -> dict[str, object]:
    """The columns passes_frame puts before each pass's own row: the launch (engine process)
    and, in a shared launch, the balanced block."""
    return {
        "run_key": run_key,
        "variant": variant,
        "round": round,
        "cell": cell,
        "order": order,
        "launch": order,
        "block": block,
        "repeat": repeat,
    }


class _Chunks:
    """Values appended into fixed arrays of CHUNK each, allocated once and never grown: a
    column that grows for hours leaves no freed blocks behind it (a growing array's
    reallocations did, and the heap kept them)."""

    CHUNK = 1 << 16

    __slots__ = ("dtype", "chunks", "n")

    def __init__(self, dtype: type | str) -> None:
        self.dtype = dtype
        self.chunks: list[np.ndarray] = []
        self.n = 0

    def append(self, value: object) -> None:
        at = self.n % self.CHUNK
        if at == 0:
            self.chunks.append(np.empty(self.CHUNK, dtype=self.dtype))
        self.chunks[-1][at] = value
        self.n += 1

    def array(self) -> np.ndarray:
        if not self.chunks:
            return np.empty(0, dtype=self.dtype)
        out: np.ndarray = np.concatenate(self.chunks)[: self.n]
        return out


class _Column:
    """One column of a PassTable: ints while they are all ints, else the values (a value
    equal to the one before shares its object: a launch's run key, arm, workload hash)."""

    __slots__ = ("ints", "items", "last")

    def __init__(self) -> None:
        self.ints = _Chunks(np.int64)
        self.items: _Chunks | None = None
        self.last: object = None

    def add(self, value: object) -> None:
        if (
            self.items is None
            and isinstance(value, (int, np.integer))
            and not isinstance(value, bool)
        ):
            self.ints.append(int(value))
            return
        if self.items is None:
            self.items = _Chunks(object)
            for old in self.ints.array().tolist():
                self.items.append(old)
        if isinstance(value, str) and value == self.last:
            value = self.last
        self.items.append(value)
        self.last = value

    def values(self) -> object:
        return self.ints.array() if self.items is None else self.items.array().tolist()


def _is_float(value: object) -> bool:
    return isinstance(value, (float, np.floating))


class PassTable:
    """passes_frame's rows kept column by column, for a launch that adds one per pass for
    hours (a slim precision run's looks): no Python object per pass, so neither the rows nor
    the heap they leave between looks grow the worker's memory by more than the numbers
    themselves (8 bytes a value). A pass whose row has other columns than the first's is
    kept as its dict. `frame()` equals passes_frame over the same passes."""

    def __init__(self) -> None:
        self.columns: dict[str, _Column] = {}
        self.numbers = _Chunks(float)  # the float columns, row after row
        self.floats: tuple[str, ...] = ()
        self.order: list[str] = []
        self.rows = 0  # in the columns
        self.where = _Chunks(np.int64)  # each column row's place among all passes
        self.odd: list[tuple[int, dict[str, object]]] = []  # (place, head and row)

    def add(self, head: dict[str, object], row: dict[str, object]) -> None:
        """One pass: its pass_head columns and its own row (pass_row's)."""
        whole = {**head, **row}
        keys = list(whole)
        floats = tuple(k for k, v in whole.items() if _is_float(v))
        place = self.rows + len(self.odd)
        if self.rows == 0 and not self.odd:
            self.order, self.floats = keys, floats
            self.columns = {k: _Column() for k in keys if k not in floats}
        if keys != self.order or floats != self.floats:
            self.odd.append((place, whole))
            return
        for key, value in whole.items():
            if key in self.columns:
                self.columns[key].add(value)
            else:
                assert isinstance(value, (float, np.floating))
                self.numbers.append(float(value))
        self.where.append(place)
        self.rows += 1

    def frame(self, keep: list[bool] | None = None) -> pd.DataFrame:
        """The rows as passes_frame gives them, in pass order (those `keep` marks, where
        given)."""
        if self.rows == 0 and not self.odd:
            return pd.DataFrame()
        numbers = self.numbers.array().reshape(self.rows, len(self.floats))
        at = {k: i for i, k in enumerate(self.floats)}
        frame = pd.DataFrame(
            {
                k: numbers[:, at[k]].copy() if k in at else self.columns[k].values()
                for k in self.order
            },
            index=self.where.array(),
        )
        if self.odd:
            others = pd.DataFrame([r for _, r in self.odd], index=[p for p, _ in self.odd])
            frame = pd.concat([frame, others]).sort_index()
        if keep is not None:
            frame = frame[np.asarray(keep, dtype=bool)]
        return frame.reset_index(drop=True)


def passes_frame(
    runs: list[RunRecord],
    slo: SLO | None = None,
    kept: PassRows | None = None,
    percentiles: Iterable[str] = DEFAULT_PERCENTILES,
) -> pd.DataFrame:
    """One row per measured pass: every metric of METRICS plus counts and counters (goodput
    and SLO attainment with `slo`), and the latency percentiles named in `percentiles` (a
    scenario's metrics.keys()). `kept`: rows of passes already summarised (a precision
    run's looks: each look summarises only its new passes), filled as it goes."""
    percentiles = tuple(percentiles)
    rows = []
    for run, p in measured_passes(runs):
        held = kept.get(id(p)) if kept is not None else None
        if held is not None and held[0] is p:
            own = held[1]
        else:
            own = pass_row(p, slo, percentiles)
            if kept is not None:
                kept[id(p)] = (p, own)
        head = pass_head(
            run.run_key, p.arm or run.variant, run.round, run.cell, run.order, p.block, p.repeat
        )
        rows.append({**head, **own})
    return pd.DataFrame(rows)


def pass_row(
    p: PassRecord, slo: SLO | None = None, percentiles: Iterable[str] = DEFAULT_PERCENTILES
) -> dict[str, object]:
    """One pass's summary from its requests and counters: the row passes_frame gives it,
    less the launch's fields."""
    # Plain Python per pass: a DataFrame per pass made this the slowest step of a
    # precision look (0.26 s for 80 passes).
    ok = [r for r in p.requests if r.error is None]
    n_ok = len(ok)
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    dur = p.duration_s
    gaps = [g * 1000.0 for r in ok for g in (r.itl_s or [])]
    chunks = [c for r in ok for c in (r.chunk_tokens or [])]
    per_req: dict[str, list[float]] = {
        "ttft_ms": [r.ttft_s * 1000.0 for r in ok if r.ttft_s is not None],
        "e2el_ms": [r.e2el_s * 1000.0 for r in ok if r.e2el_s is not None],
        "tpot_ms": [_tpot_ms(r.ttft_s, r.e2el_s, r.output_tokens) for r in ok],
        "itl_ms": gaps,
        "acceptance_length": [request_acceptance(r)[0] for r in ok],
    }
    row: dict[str, object] = {
        "started_unix": p.started_unix,
        "duration_s": dur,
        "num_requests": len(p.requests),
        "num_ok": n_ok,
        "num_failed": len(p.requests) - n_ok,
        "prompt_tokens": in_tok,
        "output_tokens": out_tok,
        "workload_hash": p.workload_hash,
        "output_throughput": out_tok / dur if dur > 0 else np.nan,
        "total_throughput": (out_tok + in_tok) / dur if dur > 0 else np.nan,
        "request_throughput": n_ok / dur if dur > 0 else np.nan,
        "tokens_per_chunk": sum(chunks) / len(chunks) if chunks else np.nan,
        # What else loaded the machine during the pass (share of its CPUs), and the load.
        "foreign_cpu": p.foreign_cpu if p.foreign_cpu is not None else np.nan,
        "load1": p.load1 if p.load1 is not None else np.nan,
    }
    for column, metrics in _by_column(tuple(percentiles)).items():
        row.update(
            zip(
                [m.key for m in metrics],
                _stats(per_req[column], [m.stat or "" for m in metrics]),
                strict=True,
            )
        )
    if slo is not None:
        good = sum(meets_slo(r, slo) for r in p.requests)
        row["goodput"] = good / dur if dur > 0 else np.nan
        row["slo_attainment"] = 100.0 * good / len(p.requests) if p.requests else np.nan
    sd = p.spec_decode
    if sd is not None and sd.num_draft_tokens > 0:
        row["acceptance_rate"] = 100.0 * sd.num_accepted_tokens / sd.num_draft_tokens
        row["mean_acceptance_length"] = 1.0 + sd.num_accepted_tokens / sd.num_drafts
        for i, accepted in enumerate(sd.accepted_per_pos):
            row[f"{POSITION_PREFIX}{i}"] = 100.0 * accepted / sd.num_drafts
            row[f"num_accepted_pos_{i}"] = accepted
    else:
        row["acceptance_rate"] = np.nan
        row["mean_acceptance_length"] = np.nan
    if sd is not None:
        row.update(
            num_drafts=sd.num_drafts,
            num_draft_tokens=sd.num_draft_tokens,
            num_accepted_tokens=sd.num_accepted_tokens,
        )
    if any(r.spec_histogram for r in ok):
        row["spec_histograms_digest"] = _histograms_digest(ok)
    st = p.step_times
    if st is not None:  # a run with a no-speculation arm: where the steps' time went
        row.update(steps=st.steps, step_s=st.step_s, forward_s=st.forward_s, draft_s=st.draft_s)
        # the speed probe's seconds (with the wait for its twin): specbench's, outside the steps
        probe_s = (st.probe_s or 0.0) + (st.twin_wait_s or 0.0)
        row["probe_s"] = probe_s
        if st.steps > 0:
            per = 1000.0 / st.steps
            row.update(
                draft_ms_per_step=st.draft_s * per if sd is not None else np.nan,
                draft_per_forward=(
                    st.draft_s / st.forward_s if sd is not None and st.forward_s > 0 else np.nan
                ),
                forward_ms_per_step=st.forward_s * per,
                rest_ms_per_step=(st.step_s - st.forward_s - st.draft_s) * per,
                outside_ms_per_pass=(dur - st.step_s - probe_s) * 1000.0,
                steps_per_pass=st.steps,
            )
        if st.probes and st.probe_s:  # the speed probe: specbench's, not vLLM's, time
            row["probe_us_per_step"] = st.probe_s * 1e6 / st.probes
            if st.twins and st.twin_s and st.probe_over_twin:  # its twin, in another process
                row["twin_us_per_step"] = st.twin_s * 1e6 / st.twins
                row["probe_over_twin"] = st.probe_over_twin
    return row


def _histograms_digest(requests: list[RequestRecord]) -> str:
    """Every request's acceptance histogram (by prompt index) as one short value: equal in
    two passes when each request's integer counts are (a 128-bit digest, so that the per-pass
    frame stays small)."""
    text = ";".join(
        f"{r.index}:{','.join(map(str, r.spec_histogram or []))}"
        for r in sorted(requests, key=lambda r: r.index)
    )
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def position_metrics(passes: pd.DataFrame) -> list[str]:
    """The per-position acceptance columns present, in position order."""
    cols = [c for c in passes.columns if c.startswith(POSITION_PREFIX)]
    return sorted(cols, key=lambda c: int(c.rsplit("_", 1)[1]))
