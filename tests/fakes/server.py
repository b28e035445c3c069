"""Fault-injecting stand-in for vLLM's OpenAI server (selected with SPECBENCH_SERVER_MODULE).

Takes the server's command line (only --host and --port matter) and behaves as the variant's
FAKE_SERVER_MODE says: ok (streams max_tokens one-token chunks), exit (dies before /health),
error (answers every completion with HTTP 500), die (exits mid-stream on the third completion).
Like vLLM's engine core, it starts a child in its process group, so a test can check that
nothing outlives the launch. Real measurements only ever come from real vLLM servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys

from aiohttp import web

MODE = os.environ.get("FAKE_SERVER_MODE", "ok")
completions = 0


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="")


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(text="vllm:num_requests_running 0.0\n")


async def complete(request: web.Request) -> web.StreamResponse:
    global completions
    completions += 1
    body = await request.json()
    if MODE == "error":
        return web.json_response({"error": {"message": "fake failure"}}, status=500)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    n = int(body["max_tokens"])
    for i in range(n):
        if MODE == "die" and completions >= 3 and i == n // 2:
            os._exit(9)
        choice = {
            "index": 0,
            "text": f" w{i}",
            "token_ids": [3 + i],
            "finish_reason": "length" if i == n - 1 else None,
        }
        await response.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await asyncio.sleep(0.001)
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _engine_flags = parser.parse_known_args()
    print("fake server: starting", MODE, flush=True)
    if MODE == "exit":
        print("fake server: refusing to start", flush=True)
        sys.exit(3)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # "engine core"
    app = web.Application()
    app.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.post("/v1/completions", complete),
        ]
    )
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
