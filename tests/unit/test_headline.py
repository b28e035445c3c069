"""The default output leads with the answer (harness.present.headline and the tables' `rows`):
a verdict line per candidate, the seed PRs' rows with duplicates folded, a few notes, the rest
one fold away; `--rows all` keeps every row; local paths relative; --github-summary."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from harness.analysis.compare import Arms, compare_records
from harness.analysis.comparison import Check, Comparison, SpeedAdjustment, Withdrawal
from harness.config.interpreter import NOT_PERFORMANCE
from harness.errors import SpecbenchError
from harness.present.headline import fold_duplicates, folded_label, tidy_paths, verdicts
from harness.present.tables import render_markdown, render_terminal, table_rows
from harness.wire.records import PrecisionStop
from harness.workflow import analyze, write_report
from testkit.factory import run, simple_pass
from tests.conftest import ROOT

FIXTURES = ROOT / "results" / "fixtures"


def _comparison(tmp_path: Path, fixture: str = "cpu-medusa-overlay-20-blocks") -> Comparison:
    from harness.results.run import load_run

    folder = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, folder)
    comparison = analyze(load_run(folder))
    assert isinstance(comparison, Comparison)
    return comparison


def _tables(markdown: str) -> list[list[list[str]]]:
    """Every table markdown-it renders, as rows of cell texts (the header row first)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables: list[list[list[str]]] = []
    row: list[str] | None = None
    for tok in tokens:
        if tok.type == "table_open":
            tables.append([])
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "inline" and row is not None:
            row.append(tok.content)
        elif tok.type == "tr_close" and row is not None:
            tables[-1].append(row)
            row = None
    return tables


def test_the_default_markdown_leads_with_a_verdict_and_folds_the_rest(tmp_path: Path) -> None:
    comparison = _comparison(tmp_path)
    md = render_markdown(comparison, rows="pr")
    lines = md.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("**optimized**: "))
    first_table = next(i for i, line in enumerate(lines) if line.startswith("| Metric"))
    assert verdict < first_table
    assert "output throughput -1.0% [-2.0, +0.0], not significant" in lines[verdict]
    assert "outputs identical" in lines[verdict]
    assert md.count("<details>") == 1 and md.rstrip().endswith("</details>")
    tables = _tables(md)
    assert len(tables) == 2  # the seed rows; the rest, inside the fold
    shown, rest = tables[0][1:], tables[1][1:]
    assert 5 <= len(shown) <= 12
    labels = [r[0] for r in shown]
    assert labels[0] == "Output / total / request throughput (tok/s, tok/s, req/s)"
    assert labels[1:] == [
        "Acceptance rate (%)",
        "Mean acceptance length",
        "Mean TPOT (ms)",
        "Mean TTFT (ms)",
        "Mean E2EL (ms)",
        "Output parity vs baseline",
    ]
    assert shown[0][1:] == [
        "2465.64 / 4931.28 / 77.05",
        "2441.61 / 4883.23 / 76.30",
        "-1.0% [-2.0, +0.0]",
    ]
    # Nothing lost: the folded rows and the shown ones are every row once (three folded).
    _, every = table_rows(comparison)
    assert len(shown) + len(rest) == len(every) - 2
    assert {r[0] for r in rest} == {r[0] for r in every} - {r[0] for r in shown} - {
        "Output throughput (tok/s)",
        "Total throughput (tok/s)",
        "Request throughput (req/s)",
    }
    # Few notes above the fold, every one below it.
    above = md.split("<details>")[0]
    assert sum(line.startswith("- ") for line in above.splitlines()) <= 5
    assert "- Stars: Output throughput (tok/s) is the primary metric" in md.split("<details>")[1]


def test_rows_all_gives_every_row_and_note_unfolded(tmp_path: Path) -> None:
    comparison = _comparison(tmp_path)
    header, every = table_rows(comparison)
    md = render_markdown(comparison, rows="all")
    assert "<details>" not in md and md.startswith("### specbench")
    [table] = _tables(md)
    assert table[0] == header and table[1:] == every
    text = render_terminal(comparison, rows="all")
    assert all(row[0] in text for row in every)
    assert "Passes per arm: baseline=40" in text and "--rows all" not in text


