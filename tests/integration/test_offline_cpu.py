"""Both CPU scenarios end to end through the CLI on real vLLM (tiny local models).

Each real run is started once per session and shared by many assertions: an engine start
costs about 35 s here.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.compare import compare_run
from harness.analysis.stats import PRECISION_LOOK_EVERY, PRECISION_MIN_BLOCKS
from harness.errors import ExitCode
from harness.present.outputs import SUMMARY_VERSION
from harness.present.tables import warnings_of
from harness.results.metrics import passes_frame, requests_frame
from harness.results.run import Run, load_run
from harness.wire.records import SCHEMA_VERSION
from testkit.processes import run_scenario
from tests.conftest import ROOT, SCENARIOS
from tests.faults import NOOP_SWITCH_ENV, fault_env
from tests.patches.kill_engine_core import KILL_AT_ENV

pytestmark = pytest.mark.integration


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    results: Run


def run_cli(
    scenario: Path,
    results_dir: Path,
    run_id: str,
    env: dict[str, str] | None = None,
    rows: str = "all",
) -> CliRun:
    """`specbench run`; `rows`: the table's rows, by default all of them and every note
    unfolded, which these tests read (the default layout: tests/unit/test_headline.py)."""
    proc, _ = run_scenario(
        scenario,
        results_dir,
        "--run-id",
        run_id,
        "--rows",
        rows,
        env=env if env is not None else {**os.environ},
        timeout=1800,
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr, load_run(results_dir / run_id))


def run_variant_of(name: str, tmp: Path, run_id: str, **changes: Any) -> CliRun:
    """A shipped scenario with some top-level fields changed, run through the CLI."""
    data = _scenario(name)
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_cli(path, tmp / "results", run_id)


# Test engines that need not be compiled (torch.compile costs ~15 s an engine start here).
EAGER = {"enforce_eager": True}

# The demo as shipped, with a precision target it reaches at the first look: one engine, the
# proposer switched between passes, a real precision stop, in about a minute.
MEDUSA_PRECISION = {"mde": 0.5, "budget_s": 400}


@pytest.fixture(scope="session")
def medusa_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    # profile: one pass per arm under vLLM's torch profiler after the measured ones;
    # speed_probe (on in the scenario): the speed probe before every step, the adjusted
    # row's covariate (on V1).
    return run_variant_of(
        "cpu-medusa-proposer.yaml",
        tmp_path_factory.mktemp("medusa"),
        "medusa",
        precision=MEDUSA_PRECISION,
        repeats=2,
        profile={"passes": 1, "top": 15},
        speed_probe=True,
    )


@pytest.fixture(scope="session")
def eagle_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    # Eager: the compiled EAGLE TP 2 engine is the serve test's (tests/integration/
    # test_serve_cpu.py runs the shipped scenario as it is); compiling costs ~15 s a start.
    return run_variant_of(
        "cpu-eagle-tp2-argmax.yaml",
        tmp_path_factory.mktemp("eagle"),
        "eagle",
        repeats=4,
        rounds=1,
        engine=EAGER,
    )


def _scenario(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / name).read_text())
    return data


# --- the Medusa proposer scenario (TP 1) -------------------------------------------------


def test_medusa_cli_succeeds_and_prints_the_table(medusa_run: CliRun) -> None:
    assert medusa_run.returncode == 0, medusa_run.stderr[-3000:]
    assert "Traceback" not in medusa_run.stderr
    out = medusa_run.stdout
    for label in (
        "Output throughput (tok/s)",
        "Total throughput (tok/s)",
        "Request throughput (req/s)",
        "Acceptance rate (%)",
        "Mean acceptance length",
        "Mean TPOT (ms)",
        "Mean TTFT (ms)",
        "Mean E2EL (ms)",
        "Acceptance at position 0 (%)",
        "Output parity vs baseline",
    ):
        assert label in out
    lines = out.lstrip().splitlines()
    assert lines[0].startswith("optimized: ")  # the verdict first, then the title and table
    assert lines[2].startswith("┌")
    path = medusa_run.results.path
    assert (path / "table.md").read_text().count("| Output throughput (tok/s) |") == 1
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["summary_version"] == SUMMARY_VERSION
    assert summary["comparison"]["candidates"][0]["name"] == "optimized"


def test_medusa_rows_say_where_each_arms_time_went(medusa_run: CliRun) -> None:
    """The demo times its steps (step_times: true): a row per part with an interval over the
    blocks, the draft row among them (the proposer is where the change lives)."""
    comparison = compare_run(medusa_run.results)
    rows = {r.key: r for r in comparison.candidates[0].rows}
    for key in (
        "draft_ms_per_step",
        "forward_ms_per_step",
        "rest_ms_per_step",
        "outside_ms_per_pass",
        "steps_per_pass",
    ):
        e = rows[key].estimate
        assert rows[key].baseline > 0 and rows[key].candidate > 0, key
        if key == "steps_per_pass" and e.ci_low is None:
            # Greedy and the same proposals: the same steps in every pass of both arms.
            assert e.delta == 0 and rows[key].baseline == rows[key].candidate
            continue
        assert e.ci_low is not None and e.ci_high is not None and e.units >= 2, key
    line = next(x for x in medusa_run.stdout.splitlines() if "Draft time per step (ms)" in x)
    assert "[" in line and "Draft time per step (ms) †" in line, line
    # The swap's own part (the proposer: the drafter) is marked and named under the table.
    [cand] = comparison.candidates
    assert cand.own_part == "draft_ms_per_step"
    assert (
        "† optimized: Draft time per step (ms) is the part of the step its change lives in "
        "(the swap medusa-proposer changes it; the on-device proposer still waits for its "
        "drafts once per step, in take_draft_token_ids" in medusa_run.stdout
    )
    # Where the delta comes from: the parts add up to the delta, each with its interval.
    [split] = comparison.attributions
    assert split.unit == "blocks" and split.units >= 20  # a precision run: 20 blocks at least
    assert abs(sum(f.value for f in split.parts) - split.measured.value) < 1e-9
    assert all(f.low is not None and f.high is not None for f in split.parts)
    assert (
        "Where optimized's delta comes from (step timer; each part's share of the "
        "output-throughput delta" in medusa_run.stdout
    )


def test_medusa_speed_probe_ran_before_every_step_and_adjusts_the_row(medusa_run: CliRun) -> None:
    """speed_probe: true: every pass carries its probes (one before each execute_model: each
    step, and the pass's last, empty call), kept out of the step's parts and out of the time
    outside them, every 4th with its twin beside it; the speed-adjusted row is adjusted by the
    probe and checked against the twin, its note says so."""
    passes = [p for r in medusa_run.results.runs for p in (r.result.passes if r.result else [])]
    assert passes
    for p in passes:
        st = p.step_times
        assert st is not None and st.probes is not None and st.probe_s is not None
        assert st.steps <= st.probes <= st.steps + 2, (st.steps, st.probes)
        assert 1e-6 < st.probe_s / st.probes < 5e-3  # about 0.1 ms here
        assert st.step_s + st.probe_s < p.duration_s
        # Its twin (harness.engine.twin) ran beside every 4th probe, in another process.
        assert st.twins is not None and st.twin_s is not None and st.probe_over_twin is not None
        assert st.probes // 4 - 1 <= st.twins <= st.probes // 4 + 1, (st.probes, st.twins)
        assert 1e-6 < st.twin_s / st.twins < 5e-3 and 0.5 < st.probe_over_twin < 2.0
    [cand] = compare_run(medusa_run.results).candidates
    row = next(r for r in cand.rows if r.key == "output_throughput_adjusted")
    a = row.adjustment
    assert a is not None and a.probe and a.twin and a.contrast is not None
    assert a.widen <= 2 * 0.02  # |theta| (about 1 here) times the ratio, within the margin
    table = (medusa_run.results.path / "table.md").read_text()
    assert "speed-adjusted by the speed probe (a fixed Python loop" in table
    assert "checked against its twin (the same loop in another process" in table


def test_medusa_arms_are_profiled_after_the_measured_passes(medusa_run: CliRun) -> None:
    """profile: each arm's pass under vLLM's torch profiler (LLM.start_profile), after the
    measured ones and never among them, its proof kept, its traces in the run folder; the
    table of the ops whose self time moved most names the proposer's work."""
    [launch] = medusa_run.results.runs
    assert launch.result is not None
    profiled = {p.arm: p for p in launch.result.profiled}
    assert set(profiled) == {"baseline", "optimized"}
    assert profiled["baseline"].paths == ["medusa.propose.tolist"]
    assert profiled["optimized"].paths == ["medusa.propose.tensor"]
    assert all(p.duration_s > 0 for p in profiled.values())
    folder = medusa_run.results.path / "profiles" / launch.run_key
    for arm in profiled:
        assert list(folder.glob(f"{arm}-0_*.pt.trace.json*")), sorted(folder.iterdir())
    comparison = compare_run(medusa_run.results)
    [table] = comparison.profiles
    assert table.passes == {"baseline": 1, "optimized": 1} and len(table.rows) == 15
    assert all(table.pass_s[a] > 0 and table.measured_s[a] > 0 for a in table.passes)
    out = medusa_run.stdout
    assert (
        "Profile (optimized vs baseline; torch profiler through vLLM's start_profile, 1 "
        "pass(es) per arm after the measured ones, never measured" in out
    )
    assert f"traces: profiles/{launch.run_key}/" in out
    # The swap moves work between the proposer and the runner's copy of its drafts.
    names = " ".join(r.name for r in table.rows)
    assert any(word in names for word in ("propose", "draft_token", "argmax", "tolist")), names


def test_medusa_launch_records_its_platform(medusa_run: CliRun) -> None:
    """The platform, read in vLLM's worker once the engine was built: in the record, in the
    manifest's launch entry, and on the table's Setup line (this CPU: V1, no CUDA graphs)."""
    [record] = medusa_run.results.runs
    assert record.result is not None and record.result.platform is not None
    platform = record.result.platform
    assert platform.runner == "V1" and platform.device == "cpu"
    assert platform.runner_class == "vllm.v1.worker.cpu_model_runner.CPUModelRunner"
    assert platform.cudagraph_mode == "NONE" and platform.attention
    manifest = json.loads((medusa_run.results.path / "manifest.json").read_text())
    assert manifest["runs"][0]["platform"]["runner"] == "V1"
    assert (
        f"platform: {platform.describe()}" in medusa_run.stdout.replace("\n", " ")
        or "platform: runner V1 (CPUModelRunner), cpu" in medusa_run.stdout
    )


def test_each_pass_records_what_else_loaded_the_machine(medusa_run: CliRun) -> None:
    """Contention per pass: the share of the CPUs other processes used during each
    measured pass, from /proc, and its summary on the table's Machine line."""
    [record] = medusa_run.results.runs
    assert record.result is not None
    shares = [p.foreign_cpu for p in record.result.passes]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in shares)
    assert all(p.load1 is not None for p in record.result.passes)
    assert "Machine: other processes used a median " in " ".join(medusa_run.stdout.split())


