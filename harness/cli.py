"""The `specbench` command: typer wrappers that parse arguments, call the library
(harness.workflow for run, report, gate and calibrate; the stage's own module for the rest)
and print what it returns. Heavy imports live inside the commands so that `--help`, `plan`
and `schema` start fast and need neither an engine nor pandas.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from harness.errors import ExitCode, SpecbenchError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="A/B benchmarks of speculative decoding on real vLLM.",
)

ScenarioArg = Annotated[Path, typer.Argument(help="Scenario YAML file.", show_default=False)]
ResultsOpt = Annotated[Path, typer.Option("--results-dir", help="Where run folders go.")]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--models-cache",
        help="Cache of built-in tiny models "
        "(default: $SPECBENCH_CACHE/models or ~/.cache/specbench/models).",
    ),
]


class Inconclusive(StrEnum):
    """What an undecided gate exits with."""

    inconclusive = "inconclusive"
    passes = "pass"
    fails = "fail"


class ExecutorKind(StrEnum):
    """Where a run's launches run."""

    local = "local"
    ray = "ray"


PinKind = Literal["none", "node"]

MaxCellsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-cells",
        min=1,
        show_default=False,
        help="The most cells a sweep may have "
        "(default: 1000, harness.config.scenario.MAX_CELLS); a larger grid is refused before it is "
        "expanded. Raise it on purpose for a grid that large.",
    ),
]
InconclusiveOpt = Annotated[
    Inconclusive,
    typer.Option(
        "--inconclusive",
        help="Exit code when a gated metric is undecided: 8 (inconclusive), 0 (pass) or 4 (fail).",
    ),
]

RowsOpt = Annotated[
    str,
    typer.Option(
        "--rows",
        help="The table's rows: pr (the verdict, the seed PRs' rows and the notes "
        "that matter; the rest folded), all (every row and note), or row keys separated by "
        "commas (summary.json's, parity, speedup). summary.json keeps every row either way.",
    ),
]
GithubSummaryOpt = Annotated[
    bool,
    typer.Option(
        "--github-summary",
        help="Also append the Markdown table to $GITHUB_STEP_SUMMARY "
        "(the job summary in GitHub Actions), or where that is not set, write it to "
        "pr-comment.md in the run folder.",
    ),
]


def _err(message: str) -> None:
    print(f"specbench: error: {message}", file=sys.stderr)


