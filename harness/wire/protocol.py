"""The worker protocol, both sides of it in one place: what an executor hands a worker (the
WorkerSpec in spec.json; one WorkerResult comes back), and the environment variables and the
RPC name the parent, the worker and specbench's vLLM plugin agree on. Pure data: the engine
side imports it too.
"""

from __future__ import annotations

from pydantic import Field

from harness.config.base import StrictModel
from harness.wire.spec import RunSpec

# Environment variables of the worker <-> plugin protocol.
IMPL_ENV = "SPECBENCH_IMPL"  # "name:choice"
PATCH_ENV = "SPECBENCH_PATCH"  # "package.module:function", a variant's own patch
OVERLAY_ENV = "SPECBENCH_OVERLAY"  # an OverlaySpec JSON file: a variant's change, overlaid
PROGRESS_ENV = "SPECBENCH_PROGRESS_FILE"  # where the worker leaves its progress note
# Where the worker appends each pass as it finishes (one JSON line each, fsync'd): the passes
# of a launch that never writes its result (stalled, killed, crashed) are kept from it.
PASSES_ENV = "SPECBENCH_PASSES_FILE"
# The file vLLM's worker processes rewrite, at most every HEARTBEAT_EVERY_S, as engine steps
# end (harness.engine.steptimes.install_heartbeat): the stall watchdog's sign of life from
# inside the engine, in any phase after its start.
HEARTBEAT_ENV = "SPECBENCH_HEARTBEAT_FILE"
HEARTBEAT_EVERY_S = 1.0
IMPL_REPORT_DIR_ENV = "SPECBENCH_IMPL_REPORT_DIR"  # where the plugin writes what actually ran
# The vLLM worker method the plugin adds; the worker calls it between passes through
# collective_rpc (offline) or the server's /collective_rpc (serve) to switch arms.
SWITCH_RPC = "specbench_switch_epoch"
# Runner <-> worker: wall clock at spawn, so the worker can time its own start-up.
SPAWNED_ENV = "SPECBENCH_SPAWNED_UNIX"
# Runner <-> worker: the worker's own log, relative to the run folder, for its errors to name.
LOG_FILE_ENV = "SPECBENCH_LOG_FILE"
# Where a profiled launch's torch profiler traces go (RunSpec.profile_passes > 0): the run's
# profiles/<run_key>/.
PROFILE_DIR_ENV = "SPECBENCH_PROFILE_DIR"
PROFILES_DIR = "profiles"
STEP_TIMES_ENV = "SPECBENCH_STEP_TIMES"  # "1": time the model runner's steps (engine.steptimes)
STEP_TIMES_RPC = "specbench_step_times"  # the worker-wrapper method that returns them
SPEED_PROBE_ENV = "SPECBENCH_SPEED_PROBE"  # "1": time the speed probe before each step


# What an overlay's dispatcher raises in a vLLM process when torch.compile traces it or a CUDA
# graph captures it (harness.engine.overlay): vLLM then fails to start with the reason buried
# in its log, so the executor finds this marker there and makes its sentence the launch's error.
OVERLAY_TRACED = "specbench overlay traced:"


def overlay_refusal(log: str) -> str | None:
    """The traced-overlay sentence in a launch's log, or None (the dispatcher's message may
    stand inside the repr of Dynamo's error, so it ends at the first quote or line end)."""
    at = log.find(OVERLAY_TRACED)
    if at < 0:
        return None
    text = log[at + len(OVERLAY_TRACED) :].splitlines()[0]
    for quote in ("')", '")', "'", '"'):
        text = text.split(quote)[0]
    return "overlay refused: " + text.strip()


# WorkerSpec history (a worker refuses a newer one, naming both):
#   1 - the run, the base folder for relative paths, the built-in models cache, and the wall
#       clock a precision run must stop by.
# How a launch is stopped and bounded (the executors do it; the forecast counts it).
KILL_GRACE_S = 10.0  # after SIGTERM, before SIGKILL
SIGKILL_WAIT_S = 5.0  # after SIGKILL, the most we wait for the group to go
# Built-in models not yet in the cache are built before the first launch, under this limit
# (prepare_models; on Ray, by each launch's task that lacks them).
MODELS_BUILD_TIMEOUT_S = 1800.0

WORKER_SPEC_VERSION = 1


class WorkerSpec(StrictModel):
    """What an executor hands a worker for one launch (spec.json): the worker protocol is
    this spec in, one WorkerResult out, logs and implementation reports beside it."""

    spec_version: int = Field(default=WORKER_SPEC_VERSION, description="See the history.")
    run: RunSpec = Field(description="The launch.")
    base_dir: str = Field(description="Folder relative paths resolve against.")
    models_cache: str | None = Field(default=None, description="Built-in models cache.")
    deadline_unix: float | None = Field(
        default=None, description="Precision runs: no block may start that ends past this."
    )
