"""Streaming load generator for serve mode: OpenAI /v1/completions requests over aiohttp.

Times every request the way vLLM's serving benchmark does (vllm/benchmarks/lib/
endpoint_request_func.py: TTFT at the first chunk with choices, ITL between chunks, E2EL at the
last chunk, TPOT from them) and also keeps what that client drops: the tokens each chunk carried
and the token ids (for output parity). Pure asyncio + aiohttp: no vLLM import, so it is cheap to
start and never the bottleneck (benchmarks/loadgen_bench.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

# vLLM's spec-decode counters on /metrics (Prometheus text); counters carry the _total suffix.
SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
SPEC_PER_POS_METRIC = "vllm:spec_decode_num_accepted_tokens_per_pos"
ERROR_CHARS = 500


@dataclass
class StreamedRequest:
    """What one streamed request returned; times are seconds (perf_counter based)."""

    index: int
    sent_s: float = 0.0  # when it was sent, relative to the start of its pass
    chunk_times: list[float] = field(default_factory=list)  # since sending, one per chunk
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each chunk carried
    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None  # from usage
    finish_reason: str | None = None
    error: str | None = None
    # vLLM's per_request_spec_decode_metrics, from the final usage chunk (one prompt, n == 1)
    spec_histogram: list[int] | None = None
    spec_draft_tokens: int | None = None


@dataclass(frozen=True)
class RequestTimings:
    """Per-request latencies derived from chunk arrival times, as vLLM's benchmark defines them."""

    ttft_s: float | None
    itl_s: list[float]
    e2el_s: float | None
    tpot_s: float | None


def request_timings(chunk_times: Sequence[float], output_tokens: int | None) -> RequestTimings:
    """TTFT = first chunk; ITL = gaps between chunks (a chunk may carry several tokens under
    speculative decoding); E2EL = last chunk; TPOT = (E2EL - TTFT) / (output tokens - 1)."""
    if not chunk_times:
        return RequestTimings(None, [], None, None)
    ttft, e2el = chunk_times[0], chunk_times[-1]
    itl = [b - a for a, b in zip(chunk_times[:-1], chunk_times[1:], strict=True)]
    tpot = (e2el - ttft) / (output_tokens - 1) if output_tokens and output_tokens > 1 else None
    return RequestTimings(ttft, itl, e2el, tpot)