@app.command()
def run(
    scenario: Annotated[
        Path | None,
        typer.Argument(
            help="Scenario YAML file (with --resume: optional, the run's own by default).",
            show_default=False,
        ),
    ] = None,
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
    run_id: Annotated[str | None, typer.Option(help="Name of the run folder.")] = None,
    mde: Annotated[
        float | None,
        typer.Option(
            help="Precision on demand: add blocks until the output-throughput minimum detectable "
            "effect reaches this fraction (0.01 = 1%); one-engine design."
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            help="Wall-clock budget in seconds for --mde (default: the scenario's, or 600)."
        ),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate",
            help="Judge the run with the scenario's gates and exit as `specbench gate` does.",
        ),
    ] = False,
    inconclusive: InconclusiveOpt = Inconclusive.inconclusive,
    clean: Annotated[
        bool,
        typer.Option(
            "--clean",
            help="Stop engine processes that dead runs in the results folder left "
            "running (they are reported either way).",
        ),
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Finish an interrupted or failed run (its folder): launches that "
            "completed are kept, the rest run; refused when the scenario or the environment "
            "changed.",
            show_default=False,
        ),
    ] = None,
    executor: Annotated[
        ExecutorKind,
        typer.Option(
            "--executor",
            help="Where launches run: local (one at a time, here) or ray (as Ray "
            "tasks on a cluster, as many at once as it has room for).",
        ),
    ] = ExecutorKind.local,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="--executor ray: the cluster (e.g. ray://head:10001, or auto for "
            "$RAY_ADDRESS / the cluster this machine belongs to); default: a Ray instance "
            "started on this machine.",
            show_default=False,
        ),
    ] = None,
    pin: Annotated[
        PinKind,
        typer.Option(
            "--pin",
            help="--executor ray: node keeps every launch of one comparison (a sweep "
            "cell, or the run) on one node, so hardware cannot confound the A/B.",
        ),
    ] = "none",
    max_cells: MaxCellsOpt = None,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="Refuse (exit 9) instead of waiting while another specbench run "
            "holds this machine.",
        ),
    ] = False,
    shared_machine: Annotated[
        bool,
        typer.Option(
            "--shared-machine",
            help="Run beside other benchmarks: take no machine lock (the table says so).",
        ),
    ] = False,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Profile each arm after its measured passes (the scenario's "
            "profile:, else 2 passes per arm): torch profiler traces under the run's profiles/ "
            "and a table of the ops whose self time differs most.",
        ),
    ] = False,
    rows: RowsOpt = "pr",
    github_summary: GithubSummaryOpt = False,
) -> int:
    """Run every variant of SCENARIO on real vLLM and print the comparison table. One
    benchmark at a time per machine: while another specbench run holds it, this one waits
    and says for whom."""
    from harness.config.sweep import MAX_CELLS
    from harness.execute.local import LocalExecutor
    from harness.execute.progress import LaunchView
    from harness.workflow import run_scenario, scenario_to_run

    path, spec, base_dir = scenario_to_run(
        scenario, mde, budget, gate, max_cells or MAX_CELLS, resume, run_id, profile
    )
    from harness.selftest import missing_selftest_line

    unproven_here = missing_selftest_line(spec.device, spec.model_runner)
    if unproven_here:
        _progress(unproven_here)
    # The launch in flight: stage, passes, tok/s, ETA (out of the plan's launches).
    view = LaunchView(0)
    if executor == ExecutorKind.ray:
        from harness.execute.ray_executor import RayExecutor

        chosen: Any = RayExecutor(address, models_cache, pin)
    else:
        if address is not None or pin != "none":
            raise SpecbenchError("--address and --pin apply to --executor ray")
        chosen = LocalExecutor(models_cache, status=view.tick)
    try:
        finished = run_scenario(
            spec,
            path,
            base_dir,
            results_dir,
            chosen,
            _progress,
            run_id=run_id,
            clean=clean,
            resume=resume,
            gate=inconclusive.value if gate else None,
            on_launches=lambda n: setattr(view, "total", n),
            wait=not no_wait,
            shared_machine=shared_machine,
            rows=rows,
            github_summary=github_summary,
        )
    finally:
        view.close()
    print(finished.text, end="")
    _progress(f"results: {finished.run.path}")
    if github_summary:
        _summary_written(finished.run.path)
    for line in finished.errors:
        _err(line)
    if finished.gated is not None:
        _print_gate(finished.gated)
    return finished.exit_code


def _progress(message: str) -> None:
    print(f"specbench: {message}", file=sys.stderr, flush=True)


def _summary_written(run_dir: Path) -> None:
    from harness.present.outputs import pr_comment_target

    _progress(f"Markdown summary: {pr_comment_target(run_dir)}")


def _print_gate(gated: Any) -> None:
    from harness.present.tables import render_gate_terminal

    print(render_gate_terminal(gated.result), end="")
    print(f"specbench: gate files: {', '.join(str(f) for f in gated.files)}", file=sys.stderr)


@app.command()
def report(
    results: Annotated[Path, typer.Argument(help="A run folder (or results/ for the newest).")],
    markdown: Annotated[bool, typer.Option(help="Print the Markdown copy instead.")] = False,
    html: Annotated[
        bool,
        typer.Option(
            "--html",
            help="Also write report.html: one self-contained page with the tables, "
            "figures, builds, fingerprint and scenario.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="Compare arms even where their launches ran on unlike nodes (a cluster)."
        ),
    ] = False,
    rows: RowsOpt = "pr",
    github_summary: GithubSummaryOpt = False,
    across_runs: Annotated[
        bool,
        typer.Option(
            "--across-runs",
            help="Read the earlier runs of this comparison from the results folder again "
            "(the notes under the table, all runs combined) and keep them in the run's "
            "across_runs.json; without it the report reads only the run's own folder.",
        ),
    ] = False,
) -> int:
    """Re-render the comparison of a stored run from its raw records (tables, figures)."""
    from harness.wire.manifest import resolve_run_dir
    from harness.workflow import write_report

    run_dir = resolve_run_dir(results)
    _, text = write_report(
        run_dir,
        html=html,
        force=force,
        rows=rows,
        github_summary=github_summary,
        fresh=across_runs,
    )
    print((run_dir / "table.md").read_text() if markdown else text, end="")
    if html:
        print(f"specbench: report: {run_dir / 'report.html'}", file=sys.stderr)
    if github_summary:
        _summary_written(run_dir)
    return 0


