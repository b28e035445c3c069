"""Runs a Plan: one worker process per RunSpec, timeouts, process-group cleanup, failures as data.

The parent never imports vLLM. It hands each worker a JSON spec, reads one JSON result back,
checks the exit code, and stores a RunRecord as soon as the launch ends, so an interrupted
run keeps everything that finished.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.catalog import BUILTIN_MODELS, IMPL_ENV, IMPL_REPORT_DIR_ENV, SPAWNED_ENV
from harness.env import fingerprint
from harness.errors import ExitCode, ScenarioError, StorageError
from harness.lifeline import die_with_parent
from harness.plan import Plan, RunSpec, expand_plan
from harness.preflight import preflight
from harness.records import RunRecord, RunStatus, WorkerResult
from harness.scenario import Scenario, scenario_hash
from harness.store import (
    mark_abandoned,
    new_run_id,
    release_space,
    reserve_space,
    save_manifest,
    save_run_record,
    write_json_atomic,
)

WORKER_MODULE = "harness.engine.worker"
SERVE_WORKER_MODULE = "harness.engine.serve_worker"
# The seam for fault injection: tests point this at a worker that crashes, hangs or writes
# garbage; the real engine worker is the default.
WORKER_MODULE_ENV = "SPECBENCH_WORKER_MODULE"
MODELS_MODULE = "harness.engine.models"
LOG_TAIL_LINES = 25
KILL_GRACE_S = 10.0
# Seconds a precision run keeps for engine shutdown, process exit and the report.
SHUTDOWN_RESERVE_S = 25.0

Progress = Callable[[str], None]


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the parent while a run was in flight."""


def device_env(device: str, tp: int) -> dict[str, str]:
    """Engine environment the device needs (measured facts in VLLM_ON_CPU.md): on the CPU,
    one core group per TP rank."""
    if device != "cpu":
        return {}
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    if tp > 1:
        cpus = sorted(os.sched_getaffinity(0))
        per = max(1, len(cpus) // tp)
        groups = [cpus[i * per:(i + 1) * per] for i in range(tp)]
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            ",".join(str(c) for c in group) for group in groups
        )
    return env


def read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file (empty if it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the worker's whole process group (vLLM's engine core and TP workers), then
    SIGKILL what is left: no engine process may outlive its launch."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM into Interrupted (SIGINT already raises KeyboardInterrupt)."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then raise as they would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum: int, frame: Any) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            if pending[0] == signal.SIGINT:
                raise KeyboardInterrupt
            raise Interrupted(signal.Signals(pending[0]).name)


