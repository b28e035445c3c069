"""A minimal, instant fake of vLLM's OpenAI completions server, for load-generator benchmarks.

    python benchmarks/fake_openai_server.py --port P [--cpu C] [--tokens-per-chunk K]
                                            [--fail-every N] [--drop-after K] [--model NAME]
                                            [--steps [--step-ms MS]]

POST /v1/completions answers at once with a streamed body shaped like vLLM 0.32's: one SSE event
per chunk (`data: {json}\\n\\n`, compact JSON, the same keys in the same order), the last token
chunk with finish_reason "length", a usage chunk with `"choices": []` when the request asks for
`stream_options.include_usage`, then `data: [DONE]`. Each chunk carries --tokens-per-chunk
tokens (default 1) out of the request's max_tokens. HTTP/1.1 keep-alive, `Transfer-Encoding:
chunked` with one HTTP chunk per SSE event, and the whole response in one transport write: the
token chunks are precomputed and cached per (model, max_tokens, return_token_ids), only the first
chunk (it carries the prompt's token ids) and the usage chunk are built per request. With --steps
the chunks are written like an engine's instead: per step one chunk to every running stream,
each its own write (at most one step per --step-ms; the usage chunk and [DONE] go with the last
token chunk).

GET /health answers 200, GET /metrics a small Prometheus page with vLLM's spec-decode counters
(always 0), the request counts and the steps run.

Fault injection for tests: --fail-every N answers every Nth completion request with HTTP 500 and a
JSON error body; --drop-after K closes the connection after K token chunks, with no usage chunk,
no [DONE] and no terminating HTTP chunk. Standard library only (asyncio.Protocol). Prints
`listening on PORT` once bound (--port 0 picks a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import os
import signal
import sys
import time
import zlib
from typing import Any

VOCAB = 32000
CACHE_ENTRIES = 1024
MAX_HEAD = 64 * 1024
DEFAULT_MAX_TOKENS = 16  # vLLM's completions default
# A response's token chunks: event objects, each one's bytes, all but the first joined.
Chunks = tuple[list[dict[str, Any]], list[bytes], bytes]


def _compact(obj: Any) -> bytes:
    """JSON as pydantic's model_dump_json writes it: no spaces."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _http_chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (size in hex, CRLF, data, CRLF)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: Any) -> bytes:
    """One SSE event framed as one HTTP chunk."""
    return _http_chunk(b"data: " + _compact(obj) + b"\n\n")


def token_id(position: int) -> int:
    """The deterministic fake output token at `position` (same for every request)."""
    return (position * 7919 + 11) % VOCAB


