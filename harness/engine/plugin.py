"""vLLM general plugin: installs the implementation swap named by SPECBENCH_IMPL in this process.

vLLM calls register() in its main, engine-core and worker processes (entry point group
vllm.general_plugins); without SPECBENCH_IMPL it does nothing.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from harness.config.catalog import parse_implementation
from harness.lifeline import dump_stacks_on_signal
from harness.wire.protocol import (
    HEARTBEAT_ENV,
    IMPL_ENV,
    IMPL_REPORT_DIR_ENV,
    OVERLAY_ENV,
    PATCH_ENV,
    SPEED_PROBE_ENV,
    STEP_TIMES_ENV,
    SWITCH_RPC,
)

# A child of vLLM's "vllm" logger, so messages use vLLM's handler and process prefix.
logger = logging.getLogger("vllm.specbench.plugin")

# What this process already installed; register() may run more than once per process.
_installed: tuple[str, str] | None = None


def register() -> None:
    """Install the swap in SPECBENCH_IMPL ("name:choice"); no-op when unset.

    An invalid value raises ValueError (vLLM then refuses to start, which is what a mislabelled
    benchmark deserves). A valid one never raises: if vLLM's layout defeats the patch, the error
    is logged and left as a report with "error", and no report of a code path ever appears.
    """
    _install_interpreter_fixes()
    if os.environ.get(IMPL_REPORT_DIR_ENV, "").strip():  # a process of a specbench launch
        dump_stacks_on_signal()  # the stall watchdog asks for its stacks (harness.lifeline)
    _install_heartbeat()
    patch = os.environ.get(PATCH_ENV, "").strip()
    if patch:
        _install_patch(patch)
    overlay = os.environ.get(OVERLAY_ENV, "").strip()
    if overlay:
        _install_overlay(overlay)
    value = os.environ.get(IMPL_ENV, "").strip()
    if value:
        _check_swap(value)  # a mislabelled benchmark stops here, in the front end too
    # What only a worker's model runner uses waits for a worker (see _when_a_worker_starts).
    pieces = [_install_step_times, _install_platform]
    _when_a_worker_starts([(lambda: _install_swap(value)), *pieces] if value else pieces)


# The installs waiting for vLLM to build a worker in this process (or one forked from it).
_pending: list[Callable[[], None]] = []
_WAITS = "_specbench_waits_for_a_worker"  # marks the init_worker that runs them


def _when_a_worker_starts(installs: list[Callable[[], None]]) -> None:
    """Run `installs`, in order, only in a process that hosts one of vLLM's workers: now, when
    register() runs inside WorkerWrapperBase.init_worker (a spawned worker loads its plugins
    there), otherwise when init_worker first runs in this process or in one forked from it
    (an engine core with its worker in-process, LLM without multiprocessing). vLLM's front
    end (LLM's process, the API server, an engine core whose workers are their own processes)
    builds no model runner, so it never imports the runners, proposers and swaps that vLLM
    itself does not import there (on vLLM 0.32 here: some 90 modules, V1's gpu_model_runner and
    V2's model runner among them). Overlays and patches still install at once: an overlay's
    proof names the processes its code runs in, the front end included."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    current = WorkerWrapperBase.init_worker
    # vLLM's own init_worker is itself decorated: the frame to look for is its innermost code.
    if _running(inspect.unwrap(current).__code__):
        for install in installs:
            install()
        return
    _pending.extend(installs)
    if getattr(current, _WAITS, False):  # wrapped already (register ran before)
        return

    @functools.wraps(current)
    def init_worker(self: Any, *args: Any, **kwargs: Any) -> Any:
        while _pending:
            _pending.pop(0)()
        return current(self, *args, **kwargs)

    setattr(init_worker, _WAITS, True)
    setattr(WorkerWrapperBase, "init_worker", init_worker)  # noqa: B010


def _running(code: Any) -> bool:
    """Whether a frame of `code` is on this thread's stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _check_swap(value: str) -> None:
    """SPECBENCH_IMPL's value, parsed: an invalid one raises ValueError (vLLM refuses to start)."""
    try:
        parse_implementation(value)
    except ValueError as exc:
        message = f"{IMPL_ENV}={value!r} is invalid: {exc}"
        logger.error("specbench: %s", message)
        raise ValueError(message) from exc


def _install_swap(value: str) -> None:
    """The built-in swap "name:choice", once per process."""
    global _installed
    try:
        name, choice = parse_implementation(value)
    except ValueError as exc:
        message = f"{IMPL_ENV}={value!r} is invalid: {exc}"
        logger.error("specbench: %s", message)
        raise ValueError(message) from exc
    if _installed is not None:
        if _installed != (name, choice):
            logger.warning(
                "specbench: %s:%s already installed in this process; ignoring %s:%s",
                *_installed,
                name,
                choice,
            )
        return
    # Imported here so that an unset SPECBENCH_IMPL costs nothing beyond this module.
    from harness.engine import impls

    try:
        impls.install(name, choice)
        _add_switch_method()
    except Exception as exc:
        logger.exception("specbench: could not install %s:%s", name, choice)
        impls.write_install_error(name, choice, exc)
    _installed = (name, choice)


def _install_interpreter_fixes() -> None:
    """Triton's interpreter where it differs from a GPU (harness.engine.interpreter); only
    with TRITON_INTERPRET=1 (Model Runner V2 on a CPU). A failure stops this process: a V2
    engine without the fix dies later, inside a kernel, with less to go on."""
    if os.environ.get("TRITON_INTERPRET", "") != "1":
        return
    from harness.engine import interpreter

    interpreter.install()


def _install_step_times() -> None:
    """The step timer (harness.engine.steptimes), last, so that it times any swapped code.
    A failure is logged and leaves the pass without step times, never the launch."""
    if os.environ.get(STEP_TIMES_ENV, "").strip() != "1":
        return
    try:
        from harness.engine import steptimes

        steptimes.install()
        if os.environ.get(SPEED_PROBE_ENV, "").strip() == "1":
            steptimes.install_probe()
    except Exception:
        logger.exception("specbench: could not install the step timer")


def _install_heartbeat() -> None:
    """The engine's heartbeat for the stall watchdog (harness.engine.steptimes), in every
    process of a launch that names its file, whether or not steps are timed. A failure is
    logged: the watchdog then bounds the launch by its passes alone."""
    if not os.environ.get(HEARTBEAT_ENV, "").strip():
        return
    try:
        from harness.engine import steptimes

        steptimes.install_heartbeat()
    except Exception:
        logger.exception("specbench: could not install the heartbeat")


def _install_platform() -> None:
    """The platform reader (harness.engine.platform), in every process of a launch (one with
    a report folder): a failure is logged, and the worker refuses a launch without one."""
    if not os.environ.get(IMPL_REPORT_DIR_ENV, "").strip():
        return
    try:
        from harness.engine import platform

        platform.install()
    except Exception:
        logger.exception("specbench: could not install the platform reader")


def _install_patch(path: str) -> None:
    """A variant's own patch function, in this process. Unlike a built-in swap, a patch that
    cannot be imported or raises stops this vLLM process with the reason: the launch fails
    in one line rather than measuring vLLM without the patch."""
    from harness.engine import impls

    try:
        if impls.install_patch(path):
            _add_switch_method()
    except Exception as exc:
        impls.write_install_error(impls.PATCH, path, exc)
        raise RuntimeError(
            f"specbench: patch {path} failed in vLLM's process "
            f"{os.getpid()}: {type(exc).__name__}: {exc}"
        ) from exc


def _install_overlay(path: str) -> None:
    """A variant's own change, overlaid on vLLM's functions in this process. As for a patch,
    a change that does not compile here stops this vLLM process with the reason."""
    from harness.engine import impls

    try:
        if impls.install_overlay(path):
            _add_switch_method()
    except Exception as exc:
        impls.write_install_error(impls.OVERLAY, "install", exc)
        raise RuntimeError(
            f"specbench: overlay {path} failed in vLLM's process "
            f"{os.getpid()}: {type(exc).__name__}: {exc}"
        ) from exc


def _add_switch_method() -> None:
    """Give vLLM's worker wrapper a method collective_rpc can call by name (no pickled
    callables, so no VLLM_ALLOW_INSECURE_SERIALIZATION): it switches the active choice in this
    process and returns what ran since the previous switch."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    from harness.engine import impls

    def switch(self: Any, choice: str = "") -> list[dict[str, Any]]:
        return impls.switch_epoch(choice or None)

    setattr(WorkerWrapperBase, SWITCH_RPC, switch)
