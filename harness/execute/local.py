"""Executors: how one RunSpec becomes a finished launch and its RunRecord.

The runner (harness.execute.runner) walks a Plan and stores what comes back; an executor
decides where
and how each launch runs. LocalExecutor starts one worker process per RunSpec on this machine,
in its own session tied to specbench's life (harness.lifeline), with a timeout and a
process-group kill whatever happens; RayExecutor (harness.execute.ray_executor) runs them as
tasks on
a Ray cluster, several at once. Neither imports vLLM: the worker does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from harness.atomic import write_json_atomic
from harness.config import interpreter
from harness.config.catalog import BUILTIN_MODELS
from harness.execute.progress import (
    StallWatch,
    ThreadStack,
    describe_stall,
    parse_dump,
    stuck_thread,
)
from harness.lifeline import DUMP_SIGNAL, catches, die_with_parent, group_alive, session_processes
from harness.wire.progress import read_heartbeat, read_kept_passes, read_progress
from harness.wire.protocol import (
    HEARTBEAT_ENV,
    IMPL_ENV,
    IMPL_REPORT_DIR_ENV,
    KILL_GRACE_S,
    LOG_FILE_ENV,
    MODELS_BUILD_TIMEOUT_S,
    OVERLAY_ENV,
    PASSES_ENV,
    PATCH_ENV,
    PROFILE_DIR_ENV,
    PROFILES_DIR,
    PROGRESS_ENV,
    SIGKILL_WAIT_S,
    SPAWNED_ENV,
    SPEED_PROBE_ENV,
    STEP_TIMES_ENV,
    WorkerSpec,
    overlay_refusal,
)
from harness.wire.records import RunRecord, RunStatus, WorkerResult
from harness.wire.spec import Plan, RunSpec

WORKER_MODULE = "harness.engine.worker"
SERVE_WORKER_MODULE = "harness.engine.serve_worker"
# The seam for fault injection: tests point this at a worker that crashes, hangs or writes
# garbage; the real engine worker is the default.
WORKER_MODULE_ENV = "SPECBENCH_WORKER_MODULE"
MODELS_MODULE = "harness.engine.models"
LOG_TAIL_LINES = 25
TICK_S = 1.0  # how often a running launch's progress is looked at
# How long a process asked for its stacks may take to write them into the launch's log.
DUMP_WAIT_S = 3.0
DUMP_QUIET_S = 0.3

Progress = Callable[[str], None]
# (launch, seconds so far, the worker's progress note or None) -> shown to the user
Status = Callable[[RunSpec, float, "dict[str, Any] | None"], None]


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the parent while a run was in flight."""


# (runs, run_dir, base_dir, deadline_of, started, done): run every launch, as many at once as
# the executor can; `started(run)` as each is submitted, `done(run, record)` as each finishes.
LaunchAll = Callable[
    [
        list[RunSpec],
        Path,
        Path,
        Callable[[RunSpec], "float | None"],
        Callable[[RunSpec], None],
        Callable[[RunSpec, RunRecord], None],
    ],
    None,
]


class Executor(Protocol):
    """Where and how the launches of a plan run: everything the runner calls.
    harness.execute.local.LocalExecutor runs one launch at a time here;
    harness.execute.ray_executor.RayExecutor runs them as Ray tasks, several at once."""

    def check(self, plan: Plan) -> None:
        """Before any run folder exists: raise what this executor cannot do for `plan` (e.g.
        no node can host a launch)."""
        ...

    @property
    def launch_all(self) -> LaunchAll | None:
        """None: the runner calls `launch` for one launch after another. Otherwise the
        executor runs them all (LaunchAll), and on Ctrl-C or SIGTERM stops what is left
        before re-raising."""
        ...

    def prepare(self, plan: Plan, run_dir: Path, progress: Progress) -> tuple[bool, str, float]:
        """Anything every launch needs first (built-in models): (ok, why not, seconds)."""
        ...

    def launch(
        self,
        run: RunSpec,
        run_dir: Path,
        base_dir: Path,
        deadline_unix: float | None,
        on_start: Callable[[int], None] | None,
    ) -> RunRecord:
        """Run one launch to its end (however it ends) and return its record. `on_start`
        gets the id of the process session that holds the launch's engine processes."""
        ...


