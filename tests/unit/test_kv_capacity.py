"""The KV capacity each launch really had. On vLLM 0.34 with CUDA the KV cache is extensible by
default: the number at initialize_from_config is a reservation and the real size is committed
after warm-up and graph capture (extend_kv_cache); num_gpu_blocks_override switches that off.
0.32 and 0.33 have no extensible cache. These facts are read from each release's source (the
installed 0.32, the 0.33 and 0.34 CUDA wheels), then the platform reader, the pin and the
table are held to what they imply, engine-free."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.analysis.comparison import Comparison
from harness.analysis.setup import kv_capacities
from harness.config.scenario import load_scenario
from harness.execute.runner import KV_PIN, kv_left_to_vllm, pin_kv_capacity
from harness.plan.plan import expand_plan
from harness.plan.vllm_support import Source, installed_source
from harness.present.tables import ASYNC_PARTS, kv_warning, platform_line
from harness.wire.platform import Platform, kv_capacity_differs
from harness.wire.records import RunRecord, WorkerResult
from harness.wire.spec import RunSpec
from tests.conftest import SCENARIOS
from tests.unit.test_vllm_releases import release

# -- what vLLM does, read from its source -------------------------------------------------------


def _class(source: Source, module: str, name: str) -> ast.ClassDef:
    tree = source.tree(module)
    assert tree is not None, module
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _method(source: Source, module: str, qualname: str) -> ast.FunctionDef | None:
    owner, name = qualname.split(".")
    found = [
        n
        for n in _class(source, module, owner).body
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    return found[0] if found else None


def _fields(cls: ast.ClassDef) -> set[str]:
    return {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


@pytest.fixture(scope="module")
def v034() -> Source:
    return release("0.34.0")


def test_034_makes_the_kv_cache_extensible_on_cuda_unless_the_override_is_set(
    v034: Source,
) -> None:
    """CacheConfig.enable_extensible_kv_cache defaults to unset, and VllmConfig settles an unset
    one to on unless a reason says otherwise: not CUDA-alike, or num_gpu_blocks_override set
    (the pin specbench used to set on every later launch)."""
    cache = _class(v034, "vllm.config.cache", "CacheConfig")
    assert {"enable_extensible_kv_cache", "num_gpu_blocks_override"} <= _fields(cache)
    field = next(
        n
        for n in cache.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and n.target.id == "enable_extensible_kv_cache"
    )
    assert field.value is not None and "default=None" in ast.unparse(field.value)
    resolve = _method(v034, "vllm.config.vllm", "VllmConfig._resolve_extensible_kv_cache")
    assert resolve is not None
    text = ast.unparse(resolve)
    chain = next(
        n
        for n in ast.walk(resolve)
        if isinstance(n, ast.If) and "is_cuda_alike" in ast.unparse(n.test)
    )
    reasons = []
    node: ast.stmt | None = chain
    while isinstance(node, ast.If):
        reasons.append(ast.unparse(node.test))
        node = node.orelse[0] if node.orelse else None
    assert "cache_config.num_gpu_blocks_override is not None" in reasons
    assert "not current_platform.is_cuda_alike()" in reasons
    # Unset: on exactly where no reason was found.
    assert "enabled = unsupported is None and" in text
    assert "cache_config.enable_extensible_kv_cache = enabled" in text


def test_034_commits_the_real_size_after_warm_up(v034: Source) -> None:
    """The engine core's num_blocks is a reservation under the extensible cache: it calls
    the workers' extend_kv_cache after compile_or_warm_up_model, which sets the worker's
    cache_config.num_gpu_blocks to the measured size; V2's capture estimate is 0 there (the
    reservation leaves the graphs out)."""
    init = _method(v034, "vllm.v1.engine.core", "EngineCore._initialize_kv_caches")
    assert init is not None
    calls = [ast.unparse(n.func) for n in ast.walk(init) if isinstance(n, ast.Call)]
    warm = calls.index("self.model_executor.compile_or_warm_up_model")
    extend = calls.index("self.model_executor.extend_kv_cache")
    assert warm < extend
    worker = _method(v034, "vllm.v1.worker.gpu_worker", "Worker.extend_kv_cache")
    assert worker is not None
    assert "self.cache_config.num_gpu_blocks = num_blocks" in ast.unparse(worker)
    # ... the very config the platform reader reads (worker.vllm_config.cache_config).
    base = _method(v034, "vllm.v1.worker.worker_base", "WorkerBase.__init__")
    assert base is not None and "self.cache_config = vllm_config.cache_config" in ast.unparse(base)
    wrapper = _method(v034, "vllm.v1.worker.worker_base", "WorkerWrapperBase.extend_kv_cache")
    assert wrapper is not None and "self.worker.extend_kv_cache(num_blocks)" in ast.unparse(wrapper)
    profile = _method(
        v034, "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.profile_cudagraph_memory"
    )
    assert profile is not None
    first = profile.body[1] if isinstance(profile.body[0], ast.Expr) else profile.body[0]
    assert isinstance(first, ast.If) and "enable_extensible_kv_cache" in ast.unparse(first.test)
    assert ast.unparse(first.body[-1]) == "return 0"


@pytest.mark.parametrize("version", ["0.32", "0.33.0"])
def test_032_and_033_have_no_extensible_kv_cache(version: str) -> None:
    """There num_gpu_blocks at initialize_from_config is the cache's size, and the pin
    keeps vLLM's own sizing (the least an earlier launch got from it)."""
    source = installed_source() if version == "0.32" else release(version)
    assert source.version.startswith(version)
    assert "enable_extensible_kv_cache" not in _fields(
        _class(source, "vllm.config.cache", "CacheConfig")
    )
    assert (
        _method(source, "vllm.v1.worker.worker_base", "WorkerWrapperBase.extend_kv_cache") is None
    )
    init = _method(source, "vllm.v1.worker.gpu_worker", "Worker.initialize_from_config")
    assert init is not None
    assert "self.cache_config.num_gpu_blocks = kv_cache_config.num_blocks" in ast.unparse(init)


