"""Regression gates without an engine: the three-way decision per metric, the exact checks,
the CI outputs (Markdown, JUnit, $GITHUB_STEP_SUMMARY), saved baselines and exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from harness.analysis.compare import Arms, compare_records
from harness.analysis.comparison import MetricRow
from harness.analysis.gate import judge, judge_metric, propose_tolerances
from harness.analysis.stats import DeltaEstimate, VarianceComponents
from harness.cli import main
from harness.config.scenario import GateSpec, parse_scenario
from harness.errors import ExitCode
from testkit.factory import run, simple_pass, stored_run


def row(
    delta: float,
    low: float | None,
    high: float | None,
    higher: bool = True,
    kind: Literal["relative", "points"] = "relative",
    note: str | None = None,
    se: float = 0.01,
    no_spread: bool = False,
) -> MetricRow:
    est = DeltaEstimate(
        kind,
        delta,
        low,
        high,
        0.5,
        "paired t (blocks)",
        False,
        0.02,
        None,
        None,
        False,
        40,
        40,
        note,
        "one-engine",
        40,
        39.0,
        se,
        VarianceComponents(None, 0.05, se * math.sqrt(40), None),
        0,
        "block",
        se * math.sqrt(40),
        40,
        no_spread=no_spread,
    )
    return MetricRow(
        "output_throughput" if higher else "mean_tpot_ms", "metric", higher, 1.0, 1.0, est
    )


@pytest.mark.parametrize(
    ("delta", "low", "high", "higher", "verdict"),
    [
        (-0.001, -0.010, 0.008, True, "PASS"),  # the whole interval above -2%
        (-0.050, -0.070, -0.030, True, "REGRESSION"),  # the whole interval below -2%
        (-0.015, -0.030, 0.000, True, "INCONCLUSIVE"),  # straddles -2%
        (0.010, -0.001, 0.025, False, "PASS"),  # lower is better: below +3%
        (0.060, 0.040, 0.080, False, "REGRESSION"),  # lower is better: above +3%
        (0.020, 0.005, 0.035, False, "INCONCLUSIVE"),
        (0.300, 0.200, 0.400, True, "PASS"),  # a big improvement passes
    ],
)
def test_three_way_decision(
    delta: float, low: float, high: float, higher: bool, verdict: str
) -> None:
    tolerance = 0.02 if higher else 0.03
    decision = judge_metric(row(delta, low, high, higher), tolerance, "opt")
    assert decision.verdict == verdict, decision.reason
    if verdict == "INCONCLUSIVE":
        assert "MDE ±2.00%" in decision.reason and decision.more_units is not None
        assert decision.more_units > 0 and "more blocks would decide" in decision.reason


def _one_engine_estimate(
    launches: int, blocks: int, true: float, interaction: float, seed: int
) -> DeltaEstimate:
    """Output throughput of a one-engine run: launch offsets, a launch x arm interaction of sd
    `interaction`, block noise 2%, through the shipped estimator."""
    from harness.analysis.stats import arm_delta

    rng = np.random.default_rng(seed)
    values, cand, launch, block = [], [], [], []
    for lid in range(launches):
        offset = rng.normal(0, 0.08)
        effect = math.log1p(true) + rng.normal(0, interaction)
        for b in range(blocks):
            for arm in (0, 1, 1, 0):
                values.append(math.exp(7 + offset + arm * effect + rng.normal(0, 0.02)))
                cand.append(arm)
                launch.append(lid)
                block.append(b)
    return arm_delta(
        np.array(values),
        np.array(cand),
        np.array(launch),
        np.array(launch),
        np.array(block),
        "relative",
        "one-engine",
    )


def test_more_units_advice_counts_launches_when_launches_carry_the_error() -> None:
    """2 launches x 40 blocks at a true -3% said 'about 51 more blocks would decide' from the
    within-launch block noise, while the interval comes from the 2 launch means (1 df): more
    blocks cannot narrow it; more launches can."""
    est = _one_engine_estimate(2, 40, -0.03, 0.02, seed=3)
    assert est.error_unit == "launch" and est.error_n == 2 and est.df == 1.0
    metric = MetricRow("output_throughput", "Output throughput", True, 1.0, 1.0, est)
    decision = judge_metric(metric, 0.02, "opt", "blocks")
    assert decision.verdict == "INCONCLUSIVE", decision.reason
    assert "more launches would decide" in decision.reason, decision.reason
    assert "blocks would decide" not in decision.reason
    # The advice is what the error term needs: the launch means' sd at df = n - 1.
    from harness.analysis.stats import units_for_halfwidth

    assert est.error_sd is not None
    needed = units_for_halfwidth(est.error_sd, abs(math.log1p(est.delta) - math.log1p(-0.02)))
    assert needed is not None and decision.more_units == needed - 2


def test_welch_fallback_counts_rounds_not_launches() -> None:
    """Unpaired launches (a round lost on one side): the interval's se is sqrt(vb + vc) over
    the rounds per arm, so the units to add are rounds, not the launches of both arms."""
    from harness.analysis.stats import arm_delta

    rng = np.random.default_rng(0)
    values, cand, launch, rnd = [], [], [], []
    lid = 0
    for arm, rounds in ((0, range(4)), (1, range(3))):
        for r in rounds:
            level = 7 + rng.normal(0, 0.05) + arm * math.log(0.98)
            for _ in range(6):
                values.append(math.exp(level + rng.normal(0, 0.01)))
                cand.append(arm)
                launch.append(lid)
                rnd.append(r if arm == 0 else r + 10)  # rounds do not match: Welch
            lid += 1
    est = arm_delta(
        np.array(values),
        np.array(cand),
        np.array(launch),
        np.array(rnd),
        np.zeros(len(values)),
        "relative",
        "launch-per-arm",
    )
    assert est.test == "Welch t (launches)" and est.units == 7
    assert est.error_unit == "round" and est.error_n == 3
    assert est.se is not None and est.error_sd is not None
    assert math.isclose(est.error_sd / math.sqrt(3), est.se)


def test_points_and_exact_values() -> None:
    same = row(0.0, None, None, kind="points", no_spread=True)
    decision = judge_metric(same, 1.0, "opt")
    assert decision.verdict == "PASS" and "(exact)" in decision.reason
    lost = row(-1.5, None, None, kind="points", no_spread=True)
    assert judge_metric(lost, 1.0, "opt").verdict == "REGRESSION"
    unknown = row(0.01, None, None, note="one launch per arm: not estimable (add rounds)")
    decision = judge_metric(unknown, 0.02, "opt")
    assert decision.verdict == "INCONCLUSIVE" and "not estimable" in decision.reason


def _shared(opt_factor: float, choice: str = "optimized") -> Any:
    from harness.wire.records import ImplReport

    passes = []
    for block in range(8):
        for k, arm in enumerate(["base", "opt", "opt", "base"]):
            i = 4 * block + k
            noise = 1 + 0.004 * ((i * 7) % 5)
            duration = (1.0 if arm == "base" else opt_factor) * noise
            c = "baseline" if arm == "base" else choice
            path = "medusa.propose.tolist" if c == "baseline" else "medusa.propose.tensor"
            rep = ImplReport(
                implementation="medusa-proposer",
                choice=c,
                path=path,
                paths={path: 5},
                matches_choice=True,
                pid=100,
                tp_rank=0,
                calls=5,
            )
            passes.append(
                simple_pass(i, duration).model_copy(
                    update={"arm": arm, "block": block, "impl_reports": [rep]}
                )
            )
    record = run("base+opt", 0, 0, passes)
    assert record.result is not None
    record.result.worker_pid = 7
    return record


IMPLS: dict[str, str | None] = {
    "base": "medusa-proposer:baseline",
    "opt": "medusa-proposer:optimized",
}


def test_judge_names_the_regressed_metric_and_renders_for_ci() -> None:
    from harness.present.tables import render_gate_junit, render_gate_markdown

    comparison = compare_records(
        [_shared(1.25)],
        Arms("base", ["opt"], implementations=IMPLS, design="one-engine"),
        "r",
        "unit",
    )
    result = judge(comparison, GateSpec())
    by_check = {d.check: d for d in result.decisions}
    assert by_check["output_throughput"].verdict == "REGRESSION"
    assert by_check["acceptance_rate"].verdict == "PASS"
    assert by_check["implementation_proof"].verdict == "PASS"
    assert result.verdict == "REGRESSION"
    md = render_gate_markdown(result, comparison)
    assert "REGRESSION" in md.splitlines()[0]
    assert (
        next(line for line in md.splitlines() if "Output throughput" in line).count("REGRESSION")
        == 1
    )
    xml = render_gate_junit(result, comparison)
    assert '<testcase name="output_throughput"' in xml and "<failure" in xml
    assert "tolerance 2.0%" in xml and "-20.00%" in xml


def test_unproven_passes_fail_the_proof_gate() -> None:
    comparison = compare_records(
        [_shared(1.0, choice="baseline")],
        Arms("base", ["opt"], implementations=IMPLS, design="one-engine"),
        "r",
        "unit",
    )
    result = judge(comparison, GateSpec(metrics={}))
    [proof] = [d for d in result.decisions if d.check == "implementation_proof"]
    assert proof.verdict == "REGRESSION" and "ran medusa-proposer:baseline" in proof.reason


def test_gate_policies_are_validated(scenario_data: dict[str, Any]) -> None:
    from harness.errors import ScenarioError

    scenario_data["gates"] = {"metrics": {"output_throughpt": 0.02}}
    with pytest.raises(ScenarioError, match="gates.metrics: .*unknown metric 'output_throughpt'"):
        parse_scenario(scenario_data)
    scenario_data["gates"] = {"metrics": {"output_throughput": -1}}
    with pytest.raises(ScenarioError, match="tolerance must be a number >= 0"):
        parse_scenario(scenario_data)
    assert parse_scenario({**scenario_data, "gates": {}}).gates.metrics["output_throughput"] == 0.02


def test_proposed_tolerances_cover_the_noise() -> None:
    comparison = compare_records(
        [_shared(1.0)],
        Arms("base", ["opt"], implementations=IMPLS, design="one-engine"),
        "r",
        "unit",
    )
    tput = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    proposed = propose_tolerances(comparison, GateSpec(), 0.01)
    assert tput.estimate.mde is not None and proposed["output_throughput"] >= tput.estimate.mde
    assert proposed["acceptance_rate"] == 1.0  # identical in every unit: the policy stays


VARIANTS = {
    "base": {"baseline": True, "implementation": "medusa-proposer:baseline"},
    "opt": {"implementation": "medusa-proposer:optimized"},
}
FP: dict[str, object] = {"vllm": "0.32.0", "torch": "2.13.0"}


def _folder(tmp_path: Path, name: str, factor: float, fingerprint: dict[str, object] = FP) -> Path:
    path = stored_run(
        tmp_path,
        name,
        [_shared(factor)],
        fingerprint,
        VARIANTS,
        {"draft": {"method": "medusa", "model": "tiny-llama-medusa", "num_speculative_tokens": 3}},
    )
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["plan"] = {"design": "one-engine"}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_cli_gate_exit_codes_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    slow = _folder(tmp_path, "slow", 1.25)
    junit = tmp_path / "out" / "gate.xml"
    assert main(["gate", str(slow), "--junit", str(junit)]) == ExitCode.GATE_FAILED
    out = capsys.readouterr().out
    assert "gate REGRESSION   opt: Output throughput" in out
    assert "<failure" in junit.read_text() and (slow / "gate.json").is_file()
    assert json.loads((slow / "gate.json").read_text())["verdict"] == "REGRESSION"
    assert "### specbench gate: ❌ REGRESSION" in summary.read_text()
    same = _folder(tmp_path, "same", 1.0)
    assert main(["gate", str(same)]) == 0


def test_saved_baseline_gate_and_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _folder(tmp_path, "main-run", 1.0)
    baselines = tmp_path / "baselines"
    assert (
        main(
            [
                "baseline",
                "save",
                str(reference),
                "--name",
                "main",
                "--baselines-dir",
                str(baselines),
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (baselines / "main").iterdir()) == ["manifest.json", "runs"]
    pr = _folder(tmp_path, "pr-run", 1.0)
    assert (
        main(
            [
                "gate",
                str(pr),
                "--against",
                "main",
                "--baselines-dir",
                str(baselines),
                "--variant",
                "opt",
                "--inconclusive",
                "pass",
            ]
        )
        == 0
    )
    # Another machine is refused (a new vLLM build is what a gate is for, and is named).
    other = _folder(tmp_path, "other", 1.0, {**FP, "machine": "aarch64"})
    capsys.readouterr()
    assert (
        main(["gate", str(other), "--against", "main", "--baselines-dir", str(baselines)])
        == ExitCode.INCOMPARABLE
    )
    err = capsys.readouterr().err
    assert "machine (None vs 'aarch64')" in err and len(err.strip().splitlines()) == 1
    assert (
        main(["gate", str(pr), "--against", "nope", "--baselines-dir", str(baselines)])
        == ExitCode.USAGE
    )


def test_calibrated_tolerances_let_an_unchanged_candidate_fail_to_pass_at_the_stated_rate() -> None:
    """calibrate's promise, simulated through the shipped code: tolerances proposed from one
    A/A run (40 blocks, AR(1) pass noise 3%) let a later A/A run fail to PASS with about the
    false-alarm probability asked for. t_{1-fa} + t_{0.975} gave 6.2% for 5% and 2.2% for 1%
    (the calibration's se is an estimate too)."""
    from types import SimpleNamespace

    from harness.analysis.stats import arm_delta

    rng = np.random.default_rng(7)
    abba = np.array([0, 1, 1, 0])

    def aa(blocks: int = 40) -> MetricRow:
        e = rng.normal(0, 0.03, 4 * blocks)
        ar = np.zeros(4 * blocks)
        for i in range(4 * blocks):
            ar[i] = (0.3 * ar[i - 1] if i else 0.0) + e[i]
        z = np.zeros(4 * blocks, dtype=int)
        est = arm_delta(
            np.exp(7 + ar),
            np.tile(abba, blocks),
            z,
            z,
            np.repeat(np.arange(blocks), 4),
            "relative",
            "one-engine",
        )
        return MetricRow("output_throughput", "Output throughput", True, 1.0, 1.0, est)

    spec = GateSpec(metrics={"output_throughput": 0.02})
    trials, not_pass, regressions = 1500, 0, 0
    for _ in range(trials):
        calibration = SimpleNamespace(candidates=[SimpleNamespace(rows=[aa()])])
        tol = propose_tolerances(calibration, spec, 0.05)  # type: ignore[arg-type]
        verdict = judge_metric(aa(), tol["output_throughput"], "opt").verdict
        not_pass += verdict != "PASS"
        regressions += verdict == "REGRESSION"
    rate = not_pass / trials
    assert 0.035 <= rate <= 0.065, rate  # 5% +- 2.7 binomial se
    assert regressions / trials < 0.005


def _counted(
    name: str, tmp_path: Path, blocks: int, accepted: tuple[int, int, int], **manifest: object
) -> Path:
    """A one-engine run of base and opt whose every pass drafted 313 times (939 tokens) and
    accepted `accepted` tokens per position, with `blocks` ABBA blocks: the same counts in
    12 or 16 passes an arm give means that differ in the last bit (as two real demo runs
    stored 31.62939297124602 and 31.629392971246013). `manifest`: fields to add to it."""
    passes = []
    for block in range(blocks):
        for k, arm in enumerate(["base", "opt", "opt", "base"]):
            i = 4 * block + k
            passes.append(
                simple_pass(
                    i, 1 + 0.004 * ((i * 7) % 5), drafts=(313, 939, sum(accepted), list(accepted))
                ).model_copy(update={"arm": arm, "block": block})
            )
    gates = {
        "gates": {
            "metrics": {
                "acceptance_rate": 1.0,
                "acceptance_pos_*": 2.0,
                "mean_acceptance_length": 0.01,
            }
        }
    }
    path = stored_run(
        tmp_path,
        name,
        [run("base+opt", 0, 0, passes)],
        FP,
        {"base": {"baseline": True}, "opt": {}},
        {
            "draft": {
                "method": "medusa",
                "model": "tiny-llama-medusa",
                "num_speculative_tokens": 3,
            },
            **gates,
        },
    )
    data = json.loads((path / "manifest.json").read_text())
    data.update(plan={"design": "one-engine"}, **manifest)
    (path / "manifest.json").write_text(json.dumps(data))
    return path


EXACT_CHECKS = (
    "acceptance_rate",
    "acceptance_pos_0",
    "acceptance_pos_1",
    "acceptance_pos_2",
    "mean_acceptance_length",
)


def test_gate_against_a_run_with_the_same_counts_passes_every_exact_metric(tmp_path: Path) -> None:
    """Identical counts in both runs, means apart in the last bit: every acceptance metric is
    decided exactly (it was INCONCLUSIVE, 'one launch per arm', for some of them); a real
    change in the counts is still judged, exactly."""
    from harness.workflow import gate_run

    reference = _counted("ref", tmp_path, 8, (99, 62, 31))
    baselines = tmp_path / "baselines"
    assert (
        main(
            [
                "baseline",
                "save",
                str(reference),
                "--name",
                "main",
                "--baselines-dir",
                str(baselines),
            ]
        )
        == 0
    )
    same = _counted("same", tmp_path, 6, (99, 62, 31))
    comparison, result = gate_run(same, against="main", baselines_dir=baselines)
    by_check = {d.check: d for d in result.decisions}
    for check in EXACT_CHECKS:
        assert by_check[check].verdict == "PASS", by_check[check].reason
        assert by_check[check].delta == 0.0, by_check[check].reason
    rows = {r.key: r for r in comparison.candidates[0].rows}
    assert rows["acceptance_pos_0"].baseline == rows["acceptance_pos_0"].candidate == 100 * 99 / 313
    # Eleven fewer tokens accepted at position 2: a regression of exactly 11/313 and 11/939.
    fewer = _counted("fewer", tmp_path, 6, (99, 62, 20))
    _, result = gate_run(fewer, against="main", baselines_dir=baselines)
    by_check = {d.check: d for d in result.decisions}
    for check in ("acceptance_pos_2", "acceptance_rate"):
        assert by_check[check].verdict == "REGRESSION", by_check[check].reason
        assert "(exact)" in by_check[check].reason
    assert by_check["acceptance_pos_2"].delta == 100 * 20 / 313 - 100 * 31 / 313
    assert by_check["acceptance_rate"].delta == 100 * 181 / 939 - 100 * 192 / 939
    assert by_check["acceptance_pos_0"].verdict == "PASS"
    assert by_check["acceptance_pos_0"].delta == 0.0


def test_calibrate_help_names_the_rate_it_controls() -> None:
    """--false-alarm is the chance an unchanged candidate fails to PASS (INCONCLUSIVE or
    REGRESSION), as propose_tolerances solves for, not the chance of a REGRESSION."""
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, ["calibrate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "fails to PASS" in text and "INCONCLUSIVE or REGRESSION" in text, text
    assert "called a REGRESSION" not in text