def launch(cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float,
           on_start: Callable[[int], None] | None = None) -> tuple[int | None, float, bool]:
    """Run `cmd` in its own session with output to `log_path` (`on_start` gets its pid, which
    is also its session id). Returns (exit code or None on timeout, wall seconds, timed_out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=die_with_parent)
        try:
            if on_start is not None:
                on_start(proc.pid)
            code = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
        finally:
            # Also on success: reap anything the worker left in its group. A second Ctrl-C
            # must not cut this short and leave engine processes behind: it waits its turn.
            with _signals_deferred():
                _kill_group(proc)
    return code, time.perf_counter() - start, timed_out


@dataclass
class RunOutcome:
    """What run_plan returns: where the results are and how each launch ended."""

    run_dir: Path
    records: list[RunRecord] = field(default_factory=list)
    interrupted: bool = False
    setup_s: float = 0.0
    wall_s: float = 0.0

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if any(r.status != "ok" for r in self.records):
            return ExitCode.RUN_FAILED
        return ExitCode.OK


def models_command(names: list[str], models_cache: Path | None) -> list[str]:
    """The worker-side command that builds built-in models (torch stays out of this process)."""
    cache = ["--cache-dir", str(models_cache)] if models_cache is not None else []
    return [sys.executable, "-m", MODELS_MODULE, *cache, *names]


def prepare_models(plan: Plan, run_dir: Path, models_cache: Path | None,
                   progress: Progress) -> tuple[bool, str, float]:
    """Build missing built-in models once, in a worker-side process, before any launch."""
    names: list[str] = []
    for run in plan.runs:
        spec = run.engine_args.get("speculative_config") or {}
        for name in (run.engine_args.get("model"), spec.get("model")):
            if name in BUILTIN_MODELS and name not in names:
                names.append(name)
    if not names:
        return True, "", 0.0
    progress(f"preparing built-in models: {', '.join(names)}")
    cmd = models_command(names, models_cache)
    log = run_dir / "logs" / "models.log"
    code, wall, timed_out = launch(cmd, {**os.environ, "PYTHONUNBUFFERED": "1"}, log, 1800)
    if code != 0:
        why = "timed out" if timed_out else f"exit code {code}"
        return False, f"building models failed ({why}):\n{read_tail(log)}", wall
    return True, "", wall


def default_worker_cmd(mode: str) -> list[str]:
    """The worker process of a mode (the fault-injection seam overrides both)."""
    module = SERVE_WORKER_MODULE if mode == "serve" else WORKER_MODULE
    return [sys.executable, "-m", os.environ.get(WORKER_MODULE_ENV, module)]


def run_logs(run: RunSpec) -> tuple[str, str | None]:
    """The worker log and (serve mode) the server log, relative to the run folder."""
    server = f"logs/{run.run_key}.server.log" if run.mode == "serve" else None
    return f"logs/{run.run_key}.log", server


def failure_tail(run_dir: Path, run: RunSpec) -> str:
    """What a reader needs to see of a failed launch: the worker's log tail and, in serve mode,
    the server's."""
    worker_log, server_log = run_logs(run)
    tail = read_tail(run_dir / worker_log)
    if server_log is not None and (run_dir / server_log).is_file():
        tail += f"\n--- {server_log} ---\n" + read_tail(run_dir / server_log)
    return tail


def run_tp(run: RunSpec) -> int:
    return int(run.engine_args.get("tensor_parallel_size", 1))


def run_one(run: RunSpec, run_dir: Path, base_dir: Path,
            models_cache: Path | None, worker_cmd: list[str],
            deadline_unix: float | None = None,
            on_start: Callable[[int], None] | None = None) -> RunRecord:
    """Launch one worker for `run` and turn however it ended into a RunRecord."""
    work = run_dir / "work" / run.run_key
    report_dir = work / "impl"
    report_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = work / "spec.json", work / "result.json"
    out_path.unlink(missing_ok=True)
    write_json_atomic(spec_path, {
        "run": run.model_dump(mode="json"),
        "base_dir": str(base_dir),
        "models_cache": str(models_cache) if models_cache else None,
        "deadline_unix": deadline_unix,
    })
    env = {**os.environ, **device_env(run.device, run_tp(run)), **run.env, "PYTHONUNBUFFERED": "1",
           IMPL_REPORT_DIR_ENV: str(report_dir)}
    env.pop(IMPL_ENV, None)
    if run.implementation:
        env[IMPL_ENV] = run.implementation
    log_rel, server_log = run_logs(run)
    log_path = run_dir / log_rel
    extra = ["--server-log", str(run_dir / server_log)] if server_log else []
    env[SPAWNED_ENV] = repr(time.time())  # lets the worker time its own start
    code, wall, timed_out = launch(
        [*worker_cmd, "--spec", str(spec_path), "--out", str(out_path), *extra],
        env, log_path, run.timeout_s, on_start,
    )
    base = {"run_key": run.run_key, "variant": run.variant, "round": run.round,
            "order": run.order, "exit_code": code, "wall_s": wall, "log_file": log_rel,
            "server_log_file": server_log}
    if timed_out:
        return RunRecord(**base, status="timeout", log_tail=failure_tail(run_dir, run),
                         error=f"worker exceeded timeout_s={run.timeout_s:g}")
    result: WorkerResult | None = None
    problem = None
    try:
        result = WorkerResult.model_validate_json(out_path.read_text())
    except FileNotFoundError:
        problem = "worker wrote no result"
    except (ValidationError, ValueError) as exc:
        problem = f"worker wrote an unreadable result ({str(exc).splitlines()[0]})"
    status: RunStatus
    if result is not None and result.run_key != run.run_key:
        problem, result = f"worker answered for {result.run_key!r}, not {run.run_key!r}", None
    if result is not None and result.status == "ok" and code == 0:
        got, want = len(result.passes), run.expected_passes
        # A precision run stops when its target or budget says so, after whole blocks.
        short = (got == 0 or got % max(1, len(run.block_order)) != 0) if run.precision \
            else got != want
        if short:
            status, problem = "failed", f"worker returned {got} passes, expected {want}"
        else:
            status = "ok"
    else:
        status = "failed"
        problem = problem or (result.error if result and result.error else None)
        problem = problem or f"worker exited with code {code}"
        if code not in (0, None) and result is None:
            problem = f"worker exited with code {code}; {problem}"
    return RunRecord(**base, status=status, error=problem, result=result,
                     log_tail=failure_tail(run_dir, run) if status != "ok" else None)


