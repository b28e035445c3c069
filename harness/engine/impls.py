"""Implementation swaps installed inside vLLM's processes, and the reports of what actually ran.

harness.engine.plugin calls install(); the worker calls read_impl_reports() after a run.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.catalog import (
    IMPL_REPORT_DIR_ENV,
    IMPLEMENTATIONS,
    NOOP_SWITCH_FAULT_ENV,
    SLOW_CHOICE_FAULT_ENV,
)

# A child of vLLM's "vllm" logger, so messages use vLLM's handler and process prefix.
logger = logging.getLogger("vllm.specbench.impls")

# Code paths a report can name.
PATH_MEDUSA_TOLIST = "medusa.propose.tolist"
PATH_MEDUSA_TENSOR = "medusa.propose.tensor"
PATH_EAGLE_LOCAL_ARGMAX = "eagle.local_argmax"  # per-rank argmax, gather (max, index) pairs
PATH_EAGLE_ALLGATHER = "eagle.allgather_argmax"  # all-gather full-vocab logits (TP > 1)
PATH_EAGLE_FULL_TP1 = "eagle.full_logits_argmax"  # full logits, nothing to gather (TP 1)
PATH_EAGLE_UNOBSERVED = "eagle.unobserved"  # drafting ran but neither primitive was seen
PATH_INSTALL_ERROR = "install_error"  # the patch could not be installed in this process
PATH_MEDUSA_UNKNOWN = "medusa.propose.unknown"  # returned neither a list nor a tensor

# (implementation, choice) -> paths that prove the choice ran. At TP 1 the baseline has no
# all-gather to do, so its full-logits path counts too.
EXPECTED_PATHS: dict[tuple[str, str], frozenset[str]] = {
    ("medusa-proposer", "baseline"): frozenset({PATH_MEDUSA_TOLIST}),
    ("medusa-proposer", "optimized"): frozenset({PATH_MEDUSA_TENSOR}),
    ("tp-argmax-reduction", "baseline"): frozenset({PATH_EAGLE_ALLGATHER, PATH_EAGLE_FULL_TP1}),
    ("tp-argmax-reduction", "optimized"): frozenset({PATH_EAGLE_LOCAL_ARGMAX}),
}

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

    def __init__(self, implementation: str, choice: str) -> None:
        self.implementation = implementation
        self.choice = choice
        self.expected = EXPECTED_PATHS[(implementation, choice)]
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

    def hit(self, path: str, details: dict[str, Any] | None = None) -> None:
        self.calls += 1
        self.epoch_calls += 1
        if path not in self.epoch_paths and details:
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
            "matches_choice": bool(self.paths) and set(self.paths) <= self.expected,
            "calls": self.calls,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "tp_rank": self.tp_rank,
            "first_call_unix": self.first_call_unix,
            "written_unix": time.time(),
            **self.details,
        }

    def end_epoch(self) -> dict[str, Any]:
        """What ran since the last switch, under the choice that was active, then reset."""
        choice = _active.get(self.implementation, self.choice)
        expected = EXPECTED_PATHS[(self.implementation, choice)]
        if self.tp_rank is None:
            self.tp_rank = _tp_rank()
        report = {
            "implementation": self.implementation,
            "choice": choice,
            "path": next(iter(self.epoch_paths), None),
            "paths": dict(self.epoch_paths),
            "matches_choice": bool(self.epoch_paths) and set(self.epoch_paths) <= expected,
            "calls": self.epoch_calls,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "tp_rank": self.tp_rank,
            "written_unix": time.time(),
            **self.epoch_details,
        }
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


def install(implementation: str, choice: str) -> bool:
    """Install implementation:choice in this process; False if it was already installed.
    Every choice of the swap is installed; `choice` is the one active until switch_epoch().

    Raises whatever vLLM raises if its layout is not what this module was written against.
    """
    if choice not in IMPLEMENTATIONS.get(implementation, {}):
        raise ValueError(f"unknown implementation choice {implementation}:{choice}")
    _active.setdefault(implementation, choice)
    if implementation == "medusa-proposer":
        return _install_medusa(choice)
    return _install_tp_argmax(choice)


def _planted_delay(implementation: str) -> None:
    """The fault seam for gate tests: the choice named in SLOW_CHOICE_FAULT_ENV sleeps."""
    fault = os.environ.get(SLOW_CHOICE_FAULT_ENV)
    if fault:
        name, choice, seconds = fault.split(":")
        if name == implementation and _active.get(implementation) == choice:
            time.sleep(float(seconds))


def switch_epoch(choice: str | None) -> list[dict[str, Any]]:
    """End the current epoch: return, per installed swap, what ran in this process since the
    last call (paths, calls, under which choice), then make `choice` active (None: keep).

    Called between passes in every vLLM worker process by collective_rpc, so each pass's
    report says what each process ran during exactly that pass.
    """
    reports = [recorder.end_epoch() for recorder in _recorders.values()]
    if choice:
        implementation, _, wanted = choice.partition(":")
        if implementation not in _recorders or wanted not in IMPLEMENTATIONS[implementation]:
            raise ValueError(f"specbench: {choice!r} is not installed in this process")
        # The fault seam for tests: a switch that silently does nothing.
        if not os.environ.get(NOOP_SWITCH_FAULT_ENV):
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


# ---------------------------------------------------------------------------------------------
# medusa-proposer


def medusa_propose_tolist(
    self: Any,
    num_speculative_tokens: int,
    target_hidden_states: Any,
    sampling_metadata: Any,
    slot_mappings: Any = None,  # unused, as in vLLM 0.32
) -> list[list[int]]:
    """The pre-optimization MedusaProposer.propose, on vLLM 0.32's signature.

    Per head argmax(...).tolist() (one device->host sync per head), then a Python transpose
    to [batch][head]. The runner accepts this list form (take_draft_token_ids handles both).
    """
    assert num_speculative_tokens == self.num_speculative_tokens
    blocks = self.model(target_hidden_states)
    logits = self.model.compute_logits(blocks)
    draft_tokens = [logit.argmax(dim=-1).tolist() for logit in logits]
    # Every head yields one id per request, so the rows are equally long.
    return [list(row) for row in zip(*draft_tokens, strict=True)]


def observe_medusa_drafts(drafts: Any) -> tuple[str, dict[str, Any]]:
    """The code path a proposer's return value proves: host lists, or a tensor (and where)."""
    if isinstance(drafts, list):
        return PATH_MEDUSA_TOLIST, {"returned": "list"}
    device = getattr(drafts, "device", None)
    if device is not None and hasattr(drafts, "shape"):
        return PATH_MEDUSA_TENSOR, {"returned": "tensor", "device": str(device)}
    return PATH_MEDUSA_UNKNOWN, {"returned": type(drafts).__name__}