def test_the_terminal_default_is_short_and_draws_no_rule_per_row(tmp_path: Path) -> None:
    comparison = _comparison(tmp_path)
    text = render_terminal(comparison, rows="pr")
    lines = text.splitlines()
    assert lines[0].startswith("optimized: output throughput -1.0% [-2.0, +0.0]")
    assert sum(line.startswith("├") for line in lines) == 1  # under the header only
    assert len(lines) <= 20
    assert "Output / total / request throughput" in text
    assert "Median TPOT" not in text
    assert lines[-1] == "12 more rows and all 14 notes: --rows all"
    full = render_terminal(comparison, rows="all")
    assert sum(line.startswith("├") for line in full.splitlines()) == 1
    assert "Median TPOT (ms)" in full


def test_rows_by_key_and_an_unknown_key(tmp_path: Path) -> None:
    comparison = _comparison(tmp_path)
    [table, _] = _tables(render_markdown(comparison, rows="p99_tpot_ms,parity"))
    assert [r[0] for r in table[1:]] == ["P99 TPOT (ms)", "Output parity vs baseline"]
    with pytest.raises(SpecbenchError, match="no row 'p98_tpot_ms'.*p99_tpot_ms"):
        render_terminal(comparison, rows="p98_tpot_ms")


def test_no_interval_means_no_result_first_and_why(tmp_path: Path) -> None:
    comparison = _comparison(tmp_path, "cpu-medusa-small")
    [line] = verdicts(comparison)
    assert line.startswith(
        "optimized: no result: output throughput +15.6% has no interval: one launch per arm"
    )
    assert render_terminal(comparison, rows="pr").startswith(line)


def test_a_failed_arm_and_the_interpreter_say_no_result(tmp_path: Path) -> None:
    runs = [run("base", 0, 0, [simple_pass(0, 2.0)]), run("opt", 0, 1, [], status="failed")]
    failed = compare_records(runs, Arms("base", ["opt"]), "run-2", "unit")
    assert verdicts(failed) == ["opt: no result: it failed (no launch completed; FAILED below)"]
    text = render_terminal(failed, rows="pr")
    assert "FAILED opt: opt.r0: failed: boom" in text  # among the few notes
    comparison = _comparison(tmp_path)
    comparison.compared_anyway[:0] = [f"noise {i}" for i in range(6)]
    comparison.interpreted = True  # a launch ran under Triton's interpreter
    text = render_terminal(comparison, rows="pr")
    assert text.startswith("optimized: no result: not performance")
    notes = text.split("└")[1].splitlines()[1:]
    assert notes[1].startswith(NOT_PERFORMANCE) and len(notes) == 6  # 5 notes and the hint
    assert "(3 more warnings or failures among them)" in notes[-1]


def test_rows_alike_fold_into_one_naming_them() -> None:
    rows = [
        ["Output throughput (tok/s)", "10.00", "9.00", "-10.0% [-12.0, -8.0] *"],
        ["Total throughput (tok/s)", "20.00", "18.00", "-10.0% [-12.0, -8.0] *"],
        ["Request throughput (req/s)", "1.00", "0.90", "-10.0% [-12.0, -8.0] *"],
        ["Mean TPOT (ms)", "2.00", "2.20", "-10.0% [-12.0, -8.0] *"],
        ["Mean TTFT (ms)", "3.00", "3.00", "n/a"],
        ["Mean E2EL (ms)", "3.00", "3.00", "n/a"],
    ]
    folded = fold_duplicates(rows, [3], ("n/a",))
    # Neighbours alike fold (TPOT too: no common last word then); two rows that say nothing
    # ("n/a") stay apart.
    assert folded[0] == [
        "Output throughput / total throughput / request throughput / mean "
        "TPOT (tok/s, tok/s, req/s, ms)",
        "10.00 / 20.00 / 1.00 / 2.00",
        "9.00 / 18.00 / 0.90 / 2.20",
        "-10.0% [-12.0, -8.0] *",
    ]
    assert folded[1:] == rows[4:]
    assert (
        folded_label(["Output throughput (tok/s)", "Total throughput (tok/s)"])
        == "Output / total throughput (tok/s)"
    )
    assert fold_duplicates(rows[:2], [3], ())[0][0] == "Output / total throughput (tok/s)"
    # The primary is starred and its secondaries (Holm-adjusted) not: the same interval, one
    # row, the primary's star kept.
    primary = [
        ["Output throughput (tok/s)", "10.00", "9.00", "-10.0% [-12.0, -8.0] *"],
        ["Total throughput (tok/s)", "20.00", "18.00", "-10.0% [-12.0, -8.0]"],
    ]
    assert fold_duplicates(primary, [3], ()) == [
        [
            "Output / total throughput (tok/s)",
            "10.00 / 20.00",
            "9.00 / 18.00",
            "-10.0% [-12.0, -8.0] *",
        ]
    ]


