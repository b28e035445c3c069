"""Comparison, parity and rendering from hand-made records; results-folder versioning."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.compare import Arms, compare_records
from harness.analysis.crossrun import check_comparable
from harness.analysis.parity import output_parity
from harness.config.interpreter import NOT_PERFORMANCE
from harness.config.scenario import parse_scenario
from harness.errors import IncomparableError, ResultsError
from harness.present.tables import acceptance_note, render_markdown, render_terminal, warnings_of
from harness.results.run import Run, load_run
from harness.wire.manifest import Manifest
from harness.wire.records import SCHEMA_VERSION, RunRecord
from testkit.factory import run, simple_pass, stored_run


def _runs(cand_duration: float = 1.9, cand_tokens_offset: int = 0) -> list[RunRecord]:
    runs: list[RunRecord] = []
    order = 0
    for r in range(2):
        # The candidate's launches differ a little between rounds: the unit is the launch.
        for variant, duration in (("base", 2.0), ("opt", cand_duration + 0.01 * r)):
            passes = [
                simple_pass(
                    k,
                    duration + 0.001 * k,
                    tokens_offset=cand_tokens_offset if variant == "opt" else 0,
                )
                for k in range(2)
            ]
            runs.append(run(variant, r, order, passes))
            order += 1
    return runs


def test_compare_rows_and_parity() -> None:
    comparison = compare_records(_runs(), Arms("base", ["opt"]), "run-1", "unit")
    [cand] = comparison.candidates
    rows = {row.key: row for row in cand.rows}
    tput = rows["output_throughput"]
    assert tput.baseline == pytest.approx(5.0, rel=1e-3)
    # Geometric mean of the rounds' ratios, the estimate the interval is centred on.
    ratios = [2.0005 / 1.9005, 2.0005 / 1.9105]
    assert tput.estimate.delta == pytest.approx(math.sqrt(ratios[0] * ratios[1]) - 1, rel=1e-3)
    assert tput.estimate.n_baseline == 4 and tput.estimate.test == "paired t (launches)"
    assert tput.estimate.units == 2 and tput.estimate.df == 1
    assert tput.estimate.significant and tput.improved is True
    # Same acceptance in every pass of both arms: zero delta in points, and no zero-width
    # "significant" interval.
    acc = rows["acceptance_rate"].estimate
    assert acc.kind == "points" and acc.delta == pytest.approx(0.0)
    assert not acc.significant and acc.ci_low is None and acc.p_value is None
    assert "acceptance_pos_2" in rows
    assert cand.parity is not None and cand.parity.fraction == 1.0
    assert cand.parity.first_divergence is None and cand.parity.baseline_self_identical == 1.0


def test_parity_reports_first_divergence() -> None:
    parity = output_parity(_runs(cand_tokens_offset=5), "base", "opt")
    assert parity is not None
    assert parity.fraction == pytest.approx(0.5)  # request 0 differs at token 0
    assert parity.first_divergence == 0


def test_failed_candidate_is_marked() -> None:
    runs = [run("base", 0, 0, [simple_pass(0, 2.0)]), run("opt", 0, 1, [], status="failed")]
    comparison = compare_records(runs, Arms("base", ["opt"]), "run-2", "unit")
    assert comparison.candidates[0].status == "failed"
    text = render_terminal(comparison)
    assert "FAILED" in text and "FAILED opt: opt.r0: failed: boom" in text


def test_terminal_table_layout() -> None:
    comparison = compare_records(_runs(), Arms("base", ["opt"]), "run-1", "unit")
    text = render_terminal(comparison)
    lines = text.splitlines()
    assert any(line.startswith("┌") for line in lines)
    assert any("│ Metric" in line or "Metric" in line and "│" in line for line in lines)
    row = next(line for line in lines if "Output throughput (tok/s)" in line)
    assert "5.00" in row and "+5.0% [" in row and "*" in row
    assert "Acceptance rate (%)" in text and "+0.00pp" in text
    assert "Output parity vs baseline" in text and "100.0% identical" in text
    md = render_markdown(comparison, {"vllm": "0.32.0", "torch": "2.13.0"})
    assert "| Output throughput (tok/s) | 5.00 |" in md and "vLLM 0.32.0" in md


def test_single_pass_arms_say_no_interval() -> None:
    runs = [run("base", 0, 0, [simple_pass(0, 2.0)]), run("opt", 0, 1, [simple_pass(0, 1.9)])]
    text = render_terminal(compare_records(runs, Arms("base", ["opt"]), "r", "unit"))
    row = next(line for line in text.splitlines() if "Output throughput" in line)
    assert "[no CI]" in row


def test_store_round_trip_and_versions(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path, "run", _runs(), {}, {"base": {"baseline": True}, "opt": {}})
    loaded = load_run(tmp_path)  # a results folder resolves to its newest run
    assert loaded.run_id == "run" and len(loaded.runs) == 4
    assert loaded.manifest["schema_version"] == SCHEMA_VERSION

    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ResultsError, match="newer than this specbench understands"):
        load_run(run_dir)
    (run_dir / "manifest.json").write_text("{broken")
    with pytest.raises(ResultsError, match="damaged, not JSON"):
        load_run(run_dir)
    with pytest.raises(ResultsError, match="no specbench results here"):
        load_run(tmp_path / "nothing")


def _bare_run(name: str, fingerprint: dict[str, Any], num_prompts: int) -> Run:
    """A loaded run with no launches: a manifest and its scenario."""
    scenario = parse_scenario(
        {
            "name": name,
            "model": "tiny-llama",
            "batch_size": 2,
            "workload": {"num_prompts": num_prompts, "max_tokens": 5},
            "variants": {"a": {"baseline": True}, "b": {}},
        }
    )
    manifest = Manifest.model_validate(
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": name,
            "fingerprint": fingerprint,
            "scenario": scenario.model_dump(mode="json"),
        }
    )
    return Run(Path(name), manifest, [], scenario)


def test_incomparable_environments_are_refused() -> None:
    a = _bare_run("a", {"vllm": "0.32.0", "gpus": []}, 4)
    b = _bare_run("b", {"vllm": "0.33.0", "gpus": ["NVIDIA H100"]}, 8)
    with pytest.raises(IncomparableError) as info:
        check_comparable([a, b])
    # The machine and the workload must match; the vLLM build may differ on purpose.
    assert "machine differs: gpus ([] vs ['NVIDIA H100'])" in str(info.value)
    assert "workload.num_prompts" in str(info.value) and "vllm" not in str(info.value)
    assert len(check_comparable([a, b], force=True)) == 2


def test_compare_two_runs_and_refuse_mismatched_environments(tmp_path: Path) -> None:
    from harness.analysis.crossrun import compare_runs

    variants = {"base": {"baseline": True}, "opt": {}}
    fp = {"vllm": "0.32.0", "torch": "2.13.0"}
    a = stored_run(tmp_path, "a", _runs(), fp, variants)
    b = stored_run(tmp_path, "b", _runs(cand_duration=1.8), fp, variants)
    comparison = compare_runs(load_run(a), load_run(b), "base", "opt")
    [cand] = comparison.candidates
    assert comparison.baseline == "A:base" and cand.name == "B:opt"
    row = next(r for r in cand.rows if r.key == "output_throughput")
    # Launches of two runs share nothing: Welch on launch means, no pairing by round.
    assert row.estimate.test == "Welch t (launches)"
    assert row.estimate.delta == pytest.approx(2.0005 / math.sqrt(1.8005 * 1.8105) - 1, rel=1e-3)

    c = stored_run(tmp_path, "c", _runs(), {**fp, "cpu_count": 64}, variants)
    with pytest.raises(IncomparableError, match=r"cpu_count \(None vs 64\)"):
        compare_runs(load_run(a), load_run(c))
    forced = compare_runs(load_run(a), load_run(c), force=True)
    assert forced.compared_anyway and all(
        f"compared anyway: {line}" in warnings_of(forced) for line in forced.compared_anyway
    )
    # Two vLLM builds (the Medusa PR's "by git checkout") compare without --force, and the
    # table says what differs.
    d = stored_run(tmp_path, "d", _runs(), {**fp, "vllm": "0.33.0.dev7+g1234abc"}, variants)
    builds = compare_runs(load_run(a), load_run(d))
    assert (
        "the builds differ (on purpose, comparing two builds): vllm ('0.32.0' vs "
        "'0.33.0.dev7+g1234abc')"
    ) in warnings_of(builds)
    assert builds.builds_differ == ["vllm ('0.32.0' vs '0.33.0.dev7+g1234abc')"]
    with pytest.raises(ResultsError, match="no variant 'nope'"):
        compare_runs(load_run(a), load_run(b), "nope")


def test_parity_violation_is_flagged_only_where_expected() -> None:
    runs = _runs(cand_tokens_offset=5)
    lax = compare_records(runs, Arms("base", ["opt"]), "r", "unit")
    assert not lax.parity_violations and not warnings_of(lax)
    strict = compare_records(
        runs, Arms("base", ["opt"], expect_identical={"opt": True}), "r", "unit"
    )
    assert strict.parity_violations == ["opt"]
    assert "greedy outputs differ" in warnings_of(strict)[0]
    assert "MISMATCH" in render_terminal(strict)


def test_facts_become_warnings_in_present_in_reading_order() -> None:
    """Analysis records facts; present words them (tables.warnings_of), the interpreter's
    line first, and the table, the key notes and summary.json read the same list."""
    comparison = compare_records(
        _runs(cand_tokens_offset=5),
        Arms("base", ["opt"], expect_identical={"opt": True}),
        "r",
        "unit",
    )
    comparison.compared_anyway = ["a difference --force went past"]
    comparison.interpreted = True
    comparison.mixed_workloads = True
    comparison.kv_blocks = {"base.r0": 120, "opt.r0": 100}
    comparison.left_out = ["step timer: parts did not add up in pass 5"]
    comparison.tp_in_one_launch = 2
    got = warnings_of(comparison)
    assert [w.split(":")[0].split(" (")[0] for w in got[1:]] == [
        "passes saw different prompts",
        "opt",
        "KV cache capacity differs between the arms' launches",
        "left out on this platform",
        "compared anyway",
        "TP 2 in one launch",
    ]
    assert got[0].startswith(NOT_PERFORMANCE)
    assert "pin it with engine: {num_gpu_blocks_override: 100}" in got[3]
    assert "greedy outputs differ from base's" in got[2]
    assert warnings_of(comparison, interpreter=False) == got[1:]
    text = render_terminal(comparison, rows="all")
    flat = " ".join(text.split())
    assert all(" ".join(w.split()) in flat for w in got)


def _noisy_runs(base_offsets: list[int], cand_offsets: list[int]) -> list[RunRecord]:
    """Baseline and candidate passes whose request 0 differs by the offset given per pass
    (0: the baseline's first output), the way a GPU's batches move greedy outputs."""
    return [
        run(
            "base", 0, 0, [simple_pass(k, 2.0, tokens_offset=o) for k, o in enumerate(base_offsets)]
        ),
        run(
            "opt", 0, 1, [simple_pass(k, 1.9, tokens_offset=o) for k, o in enumerate(cand_offsets)]
        ),
    ]


def test_gpu_parity_is_judged_against_the_baselines_own_repeats() -> None:
    """Without batch invariance (a GPU), the baseline's own passes differ too: a candidate as
    reproducible as the baseline passes, one clearly less so is a MISMATCH, one without any
    baseline repeat is not judged; on a CPU (exact) a single differing output is a MISMATCH."""
    arms: dict[str, Any] = {"expect_identical": {"opt": True}, "exact_parity": False}
    flaky = [0] + [0, 0, 0, 1] * 10  # the baseline's request 0 moves in 1 pass of 4
    like = _noisy_runs(flaky, [0, 0, 0, 1] * 5)
    same = compare_records(like, Arms("base", ["opt"], **arms), "r", "unit")
    assert not same.parity_violations
    parity = same.candidates[0].parity
    assert parity is not None and len(parity.self_pass_identical) == 40
    assert parity.p_value is not None and parity.p_value > 0.05
    text = render_terminal(same)
    assert "reference, repeats itself 87.5%" in text and "VLLM_BATCH_INVARIANT" in text
    worse = compare_records(
        _noisy_runs(flaky, [1] * 20), Arms("base", ["opt"], **arms), "r", "unit"
    )
    assert worse.parity_violations == ["opt"] and "MISMATCH" in render_terminal(worse)
    once = compare_records(_noisy_runs([0, 0], [1, 1]), Arms("base", ["opt"], **arms), "r", "u")
    assert not once.parity_violations
    assert "not judged: no baseline repeat" in render_terminal(once)
    exact = compare_records(
        _noisy_runs(flaky, [0, 0, 0, 1] * 5),
        Arms("base", ["opt"], expect_identical={"opt": True}),
        "r",
        "u",
    )
    assert exact.parity_violations == ["opt"]


def test_exact_parity_on_a_cpu_or_in_batch_invariant_mode(scenario_data: dict[str, Any]) -> None:
    assert parse_scenario(scenario_data).exact_parity  # device: cpu
    scenario_data["device"] = "cuda"
    assert not parse_scenario(scenario_data).exact_parity
    scenario_data["env"] = {"VLLM_BATCH_INVARIANT": "1"}
    assert parse_scenario(scenario_data).exact_parity
    scenario_data["variants"]["opt"]["env"] = {"VLLM_BATCH_INVARIANT": "0"}
    assert not parse_scenario(scenario_data).exact_parity


def test_expected_parity_defaults(scenario_data: dict[str, Any]) -> None:
    from harness.config.scenario import parse_scenario

    scenario_data["variants"]["tuned"] = {"engine": {"enforce_eager": True}}
    s = parse_scenario(scenario_data)
    assert s.expects_identical_outputs("opt") is True  # implementation swap only
    assert s.expects_identical_outputs("tuned") is False  # engine override
    scenario_data["workload"]["temperature"] = 0.8
    assert parse_scenario(scenario_data).expects_identical_outputs("opt") is False


def test_gpu_parity_keeps_its_false_alarms_under_pass_level_divergence() -> None:
    """Simulated A/A (benchmarks/parity_aa.py, calling the shipped Parity): when a GPU pass's
    batches move many outputs at once, the pass-level judgement raises few false alarms,
    where a prompt-level test (Fisher's exact on (pass, prompt) pairs) raises one in four."""
    import importlib.util

    import numpy as np

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("parity_aa", ROOT / "benchmarks/parity_aa.py")
    assert spec is not None and spec.loader is not None
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    structure = sim.STRUCTURES["pass-level, 8 passes"]
    rng = np.random.default_rng(7)
    trials = 100
    shipped = sum(sim._trial(rng, structure, 1.0, False) for _ in range(trials)) / trials
    naive = sum(sim._trial(rng, structure, 1.0, True) for _ in range(trials)) / trials
    assert shipped <= 0.10 and naive >= 0.15, (shipped, naive)


def test_unrealistic_acceptance_is_a_fact_of_the_scenario_worded_in_present(
    scenario_data: dict[str, Any],
) -> None:
    scenario_data["workload"].update({"kind": "random", "ignore_eos": True})
    assert parse_scenario(scenario_data).unrealistic_acceptance == ["random", "ignore_eos"]
    note = acceptance_note(["random", "ignore_eos"])
    assert note.startswith(
        "acceptance is not what real text gives: random token ids and ignore_eos "
        "(generation forced past end-of-sequence); "
    )
    scenario_data["draft"]["config"] = {
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.0,
    }
    assert parse_scenario(scenario_data).unrealistic_acceptance == []  # says so in the setup
    del scenario_data["draft"]
    scenario_data["variants"] = {
        "base": {"baseline": True},
        "eager": {"engine": {"enforce_eager": True}},
    }
    assert parse_scenario(scenario_data).unrealistic_acceptance == []