def _install_medusa(choice: str) -> bool:
    from vllm.v1.spec_decode.medusa import MedusaProposer

    implementation = "medusa-proposer"
    original = MedusaProposer.propose
    if _already("MedusaProposer.propose", original, implementation, choice):
        return False
    recorder = _Recorder(implementation, choice)
    _recorders[implementation] = recorder

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out: Any
        if _active.get(implementation) == "baseline":
            out = medusa_propose_tolist(self, *args, **kwargs)
        else:
            out = original(self, *args, **kwargs)  # vLLM's own tensor-returning propose
        _planted_delay(implementation)
        # The report says what the proposer returned, not which branch was taken.
        path, details = observe_medusa_drafts(out)
        recorder.hit(path, details)
        return out

    _mark(propose, implementation, choice)
    setattr(MedusaProposer, "propose", propose)  # noqa: B010 (mypy refuses method assignment)
    logger.info(
        "specbench: MedusaProposer.propose -> %s (%s)",
        choice,
        PATH_MEDUSA_TOLIST if choice == "baseline" else PATH_MEDUSA_TENSOR,
    )
    return True


# ---------------------------------------------------------------------------------------------
# tp-argmax-reduction
#
# vLLM picks the draft-token path itself from speculative_config.use_local_argmax_reduction
# (V1 runner: SpecDecodeBaseProposer._greedy_sample; V2 runner: DraftModelSpeculator.sample_draft).
# We do not change that choice; we watch which LogitsProcessor primitive runs while a draft is
# being sampled: get_top_tokens (local argmax) or _get_logits/_gather_logits (full logits).


