"""RayExecutor: a plan's launches as Ray tasks on a cluster (`specbench run --executor ray`).

Each launch is one task that asks for what the launch needs (TP CPUs on CPU, TP GPUs on CUDA,
all on one node), builds any built-in model it lacks on that node, and runs the unchanged
worker there in a fresh process group (harness.execute.local.run_one), in a scratch folder of its
own. It ships back the launch's record, its logs and work files, and the node it ran on with
that node's environment fingerprint; the parent writes them into the run folder as each task
finishes, so statistics, storage and reports never know where a launch ran. A task that fails,
times out or loses its node is a failed launch with its reason; Ctrl-C or SIGTERM cancels every
pending and running task (force: Ray kills the task's process, whose worker ends its group on
losing its parent). The parent never imports vLLM; Ray is imported only here.

Inside a task vLLM runs as it does locally, with its multiprocessing executor for TP: one task
is one node's processes, not a Ray job of its own (see docs/ray.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.config.catalog import BUILTIN_MODELS
from harness.errors import HardwareError, ScenarioError
from harness.execute.local import Interrupted, Progress, run_tp
from harness.wire.protocol import MODELS_BUILD_TIMEOUT_S
from harness.wire.records import RunRecord
from harness.wire.spec import Plan, RunSpec

Pin = Literal["none", "node"]
# What a task is given of the parent's environment: specbench's own settings (models cache,
# fault seams); a variant's env travels in its RunSpec.
FORWARD_PREFIXES = ("SPECBENCH_",)
CANCEL_WAIT_S = 20.0  # each step of a cancel: past the worker's group-kill grace (10 s + 5)
POLL_S = 1.0


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ScenarioError(
            "--executor ray: Ray is not installed here (pip install -e "
            "'.[ray]'; scripts/setup.sh installs it)"
        ) from None
    return ray


def _builtin_names(run: RunSpec) -> list[str]:
    spec = run.engine_args.get("speculative_config") or {}
    return [n for n in (run.engine_args.get("model"), spec.get("model")) if n in BUILTIN_MODELS]


def needs(run: RunSpec) -> dict[str, float]:
    """The Ray resources one launch asks for: a core per TP rank on CPU, a GPU per rank on
    CUDA (CPUs for the worker process then come from the GPU node's share)."""
    tp = run_tp(run)
    return (
        {"num_cpus": tp, "num_gpus": 0} if run.device == "cpu" else {"num_cpus": 1, "num_gpus": tp}
    )


def remote_launch(
    run_json: str,
    base_dir: str,
    models_cache: str | None,
    budget_s: float | None,
    env: dict[str, str],
) -> dict[str, Any]:
    """The body of a launch's Ray task, on its node: a keeper process (this module's main)
    runs the launch in a scratch folder; the task ships back what it left (the record, its
    files) and the node. A precision launch's budget counts from when the task starts, not
    from when it was queued.

    Why a keeper: when a task's process ends (a forced cancel, its node going away), Ray
    SIGKILLs that process's children, and a worker killed so cannot end its engine's process
    group. Under the keeper the worker is a grandchild: the keeper dies, the worker gets its
    death signal (SIGTERM) and ends its whole group, as it does locally."""
    from harness.lifeline import die_with_parent

    scratch = Path(tempfile.mkdtemp(prefix="specbench-ray-"))
    node: dict[str, Any] = {"hostname": socket.gethostname()}
    with contextlib.suppress(Exception):
        import ray

        node["node_id"] = ray.get_runtime_context().get_node_id()
    try:
        task = scratch / "task.json"
        task.write_text(
            json.dumps(
                {
                    "run": run_json,
                    "base_dir": base_dir,
                    "models_cache": models_cache,
                    "deadline_unix": time.time() + budget_s if budget_s is not None else None,
                }
            )
        )
        keeper = subprocess.Popen(
            [sys.executable, "-m", __name__, str(scratch)],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        try:
            keeper.wait()
        finally:  # a gentle cancel (KeyboardInterrupt here): the keeper ends the launch
            if keeper.poll() is None:
                keeper.terminate()
                try:
                    keeper.wait(timeout=CANCEL_WAIT_S)
                except subprocess.TimeoutExpired:
                    keeper.kill()
        if not (scratch / "keeper.json").is_file():
            raise RuntimeError(
                f"the launch's keeper process ended with code "
                f"{keeper.returncode} before it finished"
            )
        out = json.loads((scratch / "keeper.json").read_text())
        node["fingerprint"] = out["fingerprint"]
        return {
            "record": out["record"],
            "files": _files(scratch, skip={"task.json", "keeper.json"}),
            "node": node,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def keep(scratch: Path) -> int:
    """The keeper (python -m harness.execute.ray_executor SCRATCH): models, then the worker, as a
    local launch runs them; SIGTERM ends the launch (its worker's whole group) first."""
    import signal

    from harness.env import fingerprint
    from harness.execute.local import (
        default_worker_cmd,
        launch,
        models_command,
        read_tail,
        run_one,
    )

    def interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    task = json.loads((scratch / "task.json").read_text())
    run = RunSpec.model_validate_json(task["run"])
    if run_tp(run) > 1 and "distributed_executor_backend" not in run.engine_args:
        # vLLM's own processes for TP inside the task, never a Ray-in-Ray executor.
        run = run.model_copy(
            update={"engine_args": {**run.engine_args, "distributed_executor_backend": "mp"}}
        )
    cache = Path(task["models_cache"]) if task["models_cache"] else None
    record: RunRecord | None = None
    names = _builtin_names(run)
    if names:
        log = scratch / "logs" / f"{run.run_key}.models.log"
        code, _, timed_out = launch(
            models_command(names, cache),
            {**os.environ, "PYTHONUNBUFFERED": "1"},
            log,
            MODELS_BUILD_TIMEOUT_S,
        )
        if code != 0:
            why = "timed out" if timed_out else f"exit code {code}"
            record = RunRecord(
                **run.record_fields(),
                status="failed",
                wall_s=0.0,
                error=f"building models on {socket.gethostname()} failed ({why})",
                log_tail=read_tail(log),
                log_file=f"logs/{run.run_key}.models.log",
            )
    if record is None:
        record = run_one(
            run,
            scratch,
            Path(task["base_dir"]),
            cache,
            default_worker_cmd(run.mode, run.python),
            task["deadline_unix"],
        )
    (scratch / "keeper.json").write_text(
        json.dumps({"record": record.model_dump(mode="json"), "fingerprint": fingerprint()})
    )
    return 0


def _files(scratch: Path, skip: set[str]) -> dict[str, bytes]:
    """Everything a launch left in its scratch folder (logs, spec, result, reports)."""
    return {
        p.relative_to(scratch).as_posix(): p.read_bytes()
        for p in sorted(scratch.rglob("*"))
        if p.is_file() and p.relative_to(scratch).as_posix() not in skip
    }


@dataclass
class RayExecutor:
    """Launches as Ray tasks, as many at once as the cluster's resources allow."""

    address: str | None = None  # None: a Ray instance of this machine; else a cluster's
    models_cache: Path | None = None
    pin: Pin = "none"  # node: every launch of one comparison (a sweep cell) on one node
    _nodes: list[dict[str, Any]] = field(default_factory=list)

    def check(self, plan: Plan) -> None:
        """Before any run folder exists: join (or start) Ray and check that some node can host
        every launch, since a launch no node can ever hold would wait forever."""
        ray = import_ray()
        _reachable(self.address)
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level="ERROR",
                    configure_logging=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ScenarioError(
                    f"--address {self.address}: cannot join the Ray cluster "
                    f"({str(exc).splitlines()[0]})"
                ) from None
        self._nodes = [n for n in ray.nodes() if n.get("Alive")]
        for run in plan.runs:
            want = needs(run)
            if not any(_fits(node, want) for node in self._nodes):
                raise HardwareError(
                    f"{run.run_key}: needs {_shown(want)} on one node; the Ray cluster's "
                    "nodes have " + "; ".join(_shown(_have(n)) for n in self._nodes)
                )

    def prepare(self, plan: Plan, run_dir: Path, progress: Progress) -> tuple[bool, str, float]:
        """Nothing to build here: each task builds the models its node lacks."""
        progress(
            f"Ray: {len(self._nodes)} node(s) ("
            + "; ".join(_shown(_have(n)) for n in self._nodes)
            + ")"
        )
        return True, "", 0.0

    def launch(
        self,
        run: RunSpec,
        run_dir: Path,
        base_dir: Path,
        deadline_unix: float | None,
        on_start: Callable[[int], None] | None,
    ) -> RunRecord:
        out: list[RunRecord] = []
        self.launch_all(
            [run],
            run_dir,
            base_dir,
            lambda _: deadline_unix,
            lambda _: None,
            lambda _, record: out.append(record),
        )
        return out[0]

    def _placement(self, runs: list[RunSpec]) -> dict[str, str]:
        """pin: node: each comparison's launches (a sweep cell's, or the run's) on one node,
        the comparisons spread over the nodes that can hold them."""
        if self.pin != "node":
            return {}
        chosen: dict[str, str] = {}
        placed: dict[str, str] = {}
        for run in runs:
            group = run.cell or "run"
            if group not in chosen:
                fitting = [n for n in self._nodes if _fits(n, needs(run))]
                chosen[group] = fitting[len(chosen) % len(fitting)]["NodeID"]
            placed[run.run_key] = chosen[group]
        return placed

    def launch_all(
        self,
        runs: list[RunSpec],
        run_dir: Path,
        base_dir: Path,
        deadline_of: Callable[[RunSpec], float | None],
        started: Callable[[RunSpec], None],
        done: Callable[[RunSpec, RunRecord], None],
    ) -> None:
        """Submit every launch, then take each as it finishes; on Ctrl-C or SIGTERM cancel
        what is left (and wait, briefly, for its processes to go) before raising."""
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        env = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIXES)}
        task = ray.remote(remote_launch)
        placed = self._placement(runs)
        pending: dict[Any, RunSpec] = {}
        for run in runs:
            options: dict[str, Any] = {**needs(run), "max_retries": 0}
            if run.run_key in placed:
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                    placed[run.run_key], soft=False
                )
            deadline = deadline_of(run)
            ref = task.options(**options).remote(
                run.model_dump_json(),
                str(base_dir),
                str(self.models_cache) if self.models_cache else None,
                deadline - time.time() if deadline is not None else None,
                env,
            )
            pending[ref] = run
            started(run)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    run = pending.pop(ref)
                    done(run, self._collect(ray, ref, run, run_dir))
        except (KeyboardInterrupt, Interrupted):
            self.cancel(ray, list(pending))
            raise

    def cancel(self, ray: Any, refs: list[Any]) -> None:
        """Cancel tasks and wait for them to be gone. First gently: Ray raises
        KeyboardInterrupt in each running task, whose launch then kills its worker's whole
        process group as a local launch does (a forced cancel kills the task's process, and
        Ray then SIGKILLs that process's children, which leaves no chance to end their
        groups). Tasks still there after the group-kill grace are forced."""
        for force in (False, True):
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=force, recursive=True)
            deadline = time.monotonic() + CANCEL_WAIT_S
            left = list(refs)
            while left and time.monotonic() < deadline:
                _, left = ray.wait(left, num_returns=len(left), timeout=1.0)
            if not left:
                return
            refs = left

    def _collect(self, ray: Any, ref: Any, run: RunSpec, run_dir: Path) -> RunRecord:
        """A finished task's record, its files written into the run folder; a task that
        raised (its node lost, its process killed) is a failed launch saying so."""
        try:
            out = ray.get(ref)
        except Exception as exc:  # ray.exceptions.*: node died, worker crashed, cancelled
            return RunRecord(
                **run.record_fields(),
                status="failed",
                wall_s=0.0,
                error=f"the Ray task failed: {_reason(exc)}",
            )
        for rel, content in out["files"].items():
            target = run_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        record = RunRecord.model_validate(out["record"])
        node = out["node"]
        return record.model_copy(update={"node": node})


def _reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A HOST:PORT cluster address must answer: ray.init would otherwise retry for minutes.
    (ray:// client addresses and 'auto' are left to Ray.)"""
    if address is None or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ScenarioError(f"--address {address}: no Ray cluster answers there ({why})") from None


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    if "NodeDied" in name or "node" in first.lower() and "died" in first.lower():
        return f"the node running it was lost ({name})"
    return f"{name}: {first[:300]}"


def _have(node: dict[str, Any]) -> dict[str, float]:
    res = node.get("Resources") or {}
    return {"num_cpus": float(res.get("CPU", 0)), "num_gpus": float(res.get("GPU", 0))}


def _fits(node: dict[str, Any], want: dict[str, float]) -> bool:
    have = _have(node)
    return all(have[k] >= v for k, v in want.items())


def _shown(resources: dict[str, float]) -> str:
    return f"{resources['num_cpus']:g} CPU, {resources['num_gpus']:g} GPU"


if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1])))
