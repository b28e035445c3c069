"""The platform model: read from vLLM's own config objects and model-runner
classes, described in one line, and checked against what every swap, a switched patch and the
step timer declare they do not run on. Every unsupported combination in the registry is built
and refused (the step timer, optional, left out instead), naming the feature, the reason and
the ways out; the platform this CPU gives (V1, no CUDA graphs) refuses nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.analysis.comparison import Comparison
from harness.config.platforms import GRAPH_MODES, PATCH_SWITCHING, STEP_TIMER, Unsupported
from harness.config.scenario import load_scenario
from harness.config.swaps import SWAPS
from harness.engine.platform import check_launch, clear, platform_of, read_platforms
from harness.plan.plan import expand_plan
from harness.present.tables import platform_line
from harness.wire.platform import Platform, features_of, refusals
from harness.wire.spec import ArmSpec, RunSpec
from tests.conftest import SCENARIOS


def _config(mode: str, graphs: str, sizes: list[int], async_scheduling: bool) -> object:
    """vLLM's real CompilationConfig (its enums parse the names), beside a scheduler."""
    from vllm.config import CompilationConfig
    from vllm.config.compilation import CompilationMode, CUDAGraphMode

    compilation = CompilationConfig(
        mode=CompilationMode[mode],
        cudagraph_mode=CUDAGraphMode[graphs],
        cudagraph_capture_sizes=sizes,
    )
    return SimpleNamespace(
        compilation_config=compilation,
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
    )


def _runner(module: str, name: str) -> object:
    """An instance of vLLM's real model-runner class, without building it."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    return object.__new__(cls)


def test_the_platform_is_read_from_vllms_config_and_runner_classes() -> None:
    v1 = platform_of(
        _config("VLLM_COMPILE", "FULL_AND_PIECEWISE", [1, 2, 4, 8], True),
        _runner("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
        "cuda",
    )
    assert (v1.runner, v1.compilation_mode, v1.cudagraph_mode) == (
        "V1",
        "VLLM_COMPILE",
        "FULL_AND_PIECEWISE",
    )
    assert v1.capture_sizes == [1, 2, 4, 8] and v1.async_scheduling
    # Model Runner V2's CPU subclass is importable here; its module is what tells V2.
    v2 = platform_of(
        _config("NONE", "NONE", [], False),
        _runner("vllm.v1.worker.cpu.model_runner", "CPUModelRunner"),
        "cpu",
    )
    assert v2.runner == "V2" and v2.runner_class.endswith("cpu.model_runner.CPUModelRunner")
    cpu = platform_of(
        _config("DYNAMO_TRACE_ONCE", "NONE", [], False),
        _runner("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
        "cpu",
    )
    assert cpu.runner == "V1"
    text = v1.describe()
    assert text.startswith(
        "runner V1 (GPUModelRunner), cuda, compilation VLLM_COMPILE, "
        "CUDA graphs FULL_AND_PIECEWISE (sizes 1-8, 4), async scheduling on"
    )


def _plan(name: str) -> list[RunSpec]:
    return expand_plan(load_scenario(SCENARIOS / name)).runs


def _platform(runner: str, graphs: str) -> Platform:
    return Platform(
        runner=runner,
        runner_class="vllm.x.Runner",
        device="cuda",
        compilation_mode="VLLM_COMPILE",
        cudagraph_mode=graphs,
        async_scheduling=True,
    )


def _cases() -> list[tuple[str, RunSpec, str, Unsupported]]:
    """(feature, a launch that has it, ...) for every declared rule."""
    medusa = _plan("cpu-medusa-proposer.yaml")[0]
    eagle = _plan("cpu-eagle-tp2-argmax.yaml")[0]
    timed = next(r for r in _plan("cpu-medusa-speedup.yaml") if r.step_times)
    patched = medusa.model_copy(update={"patch": "mypkg.patches:install"})
    cases = []
    handoff = _plan("cpu-v2-draft-handoff.yaml")[0]
    for launch, feature in (
        (medusa, "the medusa-proposer swap"),
        (eagle, "the tp-argmax-reduction swap"),
        (handoff, "the v2-draft-handoff swap"),
    ):
        name = feature.split()[1]
        cases += [(feature, launch, name, rule) for rule in SWAPS[name].unsupported]
    cases += [("the step timer", timed, "step timer", rule) for rule in STEP_TIMER]
    cases += [("the patch", patched, "patch", rule) for rule in PATCH_SWITCHING]
    return cases


def test_every_swap_declares_where_it_does_not_run() -> None:
    assert all(isinstance(swap.unsupported, tuple) for swap in SWAPS.values())
    assert {name for name, swap in SWAPS.items() if swap.unsupported} == set(SWAPS)


@pytest.mark.parametrize("index", range(4))
def test_every_unsupported_combination_is_refused_with_the_reason_and_the_ways_out(
    index: int,
) -> None:
    feature, launch, _, rule = _cases()[index]
    assert launch.design == "one-engine" or not rule.switching
    if rule.switching:
        assert len(launch.arms) > 1
    runners = [rule.runner] if rule.runner else ["V1", "V2"]
    graphs = sorted(rule.graphs) if rule.graphs is not None else list(GRAPH_MODES)
    for runner in runners:
        for mode in graphs:
            platform = _platform(runner, mode)
            why = [
                w for w in refusals(platform, launch, refuse=rule.refuse) if w.startswith(feature)
            ]
            assert len(why) == 1, (runner, mode, why)
            # An optional part (the step timer) is left out, never a refusal, and vice versa.
            assert not any(
                w.startswith(feature) for w in refusals(platform, launch, refuse=not rule.refuse)
            )
            assert why[0].startswith(feature) and rule.why in why[0]
            assert f"model runner {runner}, CUDA graphs {mode}" in why[0]
            for way in rule.ways_out():
                assert way in why[0]

    # Each ways out leaves the rule: the V1 runner, eager (no graphs), or one arm per launch.
    def refused(platform: Platform, run: RunSpec = launch) -> bool:
        return any(w.startswith(feature) for w in refusals(platform, run, rule.refuse))

    if rule.runner is not None:
        other = "V1" if rule.runner == "V2" else "V2"
        assert not refused(_platform(other, graphs[0]))
    if rule.graphs is not None:
        assert not refused(_platform(runners[0], "NONE"))
    if rule.graphs is not None and "PIECEWISE" not in rule.graphs:
        assert not refused(_platform(runners[0], "PIECEWISE"))
    if rule.switching:
        alone = launch.model_copy(update={"design": "launch-per-arm", "arms": []})
        assert not refused(_platform(runners[0], graphs[0]), alone)


def test_the_cases_cover_every_declared_rule() -> None:
    assert len(_cases()) == 4
    assert STEP_TIMER == ()  # timed on V1 and V2 alike (harness.engine.steptimes)
    assert {rule for *_, rule in _cases()} == {
        *STEP_TIMER,
        *PATCH_SWITCHING,
        *(r for s in SWAPS.values() for r in s.unsupported),
    }


@pytest.mark.parametrize("runner", ["V1", "V2"])
def test_this_cpus_platform_refuses_nothing_shipped(runner: str) -> None:
    """This CPU's platforms, V1 and V2 under Triton's interpreter (eager), refuse no shipped
    CPU scenario's features: the step timer and the tp-argmax-reduction switch run on both."""
    module = "cpu_model_runner" if runner == "V1" else "cpu.model_runner"
    cpu = Platform(
        runner=runner,
        runner_class=f"vllm.v1.worker.{module}.CPUModelRunner",
        device="cpu",
        compilation_mode="DYNAMO_TRACE_ONCE",
        cudagraph_mode="NONE",
        async_scheduling=False,
        attention=["CPU_ATTN"],
        interpreted=runner == "V2",
    )
    for path in sorted(SCENARIOS.glob("cpu-*.yaml")):
        scenario = load_scenario(path)
        if runner == "V2" and scenario.draft is not None and scenario.draft.method == "medusa":
            continue  # V2 has no Medusa (vLLM falls back to V1); its swap says so
        if runner == "V1" and scenario.model_runner == "V2":
            continue  # written for V2 (v2-draft-handoff patches V2's handler)
        for launch in expand_plan(scenario, scenario_file=path).runs:
            assert not refusals(cpu, launch), (path.name, launch.run_key)
            assert not refusals(cpu, launch, refuse=False), (path.name, launch.run_key)
    # The demo times its steps (step_times: true): the timer's rules are declared too.
    assert features_of(_plan("cpu-medusa-proposer.yaml")[0]) == {
        "the medusa-proposer swap": SWAPS["medusa-proposer"].unsupported,
        "the step timer (where the speedup goes)": STEP_TIMER,
    }