def test_medusa_every_request_completed_with_max_tokens(medusa_run: CliRun) -> None:
    scenario = _scenario("cpu-medusa-proposer.yaml")
    requests = requests_frame(medusa_run.results.runs)
    workload = scenario["workload"]
    passes = passes_frame(medusa_run.results.runs)
    assert len(requests) == workload["num_prompts"] * len(passes)
    assert requests["error"].isna().all()
    assert (requests["output_tokens"] == workload["max_tokens"]).all()  # ignore_eos
    assert (requests["prompt_tokens"] == workload["input_len"]).all()
    assert (requests["ttft_ms"] > 0).all() and (requests["e2el_ms"] >= requests["ttft_ms"]).all()


def test_medusa_precision_run_stopped_at_a_look(medusa_run: CliRun) -> None:
    [record] = medusa_run.results.runs
    assert record.result is not None and record.result.stop is not None
    assert record.result.stop.reason == "target" and record.result.stopped is None
    blocks = len(record.result.passes) // 4
    assert blocks >= PRECISION_MIN_BLOCKS and blocks % PRECISION_LOOK_EVERY == 0
    assert record.log_file is not None
    assert (
        "Stopped: " in medusa_run.stdout
        and "look after"
        in medusa_run.stderr + (medusa_run.results.path / record.log_file).read_text()
    )


