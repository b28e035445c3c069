"""The library behind each command, one pass through the flow: scenario -> plan -> execute ->
Run (loaded once) -> analysis (computed once) -> the files and the decision. The CLI parses
arguments and prints; a notebook or a CI script calls these and gets the same results.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.analysis.compare import compare_run
from harness.analysis.comparison import AcrossRow, AcrossRuns, Comparison
from harness.analysis.contention import MachineUse
from harness.analysis.crossrun import compare_runs
from harness.analysis.gate import GateResult, judge
from harness.analysis.repeats import across_runs_of, combined
from harness.analysis.sweep_comparison import SweepComparison, compare_sweep
from harness.atomic import write_json_atomic
from harness.config.interpreter import NOT_PERFORMANCE, interpreted
from harness.config.scenario import (
    Scenario,
    load_scenario,
    parse_scenario,
    with_precision,
    with_profile,
)
from harness.errors import (
    ExitCode,
    IncomparableError,
    ProofRefused,
    ResultsError,
    ScenarioError,
    SpecbenchError,
)
from harness.present.outputs import write_gate_files, write_outputs
from harness.results.index import earlier_runs, index_run
from harness.results.run import Run, load_run
from harness.results.store import resolve_baseline
from harness.wire.manifest import resolve_run_dir

Analysis = Comparison | SweepComparison
Inconclusive = Literal["inconclusive", "pass", "fail"]
Progress = Callable[[str], None]


# What a run's folder says of the earlier runs of its comparison, as they stood when it ran.
ACROSS_RUNS = "across_runs.json"
# 1: the notes, in words; 2: the facts (analysis.comparison.AcrossRuns), worded by present.
ACROSS_RUNS_VERSION = 2


def analyze(run: Run, force: bool = False, fresh: bool = False) -> Analysis:
    """A stored run's comparison (a sweep: every cell's, and the break-even), with the notes
    on the earlier runs of its comparison. `fresh` (the run just made): they are read from
    the run store and kept in the run's folder (ACROSS_RUNS); else read from there, so a
    report depends only on its own folder and says what the store held when the run ran."""
    if run.is_sweep:
        return compare_sweep(run, force)
    comparison = compare_run(run, force)
    comparison.across = across_of(run, force) if fresh else kept_across(run)
    comparison.machine = MachineUse.of(run.manifest.machine)
    return comparison


def across_of(run: Run, force: bool = False) -> AcrossRuns:
    """The earlier runs of this run's comparison in the run store, and all of them combined,
    kept in its folder for later reports."""
    found = across_runs_of(run, earlier_runs(run), force)
    data = {"version": ACROSS_RUNS_VERSION, **asdict(found)}
    del data["kept"]
    with contextlib.suppress(OSError):  # a read-only folder still gets its table
        write_json_atomic(run.path / ACROSS_RUNS, data)
    return found


def kept_across(run: Run) -> AcrossRuns | None:
    """What its run kept (across_of); None from a folder without it. A version-1 file kept
    its notes as words: they are shown as written."""
    try:
        data = json.loads((run.path / ACROSS_RUNS).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("version") == 1:
        return AcrossRuns(kept=[str(note) for note in data.get("notes", [])])
    if data.get("version") != ACROSS_RUNS_VERSION:
        return None
    try:
        return AcrossRuns(
            earlier=[str(e) for e in data["earlier"]],
            runs=int(data["runs"]),
            rows=[AcrossRow(**row) for row in data["rows"]],
            failed=data["failed"],
            planned=data.get("planned"),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _run(run: Run | Path | str) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def write_report(
    run: Run | Path | str,
    html: bool = False,
    figures: bool = True,
    force: bool = False,
    rows: str = "pr",
    github_summary: bool = False,
    fresh: bool = False,
) -> tuple[Analysis, str]:
    """Compare a stored run and write its tables (`rows`: pr, all or keys), summary, frames
    and figures (harness.present.outputs; `github_summary`: the Markdown to the job summary
    too); the analysis and the terminal table. `fresh`: analyze's (the earlier runs read
    from the store again, not from the run's folder)."""
    run = _run(run)
    analysis = analyze(run, force, fresh)
    return analysis, write_outputs(run, analysis, html, figures, rows, github_summary)