def prompt_token_ids(prompt: Any) -> list[int]:
    """Token ids of a prompt: the list itself for token-id prompts, else one fake id per word."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        return [int(t) for t in prompt]
    words = str(prompt).split() or [""]
    return [zlib.crc32(w.encode()) % VOCAB for w in words]


class Responder:
    """Builds (and caches) response bytes; holds the server's options and counters."""

    def __init__(
        self,
        tokens_per_chunk: int,
        fail_every: int,
        drop_after: int | None,
        default_model: str,
        steps: bool = False,
    ) -> None:
        self.tokens_per_chunk = tokens_per_chunk
        self.steps = steps
        self.fail_every = fail_every
        self.drop_after = drop_after
        self.default_model = default_model
        self.created = int(time.time())
        self.cache: dict[tuple[str, int, bool], Chunks] = {}
        self.completions = 0
        self.failed = 0
        self.dropped = 0
        self.tokens = 0
        self.steps_run = 0  # --steps mode
        self._date_s = -1
        self._date = b""

    def date(self) -> bytes:
        """The Date header value, refreshed once a second."""
        now = int(time.time())
        if now != self._date_s:
            self._date_s, self._date = now, email.utils.formatdate(now, usegmt=True).encode()
        return self._date

    def head(self, status: str, content_type: bytes, extra: bytes = b"") -> bytes:
        """Status line and headers (uvicorn's set), up to the blank line."""
        return (
            b"HTTP/1.1 "
            + status.encode()
            + b"\r\ndate: "
            + self.date()
            + b"\r\nserver: uvicorn\r\ncontent-type: "
            + content_type
            + b"\r\n"
            + extra
            + b"\r\n"
        )

    def plain(self, status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
        """A complete non-streamed response with Content-Length."""
        return self.head(status, content_type, b"content-length: %d\r\n" % len(body)) + body

    def error(self, code: int, status: str, message: str, kind: str) -> bytes:
        """vLLM's JSON error body."""
        body = _compact({"error": {"message": message, "type": kind, "param": None, "code": code}})
        return self.plain(f"{code} {status}", body)

    def token_chunks(self, model: str, max_tokens: int, return_ids: bool) -> Chunks:
        """Every token chunk of a response: the event objects, each chunk's bytes, and the bytes
        of all but the first joined (the first carries the prompt's ids, built per request)."""
        key = (model, max_tokens, return_ids)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        events: list[dict[str, Any]] = []
        k = self.tokens_per_chunk
        for start in range(0, max_tokens, k):
            ids = [token_id(p) for p in range(start, min(start + k, max_tokens))]
            last = start + k >= max_tokens
            events.append(
                {
                    "id": f"cmpl-fake-{max_tokens}",
                    "object": "text_completion",
                    "created": self.created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": "".join(f" w{t}" for t in ids),
                            "logprobs": None,
                            "finish_reason": "length" if last else None,
                            "stop_reason": None,
                            "prompt_token_ids": None,
                            "token_ids": ids if return_ids else None,
                        }
                    ],
                }
            )
        encoded = [_sse(e) for e in events]
        entry = (events, encoded, b"".join(encoded[1:]))
        if len(self.cache) >= CACHE_ENTRIES:
            self.cache.clear()
        self.cache[key] = entry
        return entry

    def completion(self, body: bytes) -> tuple[list[bytes], bool]:
        """A completions response as the pieces to write (one piece unless --steps), and
        whether to close the connection after the last."""
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("request body is not an object")
            model = str(request.get("model") or self.default_model)
            max_tokens = request.get("max_tokens")
            max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens)
            if max_tokens < 1:
                raise ValueError("max_tokens must be at least 1")
            if not request.get("stream"):
                raise ValueError("this fake server only streams (stream: true)")
            prompt_ids = prompt_token_ids(request.get("prompt", ""))
        except (ValueError, TypeError) as exc:
            return [self.error(400, "Bad Request", str(exc), "BadRequestError")], False
        self.completions += 1
        if self.fail_every and self.completions % self.fail_every == 0:
            self.failed += 1
            return [
                self.error(
                    500,
                    "Internal Server Error",
                    "injected failure (--fail-every)",
                    "InternalServerError",
                )
            ], False
        return_ids = bool(request.get("return_token_ids"))
        options = request.get("stream_options") or {}
        usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        events, encoded, rest = self.token_chunks(model, max_tokens, return_ids)

        first = dict(events[0])
        first["choices"] = [
            dict(events[0]["choices"][0], prompt_token_ids=prompt_ids if return_ids else None)
        ]
        head = self.head(
            "200 OK", b"text/event-stream; charset=utf-8", b"transfer-encoding: chunked\r\n"
        )
        if self.drop_after is not None:
            kept = max(self.drop_after, 0)
            self.dropped += 1
            self.tokens += min(kept * self.tokens_per_chunk, max_tokens)
            pieces = [head + _sse(first) if kept else head, *encoded[1:kept]]
            return (pieces if self.steps else [b"".join(pieces)]), True
        tail = []
        if usage:
            n = len(prompt_ids)
            tail.append(
                _sse(
                    {
                        "id": events[0]["id"],
                        "object": "text_completion",
                        "created": self.created,
                        "model": model,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": n,
                            "total_tokens": n + max_tokens,
                            "completion_tokens": max_tokens,
                        },
                    }
                )
            )
        tail += [_http_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
        self.tokens += max_tokens
        if not self.steps:
            return [b"".join([head, _sse(first), rest, *tail])], False
        # Like an engine step: one chunk per write; the usage and [DONE] follow the last chunk.
        pieces = [head + _sse(first), *encoded[1:]]
        pieces[-1] = b"".join([pieces[-1], *tail])
        return pieces, False

    def metrics(self) -> bytes:
        """A small Prometheus text page: spec-decode counters (zero) and request counts."""
        labels = f'{{engine="0",model_name="{self.default_model}"}}'
        lines = []
        counters = [
            ("vllm:spec_decode_num_drafts", 0),
            ("vllm:spec_decode_num_draft_tokens", 0),
            ("vllm:spec_decode_num_accepted_tokens", 0),
            ("vllm:generation_tokens", self.tokens),
            ("fake:completion_requests", self.completions),
            ("fake:failed_requests", self.failed),
            ("fake:dropped_requests", self.dropped),
            ("fake:steps", self.steps_run),
        ]
        for name, value in counters:
            lines += [
                f"# HELP {name} Fake server counter.",
                f"# TYPE {name} counter",
                f"{name}_total{labels} {float(value)}",
            ]
        return ("\n".join(lines) + "\n").encode()

    def respond(self, method: bytes, target: bytes, body: bytes) -> tuple[list[bytes], bool]:
        """Route one request; returns the pieces to write and whether to close afterwards."""
        path = target.split(b"?", 1)[0]
        if path == b"/v1/completions":
            if method != b"POST":
                return [
                    self.error(405, "Method Not Allowed", "use POST", "MethodNotAllowed")
                ], False
            return self.completion(body)
        if path == b"/health" and method in (b"GET", b"HEAD"):
            return [self.plain("200 OK", b"", b"application/json")], False
        if path == b"/metrics" and method == b"GET":
            return [
                self.plain("200 OK", self.metrics(), b"text/plain; version=0.0.4; charset=utf-8")
            ], False
        return [
            self.error(
                404, "Not Found", f"no route {path.decode(errors='replace')}", "NotFoundError"
            )
        ], False


class Stepper:
    """--steps mode: like an engine step, each running stream gets its next chunk, one write
    each, then the loop yields (and sleeps out the rest of --step-ms)."""

    def __init__(self, step_s: float, responder: Responder) -> None:
        self.step_s = step_s
        self.responder = responder
        self.active: list[list[Any]] = []  # [protocol, pieces, next index, close]
        self.wake = asyncio.Event()

    def add(self, protocol: HttpProtocol, pieces: list[bytes], close: bool) -> None:
        """Stream `pieces` (the first already written) from the next step on."""
        self.active.append([protocol, pieces, 1, close])
        self.wake.set()

    async def run(self) -> None:
        """Run steps while any stream is active."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
            self.responder.steps_run += 1
            current, self.active = self.active, []
            for stream in current:
                protocol, pieces, index, close = stream
                transport = protocol.transport
                if transport is None or transport.is_closing():
                    continue
                transport.write(pieces[index])
                stream[2] = index + 1
                if stream[2] < len(pieces):
                    self.active.append(stream)
                elif close:
                    transport.close()
                else:
                    protocol.streaming = False
                    protocol.process()  # a pipelined request may be waiting
            # A fixed schedule (a late step shortens the next wait), so the mean step is
            # --step-ms even though the loop's timers run late by up to a millisecond.
            deadline = max(deadline + self.step_s, loop.time() - self.step_s)
            await asyncio.sleep(max(0.0, deadline - loop.time()))


class HttpProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive connection: parses requests (pipelined too) and answers each."""

    def __init__(self, responder: Responder, stepper: Stepper | None) -> None:
        self.responder = responder
        self.stepper = stepper
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.streaming = False  # a --steps response is still being written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        """Buffer the bytes and answer what is complete."""
        self.buffer += data
        self.process()

    def process(self) -> None:
        """Answer every complete request in the buffer (one at a time while streaming)."""
        transport = self.transport
        while transport is not None and not transport.is_closing() and not self.streaming:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    transport.close()
                return
            lines = bytes(self.buffer[:end]).split(b"\r\n")
            try:
                method, target, version = lines[0].split(b" ", 2)
            except ValueError:
                transport.write(
                    self.responder.error(400, "Bad Request", "bad request line", "BadRequestError")
                )
                transport.close()
                return
            length = 0
            close = version == b"HTTP/1.0"
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip() or 0)
                elif name == b"connection":
                    value = value.strip().lower()
                    close = value == b"close" or (close and value != b"keep-alive")
            if len(self.buffer) < end + 4 + length:
                return  # body not complete yet
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            pieces, drop = self.responder.respond(method, target, body)
            transport.write(pieces[0])
            if len(pieces) > 1 and self.stepper is not None:
                self.streaming = True
                self.stepper.add(self, pieces, drop or close)
                return
            if drop or close:
                transport.close()
                return