# -- what specbench records, pins and prints ---------------------------------------------------


def _platform(
    blocks: int | None,
    extensible: bool | None,
    override: int | None = None,
    async_scheduling: bool = False,
) -> Platform:
    return Platform(
        runner="V2",
        runner_class="vllm.v1.worker.gpu.model_runner.GPUModelRunner",
        device="cuda",
        compilation_mode="VLLM_COMPILE",
        cudagraph_mode="FULL_AND_PIECEWISE",
        async_scheduling=async_scheduling,
        kv_blocks=blocks,
        kv_extensible=extensible,
        kv_override=override,
    )


def _config(blocks: int, extensible: bool | None) -> SimpleNamespace:
    cache = SimpleNamespace(num_gpu_blocks=blocks, num_gpu_blocks_override=None)
    if extensible is not None:  # 0.32 and 0.33 have no such field
        cache.enable_extensible_kv_cache = extensible
    return SimpleNamespace(
        compilation_config=SimpleNamespace(
            mode="NONE", cudagraph_mode="NONE", cudagraph_capture_sizes=[]
        ),
        scheduler_config=SimpleNamespace(async_scheduling=True),
        cache_config=cache,
    )


def test_the_reader_records_the_committed_size_never_the_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.engine import platform as reader
    from harness.wire.protocol import IMPL_REPORT_DIR_ENV

    runner = object()
    reserved = reader.platform_of(_config(5000, True), runner, "cuda")
    assert (reserved.kv_blocks, reserved.kv_extensible) == (None, True)
    committed = reader.platform_of(_config(3100, True), runner, "cuda", kv_committed=True)
    assert (committed.kv_blocks, committed.kv_extensible) == (3100, True)
    old = reader.platform_of(_config(900, None), runner, "cuda")
    assert (old.kv_blocks, old.kv_extensible) == (900, None)

    # The wrapped extend_kv_cache writes the platform again once vLLM's own call has set the
    # worker's num_gpu_blocks to the committed size.
    monkeypatch.setenv(IMPL_REPORT_DIR_ENV, str(tmp_path))
    config = _config(5000, True)
    wrapper = SimpleNamespace(
        worker=SimpleNamespace(vllm_config=config, model_runner=runner), global_rank=0
    )

    def extend_kv_cache(self: SimpleNamespace, num_blocks: int) -> None:
        self.worker.vllm_config.cache_config.num_gpu_blocks = num_blocks

    reader._after(lambda self, *a: None, kv_committed=False)(wrapper)
    [written] = tmp_path.glob("platform-*.json")
    assert json.loads(written.read_text())["kv_blocks"] is None
    reader._after(extend_kv_cache, kv_committed=True)(wrapper, 3100)
    assert [p.kv_blocks for p in reader.read_platforms(tmp_path)] == [3100]