@app.command()
def compare(
    base: Annotated[Path, typer.Argument(help="Run folder holding the baseline arm.")],
    candidate: Annotated[Path, typer.Argument(help="Run folder holding the candidate arm.")],
    base_variant: Annotated[
        str | None, typer.Option(help="Variant of BASE to use (default: its baseline).")
    ] = None,
    candidate_variant: Annotated[
        str | None, typer.Option(help="Variant of CANDIDATE to use (default: its baseline).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Compare even if environments or workloads differ.")
    ] = False,
    markdown: Annotated[bool, typer.Option(help="Print Markdown instead.")] = False,
    rows: RowsOpt = "pr",
) -> int:
    """Compare two stored runs (e.g. the same scenario on two git checkouts)."""
    from harness.analysis.crossrun import compare_runs
    from harness.present.tables import render_markdown, render_terminal
    from harness.results.run import load_run

    a, b = load_run(base), load_run(candidate)
    comparison = compare_runs(a, b, base_variant, candidate_variant, force)
    print(
        render_markdown(comparison, a.manifest.fingerprint or None, rows)
        if markdown
        else render_terminal(comparison, rows=rows),
        end="",
    )
    return 0


@app.command()
def plan(
    scenario: ScenarioArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    from_run: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="A stored run of this scenario: forecast the blocks and wall time a "
            "minimum detectable effect needs, from its noise and timings.",
        ),
    ] = None,
    mde: Annotated[
        float | None,
        typer.Option(
            help="Target MDE for --from (default: the scenario's precision.mde, or 0.01)."
        ),
    ] = None,
    results_dir: ResultsOpt = Path("results"),
    max_cells: MaxCellsOpt = None,
) -> int:
    """Show what `run` would launch (a sweep: its cells), and how long it will take: at most,
    from each launch's timeout and precision budget; about, timed from a stored run (--from,
    else the newest complete run in --results-dir of the same model and settings); nothing
    runs."""
    from harness.analysis.forecast import newest_run_like
    from harness.config.scenario import load_scenario
    from harness.config.sweep import MAX_CELLS
    from harness.plan.plan import expand_plan
    from harness.plan.preflight import preflight
    from harness.present.plan_text import render_plan
    from harness.results.run import load_run

    loaded = load_scenario(scenario, max_cells or MAX_CELLS)
    expanded = expand_plan(loaded, scenario_file=scenario)
    # What run would refuse before any engine, hardware aside (plans travel between machines).
    preflight(loaded, expanded, Path(expanded.base_dir), hardware=False)
    if as_json:
        print(expanded.model_dump_json(indent=2))
        return 0
    stored = load_run(from_run) if from_run is not None else newest_run_like(results_dir, expanded)
    for line in render_plan(loaded, expanded, stored, from_run is not None, mde, results_dir):
        print(line)
    return 0


@app.command("gate")
def gate_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (or results/ for the newest).")],
    against: Annotated[
        str | None,
        typer.Option(
            help="A saved baseline (name or folder): gate this run's variant against it instead "
            "of its own candidates against its baseline. `history`: gate the run's metrics "
            "against the latest stable segment of its scenario's history in the run store "
            "(exactly where deterministic, else with the history's run-to-run spread)."
        ),
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option(
            help="With --against: the variant of RUN_DIR to gate (default: its baseline)."
        ),
    ] = None,
    baselines_dir: Annotated[
        Path | None, typer.Option(help="Where saved baselines live (default: baselines/).")
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the Markdown here.")] = None,
    inconclusive: InconclusiveOpt = Inconclusive.inconclusive,
    force: Annotated[
        bool, typer.Option(help="With --against: gate even if environments or workloads differ.")
    ] = False,
    combine: Annotated[
        bool,
        typer.Option(
            "--combine",
            help="Decide on this run and every earlier run of the same comparison "
            "(same scenario, builds and machine, in the same results folder) together, each run "
            "a launch, instead of on this run alone.",
        ),
    ] = False,
) -> int:
    """Decide PASS, REGRESSION or INCONCLUSIVE per gated metric of a stored run."""
    from harness.wire.manifest import resolve_run_dir
    from harness.workflow import gate_and_write

    gated = gate_and_write(
        resolve_run_dir(run_dir),
        inconclusive.value,
        against,
        baselines_dir,
        variant,
        junit,
        markdown,
        force,
        combine,
    )
    _print_gate(gated)
    return gated.exit_code