def gate_run(
    run: Run | Path | str,
    against: str | None = None,
    baselines_dir: Path | None = None,
    variant: str | None = None,
    force: bool = False,
    combine: bool = False,
    analysis: Analysis | None = None,
) -> tuple[Comparison, GateResult]:
    """Judge a stored run with its scenario's gates: its candidates against its baseline
    (`analysis`: that comparison, when the caller already made it), or (`against`) its
    `variant` (default: its baseline) against a saved reference run's same-named variant
    (default: the reference's baseline). Refuses incomparable runs, naming the fields.
    `against="history"`: against the latest stable segment of its history in the run store.
    `combine`: this run and every earlier run of the same comparison, each a launch; always
    so for a planned series (planned_runs) without `against`: its gate judges the plan's look."""
    run = _run(run)
    scenario = run.scenario
    combine = combine or (scenario.planned_runs is not None and against is None)
    if interpreted(scenario.device, scenario.model_runner):
        raise ResultsError(f"{run.path}: {NOT_PERFORMANCE}, so no gate judges them")
    if scenario.sweep is not None:
        raise ResultsError(
            f"{run.path}: a sweep; a gate judges one A/B (gate a scenario "
            "without sweep:, e.g. the cell you ship)"
        )
    if combine:
        if against is not None:
            raise ResultsError(
                "--combine gates a run with its own earlier runs; --against "
                "gates it against a saved baseline: choose one"
            )
        comparison = combined(run, [load_run(p, scenario) for p in earlier_runs(run)], force)[0]
    elif against is None:
        comparison = analysis if isinstance(analysis, Comparison) else compare_run(run)
    elif against == HISTORY:
        comparison = analysis if isinstance(analysis, Comparison) else compare_run(run)
        return comparison, gate_against_history(run, comparison)
    else:
        reference = load_run(
            resolve_baseline(against, *([baselines_dir] if baselines_dir is not None else []))
        )
        name = variant or scenario.baseline
        if name not in scenario.variants:
            raise ResultsError(f"{run.path}: no variant {name!r} to gate")
        ref_name = name if name in reference.scenario.variants else reference.scenario.baseline
        comparison = compare_runs(reference, run, ref_name, name, force)
    return comparison, judge(comparison, scenario.gates)


HISTORY = "history"


def gate_against_history(run: Run, comparison: Comparison) -> GateResult:
    """The run's gated metrics against the latest stable segment of its scenario's history in
    the run store (same scenario hash, same machine), plus its own exact checks (parity,
    implementation proof), which need no history."""
    from harness.analysis.history import judge_against_history
    from harness.results.index import history, machine_of

    frame = history(run.path.parent, scenario=run.scenario.name)
    frame = frame[
        (frame["scenario_hash"] == run.manifest.scenario_hash)
        & (frame["machine"] == machine_of(run.manifest))
    ]
    result, comparison.history = judge_against_history(run, comparison, frame, run.scenario.gates)
    own = judge(comparison, run.scenario.gates)
    result.decisions.extend(
        d for d in own.decisions if d.check in ("output_parity", "implementation_proof", "launches")
    )
    return result


def gate_exit_code(result: GateResult, inconclusive: Inconclusive) -> int:
    """A gate's verdict as an exit code; an undecided one as `inconclusive` says."""
    if result.verdict == "REGRESSION":
        return int(ExitCode.GATE_FAILED)
    if result.verdict == "INCONCLUSIVE":
        return {"pass": 0, "fail": int(ExitCode.GATE_FAILED)}.get(
            inconclusive, int(ExitCode.INCONCLUSIVE)
        )
    return 0


@dataclass
class Gated:
    """A gate's decision on a run, and the files it left."""

    comparison: Comparison
    result: GateResult
    files: list[Path]
    exit_code: int


def gate_and_write(
    run: Run | Path | str,
    inconclusive: Inconclusive = "inconclusive",
    against: str | None = None,
    baselines_dir: Path | None = None,
    variant: str | None = None,
    junit: Path | None = None,
    markdown: Path | None = None,
    force: bool = False,
    combine: bool = False,
    analysis: Analysis | None = None,
) -> Gated:
    """gate_run, then the gate's files (gate.json, gate.md, gate.junit.xml and the copies
    asked for), and the exit code its verdict maps to."""
    run = _run(run)
    comparison, result = gate_run(run, against, baselines_dir, variant, force, combine, analysis)
    files = write_gate_files(
        run.path, comparison, result, junit, markdown, inconclusive_fails=inconclusive == "fail"
    )
    return Gated(comparison, result, files, gate_exit_code(result, inconclusive))