def _runs() -> tuple[RunSpec, RunSpec]:
    runs = [
        r.model_copy(update={"device": "cuda"})
        for r in expand_plan(load_scenario(SCENARIOS / "cpu-medusa-speedup.yaml")).runs
    ]
    assert runs[0].design == "launch-per-arm"
    return runs[0], runs[1]


def _done(run: RunSpec, platform: Platform) -> RunRecord:
    return RunRecord(
        **run.record_fields(),
        status="ok",
        wall_s=1.0,
        result=WorkerResult(run_key=run.run_key, status="ok", platform=platform),
    )


def test_a_gpu_launch_per_arm_run_under_the_extensible_cache_is_not_pinned() -> None:
    first, later = _runs()
    extensible = [_done(first, _platform(3100, True))]
    assert pin_kv_capacity(later, extensible) is later  # vLLM's own sizing, after warm-up
    assert kv_left_to_vllm(later, extensible)  # and the progress line says so
    assert not kv_left_to_vllm(later.model_copy(update={"device": "cpu"}), extensible)
    # A reader that never saw the committed size leaves nothing to pin either.
    assert pin_kv_capacity(later, [_done(first, _platform(None, True))]) is later
    # Without the extensible cache (0.32, 0.33, or turned off) the pin holds as before.
    for flag in (None, False):
        pinned = pin_kv_capacity(later, [_done(first, _platform(900, flag))])
        assert pinned.engine_args[KV_PIN] == 900
        assert not kv_left_to_vllm(later, [_done(first, _platform(900, flag))])


def test_each_launchs_capacity_is_on_the_setup_line_and_differing_arms_warn() -> None:
    a = _platform(3100, True)
    b = _platform(2900, True)

    def comparison(platforms: dict[str, Platform]) -> Comparison:
        return Comparison("r", "s", "x", "ok", [], None, [], [], {}, platforms=platforms)

    line = platform_line(comparison({"base.r0": a, "opt.r0": b}))
    assert line is not None
    assert line.startswith(a.describe(kv=False) + "; KV cache per launch: ")
    assert "base.r0: 3100 blocks (sized by vLLM after warm-up: extensible KV cache)" in line
    assert "opt.r0: 2900 blocks (sized by vLLM after warm-up" in line
    same = platform_line(comparison({"base.r0": a, "opt.r0": a}))
    assert same == a.describe(kv=False) + f", KV cache {a.kv_text()}"
    blocks = kv_capacity_differs({"base.r0": ("base", a), "opt.r0": ("opt", b)})
    assert blocks == {"base.r0": 3100, "opt.r0": 2900}
    [warning] = kv_warning(blocks, extensible=True)
    assert "after warm-up" in warning and "would switch the extensible cache off" in warning
    pinned = _platform(900, False, override=900).kv_text()
    assert pinned == "900 blocks (pinned by num_gpu_blocks_override)"
    assert _platform(None, None).kv_text() is None  # an older record: nothing said


def test_the_kv_capacity_each_launch_had_is_read_from_the_records() -> None:
    first, later = _runs()
    records = [_done(first, _platform(3100, True)), _done(later, _platform(2900, True))]
    records.append(RunRecord(**later.record_fields(), status="failed", wall_s=1.0))
    found = kv_capacities(records)
    assert {k: p.kv_blocks for k, p in found.items()} == {
        first.run_key: 3100,
        later.run_key: 2900,
    }


def test_the_setup_line_says_what_the_parts_mean_under_async_scheduling() -> None:
    on, off = _platform(3100, True, async_scheduling=True), _platform(3100, True)
    timed = Comparison("r", "s", "x", "ok", [], None, [], [], {}, platforms={"a.r0": on})
    assert ASYNC_PARTS not in (platform_line(timed) or "")  # no step parts shown
    timed.attributions = [object()]  # type: ignore[list-item]
    line = platform_line(timed)
    assert line is not None and line.endswith(f"; {ASYNC_PARTS}")
    timed.platforms = {"a.r0": off}
    assert ASYNC_PARTS not in (platform_line(timed) or "")