@app.command()
def calibrate(
    scenario: ScenarioArg,
    false_alarm: Annotated[
        float,
        typer.Option(
            min=0.0001,
            max=0.5,
            help="Chance, per gated metric, that an unchanged candidate run "
            "at this scenario's precision fails to PASS (INCONCLUSIVE or REGRESSION; REGRESSION "
            "alone is far rarer).",
        ),
    ] = 0.01,
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
) -> int:
    """Run SCENARIO as an A/A (the baseline in both arms) and print a `gates:` block whose
    tolerances its measured noise supports."""
    from harness.config.scenario import load_scenario
    from harness.present.calibration import gates_yaml
    from harness.workflow import calibrate as run_calibration

    spec = load_scenario(scenario)
    if spec.sweep is not None:
        raise SpecbenchError(
            f"{scenario}: calibrate runs one A/A; this scenario is a sweep "
            "(calibrate a scenario without sweep:)"
        )
    run_dir, tolerances = run_calibration(
        spec, scenario, results_dir, models_cache, _progress, false_alarm
    )
    print(gates_yaml(spec, tolerances, false_alarm, run_dir), end="")
    return 0


baseline_app = typer.Typer(no_args_is_help=True, help="Saved reference runs for gates.")
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
def baseline_save(
    run_dir: Annotated[Path, typer.Argument(help="A complete run folder.")],
    name: Annotated[str, typer.Option(help="Name of the saved baseline.")],
    baselines_dir: Annotated[
        Path | None, typer.Option(help="Where saved baselines live (default: baselines/).")
    ] = None,
) -> int:
    """Save a run as a self-contained reference folder (manifest and raw run records)."""
    from harness.results.store import DEFAULT_BASELINES, save_baseline
    from harness.wire.manifest import resolve_run_dir

    path = save_baseline(resolve_run_dir(run_dir), name, baselines_dir or DEFAULT_BASELINES)
    print(f"saved baseline {name!r}: {path}")
    return 0


@app.command("index")
def index_command(
    results_dir: ResultsOpt = Path("results"),
    rebuild: Annotated[
        bool,
        typer.Option("--rebuild", help="Drop the index and build it again from the run folders."),
    ] = False,
) -> int:
    """Index every run folder of the results folder in its run store (index.duckdb)."""
    from harness.results.index import index_path, runs
    from harness.results.index import rebuild as rebuild_index

    if rebuild:
        count = rebuild_index(results_dir)
        print(f"rebuilt {index_path(results_dir)}: {count} run(s)")
    else:
        frame = runs(results_dir)
        by_status = frame["status"].fillna("unknown").value_counts().to_dict() if len(frame) else {}
        shown = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
        print(f"{index_path(results_dir)}: {len(frame)} run(s)" + (f" ({shown})" if shown else ""))
    return 0