def scenario_to_run(
    path: Path | None,
    mde: float | None,
    budget: float | None,
    gate: bool,
    max_cells: int,
    resume: Path | None = None,
    run_id: str | None = None,
    profile: bool = False,
) -> tuple[Path | None, Scenario, Path | None]:
    """The scenario `specbench run` runs, with the precision the command line asks for: the
    file given, or (resume) the interrupted run's own. Returns the scenario file (if any), the
    scenario, and the folder its relative paths resolve against when not the file's."""
    if resume is not None:
        if profile:
            raise SpecbenchError("--resume continues a run as it was planned: drop --profile")
        return resumed_scenario(resume, path, run_id, mde, budget, max_cells)
    if path is None:
        raise SpecbenchError("missing SCENARIO (a scenario file; or --resume RUN)")
    spec = load_scenario(path, max_cells)
    if gate and spec.sweep is not None:
        raise SpecbenchError(
            f"{path}: --gate judges one A/B; this scenario is a sweep "
            "(gate a scenario without sweep:, e.g. the cell you ship)"
        )
    if mde is not None or budget is not None or (gate and spec.precision is not None):
        # A gated precision run samples until every gate can decide, not to a fixed MDE.
        spec = with_precision(
            spec, mde, budget, str(path), "gates" if gate and mde is None else None
        )
    if profile:
        spec = with_profile(spec, str(path))
    return path, spec, None


def resumed_scenario(
    resume: Path,
    scenario: Path | None,
    run_id: str | None,
    mde: float | None,
    budget: float | None,
    max_cells: int,
) -> tuple[Path | None, Scenario, Path | None]:
    """The scenario a resumed run continues: the file given, else the run's own file if it is
    still there, else the copy in its manifest (the runner checks that it is unchanged)."""
    if run_id is not None or mde is not None or budget is not None:
        raise SpecbenchError(
            "--resume continues a run as it was planned: drop --run-id, --mde and --budget"
        )
    stored = load_run(resume)
    if scenario is None:
        own = stored.manifest.scenario_file
        if own and Path(own).is_file():
            scenario = Path(own)
    if scenario is not None:
        loaded = load_scenario(scenario, max_cells)
        precision = stored.manifest.scenario.get("precision")
        given = loaded.precision.model_dump(mode="json") if loaded.precision else None
        if precision and given != precision:
            # A run started with --mde/--budget/--gate keeps the precision it was given.
            data = loaded.model_dump(mode="json")
            data.update(precision=precision, rounds=stored.manifest.scenario.get("rounds"))
            loaded = parse_scenario(data, str(scenario), max_cells)
        return scenario, loaded, None
    # Relative paths resolve where they did when the run started; its grid was accepted
    # when it started.
    base = stored.manifest.plan.base_dir
    return None, stored.scenario, Path(base) if base is not None else None


@dataclass
class Finished:
    """What `specbench run` did: the run, its analysis, the table, the exit code, and the
    lines to say on stderr."""

    run: Run
    analysis: Analysis
    text: str
    exit_code: int
    errors: list[str] = field(default_factory=list)
    gated: Gated | None = None