class _Probe:
    """What the LogitsProcessor primitives saw during one draft-sampling call."""

    __slots__ = ("full_gather", "full_logits", "local_argmax", "tp_size")

    def __init__(self) -> None:
        self.local_argmax = False
        self.full_logits = False
        self.full_gather = False
        self.tp_size: int | None = None

    def path(self) -> str:
        if self.local_argmax and not self.full_logits:
            return PATH_EAGLE_LOCAL_ARGMAX
        if self.full_gather:
            return PATH_EAGLE_ALLGATHER
        if self.full_logits:
            return PATH_EAGLE_FULL_TP1
        return PATH_EAGLE_UNOBSERVED


_scope = threading.local()


def _current_probe() -> _Probe | None:
    probe = getattr(_scope, "probe", None)
    return probe if isinstance(probe, _Probe) else None


def _drafting_scope(
    original: Callable[..., Any], recorder: _Recorder, runner: str
) -> Callable[..., Any]:
    """Wrap a draft-sampling method so the primitives it calls are attributed to drafting.
    It also applies the active choice: vLLM reads use_local_argmax_reduction from the proposer
    on every call, so setting it here switches the path at run time (one-engine design)."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hasattr(self, "use_local_argmax_reduction"):
            self.use_local_argmax_reduction = _active.get(recorder.implementation) == "optimized"
        probe = _Probe()
        outer = getattr(_scope, "probe", None)
        _scope.probe = probe
        try:
            out = original(self, *args, **kwargs)
        finally:
            _scope.probe = outer
        recorder.hit(
            probe.path(),
            {
                "runner": runner,
                "tp_size": probe.tp_size,
                "use_local_argmax_reduction": getattr(self, "use_local_argmax_reduction", None),
            },
        )
        return out

    return wrapper


def _install_tp_argmax(choice: str) -> bool:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    implementation = "tp-argmax-reduction"
    owner = "SpecDecodeBaseProposer._sample_draft_tokens"
    if _already(owner, SpecDecodeBaseProposer._sample_draft_tokens, implementation, choice):
        return False
    recorder = _Recorder(implementation, choice)
    _recorders[implementation] = recorder

    orig_top = LogitsProcessor.get_top_tokens
    orig_get = LogitsProcessor._get_logits
    orig_gather = LogitsProcessor._gather_logits

    @functools.wraps(orig_top)
    def get_top_tokens(self: Any, lm_head: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.local_argmax = True
            probe.tp_size = getattr(lm_head, "tp_size", None)
        return orig_top(self, lm_head, *args, **kwargs)

    @functools.wraps(orig_get)
    def _get_logits(self: Any, hidden_states: Any, lm_head: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.full_logits = True
            probe.tp_size = getattr(lm_head, "tp_size", None)
        return orig_get(self, hidden_states, lm_head, *args, **kwargs)

    @functools.wraps(orig_gather)
    def _gather_logits(self: Any, *args: Any, **kwargs: Any) -> Any:
        probe = _current_probe()
        if probe is not None:
            probe.full_gather = True
        return orig_gather(self, *args, **kwargs)

    patches: dict[str, Callable[..., Any]] = {
        "get_top_tokens": get_top_tokens,
        "_get_logits": _get_logits,
        "_gather_logits": _gather_logits,
    }
    for attr, fn in patches.items():
        _mark(fn, implementation, choice)
        setattr(LogitsProcessor, attr, fn)

    v1_scope = _drafting_scope(SpecDecodeBaseProposer._sample_draft_tokens, recorder, "v1")
    _mark(v1_scope, implementation, choice)
    setattr(SpecDecodeBaseProposer, "_sample_draft_tokens", v1_scope)  # noqa: B010

    # Model Runner V2 (CUDA with Triton) drafts through its own speculator; absent or
    # unimportable on some platforms, where the V1 runner is the one that runs.
    try:
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
    except Exception as exc:
        logger.debug("specbench: model runner V2 speculator not importable: %s", exc)
    else:
        v2_scope = _drafting_scope(DraftModelSpeculator.sample_draft, recorder, "v2")
        _mark(v2_scope, implementation, choice)
        setattr(DraftModelSpeculator, "sample_draft", v2_scope)  # noqa: B010

    logger.info(
        "specbench: watching EAGLE draft token selection for tp-argmax-reduction:%s", choice
    )
    return True
