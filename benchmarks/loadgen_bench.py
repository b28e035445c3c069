"""Load-generator throughput: harness.engine.loadgen against an instant fake server, one core each.

    .venv/bin/python benchmarks/loadgen_bench.py [--concurrency 64] [--requests 512]
        [--max-tokens 256] [--repeats 5] [--tokens-per-chunk 1] [--target 20000]
        [--steps [--step-ms 2.5]] [--uvloop] [--timeout S] [--json-out PATH]

Starts benchmarks/fake_openai_server.py as a subprocess pinned to one CPU (it answers every
streamed /v1/completions request at once from precomputed bytes), pins this process to another
CPU, and runs harness.engine.loadgen.run_requests exactly as serve mode does (one
asyncio.run per pass,
a fresh aiohttp session each time) over --requests requests of --max-tokens tokens with
--concurrency in flight, after one warm-up pass. Since the server never waits, the pass is bound
by the client's parsing: the streamed tokens/s (tokens received over the pass duration) is the
most the load generator can take in on one core when many chunks arrive per socket read. Per
pass it prints tokens/s, chunks/s and both processes' CPU use (the client's should be near 100%,
the server's well below), then the median and minimum, and PASS when the median reaches --target
(exit 0), else FAIL (exit 1). Every request must succeed with the expected tokens, or it stops
with an error (exit 2).

With --steps the server writes like an engine instead: each step, one chunk to every running
stream, each its own write, at most one step per --step-ms. The client then reads a chunk or two
per socket read, as from a real server, which costs it several times more per token (a recv
syscall, an event-loop wake-up and aiohttp's bookkeeping per read) than parsing a burst. The
offered rate is concurrency x tokens-per-chunk / step, so pick --step-ms to offer more than the
target (64 / 2.5 ms = 25,600 tok/s): PASS then means the client kept up with a realistic stream.
"tok per client CPU s" (tokens over the client's CPU time) estimates what one core could take
in at that arrival pattern even when the client is not saturated.

The machine may be shared: the load average is printed; compare medians of several runs.
--uvloop runs the passes on uvloop's event loop instead of asyncio's (the harness uses asyncio).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from fake_openai_server import token_id  # noqa: E402

from harness.engine.loadgen import StreamedRequest, completion_payload, run_requests  # noqa: E402

MODEL = "tiny-llama"
PROMPT_TOKENS = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A request failed or returned the wrong tokens."""


def pick_cpus(server_cpu: int | None, client_cpu: int | None) -> tuple[int, int]:
    """Two distinct CPUs from this process's affinity set (server first), unless given."""
    cpus = sorted(os.sched_getaffinity(0))
    server = cpus[0] if server_cpu is None else server_cpu
    others = [c for c in cpus if c != server]
    client = (others[0] if others else server) if client_cpu is None else client_cpu
    if client == server:
        print(f"warning: server and client share CPU {server}", file=sys.stderr)
    return server, client