def test_medusa_drafts_accept_for_real(medusa_run: CliRun) -> None:
    passes = passes_frame(medusa_run.results.runs)
    assert (passes["num_accepted_tokens"] > 0).all()
    assert (passes["acceptance_rate"] > 0).all()
    # Medusa proposes num_speculative_tokens per draft step.
    assert (passes["num_draft_tokens"] == 3 * passes["num_drafts"]).all()
    assert (passes["num_accepted_tokens"] <= passes["num_draft_tokens"]).all()


def test_medusa_passes_do_not_double_count_counters(medusa_run: CliRun) -> None:
    passes = passes_frame(medusa_run.results.runs).sort_values("repeat")
    drafts = passes["num_draft_tokens"].to_numpy()
    # Cumulative counters would grow with every pass; per-pass deltas stay level.
    assert drafts.max() < 1.3 * drafts.min(), drafts
    first = passes.iloc[0]
    assert first["num_accepted_tokens"] < first["output_tokens"]
    # Both arms generate the same tokens and accept the same drafts (greedy, same model).
    per_arm = passes.groupby("variant")["num_accepted_tokens"].agg(["min", "max"])
    assert per_arm["min"].nunique() == 1 and per_arm["max"].nunique() == 1


def test_medusa_greedy_outputs_identical_between_proposers(medusa_run: CliRun) -> None:
    scenario = _scenario("cpu-medusa-proposer.yaml")
    comparison = compare_run(medusa_run.results)
    parity = comparison.candidates[0].parity
    assert parity is not None
    passes = comparison.passes_per_arm["optimized"]
    assert parity.compared == scenario["workload"]["num_prompts"] * passes
    assert parity.fraction == 1.0 and parity.first_divergence is None