def test_local_paths_print_relative(tmp_path: Path) -> None:
    home = str(Path.home())
    text = (
        f"Build: vLLM at {tmp_path}/.venv/lib/vllm; python {tmp_path}/.venv/bin/python; "
        f"cache {home}/x/y; other /opt/vllm (see https://docs.vllm.ai/en)"
    )
    tidy = tidy_paths(text, (tmp_path,))
    assert tidy.startswith("Build: vLLM at .venv/lib/vllm; python .venv/bin/python; ")
    assert "/opt/vllm" in tidy and "https://docs.vllm.ai/en" in tidy
    if not str(tmp_path).startswith(home + "/"):
        assert "cache ~/x/y" in tidy


def test_github_summary_appends_or_writes_pr_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECBENCH_NO_INDEX", "1")
    folder = tmp_path / "cpu-medusa-small"
    shutil.copytree(FIXTURES / "cpu-medusa-small", folder)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    write_report(folder, figures=False, github_summary=True)
    comment = (folder / "pr-comment.md").read_text()
    assert comment.startswith("### specbench: cpu-medusa-small") and "<details>" in comment
    assert "## Figures" not in comment  # its links point into the run folder
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (folder / "pr-comment.md").unlink()
    write_report(folder, figures=False, github_summary=True)
    assert summary.read_text() == "earlier step\n" + comment + "\n"
    assert not (folder / "pr-comment.md").exists()


def test_a_budget_the_warm_up_ate_says_which_budget_would_give_a_result(tmp_path: Path) -> None:
    """A precision launch stopped by its budget after 1 block has no interval: the verdict
    says so first and names the budget_s that would measure the minimum blocks, from the
    launch's own start, warm-up and block times; `plan` warns from a stored run's."""
    from harness.analysis.budget import launch_costs, short_budget
    from harness.analysis.stats import PRECISION_MIN_BLOCKS
    from harness.present.plan_text import budget_lines
    from harness.present.stops import budget_advice
    from harness.results.run import load_run

    folder = tmp_path / "stored"
    shutil.copytree(FIXTURES / "cpu-medusa-overlay-20-blocks", folder)
    stored = load_run(folder)
    [record] = stored.runs
    assert record.result is not None
    costs = launch_costs(record)
    assert costs is not None and costs.block_s > 0 and costs.overhead_s > 0
    one_block = 2 * len(record.arms)  # a block runs every arm twice
    result = record.result.model_copy(
        update={
            "passes": record.result.passes[:one_block],
            "stop": PrecisionStop(reason="budget", blocks=1, budget_s=40),
            "timings": record.result.timings.model_copy(update={"measure_s": costs.block_s}),
        }
    )
    short = record.model_copy(update={"result": result, "wall_s": costs.overhead_s + costs.block_s})
    found = short_budget(short)
    assert found is not None and found.budget_s == 40 and found.costs == costs
    advice = budget_advice(found)
    assert advice.startswith(
        f"budget_s: {costs.budget_for():.0f} would measure the {PRECISION_MIN_BLOCKS} blocks"
    )
    assert short_budget(record) is None  # it reached its target
    comparison = compare_records(
        [short], Arms("baseline", ["optimized"], design="one-engine"), "r", "unit"
    )
    [line] = verdicts(comparison)
    assert line.startswith("optimized: no result: output throughput")
    assert f"the precision budget ran out: budget_s: {costs.budget_for():.0f}" in line
    from harness.config.scenario import load_scenario
    from harness.plan.plan import expand_plan
    from tests.conftest import SCENARIOS

    path = SCENARIOS / "cpu-medusa-overlay.yaml"
    plan = expand_plan(load_scenario(path), scenario_file=path)
    assert budget_lines(plan, stored) == []  # its own budget leaves room
    starved = plan.model_copy(
        update={
            "runs": [
                r.model_copy(
                    update={"precision": r.precision.model_copy(update={"budget_s": 40.0})}
                )
                for r in plan.runs
                if r.precision is not None
            ]
        }
    )
    [warning] = budget_lines(starved, stored)
    assert warning.startswith("  warning: budget_s=40 leaves about ")
    assert f"budget_s: {costs.budget_for():.0f} would give one" in warning