def run_scenario(
    spec: Scenario,
    scenario_file: Path | None,
    base_dir: Path | None,
    results_dir: Path,
    executor: Any,
    progress: Progress,
    run_id: str | None = None,
    clean: bool = False,
    resume: Path | None = None,
    gate: Inconclusive | None = None,
    on_launches: Callable[[int], Any] | None = None,
    wait: bool = True,
    shared_machine: bool = False,
    rows: str = "pr",
    github_summary: bool = False,
) -> Finished:
    """Plan `spec`, run every launch through `executor`, load the Run once, analyse it once,
    write its files and (`gate`: with this policy for undecided metrics) judge it. The exit
    code: an interrupted or storage-failed run as the runner says; else a gate's verdict when
    gated; else UNPROVEN, PARITY or RUN_FAILED, in that order. `rows` and `github_summary`:
    how the tables are written (write_outputs)."""
    from harness.execute.runner import run_plan
    from harness.plan.plan import expand_plan

    if gate is not None and interpreted(spec.device, spec.model_runner):
        raise ScenarioError(
            f"--gate: model_runner: V2 on device: cpu runs {NOT_PERFORMANCE}; "
            "no gate judges them (run it without --gate)"
        )
    plan = expand_plan(spec, base_dir=base_dir, scenario_file=scenario_file)
    if on_launches is not None:
        on_launches(len(plan.runs))
    outcome = run_plan(
        plan,
        results_dir,
        executor,
        progress,
        run_id=run_id,
        clean=clean,
        resume=None if resume is None else resolve_run_dir(resume),
        wait=wait,
        shared_machine=shared_machine,
    )
    run = load_run(outcome.run_dir, plan.scenario)
    try:
        analysis = analyze(run, fresh=True)
    except IncomparableError as exc:
        raise IncomparableError(f"{exc}; the run's records are kept in {outcome.run_dir}") from None
    # After Ctrl-C, exit promptly: tables now, figures with `specbench report`.
    text = write_outputs(
        run, analysis, figures=not outcome.interrupted, rows=rows, github_summary=github_summary
    )
    finished = Finished(run, analysis, text, int(outcome.exit_code))
    # A launch the proof refused in its warm-up failed as UNPROVEN, not as a broken engine.
    refused_only = all(r.status == "ok" or ProofRefused.refused(r.error) for r in outcome.records)
    if outcome.exit_code == ExitCode.RUN_FAILED and not refused_only:
        finished.errors.append(
            "some launches failed; see the table's FAILED notes and the "
            f"logs in {outcome.run_dir / 'logs'}"
        )
    if analysis.unproven and (
        outcome.exit_code == ExitCode.OK
        or (outcome.exit_code == ExitCode.RUN_FAILED and refused_only)
    ):
        finished.errors.append(
            "a launch was refused before its first measured block: an arm's warm-up never "
            "proved its implementation ran (UNPROVEN line under the table)"
            if outcome.exit_code == ExitCode.RUN_FAILED
            else "vLLM's processes did not prove every launch or pass ran its implementation "
            "(UNPROVEN lines under the table); those passes were left out"
        )
        finished.exit_code = int(ExitCode.UNPROVEN)
    elif gate is not None and outcome.exit_code in (ExitCode.OK, ExitCode.RUN_FAILED):
        finished.gated = gate_and_write(run, gate, analysis=analysis)
        finished.exit_code = finished.gated.exit_code
    elif outcome.exit_code == ExitCode.OK and analysis.parity_violations:
        finished.errors.append(
            "greedy outputs differ from the baseline where they must not: "
            + ", ".join(analysis.parity_violations)
        )
        finished.exit_code = int(ExitCode.PARITY)
    # Best-effort (a locked index is synced by its next reader), from the manifest in hand.
    index_run(run.path, run.manifest)
    return finished


def calibrate(
    scenario: Scenario,
    scenario_path: Path | None,
    results_root: Path,
    models_cache: Path | None,
    progress: Progress,
    false_alarm: float,
) -> tuple[Path, dict[str, float]]:
    """Run the scenario's A/A on real vLLM, write its report, and return its run folder and
    the gate tolerances its measured noise supports at `false_alarm`."""
    from harness.analysis.gate import propose_tolerances
    from harness.config.scenario import as_aa
    from harness.execute.local import LocalExecutor
    from harness.execute.runner import run_plan
    from harness.plan.plan import expand_plan

    aa = as_aa(scenario)
    plan = expand_plan(aa, scenario_file=scenario_path)
    outcome = run_plan(plan, results_root, LocalExecutor(models_cache), progress)
    run = load_run(outcome.run_dir, plan.scenario)
    comparison = analyze(run)
    write_outputs(run, comparison)
    index_run(run.path, run.manifest)
    assert isinstance(comparison, Comparison)
    return outcome.run_dir, propose_tolerances(comparison, scenario.gates, false_alarm)


def scenario_name(given: str | None) -> str | None:
    """A scenario named on the command line: a YAML file's `name:`, or the name itself."""
    if given is None:
        return None
    path = Path(given)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return load_scenario(path).name
    return given


def show_history(
    results_root: Path,
    scenario: str | None = None,
    metric: str = "output_throughput",
    html_to: Path | None = None,
) -> tuple[str, Path | None]:
    """`specbench history`: the store's series of `scenario` (a name or its YAML; None: all)
    for the metrics matching `metric` (a glob), with change points; the other metrics' change
    points in a line each. `html_to`: also write the page with the series figures there."""
    from harness.analysis.history import build_series
    from harness.atomic import write_text_atomic
    from harness.present.history import render_history
    from harness.present.page import history_page
    from harness.results.index import history

    name = scenario_name(scenario)
    frame = history(results_root, scenario=name)
    if frame.empty and name is not None:
        known = sorted(set(history(results_root)["scenario"].dropna()))
        raise ResultsError(
            f"no complete run of scenario {name!r} in {results_root} (has: "
            f"{', '.join(known) or 'none'})"
        )
    every = build_series(frame)
    shown = [s for s in every if fnmatch.fnmatchcase(s.metric, metric)]
    if not shown and not frame.empty:
        raise ResultsError(
            f"no metric matches {metric!r} (has: {', '.join(sorted(set(frame['metric'])))})"
        )
    text = render_history(shown, [s for s in every if s not in shown])
    if html_to is not None:
        write_text_atomic(html_to, history_page(shown, text, name or str(results_root)))
    return text, html_to