def device_env(device: str, tp: int, runner: str = "auto") -> dict[str, str]:
    """Engine environment the device and the model runner need (measured facts in
    VLLM_ON_CPU.md): on the CPU, one core group per TP rank, and for Model Runner V2 Triton's
    interpreter (harness.config.interpreter); elsewhere a forced runner's variable."""
    if device != "cpu":
        return (
            {} if runner == "auto" else {"VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "V2" else "0"}
        )
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    if tp > 1:
        cpus = sorted(os.sched_getaffinity(0))
        per = max(1, len(cpus) // tp)
        groups = [cpus[i * per : (i + 1) * per] for i in range(tp)]
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            ",".join(str(c) for c in group) for group in groups
        )
    if runner == "V2":
        env.update(interpreter.launch_env())
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
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, SIGKILL_WAIT_S)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(pgid):
                return
            time.sleep(0.1)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then raise as they would have. A signal
    specbench was started with ignored (SIGINT, as a script's background job starts it) stays
    ignored: whoever started it asked for that."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum: int, frame: Any) -> None:
        pending.append(signum)

    previous = {
        sig: signal.signal(sig, note)
        for sig in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            if pending[0] == signal.SIGINT:
                raise KeyboardInterrupt
            raise Interrupted(signal.Signals(pending[0]).name)


def launch(
    cmd: list[str],
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
    on_start: Callable[[int], None] | None = None,
    on_tick: Callable[[float], None] | None = None,
    watch: Callable[[int, float], bool] | None = None,
) -> tuple[int | None, float, bool]:
    """Run `cmd` in its own session with output to `log_path` (`on_start` gets its pid, which
    is also its session id; `on_tick` the seconds so far, every TICK_S while it runs; `watch`
    the pid and the seconds so far, every TICK_S: True ends it now, as a stalled launch).
    Returns (exit code or None on timeout or stall, wall seconds, timed_out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            if on_start is not None:
                on_start(proc.pid)
            deadline = start + timeout_s
            code, timed_out = None, False
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    timed_out = True
                    break
                try:
                    code = proc.wait(timeout=min(TICK_S, left))
                    break
                except subprocess.TimeoutExpired:
                    if on_tick is not None:
                        with contextlib.suppress(Exception):  # a display never ends a run
                            on_tick(time.perf_counter() - start)
                    if watch is not None and _stalled(watch, proc.pid, time.perf_counter() - start):
                        break
        finally:
            # Also on success: reap anything the worker left in its group. A second Ctrl-C
            # must not cut this short and leave engine processes behind: it waits its turn.
            with _signals_deferred():
                _kill_group(proc)
    return code, time.perf_counter() - start, timed_out


def _stalled(watch: Callable[[int, float], bool], pid: int, elapsed: float) -> bool:
    try:
        return watch(pid, elapsed)
    except Exception:  # noqa: BLE001 - a broken watchdog leaves the launch to its timeout
        traceback.print_exc()
        return False


def dump_stacks(sid: int, started_unix: float, logs: list[Path]) -> list[ThreadStack]:
    """Ask each process of session `sid` that handles DUMP_SIGNAL (the worker and vLLM's
    processes: harness.lifeline.dump_stacks_on_signal) for its Python stacks, one at a time so
    that each dump lands whole in the log it writes to (the launch's log, or in serve mode the
    server's), and read them back (worker first)."""
    threads: list[ThreadStack] = []
    for pid, _ in sorted(session_processes(sid, started_unix), key=lambda p: p[0] != sid):
        if not catches(pid, DUMP_SIGNAL):
            continue
        start = [_size(log) for log in logs]
        try:
            os.kill(pid, DUMP_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
        size = _settled_sizes(logs, start)
        for log_path, begin, end in zip(logs, start, size, strict=True):
            with contextlib.suppress(OSError), log_path.open("rb") as log:
                log.seek(begin)
                threads += parse_dump(log.read(end - begin).decode(errors="replace"), pid)
    return threads


def _settled_sizes(logs: list[Path], start: list[int]) -> list[int]:
    """The logs' sizes once a dump has landed: something was written and nothing more for
    DUMP_QUIET_S (or DUMP_WAIT_S has passed)."""
    deadline, size, quiet_since = time.monotonic() + DUMP_WAIT_S, list(start), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = [_size(log) for log in logs]
        if now != size:
            size, quiet_since = now, time.monotonic()
        elif size != start and time.monotonic() - quiet_since >= DUMP_QUIET_S:
            break
    return size


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class LaunchWatch:
    """Every tick of one launch: show its progress note and apply the stall rule
    (harness.execute.progress.StallWatch) to it and the engine's heartbeat; on a stall, dump
    the stacks of every process of the launch into its log and keep the line that says where
    it is stuck (`error`)."""

    def __init__(
        self,
        run: RunSpec,
        progress: Path,
        log_path: Path,
        show: Status | None,
        heartbeat: Path | None = None,
        server_log: Path | None = None,
    ) -> None:
        self.run, self.progress, self.log_path, self.show = run, progress, log_path, show
        self.heartbeat = heartbeat
        # Where the launch's processes write (a serve launch's server and engine: its own log).
        self.logs = [log_path] if server_log is None else [log_path, server_log]
        self.started_unix = time.time()
        self.rule = StallWatch(self.started_unix)
        self.error: str | None = None

    def __call__(self, pid: int, elapsed: float) -> bool:
        note = read_progress(self.progress)
        if self.show is not None:
            with contextlib.suppress(Exception):  # a display never ends a run
                self.show(self.run, elapsed, note)
        beat = read_heartbeat(self.heartbeat) if self.heartbeat is not None else None
        stall = self.rule.check(note, time.time(), beat)
        if stall is None:
            return False
        thread = stuck_thread(dump_stacks(pid, self.started_unix, self.logs))
        self.error = describe_stall(stall, thread)
        return True


def work_dir(run_dir: Path, run: RunSpec) -> Path:
    """A launch's working folder in its run folder (spec, progress note, kept passes)."""
    return run_dir / "work" / run.run_key


def kept_passes(run_dir: Path, run: RunSpec) -> Path:
    """Where a launch's worker keeps each pass as it ends (wire.progress.keep_pass)."""
    return work_dir(run_dir, run) / "passes.jsonl"


def with_kept_passes(
    run: RunSpec, result: WorkerResult | None, kept: Path
) -> tuple[WorkerResult | None, str]:
    """A launch that did not end well, with the passes its worker kept as each ended
    (wire.progress.keep_pass) where its result lacks them (no result at all: a stall, a
    kill, a crash; or one written without them): (the result, a few words on what was kept
    for its error line, '' if nothing). They stay raw data of a failed launch: analysis
    reads the passes of launches with status ok only."""
    measured, warm, bad = read_kept_passes(kept)
    have = result.passes if result is not None else []
    in_file = result.passes_in_file if result is not None else 0
    have_warm = result.warmup_passes if result is not None else []
    if len(measured) <= len(have) and len(warm) <= len(have_warm):
        return result, ""
    wrote = result is not None
    if result is None:
        result = WorkerResult(
            run_key=run.run_key,
            status="failed",
            error="the worker wrote no result: its passes as kept when each ended",
        )
    result = result.model_copy(
        update={
            "passes": measured if len(measured) > len(have) else have,
            "passes_in_file": 0 if len(measured) > len(have) else result.passes_in_file,
            "warmup_passes": warm if len(warm) > len(have_warm) else have_warm,
        }
    )
    if wrote and len(measured) <= len(have) + in_file:
        # The worker ended the launch itself (a refusal, an engine's death) and said why in
        # its own line: the passes it kept in the pass file only, and the warm-up passes it
        # had not put in its result, are kept quietly.
        return result, ""
    words = f"{len(measured)} measured pass{'' if len(measured) == 1 else 'es'}"
    if warm:
        words += f" and {len(warm)} warm-up pass{'' if len(warm) == 1 else 'es'}"
    words += " before it kept in its record (in no interval: the launch failed)"
    if bad:
        words += f"; {bad} kept line{'' if bad == 1 else 's'} unreadable"
    return result, words


def with_passes_from_file(result: WorkerResult, kept: Path) -> str | None:
    """A finished launch's measured passes read back from its pass file: a worker keeps a
    long launch's passes there only, as each ends (its memory stays flat), and counts them in
    `result.passes_in_file`. They join the passes its result carries (those it could not
    keep on disk), in pass order, without step times where the worker withdrew them. What
    cannot be found is the launch's failure, in words (None when every pass is there)."""
    if not result.passes_in_file:
        return None
    measured, _, bad = read_kept_passes(kept)
    have = {(p.repeat, p.arm, p.block) for p in result.passes}
    read = [p for p in measured if (p.repeat, p.arm, p.block) not in have]
    if len(read) != result.passes_in_file:
        unreadable = f" ({bad} line(s) unreadable)" if bad else ""
        return (
            f"the worker kept {result.passes_in_file} measured passes in {kept.name}, but "
            f"{len(read)} could be read back{unreadable}"
        )
    if result.step_times_withdrawn:
        read = [p.model_copy(update={"step_times": None}) for p in read]
    result.passes = sorted([*result.passes, *read], key=lambda p: p.repeat)
    result.passes_in_file = 0
    return None


def models_command(names: list[str], models_cache: Path | None) -> list[str]:
    """The worker-side command that builds built-in models (torch stays out of this process)."""
    cache = ["--cache-dir", str(models_cache)] if models_cache is not None else []
    return [sys.executable, "-m", MODELS_MODULE, *cache, *names]


def prepare_models(
    plan: Plan, run_dir: Path, models_cache: Path | None, progress: Progress
) -> tuple[bool, str, float]:
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
    code, wall, timed_out = launch(
        cmd, {**os.environ, "PYTHONUNBUFFERED": "1"}, log, MODELS_BUILD_TIMEOUT_S
    )
    if code != 0:
        why = "timed out" if timed_out else f"exit code {code}"
        return False, f"building models failed ({why}):\n{read_tail(log)}", wall
    return True, "", wall


def default_worker_cmd(mode: str, python: str | None = None) -> list[str]:
    """The worker process of a mode under `python`, another vLLM build's interpreter (default:
    specbench's own). The fault-injection seam overrides the module of both modes."""
    from harness.plan.builds import interpreter

    module = SERVE_WORKER_MODULE if mode == "serve" else WORKER_MODULE
    return [interpreter(python), "-m", os.environ.get(WORKER_MODULE_ENV, module)]


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


def run_one(
    run: RunSpec,
    run_dir: Path,
    base_dir: Path,
    models_cache: Path | None,
    worker_cmd: list[str],
    deadline_unix: float | None = None,
    on_start: Callable[[int], None] | None = None,
    show: Status | None = None,
) -> RunRecord:
    """Launch one worker for `run` and turn however it ended into a RunRecord."""
    work = work_dir(run_dir, run)
    report_dir = work / "impl"
    report_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = work / "spec.json", work / "result.json"
    out_path.unlink(missing_ok=True)
    write_json_atomic(
        spec_path,
        WorkerSpec(
            run=run,
            base_dir=str(base_dir),
            deadline_unix=deadline_unix,
            models_cache=str(models_cache) if models_cache else None,
        ).model_dump(mode="json"),
    )
    env = {
        **os.environ,
        **device_env(run.device, run_tp(run), run.model_runner),
        **run.env,
        "PYTHONUNBUFFERED": "1",
        IMPL_REPORT_DIR_ENV: str(report_dir),
    }
    overlay = None
    if run.overlay is not None:  # read by the plugin in every vLLM process of the launch
        overlay = work / "overlay.json"
        write_json_atomic(overlay, run.overlay.model_dump(mode="json"))
    for key, value in (
        (IMPL_ENV, run.implementation),
        (PATCH_ENV, run.patch),
        (OVERLAY_ENV, str(overlay) if overlay else None),
        (STEP_TIMES_ENV, "1" if run.step_times else None),
        (SPEED_PROBE_ENV, "1" if run.step_times and run.speed_probe else None),
        (
            PROFILE_DIR_ENV,
            str(run_dir / PROFILES_DIR / run.run_key) if run.profile_passes else None,
        ),
    ):
        env.pop(key, None)  # never inherited from the parent's environment
        if value:
            env[key] = value
    progress, heartbeat = work / "progress.json", work / "heartbeat"
    kept = kept_passes(run_dir, run)
    for path, variable in (
        (progress, PROGRESS_ENV),
        (kept, PASSES_ENV),
        (heartbeat, HEARTBEAT_ENV),
    ):
        path.unlink(missing_ok=True)  # a resumed or repeated launch starts afresh
        env[variable] = str(path)
    log_rel, server_log = run_logs(run)
    env[LOG_FILE_ENV] = log_rel
    log_path = run_dir / log_rel
    extra = ["--server-log", str(run_dir / server_log)] if server_log else []
    env[SPAWNED_ENV] = repr(time.time())  # lets the worker time its own start
    server_path = run_dir / server_log if server_log else None
    watch = LaunchWatch(run, progress, log_path, show, heartbeat, server_path)
    code, wall, timed_out = launch(
        [*worker_cmd, "--spec", str(spec_path), "--out", str(out_path), *extra],
        env,
        log_path,
        run.timeout_s,
        on_start,
        watch=watch,
    )
    base = {
        **run.record_fields(),
        "exit_code": code,
        "wall_s": wall,
        "log_file": log_rel,
        "server_log_file": server_log,
    }
    if watch.error is not None or timed_out:
        partial, words = with_kept_passes(run, None, kept)
        error = watch.error or f"worker exceeded timeout_s={run.timeout_s:g}"
        return RunRecord(
            **base,
            status="failed" if watch.error is not None else "timeout",
            log_tail=failure_tail(run_dir, run),
            error=f"{error}; {words}" if words else error,
            result=partial,
        )
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
        problem = with_passes_from_file(result, kept)
        got, want = len(result.passes), run.expected_passes
        # A precision run stops when its target or budget says so, after whole blocks.
        short = (
            (got == 0 or got % max(1, len(run.block_order)) != 0) if run.precision else got != want
        )
        if short:
            status, problem = "failed", f"worker returned {got} passes, expected {want}"
        else:
            status = "ok" if problem is None else "failed"
    else:
        status = "failed"
        problem = problem or (result.error if result and result.error else None)
        problem = problem or f"worker exited with code {code}"
        if code not in (0, None) and result is None:
            problem = f"worker exited with code {code}; {problem}"
    tail = failure_tail(run_dir, run) if status != "ok" else None
    if tail is not None and run.overlay is not None:
        # A dispatcher traced into a compiled graph fails vLLM's start: its own sentence is
        # the true reason, not "Engine core initialization failed".
        problem = overlay_refusal(read_tail(run_dir / log_rel, 5000)) or problem
    if status != "ok":
        result, words = with_kept_passes(run, result, kept)
        problem = f"{problem}; {words}" if words and problem else problem
    return RunRecord(**base, status=status, error=problem, result=result, log_tail=tail)


@dataclass
class LocalExecutor:
    """One worker process per launch on this machine (the default)."""

    models_cache: Path | None = None
    # Shown every second while a launch runs (harness.execute.progress.LaunchView.tick).
    status: Status | None = None
    launch_all: None = None  # one launch at a time, each through launch()

    def check(self, plan: Plan) -> None:
        """Nothing to check before a run folder exists: pre-flight covers this machine."""

    def prepare(self, plan: Plan, run_dir: Path, progress: Progress) -> tuple[bool, str, float]:
        return prepare_models(plan, run_dir, self.models_cache, progress)

    def launch(
        self,
        run: RunSpec,
        run_dir: Path,
        base_dir: Path,
        deadline_unix: float | None,
        on_start: Callable[[int], None] | None,
    ) -> RunRecord:
        return run_one(
            run,
            run_dir,
            base_dir,
            self.models_cache,
            default_worker_cmd(run.mode, run.python),
            deadline_unix,
            on_start,
            self.status,
        )