@app.command()
def history(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="A scenario (its YAML file or its name); default: every scenario in the store.",
            show_default=False,
        ),
    ] = None,
    metric: Annotated[
        str, typer.Option("--metric", help="The metric (a key, or a glob such as 'acceptance_*').")
    ] = "output_throughput",
    results_dir: ResultsOpt = Path("results"),
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write a page with the series figures (change points marked) here.",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Print each comparison's series over the stored runs: commit or date, estimate [95% CI],
    verdict, and the change points."""
    from harness.workflow import show_history

    text, page = show_history(results_dir, scenario, metric, html)
    print(text, end="")
    if page is not None:
        _progress(f"wrote {page}")
    return 0


@app.command()
def bisect(
    scenario: ScenarioArg,
    good: Annotated[
        str | None, typer.Option(help="A commit whose metric is the reference.", show_default=False)
    ] = None,
    bad: Annotated[
        str | None, typer.Option(help="A later commit that differs from good.", show_default=False)
    ] = None,
    repo: Annotated[
        Path | None,
        typer.Option(
            help="The vLLM checkout (based on the installed release) holding good..bad.",
            show_default=False,
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            help="The commit of the installed release in --repo (default: the tag v<installed "
            "version>).",
            show_default=False,
        ),
    ] = None,
    build: Annotated[
        str | None,
        typer.Option(
            "--build",
            help="For commits whose change cannot be overlaid: a command that installs "
            "the checkout into a fresh environment (run in the commit's worktree, the "
            'environment active), e.g. "pip install -e . --no-build-isolation"; cached per commit.',
            show_default=False,
        ),
    ] = None,
    python: Annotated[
        list[str] | None,
        typer.Option(
            "--python",
            help="Instead of commits: interpreters, in order (good first, bad last); "
            "repeat the option.",
            show_default=False,
        ),
    ] = None,
    metric: Annotated[str, typer.Option(help="The metric to bisect on.")] = "output_throughput",
    threshold: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            max=1.0,
            help="The smallest change worth finding, as a fraction (default: "
            "the scenario's gate tolerance for the metric, else 0.02).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        float,
        typer.Option(
            help="Seconds a precision comparison may run per arm it hosts (engine start "
            "included): good and three candidates in one engine get four times this."
        ),
    ] = 80.0,
    tries: Annotated[
        int,
        typer.Option(
            min=1,
            max=10,
            help="Runs per comparison while its verdict is UNKNOWN, each to a tighter precision.",
        ),
    ] = 3,
    blocks: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="A fixed number of balanced blocks per one-engine comparison instead of "
            "a precision target, doubled on each try while UNKNOWN: quicker for a large step.",
            show_default=False,
        ),
    ] = None,
    check_beside: Annotated[
        int,
        typer.Option(
            min=0,
            max=10,
            help="Engine runs spent, once a culprit is named, measuring the parts "
            "on either side of it for a further step while undecided; about doubles a "
            "one-culprit bisect (0: judge them from what was measured anyway, 'not checked' "
            "where that cannot decide).",
        ),
    ] = 3,
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
) -> int:
    """Find the first commit (or interpreter) between good and bad whose metric differs from
    good's: midpoints compared with good in one engine (on bad's side of half the step, on
    good's side, UNKNOWN), measured again while UNKNOWN. The same command again resumes an
    interrupted bisect."""
    from harness.bisect import run_bisect
    from harness.present.bisect import render_outcome

    outcome = run_bisect(
        scenario,
        results_dir,
        _progress,
        repo=repo,
        good=good,
        bad=bad,
        base=base,
        pythons=python,
        build_command=build,
        metric=metric,
        threshold=threshold,
        budget_s=budget,
        tries=tries,
        blocks=blocks,
        models_cache=models_cache,
        check_beside=check_beside,
    )
    print(render_outcome(outcome), end="")
    _progress(f"bisect: {outcome.folder}")
    return outcome.exit_code


@app.command()
def schema() -> int:
    """Print the JSON Schema of scenario files."""
    from harness.config.scenario import scenario_json_schema

    print(json.dumps(scenario_json_schema(), indent=2))
    return 0


@app.command()
def implementations() -> int:
    """List the implementations a variant can swap inside vLLM's workers (the registry)."""
    from harness.config.swaps import describe_registry

    for line in describe_registry():
        print(line)
    return 0