def unlaunched_record(run: RunSpec, **fields: Any) -> RunRecord:
    """The record of a launch whose worker never reported (models failed, or interrupted)."""
    return RunRecord(run_key=run.run_key, variant=run.variant, round=run.round,
                     order=run.order, wall_s=0.0, **fields)


def run_plan(scenario: Scenario, scenario_path: Path | None, results_root: Path,
             models_cache: Path | None = None, progress: Progress = print,
             worker_cmd: list[str] | None = None, run_id: str | None = None,
             clean: bool = False) -> RunOutcome:
    """Run every launch of the scenario's plan, storing results under results_root/<run-id>.

    A failed launch is recorded and the plan goes on; Ctrl-C or SIGTERM stops the launch in
    flight (its process group is killed), marks the run interrupted and keeps the rest. A
    results folder that stops taking writes (a full disk) stops the run with StorageError,
    the manifest saying so. `clean` stops leftover processes of dead runs found there.
    """
    started = time.perf_counter()
    base_dir = scenario_path.parent.resolve() if scenario_path else Path.cwd()
    plan = expand_plan(scenario)
    preflight(scenario, plan, base_dir)
    if run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", run_id):
        raise ScenarioError(f"--run-id {run_id!r}: use a plain name (letters, digits, '-', "
                            "'_', '.'), no '/' or '..'")
    try:
        results_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"--results-dir {results_root}: cannot create it "
                            f"({exc.strerror})") from None
    if not os.access(results_root, os.W_OK | os.X_OK):
        raise ScenarioError(f"--results-dir {results_root}: not writable")
    for line in mark_abandoned(results_root, clean):
        progress(f"found a dead run: {line}")
    run_id = run_id or new_run_id(scenario.name)
    run_dir = results_root / run_id
    if run_dir.exists():
        raise ScenarioError(f"--run-id {run_id}: {run_dir} already exists; choose another")
    worker_cmd = worker_cmd or default_worker_cmd(scenario.mode)
    outcome = RunOutcome(run_dir=run_dir)

    manifest: dict[str, Any] = {
        "run_id": run_id,
        "status": "running",
        # Lets a later run tell a run whose specbench was killed from one still going.
        "runner_pid": os.getpid(),
        "created_unix": time.time(),
        "scenario_file": str(scenario_path) if scenario_path else None,
        "scenario": scenario.model_dump(mode="json"),
        "scenario_hash": scenario_hash(scenario),
        "fingerprint": fingerprint(scenario_hash(scenario)),
        "device_env": device_env(scenario.device, scenario.tensor_parallel_size),
        "plan": plan.model_dump(mode="json"),
        "runs": [],
        # The worker whose session a later run checks for leftovers, should this one die.
        "in_flight": None,
    }

    def finish(status: str, error: str | None = None) -> RunOutcome:
        outcome.wall_s = time.perf_counter() - started
        manifest.update(status=status, finished_unix=time.time(), in_flight=None,
                        timings={"setup_s": outcome.setup_s, "wall_s": outcome.wall_s},
                        **({"error": error} if error else {}))
        save_manifest(run_dir, manifest)
        release_space(run_dir)
        return outcome

    def keep(record: RunRecord) -> None:
        """A launch's record is stored, and listed in the manifest, as soon as it exists."""
        outcome.records.append(record)
        save_run_record(run_dir, record)
        manifest["runs"].append({"run_key": record.run_key, "status": record.status})

    def keep_unsaved() -> None:
        """After the disk filled: store the records whose writes failed, in the space freed."""
        saved = {entry["run_key"] for entry in manifest["runs"]}
        for record in outcome.records:
            if record.run_key not in saved:
                save_run_record(run_dir, record)
                manifest["runs"].append({"run_key": record.run_key, "status": record.status})

    def started_worker(run: RunSpec) -> Callable[[int], None]:
        def note(pid: int) -> None:
            manifest["in_flight"] = {"run_key": run.run_key, "worker_pid": pid,
                                     "started_unix": time.time()}
            save_manifest(run_dir, manifest)
        return note

    in_flight: RunSpec | None = None
    try:
        run_dir.mkdir(parents=True)
        reserve_space(run_dir)
        save_manifest(run_dir, manifest)
        with _signals_raise():
            try:
                ok, why, outcome.setup_s = prepare_models(plan, run_dir, models_cache,
                                                          progress)
                if not ok:
                    for run in plan.runs:
                        keep(unlaunched_record(run, status="failed",
                                               error=why.splitlines()[0], log_tail=why,
                                               log_file="logs/models.log"))
                    return finish("failed")
                # Precision runs spend the budget on blocks, keeping time to shut down.
                deadline = (time.time() - (time.perf_counter() - started)
                            + scenario.precision.budget_s - SHUTDOWN_RESERVE_S
                            if scenario.precision is not None else None)
                for run in plan.runs:
                    in_flight = run
                    progress(f"[{run.order + 1}/{len(plan.runs)}] {run.run_key}: launching")
                    record = run_one(run, run_dir, base_dir, models_cache, worker_cmd,
                                     deadline, started_worker(run))
                    manifest["in_flight"] = None
                    keep(record)
                    save_manifest(run_dir, manifest)
                    detail = f" ({record.error})" if record.error else ""
                    progress(f"[{run.order + 1}/{len(plan.runs)}] {run.run_key}: "
                             f"{record.status} in {record.wall_s:.1f}s{detail}")
                    in_flight = None
            except (KeyboardInterrupt, Interrupted) as exc:
                outcome.interrupted = True
                if in_flight is not None:
                    # launch() already killed its process group; keep what its logs say.
                    worker_log, server_log = run_logs(in_flight)
                    why = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
                    keep(unlaunched_record(in_flight, status="interrupted",
                                           error=f"interrupted by {why}", log_file=worker_log,
                                           server_log_file=server_log,
                                           log_tail=failure_tail(run_dir, in_flight)))
                progress("interrupted: the launch in flight was stopped; finished launches "
                         "kept")
                return finish("interrupted")
        return finish("complete" if outcome.exit_code == ExitCode.OK else "failed")
    except OSError as exc:
        # Our own writes failed (the worker's group is already stopped): a full disk or a
        # folder gone read-only. Free the reserve so the manifest can say how the run ended.
        where = f" writing {exc.filename}" if exc.filename else ""
        why = f"{exc.strerror or exc}{where}"
        told = "its manifest says status: failed"
        try:
            release_space(run_dir)
            keep_unsaved()
            finish("failed", error=why)
        except OSError:
            told = "its manifest could not be updated (the next run marks it abandoned)"
        raise StorageError(f"results folder {run_dir}: {why}; the run stopped with "
                           f"{len(manifest['runs'])} launch(es) recorded, and {told}") from None
