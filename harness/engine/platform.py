"""The launch's platform, read inside each vLLM worker process once its engine is built, and
written beside the swap reports for the worker (offline and serve alike) to read back.

The plugin wraps vLLM's WorkerWrapperBase.initialize_from_config (the KV cache and attention
backends are set up there, after the model is loaded): when it returns, this process writes
platform-<pid>.json into the launch's report folder. Under the extensible KV cache (vLLM 0.34
on CUDA, by default) the KV cache's size there is a reservation: the engine core commits the
real one after warm-up and CUDA-graph capture through WorkerWrapperBase.extend_kv_cache, which
is wrapped too where the installed vLLM has it, and the file is written again with that size
(the engine is not ready before it, so the worker reads the real one). A failure to read is
logged and leaves the launch without a platform, which the worker then refuses by name (never
measured blind).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

from harness.wire.platform import PLATFORM_FILE_PREFIX, Platform, features_of, refusals
from harness.wire.protocol import IMPL_REPORT_DIR_ENV
from harness.wire.spec import RunSpec

logger = logging.getLogger("vllm.specbench.platform")
_installed = False


def _name(value: Any) -> str:
    """An enum's name (CompilationMode.VLLM_COMPILE -> 'VLLM_COMPILE'), else its text."""
    return str(getattr(value, "name", value))


def platform_of(
    vllm_config: Any,
    model_runner: Any,
    device: str,
    rank: int | None = None,
    kv_committed: bool = False,
) -> Platform:
    """The platform from vLLM's own config objects and the model runner it built. V2 is told
    by the runner's module: Model Runner V2 lives under vllm.v1.worker.gpu (its CPU subclass
    under vllm.v1.worker.cpu), V1 in vllm.v1.worker.*_model_runner. `kv_committed`: read
    after extend_kv_cache, so an extensible KV cache's num_gpu_blocks is its real size (before
    it, a reservation, recorded as unknown)."""
    cls = type(model_runner)
    module = cls.__module__
    v2 = module.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu."))
    compilation = vllm_config.compilation_config
    backends = []
    for groups in getattr(model_runner, "attn_groups", None) or []:
        for group in groups:
            backend = getattr(group, "backend", None)
            get_name = getattr(backend, "get_name", None)
            backends.append(get_name() if callable(get_name) else _name(backend))
    cache = getattr(vllm_config, "cache_config", None)
    # 0.34+: None where the installed vLLM has no extensible KV cache (0.32, 0.33).
    extensible = getattr(cache, "enable_extensible_kv_cache", None)
    blocks = getattr(cache, "num_gpu_blocks", None)
    return Platform(
        runner="V2" if v2 else "V1",
        runner_class=f"{module}.{cls.__qualname__}",
        device=device,
        compilation_mode=_name(compilation.mode),
        cudagraph_mode=_name(compilation.cudagraph_mode),
        capture_sizes=sorted(int(s) for s in compilation.cudagraph_capture_sizes or []),
        async_scheduling=bool(vllm_config.scheduler_config.async_scheduling),
        attention=backends,
        runner_env=os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
        rank=rank,
        interpreted=os.environ.get("TRITON_INTERPRET", "") == "1",
        kv_blocks=None if extensible and not kv_committed else blocks,
        kv_extensible=None if extensible is None else bool(extensible),
        kv_override=getattr(cache, "num_gpu_blocks_override", None),
    )


def write(wrapper: Any, kv_committed: bool = False) -> None:
    """This process's platform, into the report folder (nothing without one)."""
    folder = os.environ.get(IMPL_REPORT_DIR_ENV)
    if not folder:
        return
    from vllm.platforms import current_platform

    worker = wrapper.worker
    platform = platform_of(
        worker.vllm_config,
        worker.model_runner,
        str(current_platform.device_type),
        getattr(wrapper, "global_rank", None),
        kv_committed,
    )
    path = Path(folder) / f"{PLATFORM_FILE_PREFIX}{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(platform.model_dump()))
    tmp.replace(path)


def _after(original: Any, kv_committed: bool) -> Any:
    """`original`, then this process's platform written (a failure to read is logged)."""

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        try:
            write(self, kv_committed)
        except Exception:
            logger.exception("specbench: could not read this process's platform")
        return out

    return wrapped


def install() -> None:
    """Wrap WorkerWrapperBase.initialize_from_config once per process, and extend_kv_cache
    where the installed vLLM has it (0.34+: the extensible KV cache's real size)."""
    global _installed
    if _installed:
        return
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    initialize = _after(WorkerWrapperBase.initialize_from_config, kv_committed=False)
    setattr(WorkerWrapperBase, "initialize_from_config", initialize)  # noqa: B010
    extend = WorkerWrapperBase.__dict__.get("extend_kv_cache")
    if extend is not None:
        setattr(WorkerWrapperBase, "extend_kv_cache", _after(extend, kv_committed=True))  # noqa: B010
    _installed = True


def read_platforms(report_dir: Path) -> list[Platform]:
    """Every platform the launch's vLLM processes wrote, by rank (unknown ranks last)."""
    found = []
    for path in sorted(report_dir.glob(f"{PLATFORM_FILE_PREFIX}*.json")):
        found.append(Platform.model_validate_json(path.read_text()))
    return sorted(found, key=lambda p: (p.rank is None, p.rank or 0))


def clear(report_dir: Path) -> None:
    """Platforms an earlier attempt of this launch left (a resumed run reuses its folder)."""
    for path in report_dir.glob(f"{PLATFORM_FILE_PREFIX}*.json"):
        path.unlink(missing_ok=True)


def check_launch(run: RunSpec, report_dir: Path) -> tuple[Platform | None, str | None]:
    """The platform the launch's vLLM processes reported, and why the launch must not be
    measured on it (None: it may). A launch whose features declare platforms they do not work
    on is refused when no process reported one: it would be measured blind. The optional
    features it must run without there: `refusals(platform, run, refuse=False)`."""
    platforms = read_platforms(report_dir)
    platform = platforms[0] if platforms else None
    if platform is None:
        if any(features_of(run).values()):
            return None, (
                "platform refused: no vLLM process reported its platform (model "
                "runner, CUDA graphs), so whether "
                + ", ".join(features_of(run))
                + " can run here is unknown (the "
                "engine log says why the reader failed)"
            )
        return None, None
    plain = {p.model_copy(update={"rank": None}).model_dump_json(): p for p in platforms}
    if len(plain) > 1:
        return platform, (
            "platform refused: vLLM's processes report different platforms: "
            + "; ".join(f"rank {p.rank}: {p.describe()}" for p in plain.values())
        )
    why = refusals(platform, run)
    return platform, ("platform refused: " + " | ".join(why)) if why else None