def test_medusa_switch_ran_both_proposers_in_one_engine_process(medusa_run: CliRun) -> None:
    """Pass by pass, the engine core (never the harness's worker) reports what the proposer
    returned: host lists in baseline passes, a CPU tensor in optimized ones, same process."""
    [record] = medusa_run.results.runs
    assert record.result is not None
    pids = set()
    for p in record.result.passes:
        assert p.impl_reports is not None and len(p.impl_reports) == 1, p.repeat
        [rep] = p.impl_reports
        want = (
            ("medusa.propose.tolist", "list")
            if p.arm == "baseline"
            else ("medusa.propose.tensor", "tensor")
        )
        assert set(rep.paths) == {want[0]} and rep.details["returned"] == want[1]
        assert (rep.calls or 0) > 0 and rep.matches_choice
        assert rep.pid != record.result.worker_pid
        pids.add(rep.pid)
    assert len(pids) == 1
    comparison = compare_run(medusa_run.results)
    assert comparison.design == "one-engine" and not comparison.unproven
    assert not comparison.discarded and warnings_of(comparison) == []
    tput = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    # Real passes sometimes stall: the estimator is then the stall-robust one, named.
    assert tput.estimate.test in ("paired t (blocks)", "Yuen 20% trimmed (blocks)")
    assert tput.estimate.mde is not None
    if not sum(tput.estimate.stalls):
        assert tput.estimate.test == "paired t (blocks)" and not tput.estimate.robust
    assert "Design: one-engine" in medusa_run.stdout


def assert_per_request_acceptance_pools_to_the_counters(run: CliRun) -> None:
    """vLLM's per-request spec-decode metrics and its aggregate counters come from the same
    scheduler event: per pass, the requests' verify steps, accepted and proposed draft tokens
    sum exactly to the pass's counters; and the per-request rows are in the table."""
    for record in run.results.runs:
        assert record.result is not None
        for p in record.result.passes:
            assert p.spec_decode is not None
            hists = [r.spec_histogram for r in p.requests]
            assert all(h is not None for h in hists), "a request without its metrics"
            steps = sum(sum(h) for h in hists if h is not None)
            accepted = sum(j * c for h in hists if h is not None for j, c in enumerate(h))
            drafted = sum(r.spec_draft_tokens or 0 for r in p.requests)
            assert (steps, accepted, drafted) == (
                p.spec_decode.num_drafts,
                p.spec_decode.num_accepted_tokens,
                p.spec_decode.num_draft_tokens,
            )
    table = (run.results.path / "table.md").read_text()
    for label in (
        "P10 acceptance length (per request)",
        "Median acceptance length (per request)",
        "P90 acceptance length (per request)",
    ):
        assert f"| {label} |" in table


def test_medusa_per_request_acceptance_pools_to_the_counters(medusa_run: CliRun) -> None:
    assert_per_request_acceptance_pools_to_the_counters(medusa_run)


def test_medusa_manifest_fingerprint(medusa_run: CliRun) -> None:
    m = medusa_run.results.manifest
    fp = m["fingerprint"]
    assert m["schema_version"] == SCHEMA_VERSION and m["status"] == "complete"
    assert fp["vllm"] == "0.32.0" and fp["torch"].startswith("2.13.0")
    assert fp["cpu_count"] >= 1 and fp["compat_id"] and fp["scenario_hash"] == m["scenario_hash"]
    result = medusa_run.results.runs[0].result
    assert result is not None and result.engine_versions["vllm"] == "0.32.0"
    assert m["plan"]["design"] == "one-engine"
    assert set(result.resolved_models) == {"tiny-llama", "tiny-llama-medusa"}


# --- the EAGLE TP 2 argmax scenario ------------------------------------------------------