async def serve(host: str, port: int, responder: Responder, step_s: float | None) -> None:
    """Bind, announce the port, and serve until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    stepper = Stepper(step_s, responder) if step_s is not None else None
    server = await loop.create_server(
        lambda: HttpProtocol(responder, stepper), host, port, reuse_address=True, backlog=1024
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on {bound}", flush=True)
    stop = loop.create_future()

    def stop_once() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_once)
    steps = asyncio.create_task(stepper.run()) if stepper is not None else None
    async with server:
        await stop
    if steps is not None:
        steps.cancel()


def main(argv: list[str] | None = None) -> int:
    """Parse options, pin to a CPU if asked, and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to this CPU")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument(
        "--fail-every",
        type=int,
        default=0,
        help="answer every Nth completion request with HTTP 500 (0: never)",
    )
    parser.add_argument(
        "--drop-after",
        type=int,
        default=None,
        help="close the connection after K token chunks, without [DONE]",
    )
    parser.add_argument("--model", default="tiny-llama", help="model name when none is sent")
    parser.add_argument(
        "--steps",
        action="store_true",
        help="write chunks like an engine: per step one chunk per running "
        "stream, each its own write (default: a response in one write)",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="with --steps, the least time per step (0: yield only)",
    )
    args = parser.parse_args(argv)
    if args.tokens_per_chunk < 1:
        parser.error("--tokens-per-chunk must be at least 1")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    responder = Responder(
        args.tokens_per_chunk, args.fail_every, args.drop_after, args.model, steps=args.steps
    )
    asyncio.run(serve(args.host, args.port, responder, args.step_ms / 1000 if args.steps else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
