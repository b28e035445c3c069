"""Implementation swaps inside vLLM's processes: installing one (its record:
harness.config.swaps; its installer: harness.engine.swaps) with its context, switching the
active choice between passes, and the reports of what actually ran.

harness.engine.plugin calls install(); the worker calls read_impl_reports() after a run.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.swaps import SWAPS
from harness.engine.swaps import INSTALLERS
from harness.wire.protocol import IMPL_REPORT_DIR_ENV

# A child of vLLM's "vllm" logger, so messages use vLLM's handler and process prefix.
# What a hit observed: a mapping, or a callable giving it (read once per path and epoch).
Details = dict[str, Any] | Callable[[], dict[str, Any]] | None

logger = logging.getLogger("vllm.specbench.impls")

PATH_INSTALL_ERROR = "install_error"  # the patch could not be installed in this process


# A variant's own patch function reports under this implementation name, its import path as
# the choice; any code path it reports proves it ran.
PATCH = "patch"
# A variant's own change overlaid on vLLM's functions reports under this name, the arm (its
# variant) as the choice, and each dispatched function as a path with its calls.
OVERLAY = "overlay"
_overlay_arms: tuple[str, ...] = ()


def expected_paths(implementation: str, choice: str) -> frozenset[str] | None:
    """The code paths whose report proves implementation:choice ran (from its swap record;
    None: any path, a user's patch)."""
    return None if implementation in (PATCH, OVERLAY) else SWAPS[implementation].proves[choice]


def _matches(paths: dict[str, int], expected: frozenset[str] | None) -> bool:
    return bool(paths) and (expected is None or set(paths) <= expected)


# Rewrite a report every this many calls (beyond the first call and any new path), so a live
# count is visible without paying for a file write on every drafting step.
REWRITE_EVERY = 256

# Set on every function we install, so a second install in the same process is a no-op.
_MARK = "__specbench_impl__"

# The choice each installed swap runs now. Installing sets it; switch_epoch() changes it
# between passes (one-engine design), in every process, through vLLM's collective_rpc.
_active: dict[str, str] = {}
_recorders: dict[str, _Recorder] = {}


def report_filename(implementation: str, choice: str, pid: int) -> str:
    return f"{implementation}.{choice}.{pid}.json"


def read_impl_reports(report_dir: Path) -> list[dict[str, Any]]:
    """Every report in report_dir, sorted by (implementation, choice, pid).

    Missing directory -> []. Files that are not a JSON object naming an implementation (for
    example a half-written temporary) are skipped.
    """
    if not report_dir.is_dir():
        return []
    reports: list[dict[str, Any]] = []
    for path in sorted(report_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("implementation"), str):
            reports.append(data)
    reports.sort(key=lambda r: (r["implementation"], str(r.get("choice")), r.get("pid") or 0))
    return reports


def _write_json_atomic(directory: Path, filename: str, data: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / filename
    # The temporary name starts with "." and lacks ".json", so read_impl_reports never sees it.
    tmp = directory / f".{filename}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)


def _tp_rank() -> int | None:
    # Only knowable once vLLM's distributed state is up, i.e. inside a worker.
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:
        return None


class _Recorder:
    """Counts calls of one installed implementation in this process and writes its report."""

    def __init__(
        self, implementation: str, choice: str, static: dict[str, Any] | None = None
    ) -> None:
        self.implementation = implementation
        self.static = static or {}  # facts every report repeats (an overlay's functions)
        self.choice = choice
        self.expected = expected_paths(implementation, choice)
        self.calls = 0
        self.paths: dict[str, int] = {}
        self.first_path: str | None = None
        self.first_call_unix: float | None = None
        self.details: dict[str, Any] = {}
        self.tp_rank: int | None = None
        self.write_failed = False
        # Since the last switch_epoch(): what ran while the current choice was active.
        self.epoch_calls = 0
        self.epoch_paths: dict[str, int] = {}
        self.epoch_details: dict[str, Any] = {}
        self.epochs = 0  # epochs ended: the first is the engine's start
        self.shadows: dict[str, str] = {}  # overlay: function -> what shadows it ("": nothing)

    def hit(self, path: str, details: Details = None) -> None:
        self.calls += 1
        self.epoch_calls += 1
        if details and (path not in self.epoch_paths or path not in self.paths):
            # Details are read once per path and epoch: a callable is called only then, so
            # describing what ran costs nothing on the other calls (the same in both arms).
            details = details() if callable(details) else details
        if path not in self.epoch_paths and details:
            assert isinstance(details, dict)
            self.epoch_details.update(details)
        self.epoch_paths[path] = self.epoch_paths.get(path, 0) + 1
        seen = self.paths.get(path)
        self.paths[path] = 1 if seen is None else seen + 1
        if seen is None:
            # Write on every new path, not only the first call, so a mixed run is visible.
            if self.first_path is None:
                self.first_path = path
                self.first_call_unix = time.time()
                # Best effort: a worker that exits cleanly leaves its final count.
                atexit.register(self.write)
            else:
                logger.warning(
                    "specbench %s:%s ran a second code path %s (first was %s)",
                    self.implementation,
                    self.choice,
                    path,
                    self.first_path,
                )
            if details:
                assert isinstance(details, dict)
                self.details.update(details)
            self.write()
        elif self.calls % REWRITE_EVERY == 0:
            self.write()

    def report(self) -> dict[str, Any]:
        if self.tp_rank is None:
            self.tp_rank = _tp_rank()
        return {
            "implementation": self.implementation,
            "choice": self.choice,
            "path": self.first_path,
            "paths": dict(self.paths),
            "matches_choice": _matches(self.paths, self.expected),
            "calls": self.calls,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "process": multiprocessing.current_process().name,
            "tp_rank": self.tp_rank,
            "first_call_unix": self.first_call_unix,
            "written_unix": time.time(),
            **self.static,
            **self.details,
        }

    def end_epoch(self) -> dict[str, Any]:
        """What ran since the last switch, under the choice that was active, then reset."""
        choice = _active.get(self.implementation, self.choice)
        if self.implementation == PATCH:  # a switchable patch: its import path while on
            choice = self.choice if choice == "on" else "off"
        expected = expected_paths(self.implementation, choice)
        if self.tp_rank is None:
            self.tp_rank = _tp_rank()
        report = {
            "implementation": self.implementation,
            "choice": choice,
            "path": next(iter(self.epoch_paths), None),
            "paths": dict(self.epoch_paths),
            "matches_choice": _matches(self.epoch_paths, expected),
            "calls": self.epoch_calls,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "tp_rank": self.tp_rank,
            "written_unix": time.time(),
            **self.static,
            **self.epoch_details,
        }
        if self.implementation == OVERLAY and self.epochs:
            # A dispatched function that has not run since the engine started may be shadowed
            # on this platform: say by what (once per function), so that a refusal can give
            # the true reason (harness.analysis.proof.overlay_evidence).
            idle = [
                k
                for k in self.static.get("overlaid", [])
                if not self.paths.get(k) and k not in self.shadows
            ]
            if idle:
                from harness.engine.overlay import shadowed

                t = time.perf_counter()
                self.shadows.update(dict.fromkeys(idle, ""))
                self.shadows.update(shadowed(idle))
                logger.info(
                    "specbench: looked for what shadows %d idle overlaid function(s) in %.3f s",
                    len(idle),
                    time.perf_counter() - t,
                )
            found = {k: v for k, v in self.shadows.items() if v}
            if found:
                report["shadowed"] = found
        self.epochs += 1
        self.epoch_calls, self.epoch_paths, self.epoch_details = 0, {}, {}
        return report

    def write(self) -> None:
        report_dir = os.environ.get(IMPL_REPORT_DIR_ENV)
        if not report_dir:
            return
        try:
            filename = report_filename(self.implementation, self.choice, os.getpid())
            _write_json_atomic(Path(report_dir), filename, self.report())
        except Exception:
            # A report must never take the engine down; log once, keep serving.
            if not self.write_failed:
                logger.exception("specbench: could not write implementation report")
            self.write_failed = True


class _Context:
    """The SwapContext an installer gets: the active choice, reports, the install-once mark."""

    def __init__(self, name: str, recorder: _Recorder) -> None:
        self.name = name
        self.logger = logger
        self._recorder = recorder

    def active(self) -> str:
        return _active[self.name]

    def hit(self, path: str, details: Details = None) -> None:
        """Report that `path` ran; `details` (a mapping, or a callable returning one: called
        only for the first call of a path in an epoch) say what was observed."""
        self._recorder.hit(path, details)

    def claim(self, owner: str, fn: Any) -> bool:
        return not _already(owner, fn, self.name, self._recorder.choice)

    def mark(self, fn: Any) -> None:
        _mark(fn, self.name, self._recorder.choice)


def install(implementation: str, choice: str) -> bool:
    """Install implementation:choice in this process; False if it was already installed.
    Every choice of the swap is installed; `choice` is the one active until switch_epoch().

    Raises whatever vLLM raises if its layout is not what the swap was written against.
    """
    swap = SWAPS.get(implementation)
    if swap is None or choice not in swap.choices:
        raise ValueError(f"unknown implementation choice {implementation}:{choice}")
    _active.setdefault(implementation, choice)
    recorder = _Recorder(implementation, choice)
    installed = INSTALLERS[implementation](_Context(implementation, recorder))
    if installed:
        _recorders[implementation] = recorder
    return installed


def install_patch(path: str) -> bool:
    """Import a variant's own 'package.module:function' and call it with its context in this
    process; False if it was already installed here. Raises what importing or calling it
    raises (the plugin turns that into a failed launch with the reason)."""
    if PATCH in _recorders:
        return False
    module_name, _, function_name = path.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    _active.setdefault(PATCH, "on")
    recorder = _Recorder(PATCH, path)
    function(_Context(PATCH, recorder))
    _recorders[PATCH] = recorder
    logger.info("specbench: patch %s installed", path)
    return True


def install_overlay(path: str) -> bool:
    """Install the overlay spec at `path` (harness.wire.overlay.OverlaySpec as JSON) in this
    process; False if it was already installed here. Raises what compiling the change raises
    (the plugin turns that into a failed launch with the reason)."""
    global _overlay_arms
    if OVERLAY in _recorders:
        return False
    from harness.engine import overlay

    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    _overlay_arms = tuple(arm["variant"] for arm in spec["arms"])
    _active.setdefault(OVERLAY, spec["active"])
    recorder = _Recorder(OVERLAY, spec["active"])
    facts = overlay.install(spec, recorder.hit, lambda: _active[OVERLAY])
    recorder.static = {"overlaid": facts["overlaid"], "arm_only": facts["arm_only"]}
    _recorders[OVERLAY] = recorder
    logger.info(
        "specbench: overlay of %d function(s) installed for arms %s (importers rebound: %s)",
        len(facts["overlaid"]),
        ", ".join(_overlay_arms),
        {k: len(v) for k, v in facts["rebound"].items()},
    )
    return True


def switch_epoch(choice: str | None) -> list[dict[str, Any]]:
    """End the current epoch: return, per installed swap, what ran in this process since the
    last call (paths, calls, under which choice), then make `choice` active (None: keep).

    Called between passes in every vLLM worker process by collective_rpc, so each pass's
    report says what each process ran during exactly that pass.
    """
    reports = [recorder.end_epoch() for recorder in _recorders.values()]
    if choice:
        implementation, _, wanted = choice.partition(":")
        known = (
            ("on", "off")
            if implementation == PATCH
            else _overlay_arms
            if implementation == OVERLAY
            else (SWAPS[implementation].choices if implementation in SWAPS else ())
        )
        if implementation not in _recorders or wanted not in known:
            raise ValueError(f"specbench: {choice!r} is not installed in this process")
        _active[implementation] = wanted
    return reports


def write_install_error(implementation: str, choice: str, error: BaseException) -> None:
    """Leave a report saying the swap could not be installed in this process (never raises)."""
    report_dir = os.environ.get(IMPL_REPORT_DIR_ENV)
    if not report_dir:
        return
    data: dict[str, Any] = {
        "implementation": implementation,
        "choice": choice,
        # A string, so readers that require "path" still surface the failure.
        "path": PATH_INSTALL_ERROR,
        "paths": {},
        "matches_choice": False,
        "calls": 0,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "tp_rank": None,
        "first_call_unix": None,
        "written_unix": time.time(),
        "error": f"{type(error).__name__}: {error}",
    }
    try:
        _write_json_atomic(
            Path(report_dir), report_filename(implementation, choice, os.getpid()), data
        )
    except Exception:
        logger.exception("specbench: could not write implementation error report")


def _mark(fn: Callable[..., Any], implementation: str, choice: str) -> None:
    setattr(fn, _MARK, f"{implementation}:{choice}")


def _installed_mark(fn: Any) -> str | None:
    mark = getattr(fn, _MARK, None)
    return mark if isinstance(mark, str) else None


def _already(owner: str, fn: Any, implementation: str, choice: str) -> bool:
    mark = _installed_mark(fn)
    if mark is None:
        return False
    if mark != f"{implementation}:{choice}":
        # Two different swaps in one process would make the report lie; keep the first.
        logger.warning(
            "specbench: %s already carries %s; not installing %s:%s",
            owner,
            mark,
            implementation,
            choice,
        )
    return True