def test_eagle_tp2_runs_and_accepts(eagle_run: CliRun) -> None:
    assert eagle_run.returncode == 0, eagle_run.stderr[-3000:]
    passes = passes_frame(eagle_run.results.runs)
    assert len(passes) == 2 * 4  # 2 blocks of A B B A
    assert (passes["num_accepted_tokens"] > 0).all()
    requests = requests_frame(eagle_run.results.runs)
    assert (requests["output_tokens"] == 32).all() and requests["error"].isna().all()
    # step_times: true in the scenario: timed on TP rank 0, the drafter's part included.
    assert (passes["steps_per_pass"] > 0).all() and (passes["draft_ms_per_step"] > 0).all()
    assert (passes["forward_ms_per_step"] > 0).all()


def test_eagle_tp2_per_request_acceptance_pools_to_the_counters(eagle_run: CliRun) -> None:
    assert_per_request_acceptance_pools_to_the_counters(eagle_run)


def assert_tp2_switched_in_place(run: CliRun) -> None:
    """The same two TP worker processes report the all-gather in baseline passes and the local
    argmax in local-argmax passes, each pass on its own: the switch happened inside them."""
    [record] = run.results.runs
    assert record.result is not None
    seen: dict[int, set[str]] = {}
    for p in record.result.passes:
        assert p.impl_reports is not None
        ranks = [r.tp_rank for r in p.impl_reports if r.tp_rank is not None]
        assert len(ranks) == len(p.impl_reports) and sorted(ranks) == [0, 1]
        want = "eagle.allgather_argmax" if p.arm == "baseline" else "eagle.local_argmax"
        for r in p.impl_reports:
            assert set(r.paths) == {want} and r.matches_choice, (p.repeat, r)
            assert (r.calls or 0) > 0 and r.pid != record.result.worker_pid
            assert r.details["use_local_argmax_reduction"] is (p.arm != "baseline")
            seen.setdefault(r.pid, set()).add(want)
    assert len(seen) == 2 and all(len(paths) == 2 for paths in seen.values())
    comparison = compare_run(run.results)
    assert not comparison.unproven and not comparison.discarded


def test_eagle_tp2_switch_ran_both_paths_on_both_ranks(eagle_run: CliRun) -> None:
    assert_tp2_switched_in_place(eagle_run)


def test_eagle_local_argmax_matches_allgather_outputs(eagle_run: CliRun) -> None:
    parity = compare_run(eagle_run.results).candidates[0].parity
    assert parity is not None and parity.fraction == 1.0


def test_a_switch_that_does_nothing_fails_the_run(tmp_path: Path) -> None:
    """A planted wrong path: the switch answers but changes nothing, so optimized's warm-up
    passes run the baseline proposer. The launch is refused before its first measured block
    (no budget spent on passes that would all be discarded), named, and `run` exits with
    UNPROVEN, not RUN_FAILED."""
    data = _scenario("cpu-medusa-proposer.yaml")
    data.pop("precision")
    data.update(name="noop-switch", repeats=2, warmup=4, env={NOOP_SWITCH_ENV: "1"})
    data["workload"].update(num_prompts=4, max_tokens=16)
    path = tmp_path / "noop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run = run_cli(path, tmp_path / "results", "noop", env=fault_env())
    assert run.returncode == int(ExitCode.UNPROVEN), run.stderr[-2000:]
    assert "UNPROVEN" in run.stdout and "ran medusa-proposer:baseline" in run.stdout
    assert "ProofRefused: proof failed in all 2 warm-up pass(es)" in run.stdout
    assert "refused before its first measured block" in run.stderr
    assert "some launches failed" not in run.stderr
    comparison = compare_run(run.results)
    assert not comparison.passes_per_arm


# --- a deliberately broken variant -------------------------------------------------------