def test_a_launch_is_refused_when_no_process_reported_its_platform(tmp_path: Path) -> None:
    medusa = _plan("cpu-medusa-proposer.yaml")[0]
    platform, why = check_launch(medusa, tmp_path)
    assert platform is None and why is not None and "no vLLM process reported" in why
    plain = medusa.model_copy(
        update={"arms": [], "implementation": None, "design": "launch-per-arm", "step_times": False}
    )
    assert check_launch(plain, tmp_path) == (None, None)  # nothing declared: recorded only
    # Ranks that disagree are refused; stale files of an earlier attempt are cleared.
    for rank, graphs in ((0, "NONE"), (1, "FULL")):
        p = _platform("V1", graphs).model_copy(update={"rank": rank})
        (tmp_path / f"platform-{100 + rank}.json").write_text(p.model_dump_json())
    assert [p.rank for p in read_platforms(tmp_path)] == [0, 1]
    platform, why = check_launch(medusa, tmp_path)
    assert platform is not None and why is not None and "report different platforms" in why
    clear(tmp_path)
    assert read_platforms(tmp_path) == []


def test_launches_on_one_platform_print_it_once_and_differing_ones_each() -> None:
    a, b = _platform("V1", "NONE"), _platform("V1", "FULL")

    def line(platforms: dict[str, Platform]) -> str | None:
        bare = Comparison("r", "s", "x", "ok", [], None, [], [], {}, platforms=platforms)
        return platform_line(bare)

    assert line({"x.r0": a, "x.r1": a}) == a.describe()
    both = line({"x.r0": a, "x.r1": b})
    assert both is not None and both.endswith("(the launches differ)") and "x.r1: " in both
    assert line({}) is None
    forced = a.model_copy(update={"runner_env": "0"}).describe()
    assert "forced by VLLM_USE_V2_MODEL_RUNNER=0" in forced


def test_the_maverick_scenario_runs_under_model_runner_v2_with_cuda_graphs() -> None:
    """Seed 002's shape on CUDA: vLLM's default there (V2, FULL_AND_PIECEWISE graphs) would
    refuse the swap switched in one engine, so the scenario runs an engine per arm."""
    v2 = _platform("V2", "FULL_AND_PIECEWISE")
    for launch in _plan("gpu-llama4-maverick-eagle-tp8.yaml"):
        assert launch.design == "launch-per-arm" and not refusals(v2, launch)
        one = launch.model_copy(
            update={
                "design": "one-engine",
                "arms": [
                    ArmSpec(
                        variant=v,
                        baseline=v == "baseline",
                        implementation=f"tp-argmax-reduction:{c}",
                    )
                    for v, c in (("baseline", "baseline"), ("local-argmax", "optimized"))
                ],
            }
        )
        assert refusals(v2, one)