def start_server(
    cpu: int, tokens_per_chunk: int, step_ms: float | None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the fake server pinned to `cpu` on a free port; returns it and its port."""
    cmd = [
        sys.executable,
        str(HERE / "fake_openai_server.py"),
        "--port",
        "0",
        "--cpu",
        str(cpu),
        "--tokens-per-chunk",
        str(tokens_per_chunk),
        "--model",
        MODEL,
    ]
    if step_ms is not None:
        cmd += ["--steps", "--step-ms", str(step_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        stop_server(proc)
        raise BenchError(f"fake server did not start (said {line!r}, exit {proc.returncode})")
    return proc, int(line.rsplit(" ", 1)[1])


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the fake server, killing it if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def check(results: list[StreamedRequest], max_tokens: int, tokens_per_chunk: int) -> None:
    """Raise BenchError unless every request returned exactly the expected stream."""
    expected_ids = [token_id(p) for p in range(max_tokens)]
    expected_chunks = math.ceil(max_tokens / tokens_per_chunk)
    for r in results:
        problem = None
        if r.error is not None:
            problem = r.error
        elif r.token_ids != expected_ids:
            problem = f"{len(r.token_ids)} token ids, expected {max_tokens} (or wrong ids)"
        elif len(r.chunk_tokens) != expected_chunks:
            problem = f"{len(r.chunk_tokens)} chunks, expected {expected_chunks}"
        elif r.output_tokens != max_tokens or r.prompt_tokens != PROMPT_TOKENS:
            problem = f"usage says {r.prompt_tokens} prompt / {r.output_tokens} output tokens"
        elif r.finish_reason != "length":
            problem = f"finish_reason {r.finish_reason!r}"
        if problem:
            failed = sum(x.error is not None for x in results)
            raise BenchError(
                f"request {r.index} failed: {problem} "
                f"({failed} of {len(results)} requests have errors)"
            )


def event_loop_runner(use_uvloop: bool) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """asyncio.run (what the harness uses) or uvloop.run."""
    if not use_uvloop:
        return asyncio.run
    import uvloop

    return uvloop.run


def main() -> int:
    """Run the benchmark; exit 0 on PASS, 1 on FAIL, 2 on a failed request, 130 if stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=512, help="requests per pass")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per request")
    parser.add_argument("--repeats", type=int, default=5, help="measured passes")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument(
        "--target", type=float, default=20_000, help="median streamed tokens/s required to PASS"
    )
    parser.add_argument("--uvloop", action="store_true", help="use uvloop's event loop")
    parser.add_argument(
        "--steps",
        action="store_true",
        help="server writes one chunk per stream per step (engine-like) "
        "instead of each response in one write",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="with --steps, the least time per server step (0: no pacing)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="per-request timeout in seconds (a hung request fails the run)",
    )
    parser.add_argument("--server-cpu", type=int, default=None)
    parser.add_argument("--client-cpu", type=int, default=None)
    parser.add_argument("--json-out", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    # SIGTERM unwinds like Ctrl-C, so the fake server is always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = event_loop_runner(args.uvloop)
    server_cpu, client_cpu = pick_cpus(args.server_cpu, args.client_cpu)
    prompt = list(range(1, PROMPT_TOKENS + 1))
    payloads = [
        completion_payload(
            MODEL, prompt, args.max_tokens, ignore_eos=True, temperature=0.0, seed=None
        )
        for _ in range(args.requests)
    ]
    load_before = os.getloadavg()
    print(
        f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"server on CPU {server_cpu}, client on CPU {client_cpu}; "
        f"loop {'uvloop' if args.uvloop else 'asyncio'}; concurrency {args.concurrency}, "
        f"{args.requests} requests x {args.max_tokens} tokens, "
        f"{args.tokens_per_chunk} token(s) per chunk; server writes "
        + (
            f"one chunk per stream per step (>= {args.step_ms} ms)"
            if args.steps
            else "each response at once"
        )
    )

    server, port = start_server(
        server_cpu, args.tokens_per_chunk, args.step_ms if args.steps else None
    )
    passes: list[dict[str, float]] = []
    try:
        os.sched_setaffinity(0, {client_cpu})
        url = f"http://127.0.0.1:{port}/v1/completions"
        warm, _ = run(
            run_requests(
                url, payloads[: args.concurrency], args.concurrency, timeout_s=args.timeout
            )
        )
        check(warm, args.max_tokens, args.tokens_per_chunk)
        for repeat in range(args.repeats):
            client0, server0 = time.process_time(), cpu_seconds(server.pid)
            results, duration = run(
                run_requests(url, payloads, args.concurrency, timeout_s=args.timeout)
            )
            client_s, server_s = time.process_time() - client0, cpu_seconds(server.pid) - server0
            check(results, args.max_tokens, args.tokens_per_chunk)
            tokens = sum(len(r.token_ids) for r in results)
            chunks = sum(len(r.chunk_tokens) for r in results)
            figures = {
                "duration_s": duration,
                "tokens": tokens,
                "chunks": chunks,
                "tokens_per_s": tokens / duration,
                "chunks_per_s": chunks / duration,
                "client_cpu": client_s / duration,
                "server_cpu": server_s / duration,
                "tokens_per_client_cpu_s": tokens / client_s if client_s else math.inf,
            }
            passes.append(figures)
            print(
                f"pass {repeat}: {figures['tokens_per_s']:9.0f} tok/s "
                f"{figures['chunks_per_s']:9.0f} chunks/s  {duration:6.3f} s  "
                f"client CPU {figures['client_cpu']:4.0%}  "
                f"server CPU {figures['server_cpu']:4.0%}  "
                f"{figures['tokens_per_client_cpu_s']:9.0f} tok per client CPU s"
            )
    except BenchError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_server(server)

    rates = [p["tokens_per_s"] for p in passes]
    median, low = statistics.median(rates), min(rates)
    capacity = statistics.median(p["tokens_per_client_cpu_s"] for p in passes)
    verdict = "PASS" if median >= args.target else "FAIL"
    load_after = os.getloadavg()
    print(
        f"streamed tokens/s: median {median:.0f}, min {low:.0f}; chunks/s median "
        f"{statistics.median(p['chunks_per_s'] for p in passes):.0f}; tokens per client CPU "
        f"second median {capacity:.0f}; target {args.target:.0f}: {verdict} "
        f"(load average now {load_after[0]:.2f})"
    )
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(
            json.dumps(
                {
                    "config": {k: v for k, v in vars(args).items() if k != "json_out"}
                    | {"server_cpu_id": server_cpu, "client_cpu_id": client_cpu},
                    "load_average_before": load_before,
                    "load_average_after": load_after,
                    "passes": passes,
                    "median_tokens_per_s": median,
                    "min_tokens_per_s": low,
                    "median_tokens_per_client_cpu_s": capacity,
                    "verdict": verdict,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