@pytest.fixture(scope="module")
def failing_and_patched(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """One run, six engines: the baseline; a configuration vLLM refuses at start (no
    pre-flight check knows it); a variant's own patch by import path (Medusa proposes token
    0 everywhere); a patch that raises when vLLM loads it; a patch that kills the engine core
    at the first request of pass 1; and the target without speculation (the reference of the
    speedup rows and of where each speedup goes)."""
    return _short_medusa(
        tmp_path_factory.mktemp("own-code"),
        "own-code",
        2,
        {
            "baseline": {"baseline": True},
            "nospec": {"speculative_config": "none"},
            # A real engine failure that passes every pre-flight check: vLLM refuses a token
            # budget per step smaller than the batch (its own scheduler config check).
            "broken": {"engine": {"max_num_batched_tokens": 4}},
            "zeros": {"patch": "tests.patches.medusa_zero_drafts:install"},
            "patch-raises": {"patch": "tests.patches.medusa_zero_drafts:broken"},
            # 4 warm-up requests, then passes of 4: request 9 opens pass 1.
            "dies": {"patch": "tests.patches.kill_engine_core:install", "env": {KILL_AT_ENV: "9"}},
        },
    )


def _short_medusa(tmp: Path, name: str, repeats: int, variants: dict[str, Any]) -> CliRun:
    """The demo's engine with short passes and the given variants, run through the CLI."""
    data = _scenario("cpu-medusa-proposer.yaml")
    data.pop("precision")
    # The speed probe is refused beside a no-speculation arm (it would take more steps).
    data.update(name=name, repeats=repeats, warmup=4, variants=variants, speed_probe=False)
    data["workload"].update(num_prompts=4, max_tokens=16)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_cli(path, tmp / "results", name)


def test_broken_variant_is_recorded_while_the_other_completes(failing_and_patched: CliRun) -> None:
    run = failing_and_patched
    assert run.returncode == 1
    assert "Traceback" not in run.stderr.split("specbench: [6/6]")[-1]
    by_variant = {r.variant: r for r in run.results.runs}
    assert by_variant["baseline"].status == "ok"
    broken = by_variant["broken"]
    assert broken.status == "failed" and broken.error and broken.log_tail
    assert broken.exit_code not in (0, None)
    assert "FAILED" in run.stdout and "FAILED broken" in run.stdout
    assert run.results.manifest["status"] == "failed"


def test_a_variants_own_patch_runs_inside_vllm(failing_and_patched: CliRun) -> None:
    """variants.NAME.patch: imported and called in vLLM's processes, reported like a swap,
    its effect seen in behaviour; a patch that raises fails its launch with the reason."""
    run = failing_and_patched
    by_variant = {r.variant: r for r in run.results.runs}
    zeros = by_variant["zeros"]
    assert zeros.status == "ok" and zeros.result is not None
    reports = [r for r in zeros.result.impl_reports or [] if r.implementation == "patch"]
    assert reports and all(
        r.choice == "tests.patches.medusa_zero_drafts:install"
        and set(r.paths) == {"medusa.propose.zeros"}
        and r.calls is not None
        and r.calls > 0
        and r.pid != zeros.result.worker_pid
        for r in reports
    )
    comparison = compare_run(run.results)
    cand = next(c for c in comparison.candidates if c.name == "zeros")
    rate = next(r for r in cand.rows if r.key == "acceptance_rate")
    assert rate.baseline > 20 and rate.candidate < 5  # token 0 is never the target's choice
    assert cand.parity is not None and cand.parity.fraction == 1.0  # outputs stay greedy
    assert not comparison.unproven
    assert (
        "zeros: implementation patch:tests.patches.medusa_zero_drafts:install; workers "
        "ran: patch:tests.patches.medusa_zero_drafts:install -> medusa.propose.zeros"
    ) in run.stdout
    raises = by_variant["patch-raises"]
    assert raises.status == "failed" and raises.error is not None
    assert raises.error.startswith(
        "RuntimeError: specbench: patch tests.patches.medusa_zero_drafts:broken failed in vLLM's"
    )
    assert "ValueError: this patch does not know vLLM 0.32's layout" in raises.error


def test_a_switchable_patch_shares_one_engine_with_the_baseline(tmp_path: Path) -> None:
    """switchable: true: one engine hosts both arms and the patch reads ctx.active() per
    call, so each pass's reports prove whether the patch ran, and acceptance differs by arm
    within the same engine."""
    run = _short_medusa(
        tmp_path,
        "switchable",
        4,
        {
            "baseline": {"baseline": True},
            "zeros": {"patch": "tests.patches.medusa_zero_drafts:install", "switchable": True},
        },
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # Progress from the worker's notes (plain lines: stderr is not a terminal here).
    assert "baseline+zeros.r0: starting the engine" in run.stderr
    # A note per stage the parent's 1 s tick saw: 8 short passes may all fall between two
    # ticks on a loaded machine (seen in the fresh-clone CI), the warm-up's seconds do not.
    assert (
        "baseline+zeros.r0: measuring pass " in run.stderr
        or "baseline+zeros.r0: warming up" in run.stderr
    )
    [launch] = run.results.runs
    assert launch.result is not None and launch.variant == "baseline+zeros"
    for p in launch.result.passes:
        reports = [r for r in p.impl_reports or [] if r.implementation == "patch"]
        assert reports, f"pass {p.repeat} has no patch report"
        if p.arm == "zeros":
            assert all(
                r.choice == "tests.patches.medusa_zero_drafts:install"
                and r.calls is not None
                and r.calls > 0
                and set(r.paths) == {"medusa.propose.zeros"}
                for r in reports
            )
        else:
            assert all(r.choice == "off" and r.calls == 0 for r in reports)
    comparison = compare_run(run.results)
    assert comparison.design == "one-engine" and not comparison.unproven
    rate = next(r for r in comparison.candidates[0].rows if r.key == "acceptance_rate")
    assert rate.baseline > 20 and rate.candidate < 5


def test_an_engine_core_that_dies_is_named_with_its_pass_and_exit_code(
    failing_and_patched: CliRun,
) -> None:
    """A patch kills vLLM's engine core (os._exit(3)) at its first request of pass 1: the
    launch fails at once (vLLM 0.32's offline client alone would wait for the timeout),
    saying which process died, how, in which pass and where its log is, instead of vLLM's
    'EngineDeadError: ... see stack trace (above)'; pass 0 is kept as data, and the other
    variants' engines complete."""
    run = failing_and_patched
    by_variant = {r.variant: r for r in run.results.runs}
    assert by_variant["baseline"].status == "ok"
    launch = by_variant["dies"]
    error = (
        "vLLM's engine core process died during pass 1 (exit code 3); its output, with "
        "any stack trace, is in logs/dies.r0.log"
    )
    assert (launch.status, launch.error) == ("failed", error)
    assert launch.wall_s < 100  # told at once, not found by the timeout
    assert launch.result is not None and [p.repeat for p in launch.result.passes] == [0]
    assert (run.results.path / "logs" / "dies.r0.log").is_file()
    assert f"FAILED dies: dies.r0: failed: {error}" in run.stdout


def test_sigkill_of_specbench_leaves_no_engine_behind(tmp_path: Path) -> None:
    """kill -9 of `specbench run` once vLLM's engine core runs: the worker, the engine core
    and every process of the launch's session are gone within seconds."""
    from testkit.processes import kill_once_engine_runs, wait_gone

    data = _scenario("cpu-medusa-proposer.yaml")
    data.pop("precision")
    data.update(name="sigkill", repeats=200, warmup=4)
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    wait_gone(kill_once_engine_runs(path, tmp_path / "results"))


# --- no speculation: the speedup and where it goes ---------------------------------------


def printed_decomposition(stdout: str, arm: str) -> dict[str, float]:
    """The factors of one 'Where the speedup goes' block as printed (3 decimals)."""
    lines = stdout.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith(f"Where the speedup goes: {arm} vs ")
    )
    found: dict[str, float] = {}
    for line in lines[start + 1 : start + 11]:
        label, value = line.strip().split("  ", 1)
        found[label.strip()] = float(value.strip().split("×")[0])
    return found


def check_speedup_run(run: CliRun, arms: list[str], reference: str, k: int) -> None:
    """What every run with a no-speculation arm must show, on real vLLM: step times in every
    pass (no draft time without speculation), the speedup row, and factors that multiply back
    to the measured speedup, exactly in the data and within rounding as printed."""
    planned = {r["run_key"]: r for r in run.results.manifest["plan"]["runs"]}
    for record in run.results.runs:
        launch = planned[record.run_key]
        assert launch["step_times"]
        assert ("speculative_config" in launch["engine_args"]) == (record.variant != reference)
        if record.status != "ok" or record.result is None:
            continue
        for p in record.result.passes:
            st = p.step_times
            assert st is not None and st.steps > 0 and 0 < st.forward_s < st.step_s
            assert st.forward_s + st.draft_s < st.step_s
            assert (st.draft_s > 0) == (record.variant != reference)
            assert (p.spec_decode is None) == (record.variant == reference)
    comparison = compare_run(run.results)
    assert comparison.no_speculation == reference
    assert set(comparison.speedups) == set(arms)
    assert [d.arm for d in comparison.decompositions] == arms
    row = next(line for line in run.stdout.splitlines() if "Speedup vs no speculation" in line)
    assert "1 (reference)" in row and row.count("×") == len(arms)
    acceptance = next(line for line in run.stdout.splitlines() if "Acceptance rate (%)" in line)
    assert "—" in acceptance
    # Where each arm's time went, a row per part with each arm's value: draft time only where
    # the arm speculates, and every part of a step positive.
    for cand in (c for c in comparison.candidates if c.status == "ok"):
        rows = {r.key: r for r in cand.rows}
        for key in (
            "forward_ms_per_step",
            "rest_ms_per_step",
            "outside_ms_per_pass",
            "steps_per_pass",
        ):
            assert rows[key].baseline > 0 and rows[key].candidate > 0, (cand.name, key)
        draft = rows["draft_ms_per_step"]
        for arm, value in ((comparison.baseline, draft.baseline), (cand.name, draft.candidate)):
            assert (value > 0) if arm != reference else math.isnan(value), (arm, value)
    assert any("Draft time per step (ms)" in line for line in run.stdout.splitlines())
    for d in comparison.decompositions:
        assert d.k == k and d.reference == reference
        assert math.prod(f.value for f in d.factors) == pytest.approx(d.measured.value, rel=1e-9)
        assert math.prod(f.value for f in d.parts_of_other) == pytest.approx(
            d.factors[-1].value, rel=1e-9
        )
        assert math.prod(f.value for f in d.parts_of_acceptance) == pytest.approx(
            d.factors[1].value, rel=1e-9
        )
        # The table's speedup is the same estimate over the same passes.
        assert 1 + comparison.speedups[d.arm].delta == pytest.approx(d.measured.value, rel=1e-9)
        # Raw figures, unclamped (with one short pass per launch, a verification forward can
        # time below a plain one: launch noise, which the interval of more rounds carries).
        assert all(v > 0 for k_, v in d.raw.items() if not k_.startswith("rest"))
        assert 0 <= d.alpha <= 1 and d.acceptance_length >= 1
        printed = printed_decomposition(run.stdout, d.arm)
        product = math.prod(
            printed[label]
            for label in (
                "ideal: k + 1 tokens per step",
                "acceptance",
                "draft cost",
                "verification cost",
                "other overhead",
            )
        )
        assert product == pytest.approx(printed["= measured speedup"], rel=0.005), printed


def test_medusa_against_no_speculation(failing_and_patched: CliRun) -> None:
    run = failing_and_patched
    check_speedup_run(run, ["baseline", "zeros"], "nospec", 3)
    found = {d.arm: d for d in compare_run(run.results).decompositions}
    # Drafts of token 0 are never accepted: about one token per step, as without speculation.
    assert found["zeros"].factors[1].value < found["baseline"].factors[1].value
    assert found["zeros"].acceptance_length < 1.1 < found["baseline"].acceptance_length


@pytest.fixture(scope="module")
def eagle_speedup(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """EAGLE at TP 2 against the same TP 2 target without speculation, two engines, on the
    Spec-Bench fixture (12 prompts in 3 categories, loaded through vLLM's SpecBench too)."""
    tmp = tmp_path_factory.mktemp("eagle-speedup")
    data = _scenario("cpu-eagle-tp2-argmax.yaml")
    data.update(
        name="eagle-speedup",
        rounds=1,
        repeats=2,
        warmup=4,
        engine=EAGER,
        variants={"eagle": {"baseline": True}, "nospec": {"speculative_config": "none"}},
    )
    data["workload"] = {
        "kind": "spec_bench",
        "num_prompts": 12,
        "max_tokens": 16,
        "path": str(ROOT / "tests/fixtures/datasets/spec_bench_question.jsonl"),
    }
    path = tmp / "eagle-speedup.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_cli(path, tmp / "results", "eagle-speedup")


def test_eagle_tp2_against_no_speculation(eagle_speedup: CliRun) -> None:
    assert eagle_speedup.returncode == 0, eagle_speedup.stderr[-3000:]
    check_speedup_run(eagle_speedup, ["eagle"], "nospec", 3)
    assert "Where the speedup goes: eagle vs nospec (k = 3; 1 round" in eagle_speedup.stdout


def test_a_spec_bench_file_gets_a_per_category_table(eagle_speedup: CliRun) -> None:
    run = eagle_speedup
    categories = ["translation", "summarization", "math_reasoning"]
    for record in run.results.runs:
        assert record.result is not None
        for p in record.result.passes:
            assert [r.category for r in p.requests] == categories * 4
    comparison = compare_run(run.results)
    # Text prompts from a file go through the tokenizer's chat template, as vllm bench's do.
    assert comparison.prompts == ["the tokenizer's chat template"]
    assert "; prompts: the tokenizer's chat template; " in run.stdout
    assert list(comparison.categories) == categories
    assert comparison.category_requests == dict.fromkeys(categories, 4)
    for results in comparison.categories.values():
        rows = {r.key: r for r in results[0].rows}
        assert rows["acceptance_length"].baseline > 1  # EAGLE's; the candidate has none
        assert math.isnan(rows["acceptance_length"].candidate)
        assert rows["output_rate"].baseline > 0 and rows["output_rate"].candidate > 0
    table = run.stdout[run.stdout.index("Per category") :]
    assert "math_reasoning (4)" in table and "Output rate (tok/s per request)" in table
    assert "Acceptance length" in table and "—" in table