@app.command()
def support(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="vLLM wheels (.whl) or folders holding vllm/, read as source (no import); none: "
            "the installed vLLM.",
            show_default=False,
        ),
    ] = None,
    reasons: Annotated[int, typer.Option(min=1, help="Failures shown per cell.")] = 2,
    scenario: Annotated[
        list[Path] | None,
        typer.Option(
            "--scenario",
            help="Instead of the matrix: whether this scenario can run on each "
            "version (the features it uses, its engine-argument keys, its swaps' versions, "
            "and each variant's diff planned against that version's source as `plan` plans "
            "it against the installed vLLM); repeat the option. Exit 1 when one cannot.",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Which specbench features each vLLM version supports: every vLLM internal specbench
    touches (harness/config/vllm_internals.py) looked up in its source, one row per feature."""
    from harness.plan import vllm_support as vs

    found = [vs.open_source(s) for s in sources] if sources else [vs.installed_source()]
    if not scenario:
        print(vs.render_matrix([vs.check_source(s) for s in found], reasons))
        return 0
    from harness.config.scenario import load_scenario
    from harness.plan.plan import expand_plan

    status = 0
    for path in scenario:
        spec = load_scenario(path)
        # Planned without its changes: a diff written for another release need not apply to
        # the installed vLLM; each source plans them against its own files.
        plan = expand_plan(vs.without_changes(spec), scenario_file=path)
        features, _ = vs.scenario_needs(spec, plan)
        for source in found:
            failures = vs.check_scenario(source, spec, plan)
            mark = "✗" if failures else "✓"
            print(
                f"{mark} {spec.name} on vLLM {source.version}: "
                + (
                    "; ".join(
                        f"{f}: {w[0]}" + (f" (+{len(w) - 1} more)" if len(w) > 1 else "")
                        for f, w in failures.items()
                    )
                    if failures
                    else f"uses {', '.join(features)}"
                )
            )
            for feature, why in failures.items():
                if feature.startswith("overlay ") and len(why) > 1:
                    print("\n".join(f"  {line}" for line in why))
            status = status or (1 if failures else 0)
    return status


@app.command()
def doctor(
    sample: Annotated[
        float,
        typer.Option(
            "--sample",
            min=0.1,
            max=60.0,
            help="Seconds to watch the machine's processes for the load checks.",
        ),
    ] = 1.0,
) -> int:
    """What this machine can run (vLLM, torch, platform, devices, usable methods and swaps),
    and whether it is fit to benchmark on (CPU governor and boost, SMT, steal, other heavy
    processes, load; GPU persistence, clocks, other processes), each check ok, warning or
    unknown with the command that fixes it."""
    from harness.doctor import doctor_lines, machine_checks

    for line in doctor_lines():
        print(line)
    print(
        "machine checks (as pyperf's `system` command checks; warnings make results noisier "
        "or biased):"
    )
    for check in machine_checks(sample):
        print(check.line())
    return 0


@app.command()
def selftest(
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
    device: Annotated[
        Literal["auto", "cpu", "cuda"],
        typer.Option(help="The device to test (auto: CUDA where this machine has a GPU)."),
    ] = "auto",
    model_runner: Annotated[
        Literal["auto", "V1", "V2"],
        typer.Option(
            "--model-runner",
            help="The model runner to test (auto: the one vLLM picks; V2 on a CPU runs under "
            "Triton's interpreter, set up by scripts/setup.sh --v2).",
        ),
    ] = "auto",
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="Run only these checks (methods, capture, swap, overlay, serve); repeat the "
            "option. A partial selftest is not recorded as passed.",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Prove, on this machine and the installed vLLM, every feature whose correctness depends
    on the platform: an engine per speculative method, parity, the step timer, the KV
    capacity, capture-time code refused, a swap and an overlay switched in one engine under
    the default graph mode and eager, serve, and a gate on an A/A. Prints a table and writes
    selftest.json (attach it to a bug report); exit 0 when every check the platform allows
    passed, 1 when one failed."""
    from harness.env import cuda_gpus
    from harness.execute.local import LocalExecutor
    from harness.selftest import render, run_selftest

    chosen = device if device != "auto" else ("cuda" if cuda_gpus() else "cpu")
    result = run_selftest(
        results_dir,
        LocalExecutor(models_cache),
        _progress,
        chosen,
        model_runner,
        only,
    )
    print(render(result), end="")
    return int(ExitCode.OK if result.passed else ExitCode.RUN_FAILED)


@app.command()
def models(
    build: Annotated[list[str] | None, typer.Argument(help="Built-in models to build now.")] = None,
    models_cache: CacheOpt = None,
) -> int:
    """List the built-in tiny models, or build the named ones (worker-side process)."""
    import subprocess

    from harness.config.catalog import BUILTIN_MODELS

    if not build:
        for name, text in BUILTIN_MODELS.items():
            print(f"{name:<20} {text}")
        return 0
    unknown = [n for n in build if n not in BUILTIN_MODELS and n != "all"]
    if unknown:
        raise SpecbenchError(
            f"unknown built-in model(s): {', '.join(unknown)} (known: {', '.join(BUILTIN_MODELS)})"
        )
    names = list(BUILTIN_MODELS) if "all" in build else build
    from harness.execute.local import models_command

    return subprocess.run(models_command(names, models_cache), check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors become one line and an exit code, no traceback."""
    try:
        result = app(args=argv, standalone_mode=False)
    except SpecbenchError as exc:
        _err(str(exc))
        return int(exc.exit_code)
    except typer.Abort:
        _err("interrupted")
        return int(ExitCode.INTERRUPTED)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: missing argument, unknown option
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            _err(str(exc))
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        _err("interrupted")
        return int(ExitCode.INTERRUPTED)
    return int(result) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
