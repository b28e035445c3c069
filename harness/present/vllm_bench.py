"""Each arm of a run in the shape of `vllm bench serve --save-result`: the result dict vLLM 0.32's
benchmarks/serve.py writes, with its keys and units (seconds in the per-request lists, ms in
the latency statistics, acceptance rate in %), so that a script or dashboard written for
vllm-bench JSON reads a specbench run arm by arm. What vLLM's file has and specbench does not
measure is None (client queue times, generated texts: specbench keeps token ids, not text;
the peak output rate and concurrency over time). specbench's own figures are under
"specbench": the arm's passes and launches, and, for a candidate, every row's delta against
the baseline with its 95% interval on the design's unit.

The statistics are vLLM's: mean, median, population std and the chosen percentiles of TTFT,
TPOT (per request, excluding the first token), ITL (every inter-token gap pooled; streamed
requests only) and E2EL, over the arm's measured requests of every launch. Written as
run_dir/vllm-bench/<arm>.json (a sweep: vllm-bench/<cell>/<arm>.json) by `specbench run` and
`specbench report`.

Beside each, <arm>.pytorch.json holds the arm in the PyTorch OSS benchmark format that vLLM's
perf dashboard reads: one record per latency statistic, as `vllm bench serve` writes it when
SAVE_TO_PYTORCH_BENCHMARK_FORMAT is set (`save_to_pytorch_benchmark_format` and
`convert_to_pytorch_benchmark_format` in vllm.benchmarks). Only the engine layer may import
vLLM, so the records are built here in the same shape, and a test holds them equal to what
vLLM's own converter makes of the same result and arguments.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.config.engine_args import engine_args_for
from harness.config.latency import LATENCY_METRICS, p_word
from harness.results.metrics import measured_passes

if TYPE_CHECKING:
    from harness.analysis.comparison import Comparison
    from harness.results.run import Run
    from harness.wire.records import PassRecord, RequestRecord

# vllm bench serve's defaults for a generative model (--metric-percentiles 99;
# --percentile-metrics ttft,tpot,itl), with E2EL added, as specbench's table has it. A run's
# files use its scenario's metrics.percentiles and metrics.percentile_metrics instead.
PERCENTILES: tuple[float, ...] = (99.0,)
PERCENTILE_METRICS: tuple[str, ...] = LATENCY_METRICS
FOLDER = "vllm-bench"
# vllm bench serve's save_to_pytorch_benchmark_format: the statistics it records (those the
# result has) and the raw lists it leaves out of every record's extra_info.
PYTORCH_METRICS = (
    "median_ttft_ms",
    "mean_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
)
PYTORCH_IGNORED = ("ttfts", "itls", "generated_texts", "errors")


def _stats(
    name: str, values_s: list[float | None], percentiles: tuple[float, ...]
) -> dict[str, float | None]:
    """mean/median/std/pNN of `values_s` (seconds) in ms, under vLLM's key names (None: no
    value measured)."""
    data = np.asarray([v for v in values_s if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        keys = [f"{stat}_{name}_ms" for stat in ("mean", "median", "std")] + [
            f"p{p_word(p)}_{name}_ms" for p in percentiles
        ]
        return dict.fromkeys(keys)
    out: dict[str, float | None] = {
        f"mean_{name}_ms": float(data.mean()) * 1000.0,
        f"median_{name}_ms": float(np.median(data)) * 1000.0,
        f"std_{name}_ms": float(data.std()) * 1000.0,
    }
    for p in percentiles:
        out[f"p{p_word(p)}_{name}_ms"] = float(np.percentile(data, p)) * 1000.0
    return out


def _tpot_s(r: RequestRecord) -> float | None:
    if r.ttft_s is None or r.e2el_s is None or r.output_tokens < 2:
        return None
    return (r.e2el_s - r.ttft_s) / (r.output_tokens - 1)


def arm_result(
    passes: list[PassRecord],
    percentiles: tuple[float, ...] = PERCENTILES,
    metrics: tuple[str, ...] = PERCENTILE_METRICS,
) -> dict[str, Any]:
    """vllm bench serve's result dict for one arm's measured passes."""
    requests = [r for p in passes for r in p.requests]
    ok = [r for r in requests if r.error is None]
    duration = float(sum(p.duration_s for p in passes))
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)

    def rate(x: float) -> float | None:
        return x / duration if duration > 0 else None

    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(requests) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": rate(len(ok)),
        "request_goodput": None,
        "output_throughput": rate(total_out),
        "total_token_throughput": rate(total_in + total_out),
        "input_lens": [r.prompt_tokens for r in requests],
        "output_lens": [r.output_tokens for r in requests],
        "ttfts": [r.ttft_s for r in requests],
        "itls": [list(r.itl_s or []) for r in requests],
        "latencies": [r.e2el_s for r in requests],
        "start_times": [p.started_unix + (r.sent_s or 0.0) for p in passes for r in p.requests],
        "queue_times": None,
        "generated_texts": None,
        "errors": [r.error or "" for r in requests],
        "max_output_tokens_per_s": None,
        "max_concurrent_requests": None,
        "rtfx": None,
    }
    per_metric: dict[str, list[float | None]] = {
        "ttft": [r.ttft_s for r in ok],
        "tpot": [_tpot_s(r) for r in ok],
        "itl": [gap for r in ok for gap in (r.itl_s or [])],
        "e2el": [r.e2el_s for r in ok],
    }
    for name in metrics:
        result.update(_stats(name, per_metric[name], percentiles))
    counters = [p.spec_decode for p in passes if p.spec_decode is not None]
    drafts = sum(c.num_drafts for c in counters)
    draft_tokens = sum(c.num_draft_tokens for c in counters)
    accepted = sum(c.num_accepted_tokens for c in counters)
    if draft_tokens > 0:
        width = max(len(c.accepted_per_pos) for c in counters)
        per_pos = [
            sum(c.accepted_per_pos[i] for c in counters if i < len(c.accepted_per_pos))
            for i in range(width)
        ]
        result["spec_decode_acceptance_rate"] = accepted / draft_tokens * 100
        result["spec_decode_acceptance_length"] = 1 + accepted / drafts if drafts else 0.0
        result["spec_decode_num_drafts"] = drafts
        result["spec_decode_draft_tokens"] = draft_tokens
        result["spec_decode_accepted_tokens"] = accepted
        result["spec_decode_per_position_acceptance_rates"] = [
            a / drafts if drafts else 0.0 for a in per_pos
        ]
    return result


def _header(run: Run, arm: str, passes: list[PassRecord]) -> dict[str, Any]:
    """What `vllm bench serve` adds when it saves (date, backend, model, prompts, load)."""
    s = run.scenario
    serve = s.serve if s.mode == "serve" else None
    started = min((p.started_unix for p in passes), default=None)
    return {
        "date": (
            datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S")
            if started is not None
            else None
        ),
        "endpoint_type": "vllm" if serve else "offline",
        "backend": "vllm" if serve else "offline",
        "label": arm,
        "model_id": s.model,
        "tokenizer_id": s.model,
        "num_prompts": s.workload.num_prompts,
        "request_rate": (
            "inf" if serve is None or serve.request_rate is None else serve.request_rate
        ),
        "burstiness": serve.burstiness if serve is not None else 1.0,
        "max_concurrency": serve.concurrency if serve is not None else s.batch_size,
    }


def _rows(comparison: Comparison | None, arm: str) -> list[dict[str, Any]]:
    if comparison is None:
        return []
    cand = next((c for c in comparison.candidates if c.name == arm), None)
    if cand is None:
        return []
    out = []
    for row in cand.rows:
        e = row.estimate
        out.append(
            {
                "metric": row.key,
                "label": row.label,
                "baseline": row.baseline,
                "candidate": row.candidate,
                "delta": e.delta,
                "ci_low": e.ci_low,
                "ci_high": e.ci_high,
                "p_value": e.p_value,
                "starred": row.star,
                "kind": str(e.kind),
                "units": e.units,
                "unit": e.error_unit,
                "role": row.role,
            }
        )
    return out


def run_results(
    run: Run, comparison: Comparison | None = None, cell: str | None = None
) -> dict[str, dict[str, Any]]:
    """Every arm's vllm-bench result dict (header, results, and "specbench"), by arm; of one
    sweep cell's launches when `cell` names it; the percentiles the scenario chose."""
    percentiles = tuple(run.scenario.metrics.percentiles)
    metrics = tuple(run.scenario.metrics.percentile_metrics)
    by_arm: dict[str, list[PassRecord]] = {}
    launches: dict[str, set[str]] = {}
    records = [r for r in run.runs if cell is None or r.cell == cell]
    for record, p in measured_passes(records):
        arm = p.arm or record.variant
        by_arm.setdefault(arm, []).append(p)
        launches.setdefault(arm, set()).add(record.run_key)
    out = {}
    for arm, passes in by_arm.items():
        out[arm] = {
            **_header(run, arm, passes),
            **arm_result(passes, percentiles, metrics),
            "specbench": {
                "run_id": run.run_id,
                "scenario": run.scenario.name,
                "arm": arm,
                "cell": cell,
                "baseline": arm == run.scenario.baseline,
                "design": run.design,
                "passes": len(passes),
                "launches": sorted(launches[arm]),
                "percentiles": list(percentiles),
                "against_baseline": _rows(comparison, arm),
            },
        }
    return out