def completion_payload(
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    *,
    ignore_eos: bool,
    temperature: float,
    seed: int | None,
) -> dict[str, Any]:
    """The request body: streamed, with usage and per-chunk token ids."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        # The API defaults to temperature 1.0 (sampling): always say what the scenario means.
        "temperature": temperature,
        "ignore_eos": ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if seed is not None:
        payload["seed"] = seed
    return payload


def exception_text(exc: BaseException) -> str:
    """'Type: message', or the exception's repr where its message is empty (a bare
    ServerDisconnectedError or OSError would otherwise read as nothing after the colon)."""
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else repr(exc)


def server_error_text(err: Any) -> str:
    """The reason in a server's error event: its message, else the whole event (vLLM sends
    an empty message for an exception whose text is empty, e.g. out of open files)."""
    message = err.get("message") if isinstance(err, dict) else err
    if isinstance(message, str) and message.strip():
        return message.strip()
    return f"no message ({json.dumps(err, sort_keys=True, default=repr)[:ERROR_CHARS]})"


def _apply_event(result: StreamedRequest, data: Any, elapsed: float) -> None:
    """Fold one SSE data object into `result`."""
    if not isinstance(data, dict):
        raise ValueError(f"stream event is not an object: {str(data)[:80]}")
    if "error" in data:
        raise ValueError(f"server error in stream: {server_error_text(data['error'])}")
    choices = data.get("choices")
    if choices:
        choice = choices[0]
        ids = choice.get("token_ids") or []
        # Timed like vLLM's client: every chunk with choices, whatever it carries.
        result.chunk_times.append(elapsed)
        result.chunk_tokens.append(len(ids))
        result.token_ids.extend(ids)
        if choice.get("finish_reason") is not None:
            result.finish_reason = choice["finish_reason"]
    usage = data.get("usage")
    if usage:
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.output_tokens = usage.get("completion_tokens", result.output_tokens)
    spec = (data.get("metrics") or {}).get("speculative_decoding")
    if isinstance(spec, dict) and isinstance(spec.get("acceptance_histogram"), list):
        result.spec_histogram = [int(c) for c in spec["acceptance_histogram"]]
        result.spec_draft_tokens = int(spec.get("num_draft_tokens", 0))


async def stream_completion(
    session: aiohttp.ClientSession, url: str, payload: dict[str, Any], index: int, pass_start: float
) -> StreamedRequest:
    """POST one streamed completion and record every chunk's arrival; failures become data."""
    result = StreamedRequest(index=index)
    start = time.perf_counter()
    result.sent_s = start - pass_start
    done = False
    try:
        async with session.post(url, json=payload) as response:
            if response.status != 200:
                body = (await response.text())[:ERROR_CHARS]
                result.error = f"HTTP {response.status}: {body}"
                return result
            buffer = b""
            async for data in response.content.iter_any():
                elapsed = time.perf_counter() - start
                buffer += data
                if b"\n\n" not in buffer:
                    continue
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    event = event.strip()
                    if not event.startswith(b"data:"):
                        continue  # SSE comments / keep-alives
                    data_bytes = event[5:].strip()
                    if data_bytes == b"[DONE]":
                        done = True
                        continue
                    _apply_event(result, json.loads(data_bytes), elapsed)
        if not done:
            result.error = "stream ended before [DONE]"
        elif result.finish_reason is None:
            result.error = "stream finished without a finish_reason"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed request is a record, not a crash
        result.error = exception_text(exc)[:ERROR_CHARS]
    return result


def connector(concurrency: int) -> aiohttp.TCPConnector:
    """Connections as vLLM's benchmark pools them: at most one per request in flight."""
    return aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60, enable_cleanup_closed=True)


async def run_requests(
    url: str,
    payloads: Sequence[dict[str, Any]],
    concurrency: int,
    arrivals: AsyncIterator[int] | None = None,
    timeout_s: float | None = None,
) -> tuple[list[StreamedRequest], float]:
    """Send every payload with at most `concurrency` in flight; `arrivals` yields payload
    indices at their arrival times (rate-limited load), else all arrive at once.
    Returns the results in payload order and the pass duration (first send to last answer)."""
    semaphore = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(
        connector=connector(concurrency), timeout=timeout, trust_env=False
    ) as session:

        async def one(i: int) -> StreamedRequest:
            async with semaphore:
                return await stream_completion(session, url, payloads[i], i, start)

        start = time.perf_counter()
        tasks: list[asyncio.Task[StreamedRequest]] = []
        if arrivals is None:
            tasks = [asyncio.create_task(one(i)) for i in range(len(payloads))]
        else:
            async for i in arrivals:
                tasks.append(asyncio.create_task(one(i)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    return sorted(results, key=lambda r: r.index), duration


def parse_spec_counters(text: str) -> dict[str, Any]:
    """Cumulative spec-decode counters from a /metrics page, summed over engines."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, Any] = dict.fromkeys(SPEC_METRICS.values(), 0)
    per_pos: dict[int, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # skip the _created timestamps
            name = sample.name.removesuffix("_total")
            if name in SPEC_METRICS:
                totals[SPEC_METRICS[name]] += int(sample.value)
            elif name == SPEC_PER_POS_METRIC:
                pos = int(sample.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0) + int(sample.value)
    totals["accepted_per_pos"] = [per_pos.get(i, 0) for i in range(max(per_pos, default=-1) + 1)]
    return totals


async def fetch_text(url: str, timeout_s: float = 30.0) -> str:
    async with (
        aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s), trust_env=False
        ) as session,
        session.get(url) as response,
    ):
        response.raise_for_status()
        return await response.text()
