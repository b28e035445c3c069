"""Runs a Plan: every launch through an executor, its record stored as soon as it exists,
failures as data, and no way of ending the run leaving an engine behind.

The parent never imports vLLM. An interrupted run keeps everything that finished; a dead
earlier run in the same results folder is found, and its leftover processes named (or, with
clean, stopped); a results folder that stops taking writes ends the run in one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.scenario import scenario_hash
from harness.config.sweep import cell_label
from harness.env import COMPAT_FIELDS, find_gpus, fingerprint, gpu_ids
from harness.errors import ExitCode, ResultsError, ScenarioError, StorageError
from harness.execute.local import (
    Executor,
    Interrupted,
    LaunchAll,
    LocalExecutor,
    Progress,
    device_env,
    failure_tail,
    kept_passes,
    run_logs,
    with_kept_passes,
)
from harness.lifeline import kill_processes, pid_alive, session_processes
from harness.machine import machine
from harness.plan.preflight import preflight
from harness.results.index import comparison_key, earlier_runs_of
from harness.results.run import Run, load_run
from harness.results.store import (
    new_run_id,
    release_space,
    reserve_space,
    save_run_record,
    supersede,
)
from harness.wire.manifest import MANIFEST, InFlight, LaunchEntry, Manifest
from harness.wire.platform import Platform
from harness.wire.records import RunRecord
from harness.wire.spec import Plan, RunSpec

# Seconds a precision run keeps for engine shutdown, process exit and the report.
SHUTDOWN_RESERVE_S = 25.0


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM into Interrupted (SIGINT already raises KeyboardInterrupt, unless specbench
    was started with it ignored, as a non-interactive shell starts a background job: then it
    stays ignored, and so does a SIGTERM started ignored)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


def _entry(record: RunRecord) -> LaunchEntry:
    """A finished launch as the manifest indexes it, with the platform its engine reported."""
    platform = record.result.platform if record.result is not None else None
    return LaunchEntry(run_key=record.run_key, status=record.status, platform=platform)


KV_PIN = "num_gpu_blocks_override"


def pin_kv_capacity(run: RunSpec, records: list[RunRecord]) -> RunSpec:
    """Launch-per-arm on a GPU: vLLM sizes each launch's KV cache from the memory free at its
    start, so arms in separate launches could hold different numbers of requests. A launch
    without its own num_gpu_blocks_override gets the least capacity an earlier launch of its
    cell reported (the platform's kv_blocks), so every later launch holds what the first did.
    Not where an earlier launch ran vLLM's extensible KV cache (0.34 on CUDA by default): there
    vLLM sizes the cache from the memory free after warm-up and CUDA-graph capture, and the
    override would switch that off (vLLM then sizes the cache before its graphs, which can run
    out of memory at capture); each launch keeps vLLM's own sizing, and the table's Setup line
    gives each launch's capacity, with a warning where the arms' differ. Unchanged (the same
    object) otherwise: a CPU sizes it from VLLM_CPU_KVCACHE_SPACE alike in every launch, and
    one engine has one cache."""
    if run.device != "cuda" or run.design == "one-engine" or KV_PIN in run.engine_args:
        return run
    earlier = _earlier_platforms(run, records)
    if any(p.kv_extensible for p in earlier):
        return run
    seen = [p.kv_blocks for p in earlier if p.kv_blocks]
    if not seen:
        return run
    return run.model_copy(update={"engine_args": {**run.engine_args, KV_PIN: min(seen)}})


def _earlier_platforms(run: RunSpec, records: list[RunRecord]) -> list[Platform]:
    """The platforms earlier complete launches of the run's cell reported."""
    return [
        r.result.platform
        for r in records
        if r.status == "ok"
        and r.cell == run.cell
        and r.result is not None
        and r.result.platform is not None
    ]


def kv_left_to_vllm(run: RunSpec, records: list[RunRecord]) -> bool:
    """Whether pin_kv_capacity leaves this launch to vLLM's extensible KV cache (said in the
    progress line: the cache is not pinned, and the table gives each launch's)."""
    return (
        run.device == "cuda"
        and run.design != "one-engine"
        and KV_PIN not in run.engine_args
        and any(p.kv_extensible for p in _earlier_platforms(run, records))
    )


def failed_to_start(run: RunSpec, records: list[RunRecord]) -> str | None:
    """Why a launch is not started: an earlier launch of the same arms and cell failed before
    its first pass (an engine or server that did not start, a start-up timeout, a refusal in
    the warm-up). Its later rounds would load the same engine and fail the same way: a cold
    GPU model costs minutes each. None: launch it."""
    for earlier in records:
        result = earlier.result
        if (
            earlier.status in ("failed", "timeout")
            and earlier.variant == run.variant
            and earlier.cell == run.cell
            and (result is None or not (result.passes or result.warmup_passes))
        ):
            first = (earlier.error or earlier.status).splitlines()[0][:300]
            return (
                f"not launched: {earlier.run_key}, the same configuration, failed before "
                f"its first pass ({first}); `specbench run --resume` tries it again"
            )
    return None


def unlaunched_record(run: RunSpec, **fields: Any) -> RunRecord:
    """The record of a launch whose worker never reported (models failed, or interrupted)."""
    return RunRecord(**run.record_fields(), wall_s=0.0, **fields)


# Fingerprint fields a resumed run must share with its start (besides each variant's build).
RESUME_FIELDS = (*COMPAT_FIELDS, "git_sha")


def check_resumable(plan: Plan, results: Run, builds: dict[str, Any]) -> None:
    """A stored run may be resumed by this plan here: same scenario, same machine and builds,
    not complete, and not still running."""
    where = f"--resume {results.path}"
    manifest = results.manifest
    if manifest.scenario_hash != plan.scenario_hash:
        old, new = manifest.scenario, plan.scenario.model_dump(mode="json")
        fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise ScenarioError(
            f"{where}: the scenario changed since that run started ("
            f"{', '.join(fields) or 'hash'} differ); start a new run"
        )
    now = fingerprint(plan.scenario_hash)
    was = manifest.fingerprint
    changed = [
        f"{k} ({was.get(k)} -> {now.get(k)})" for k in RESUME_FIELDS if was.get(k) != now.get(k)
    ]
    old_builds = manifest.builds
    changed += [
        f"the build of {name}"
        for name in builds
        if name in old_builds and not _same_build(old_builds[name], builds[name])
    ]
    if changed:
        raise ScenarioError(
            f"{where}: the environment changed since that run started: "
            f"{', '.join(changed)}; start a new run"
        )
    status = manifest.status
    if status == "complete":
        raise ScenarioError(f"{where}: that run is complete; nothing to resume")
    pid = manifest.runner_pid
    if status == "running" and isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
        raise ScenarioError(f"{where}: that run is still running (specbench pid {pid})")
    planned = {r.run_key for r in plan.runs}
    strangers = sorted({r.run_key for r in results.runs} - planned)
    if strangers:
        raise ScenarioError(
            f"{where}: its launches {', '.join(strangers[:3])} are not in this "
            "plan; start a new run"
        )


def _same_build(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two build descriptions of one build: equal but for how the interpreter was spelled
    (.venv/bin/python and .venv/bin/python3 are one file)."""

    def key(build: dict[str, Any]) -> dict[str, Any]:
        python = build.get("python")
        return {**build, "python": os.path.realpath(python) if isinstance(python, str) else python}

    return key(a) == key(b)


def _lock_gpus(plan: Plan) -> list[str] | None:
    """The GPUs a CUDA run locks (one lock each, harness.machine): those it may use; None (the
    machine's one lock) for a run on the CPU."""
    if all(run.device != "cuda" for run in plan.runs):
        return None
    return gpu_ids(find_gpus().gpus) or None


def run_plan(
    plan: Plan,
    results_root: Path,
    executor: Executor | None = None,
    progress: Progress = print,
    run_id: str | None = None,
    clean: bool = False,
    resume: Path | None = None,
    wait: bool = True,
    shared_machine: bool = False,
) -> RunOutcome:
    """Run every launch of `plan` through `executor` (default: local worker processes),
    storing results under results_root/<run-id>. The plan is the whole contract: every check
    runs on it, launch by launch, before anything starts.

    A failed launch is recorded and the plan goes on; Ctrl-C or SIGTERM stops the launch in
    flight (its process group is killed), marks the run interrupted and keeps the rest. A
    results folder that stops taking writes (a full disk) stops the run with StorageError,
    the manifest saying so. `clean` stops leftover processes of dead runs found there.

    One benchmark at a time: the machine's lock (harness.machine; on GPUs, one lock per GPU
    the run may use) is held from the run folder's creation to the run's end; a run started
    meanwhile waits (`wait=False`: refuses, before any folder exists); `shared_machine` takes
    no lock and the manifest says so.
    """
    return _PlanRun(plan, results_root, executor, progress, run_id, clean, resume).run(
        wait, shared_machine
    )


def _check_run_id(run_id: str | None) -> None:
    if run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", run_id):
        raise ScenarioError(
            f"--run-id {run_id!r}: use a plain name (letters, digits, '-', "
            "'_', '.'), no '/' or '..'"
        )


def _check_plan_open(results_root: Path, manifest: Manifest) -> None:
    """A planned series (planned_runs) whose runs are all complete in `results_root` takes
    no further run: it would get no verdict (no look past the plan's last is valid), so it
    is refused before any folder or engine exists."""
    planned = (manifest.scenario or {}).get("planned_runs")
    key = comparison_key(manifest)
    if not planned or key is None or manifest.created_unix is None:
        return
    done = earlier_runs_of(results_root, key, manifest.created_unix, manifest.run_id or "")
    if len(done) >= planned:
        raise ScenarioError(
            f"planned_runs: {planned}: this comparison's {len(done)} runs are complete in "
            f"{results_root} (the plan's last look: {done[planned - 1].name}), so a further "
            "run would get no verdict; plan a new series (another planned_runs is another "
            "comparison) or drop planned_runs"
        )


def _check_results_root(results_root: Path) -> None:
    try:
        results_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(
            f"--results-dir {results_root}: cannot create it ({exc.strerror})"
        ) from None
    if not os.access(results_root, os.W_OK | os.X_OK):
        raise ScenarioError(f"--results-dir {results_root}: not writable")


class _PlanRun:
    """One run of a plan, held as pyperf's Manager holds a benchmark's: the plan, the executor,
    the run folder, its manifest, the records so far and the launches in flight. Built, it has
    made every check (before any folder of the run exists); a method per step from there: run
    (the machine's lock, the folder, every launch), launch_one, ended (a record kept as soon
    as it exists), and the ways a run ends (finish, _interrupted, _storage_failed)."""

    def __init__(
        self,
        plan: Plan,
        results_root: Path,
        executor: Executor | None,
        progress: Progress,
        run_id: str | None,
        clean: bool,
        resume: Path | None,
    ) -> None:
        self.started = time.perf_counter()
        self.plan, self.scenario, self.base_dir = plan, plan.scenario, Path(plan.base_dir)
        self.builds = preflight(self.scenario, plan, self.base_dir)
        self.executor = executor or LocalExecutor()
        self.executor.check(plan)  # e.g. a cluster to join, with room for every launch
        self.progress = progress
        _check_run_id(run_id)
        _check_results_root(results_root)
        for line in mark_abandoned(results_root, clean):
            progress(f"found a dead run: {line}")
        self.previous = load_run(resume, self.scenario) if resume is not None else None
        self.run_id, self.run_dir = self._place(results_root, run_id)
        self.outcome = RunOutcome(run_dir=self.run_dir)
        self.manifest = self._new_manifest()
        if self.previous is None:
            _check_plan_open(results_root, self.manifest)
        self.done: set[str] = set()
        self.flying: dict[str, RunSpec] = {}  # launches started and not yet recorded
        if self.previous is not None:
            self._take_over(self.previous)

    def _place(self, results_root: Path, run_id: str | None) -> tuple[str, Path]:
        """The run's id and folder: the resumed run's, or a new one that must not exist."""
        if self.previous is not None:
            check_resumable(self.plan, self.previous, self.builds)
            return self.previous.run_id, self.previous.path
        run_id = run_id or new_run_id(self.scenario.name)
        run_dir = results_root / run_id
        if run_dir.exists():
            raise ScenarioError(f"--run-id {run_id}: {run_dir} already exists; choose another")
        return run_id, run_dir

    def _new_manifest(self) -> Manifest:
        scenario = self.scenario
        return Manifest(
            run_id=self.run_id,
            status="running",
            # Lets a later run tell a run whose specbench was killed from one still going.
            runner_pid=os.getpid(),
            created_unix=time.time(),
            scenario_file=self.plan.scenario_file,
            scenario=scenario.model_dump(mode="json"),
            scenario_hash=scenario_hash(scenario),
            fingerprint=fingerprint(scenario_hash(scenario)),
            device_env=device_env(
                scenario.device, scenario.tensor_parallel_size, scenario.model_runner
            ),
            # The vLLM build each variant ran under (interpreter, version, location, commit).
            builds=self.builds,
            plan=self.plan.model_dump(mode="json"),
            runs=[],
            # The worker whose session a later run checks for leftovers, should this one die.
            in_flight=None,
        )

    def _take_over(self, previous: Run) -> None:
        """A resumed run keeps the launches that finished well, and its start."""
        manifest = self.manifest
        kept = [r for r in previous.runs if r.status == "ok"]
        self.done = {r.run_key for r in kept}
        self.outcome.records.extend(kept)
        manifest.created_unix = previous.manifest.created_unix
        manifest.fingerprint = previous.manifest.fingerprint
        manifest.runs = [_entry(r) for r in kept]
        manifest.resumed = [
            *previous.manifest.resumed,
            {"unix": time.time(), "from_status": previous.manifest.status, "kept": len(kept)},
        ]

    # -- run: under the machine's lock, the folder, then every launch

    def run(self, wait: bool, shared_machine: bool) -> RunOutcome:
        stack = contextlib.ExitStack()
        holding = stack.enter_context(
            machine(
                f"run {self.run_id} of {self.scenario.name}",
                wait,
                shared_machine,
                self.progress,
                _lock_gpus(self.plan),
            )
        )
        self.manifest.machine = holding.to_dict()
        # A wait for the machine is not the run's (nor its budget's).
        self.started = time.perf_counter()
        try:
            self._open_folder()
            with _signals_raise():
                try:
                    return self._launch()
                except (KeyboardInterrupt, Interrupted) as exc:
                    return self._interrupted(exc)
        except OSError as exc:
            raise self._storage_failed(exc) from None
        finally:
            stack.close()  # the machine's lock, for the next benchmark

    def _open_folder(self) -> None:
        run_dir, done = self.run_dir, self.done
        run_dir.mkdir(parents=True, exist_ok=self.previous is not None)
        if self.previous is not None:
            supersede(run_dir, done)
            self.progress(
                f"resuming {self.run_id}: {len(done)} of {len(self.plan.runs)} launch(es) "
                f"kept, {len(self.plan.runs) - len(done)} to run"
            )
        reserve_space(run_dir)
        self.manifest.save(run_dir)

    def _launch(self) -> RunOutcome:
        todo = [run for run in self.plan.runs if run.run_key not in self.done]
        ok, why, self.outcome.setup_s = self.executor.prepare(
            self.plan, self.run_dir, self.progress
        )
        if not ok:
            for run in todo:
                self.keep(
                    unlaunched_record(
                        run,
                        status="failed",
                        error=why.splitlines()[0],
                        log_tail=why,
                        log_file="logs/models.log",
                    )
                )
            return self.finish("failed")
        launch_all = self.executor.launch_all
        if launch_all is not None:  # launches at once, as the executor can
            self._launch_together(launch_all, todo)
        else:
            for run in todo:
                self.launch_one(run)
        return self.finish("complete" if self.outcome.exit_code == ExitCode.OK else "failed")

    def _launch_together(self, launch_all: LaunchAll, todo: list[RunSpec]) -> None:
        try:
            launch_all(todo, self.run_dir, self.base_dir, self.deadline_of, self.begun, self.ended)
        except (KeyboardInterrupt, Interrupted):
            raise
        except Exception as exc:
            for run in [r for r in todo if r.run_key in self.flying]:
                self.ended(
                    run,
                    unlaunched_record(
                        run,
                        status="failed",
                        error=f"the executor failed: {type(exc).__name__}: {exc}",
                    ),
                )

    def launch_one(self, run: RunSpec) -> None:
        """One launch, through the executor, to its record; not started where an earlier
        launch of the same engine failed before its first pass."""
        records = self.outcome.records
        self.begun(run)
        skipped = failed_to_start(run, records)
        if skipped is not None:  # the same engine would load, and fail, again
            self.ended(run, unlaunched_record(run, status="failed", error=skipped))
            return
        pinned = pin_kv_capacity(run, records)
        if pinned is not run:
            self.progress(
                f"{run.run_key}: KV cache pinned to "
                f"{pinned.engine_args[KV_PIN]} blocks (the least an earlier "
                "launch of another arm got), so the arms hold alike"
            )
        elif kv_left_to_vllm(run, records):
            self.progress(
                f"{run.run_key}: KV cache not pinned: vLLM sizes it after warm-up (its "
                "extensible KV cache, which num_gpu_blocks_override would switch off); the "
                "table gives each launch's capacity"
            )
        try:
            record = self.executor.launch(
                pinned, self.run_dir, self.base_dir, self.deadline_of(run), self.started_worker(run)
            )
        except Interrupted:
            raise  # SIGTERM: the run's own ending
        except Exception as exc:
            # An executor's failure (a lost node, a broken transport, a disk full under the
            # worker) is this launch's; a disk full for the records themselves still ends the
            # run at keep() below.
            record = unlaunched_record(
                run,
                status="failed",
                error=f"the executor failed: {type(exc).__name__}: {exc}",
            )
        self.ended(run, record)

    def deadline_of(self, run: RunSpec) -> float | None:
        """Precision runs spend the budget on blocks, keeping time to shut down: the budget
        is the run's, or in a sweep (and a resumed run) each launch's, counted from when it
        starts."""
        if run.precision is None:
            return None
        since = (
            time.time()
            if self.plan.cells or self.previous is not None
            else time.time() - (time.perf_counter() - self.started)
        )
        return since + run.precision.budget_s - SHUTDOWN_RESERVE_S

    def begun(self, run: RunSpec) -> None:
        self.flying[run.run_key] = run
        cell = f" ({cell_label(run.cell_values)})" if run.cell_values else ""
        self.progress(f"[{run.order + 1}/{len(self.plan.runs)}] {run.run_key}{cell}: launching")

    def started_worker(self, run: RunSpec) -> Callable[[int], None]:
        def note(pid: int) -> None:
            self.manifest.in_flight = InFlight(
                run_key=run.run_key, worker_pid=pid, started_unix=time.time()
            )
            self.manifest.save(self.run_dir)

        return note

    def ended(self, run: RunSpec, record: RunRecord) -> None:
        self.flying.pop(run.run_key, None)
        self.manifest.in_flight = None
        self.keep(record)
        self.manifest.save(self.run_dir)
        detail = f" ({record.error})" if record.error else ""
        where = (
            f" on {record.node.get('hostname')}"
            if record.node and record.node.get("hostname")
            else ""
        )
        self.progress(
            f"[{run.order + 1}/{len(self.plan.runs)}] {run.run_key}: "
            f"{record.status} in {record.wall_s:.1f}s{where}{detail}"
        )

    def keep(self, record: RunRecord) -> None:
        """A launch's record is stored, and listed in the manifest, as soon as it exists."""
        self.outcome.records.append(record)
        save_run_record(self.run_dir, record)
        self.manifest.runs.append(_entry(record))

    def keep_unsaved(self) -> None:
        """After the disk filled: store the records whose writes failed, in the space freed."""
        saved = {entry.run_key for entry in self.manifest.runs}
        for record in self.outcome.records:
            if record.run_key not in saved:
                save_run_record(self.run_dir, record)
                self.manifest.runs.append(_entry(record))

    # -- the ways a run ends

    def _interrupted(self, exc: KeyboardInterrupt | Interrupted) -> RunOutcome:
        self.outcome.interrupted = True
        why = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        for run in list(self.flying.values()):
            # The executor already stopped it; keep what its logs say, and the passes its
            # worker kept as each ended (raw data of an unfinished launch, in no interval).
            worker_log, server_log = run_logs(run)
            result, kept = with_kept_passes(run, None, kept_passes(self.run_dir, run))
            self.keep(
                unlaunched_record(
                    run,
                    status="interrupted",
                    error=f"interrupted by {why}" + (f"; {kept}" if kept else ""),
                    log_file=worker_log,
                    server_log_file=server_log,
                    log_tail=failure_tail(self.run_dir, run),
                    result=result,
                )
            )
        self.progress(
            f"interrupted: {len(self.flying)} launch(es) in flight stopped; finished launches kept"
        )
        return self.finish("interrupted")

    def _storage_failed(self, exc: OSError) -> StorageError:
        """Our own writes failed (the worker's group is already stopped): a full disk or a
        folder gone read-only. Free the reserve so the manifest can say how the run ended."""
        where = f" writing {exc.filename}" if exc.filename else ""
        why = f"{exc.strerror or exc}{where}"
        told = "its manifest says status: failed"
        try:
            release_space(self.run_dir)
            self.keep_unsaved()
            self.finish("failed", error=why)
        except OSError:
            told = "its manifest could not be updated (the next run marks it abandoned)"
        return StorageError(
            f"results folder {self.run_dir}: {why}; the run stopped with "
            f"{len(self.manifest.runs)} launch(es) recorded, and {told}"
        )

    def finish(self, status: str, error: str | None = None) -> RunOutcome:
        outcome, manifest = self.outcome, self.manifest
        outcome.wall_s = time.perf_counter() - self.started
        manifest.status, manifest.finished_unix, manifest.in_flight = status, time.time(), None
        manifest.timings = {"setup_s": outcome.setup_s, "wall_s": outcome.wall_s}
        if error:
            manifest.error = error
        manifest.save(self.run_dir)
        release_space(self.run_dir)
        return outcome


def mark_abandoned(results_root: Path, clean: bool = False) -> list[str]:
    """Runs under `results_root` still marked running whose specbench process is gone (killed
    by SIGKILL, the OOM killer, a CI runner): mark them abandoned and say which, with any of
    their engine processes still running (stopped when `clean`)."""
    found: list[str] = []
    if not results_root.is_dir():
        return found
    for manifest_path in sorted(results_root.glob(f"*/{MANIFEST}")):
        try:
            run_dir, manifest = Manifest.read(manifest_path)
        except ResultsError:
            continue
        pid, status = manifest.runner_pid, manifest.status
        dead = isinstance(pid, int) and not pid_alive(pid)
        line = None
        if status == "running" and dead:
            manifest.status, manifest.abandoned_unix = "abandoned", time.time()
            with contextlib.suppress(OSError):  # a full disk: still report it
                manifest.save(run_dir)
            line = (
                f"{run_dir.name} (its specbench process {pid} is gone; "
                f"{len(manifest.runs)} finished launch(es) kept), now marked abandoned"
            )
        flight = manifest.in_flight
        if status in ("running", "abandoned") and dead and flight is not None:
            left = session_processes(flight.worker_pid, flight.started_unix)
            if left:
                shown = ", ".join(f"{p} {n}" for p, n in left)
                if clean:
                    kill_processes([p for p, _ in left])
                    tail = f"stopped its {len(left)} leftover process(es): {shown}"
                else:
                    tail = (
                        f"{len(left)} of its processes still run ({shown}); "
                        "`specbench run --clean` stops them"
                    )
                line = f"{line}; {tail}" if line else f"{run_dir.name}: {tail}"
        if line:
            found.append(line)
    return found