def bench_args(run: Run, arm: str) -> dict[str, Any]:
    """The arguments a PyTorch-format record carries (`vars(args)` in vLLM): the arm's engine
    arguments, the prompts and the file name, as `vllm bench serve` would have them."""
    variant = arm if arm in run.scenario.variants else run.scenario.baseline
    return {
        **engine_args_for(run.scenario, variant),
        "label": arm,
        "num_prompts": run.scenario.workload.num_prompts,
        "result_filename": f"{arm}.json",
    }


def _use_compile(args: dict[str, Any], extra_info: dict[str, Any]) -> bool:
    # vLLM's use_compile: off when the compilation mode is "0" or the file names "eager".
    mode = extra_info.get("compilation_config.mode", "")
    return not (mode == "0" or "eager" in str(args.get("result_filename", "")))


def pytorch_records(args: dict[str, Any], result: dict[str, Any]) -> list[dict[str, Any]]:
    """One arm's result as vLLM's convert_to_pytorch_benchmark_format makes it: a record per
    statistic in PYTORCH_METRICS, the rest of the result (less the raw lists) as extra_info.
    An eager engine (enforce_eager, or compilation mode 0) records use_compile false."""
    extra = {
        k: v for k, v in result.items() if k not in PYTORCH_METRICS and k not in PYTORCH_IGNORED
    }
    compilation = args.get("compilation_config")
    mode = (
        compilation.get("mode", compilation.get("level")) if isinstance(compilation, dict) else None
    )
    if args.get("enforce_eager") or mode in (0, "0", "NONE"):
        extra["compilation_config.mode"] = "0"
    records = []
    for name in (k for k in PYTORCH_METRICS if k in result):
        records.append(
            {
                "benchmark": {
                    "name": "vLLM benchmark",
                    "extra_info": {
                        "args": args,
                        "compilation_config.mode": extra.get("compilation_config.mode", ""),
                        "optimization_level": extra.get(
                            "optimization_level", args.get("optimization_level", "")
                        ),
                        "use_compile": _use_compile(args, extra),
                    },
                },
                "model": {"name": args["model"]},
                "metric": {"name": name, "benchmark_values": [result[name]], "extra_info": extra},
            }
        )
    return records


def write_results(
    run: Run, comparison: Comparison | None, sweep_cells: list[tuple[str, Any]], write: Any
) -> list[str]:
    """Write every arm's file with `write(path, data)`; returns the paths written, relative
    to the run folder. `sweep_cells`: (cell id, its Comparison) of a sweep, else empty."""
    written = []
    parts = [
        (f"{FOLDER}/{cell}", run_results(run, comp, cell=cell)) for cell, comp in sweep_cells
    ] or [(FOLDER, run_results(run, comparison))]
    for folder, results in parts:
        for arm, data in results.items():
            path = f"{folder}/{arm}.json"
            (run.path / folder).mkdir(parents=True, exist_ok=True)
            write(run.path / path, data)
            pytorch = f"{folder}/{arm}.pytorch.json"
            write(run.path / pytorch, pytorch_records(bench_args(run, arm), data))
            written += [path, pytorch]
    return written
