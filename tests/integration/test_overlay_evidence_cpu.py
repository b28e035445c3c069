"""The overlay's run-time evidence on real vLLM engines at TP 2 on this CPU: code the planner
let through (planted here through the plan item, as a blind spot of the planner would) is
refused by where it actually ran -- in the engine core, shadowed by the CPU model runner, only
at start-up -- before any measured block, each function named with its true reason; and a
function Dynamo traces into the compiled forward fails the launch by name, never measured
with replayed proof."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from harness.config.scenario import load_scenario
from harness.execute.local import default_worker_cmd, run_one
from harness.plan.plan import expand_plan
from harness.wire.overlay import OverlayCode
from harness.wire.records import RunRecord
from harness.wire.spec import RunSpec
from tests.conftest import SCENARIOS

pytestmark = pytest.mark.integration


def _installed(file: str, qualname: str) -> OverlayCode:
    """The installed version of a vLLM function as a branch's code: identical source, so
    only where it runs is under test."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    text = (root / file.removeprefix("vllm/")).read_text(encoding="utf-8")
    *owners, name = qualname.split(".")
    body: list[ast.stmt] = ast.parse(text).body
    for owner in owners:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    source = "".join(text.splitlines(keepends=True)[first - 1 : node.end_lineno])
    return OverlayCode(
        module=file.removesuffix(".py").replace("/", "."),
        owner=owners[-1] if owners else None,
        name=name,
        kind="function",
        source=source,
        line=first,
        file=file,
        future=["annotations"] if "from __future__ import annotations" in text else [],
    )


def _launch(tmp: Path, extra: list[OverlayCode]) -> RunRecord:
    """The shipped EAGLE TP 2 overlay scenario (compiled, its diff on the candidate), with
    `extra` functions planted in the candidate's overlay, launched once."""
    scenario = load_scenario(SCENARIOS / "cpu-eagle-tp2-overlay.yaml")
    scenario = scenario.model_copy(update={"repeats": 2, "warmup": 4, "precision": None})
    plan = expand_plan(scenario, scenario_file=SCENARIOS / "cpu-eagle-tp2-overlay.yaml")
    (run,) = plan.runs
    assert run.overlay is not None
    arms = [
        arm.model_copy(update={"code": [*arm.code, *extra]}) if arm.change else arm
        for arm in run.overlay.arms
    ]
    overlay = run.overlay.model_copy(
        update={"arms": arms, "functions": [*run.overlay.functions, *(c.key for c in extra)]}
    )
    planted: RunSpec = run.model_copy(update={"overlay": overlay})
    return run_one(planted, tmp, SCENARIOS, None, default_worker_cmd(planted.mode))


def test_code_outside_the_switch_shadowed_or_start_up_only_is_refused_before_measuring(
    tmp_path: Path,
) -> None:
    record = _launch(
        tmp_path,
        [
            _installed(
                "vllm/distributed/device_communicators/shm_broadcast.py", "MessageQueue.enqueue"
            ),
            _installed("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._to_list"),
            _installed("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._dummy_run"),
        ],
    )
    assert record.status == "failed", record.error
    error = record.error or ""
    assert error.startswith("OverlayRefused: overlay refused before the first measured block:")
    assert (
        "MessageQueue.enqueue (vllm.distributed.device_communicators.shm_broadcast) runs in vLLM's"
        in error
        and "which the arm switch (collective_rpc to vLLM's workers) never reaches" in error
    )
    assert (
        "GPUModelRunner._to_list (vllm.v1.worker.gpu_model_runner) never ran: "
        "CPUModelRunner._to_list (vllm.v1.worker.cpu_model_runner) overrides it" in error
    )
    assert (
        "GPUModelRunner._dummy_run (vllm.v1.worker.gpu_model_runner) ran only while the "
        "engine started" in error
    )
    # The branch's own function ran on both ranks and is not named; the way out is.
    assert "_greedy_sample" not in error
    assert error.endswith(
        "To measure it, give the branch as a build "
        "(variants.local-argmax.python: an environment with it installed): "
        "it then runs launch-per-arm"
    )
    assert record.result is not None and record.result.passes == []


def test_a_function_dynamo_inlines_into_the_compiled_forward_fails_the_launch_by_name(
    tmp_path: Path,
) -> None:
    record = _launch(
        tmp_path,
        [_installed("vllm/distributed/communication_op.py", "tensor_model_parallel_all_reduce")],
    )
    assert record.status == "failed"
    assert (record.error or "").startswith(
        "overlay refused: tensor_model_parallel_all_reduce (vllm.distributed.communication_op) "
        "runs inside a graph: torch.compile traced it into the compiled forward"
    ), record.error
    assert record.result is None or record.result.passes == []