def _with_adjusted(
    comparison: Comparison, delta: float, withdrawn: Withdrawal | None = None
) -> Comparison:
    """The comparison with a speed-adjusted row beside each candidate's output throughput."""
    from dataclasses import replace

    from harness.config.metrics import ADJUSTED_METRIC

    for cand in comparison.candidates:
        tput = next(r for r in cand.rows if r.key == "output_throughput")
        estimate = replace(tput.estimate, delta=delta)
        if delta != delta:  # withdrawn: no interval
            estimate = replace(estimate, ci_low=None, ci_high=None, significant=False)
        row = replace(
            tput,
            key=ADJUSTED_METRIC,
            label="Output throughput, speed-adjusted (tok/s)",
            estimate=estimate,
            role="secondary",
            adjustment=SpeedAdjustment(
                "verification forward (time per step)", "draft", 40, -1.5, 0.6, 0.0, withdrawn
            ),
        )
        cand.rows.insert(cand.rows.index(tput) + 1, row)
    return comparison


def test_the_speed_adjusted_row_is_in_the_verdict_and_the_pr_rows(tmp_path: Path) -> None:
    comparison = _with_adjusted(_comparison(tmp_path), 0.01)
    [line] = verdicts(comparison)
    assert "; speed-adjusted (by the step parts) +1.0% [" in line
    assert "Output throughput, speed-adjusted" in render_terminal(comparison, rows="pr")
    # Adjusted by the speed probe instead (speed_probe: true): the verdict names it.
    row = next(r for r in comparison.candidates[0].rows if r.adjustment is not None)
    assert row.adjustment is not None
    row.adjustment = dataclasses.replace(row.adjustment, probe=True)
    [line] = verdicts(comparison)
    assert "; speed-adjusted (by the speed probe) +1.0% [" in line


def test_a_withdrawn_speed_adjusted_row_says_why_and_leaves_the_pr_rows(tmp_path: Path) -> None:
    moved = Check(math.log1p(0.0462), math.log1p(0.0165), math.log1p(0.0767), 0.95)
    comparison = _with_adjusted(_comparison(tmp_path), float("nan"), Withdrawal(moved))
    [line] = verdicts(comparison)
    assert (
        "; speed-adjusted row withdrawn (the verification forward (time per step) moved with "
        "the change (+4.62% [+1.65%, +7.67%]))" in line
    )
    text = " ".join(render_terminal(comparison, rows="all").split())
    assert (
        "speed-adjusted: withdrawn: the verification forward (time per step) moved with the "
        "change (+4.62% [+1.65%, +7.67%]), so it does not measure the machine's speed alone; "
        "speed-adjusted by the verification forward (time per step) (ANCOVA on 40 blocks, "
        "theta -1.50): removes 60% of the variance" in text
    )
    assert "speed-adjusted (tok/s)" not in render_terminal(comparison, rows="pr")
    assert "speed-adjusted (tok/s)" in render_terminal(comparison, rows="all")
