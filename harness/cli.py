"""The `specbench` command: thin typer wrappers that build one object, call one library
function and map the outcome to an exit code. Heavy imports live inside the commands so that
`--help`, `plan` and `schema` start fast and need no engine.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
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
    typer.Option("--models-cache", help="Cache of built-in tiny models "
                 "(default: $SPECBENCH_CACHE/models or ~/.cache/specbench/models)."),
]


class Inconclusive(str, Enum):
    """What an undecided gate exits with."""

    inconclusive = "inconclusive"
    passes = "pass"
    fails = "fail"


class ExecutorKind(str, Enum):
    """Where a run's launches run."""

    local = "local"
    ray = "ray"


PinKind = Literal["none", "node"]

MaxCellsOpt = Annotated[
    int | None, typer.Option(
        "--max-cells", min=1, show_default=False, help="The most cells a sweep may have "
        "(default: 1000, harness.config.scenario.MAX_CELLS); a larger grid is refused before it is "
        "expanded. Raise it on purpose for a grid that large."),
]
InconclusiveOpt = Annotated[
    Inconclusive, typer.Option(
        "--inconclusive", help="Exit code when a gated metric is undecided: 8 (inconclusive), "
        "0 (pass) or 4 (fail)."),
]


def _err(message: str) -> None:
    print(f"specbench: error: {message}", file=sys.stderr)


@app.command()
def run(
    scenario: Annotated[Path | None, typer.Argument(
        help="Scenario YAML file (with --resume: optional, the run's own by default).",
        show_default=False)] = None,
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
    run_id: Annotated[str | None, typer.Option(help="Name of the run folder.")] = None,
    mde: Annotated[float | None, typer.Option(
        help="Precision on demand: add blocks until the output-throughput minimum detectable "
        "effect reaches this fraction (0.01 = 1%); one-engine design.")] = None,
    budget: Annotated[float | None, typer.Option(
        help="Wall-clock budget in seconds for --mde (default: the scenario's, or 600).")] = None,
    gate: Annotated[bool, typer.Option(
        "--gate", help="Judge the run with the scenario's gates and exit as `specbench gate` "
        "does.")] = False,
    inconclusive: InconclusiveOpt = Inconclusive.inconclusive,
    clean: Annotated[bool, typer.Option(
        "--clean", help="Stop engine processes that dead runs in the results folder left "
        "running (they are reported either way).")] = False,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Finish an interrupted or failed run (its folder): launches that "
        "completed are kept, the rest run; refused when the scenario or the environment "
        "changed.", show_default=False)] = None,
    executor: Annotated[ExecutorKind, typer.Option(
        "--executor", help="Where launches run: local (one at a time, here) or ray (as Ray "
        "tasks on a cluster, as many at once as it has room for).")] = ExecutorKind.local,
    address: Annotated[str | None, typer.Option(
        "--address", help="--executor ray: the cluster (e.g. ray://head:10001, or auto for "
        "$RAY_ADDRESS / the cluster this machine belongs to); default: a Ray instance "
        "started on this machine.", show_default=False)] = None,
    pin: Annotated[PinKind, typer.Option(
        "--pin", help="--executor ray: node keeps every launch of one comparison (a sweep "
        "cell, or the run) on one node, so hardware cannot confound the A/B.")] = "none",
    max_cells: MaxCellsOpt = None,
) -> int:
    """Run every variant of SCENARIO on real vLLM and print the comparison table."""
    from harness.config.scenario import MAX_CELLS, load_scenario, with_precision
    from harness.errors import IncomparableError
    from harness.execute.local import LocalExecutor
    from harness.execute.progress import LaunchView
    from harness.execute.runner import run_plan
    from harness.plan.plan import expand_plan

    max_cells = max_cells or MAX_CELLS
    if resume is not None:
        scenario, spec, base_dir = _resumed_scenario(resume, scenario, run_id, mde, budget,
                                                     max_cells)
    elif scenario is None:
        raise SpecbenchError("missing SCENARIO (a scenario file; or --resume RUN)")
    else:
        spec, base_dir = load_scenario(scenario, max_cells), None
    if gate and spec.sweep is not None:
        raise SpecbenchError(f"{scenario}: --gate judges one A/B; this scenario is a sweep "
                             "(gate a scenario without sweep:, e.g. the cell you ship)")
    if resume is None and (mde is not None or budget is not None
                           or (gate and spec.precision is not None)):
        # A gated precision run samples until every gate can decide, not to a fixed MDE.
        spec = with_precision(spec, mde, budget, str(scenario),
                              "gates" if gate and mde is None else None)

    def progress(message: str) -> None:
        print(f"specbench: {message}", file=sys.stderr, flush=True)

    from harness.results.store import resolve_run_dir

    plan = expand_plan(spec, base_dir=base_dir, scenario_file=scenario)
    view = LaunchView(len(plan.runs))  # the launch in flight: stage, passes, tok/s, ETA
    if executor == ExecutorKind.ray:
        from harness.execute.ray_executor import RayExecutor

        chosen: Any = RayExecutor(address, models_cache, pin)
    else:
        if address is not None or pin != "none":
            raise SpecbenchError("--address and --pin apply to --executor ray")
        chosen = LocalExecutor(models_cache, status=view.tick)
    try:
        outcome = run_plan(plan, results_dir, chosen, progress, run_id=run_id, clean=clean,
                           resume=None if resume is None else resolve_run_dir(resume))
    finally:
        view.close()
    # After Ctrl-C, exit promptly: tables now, figures with `specbench report`.
    try:
        comparison = write_report(outcome.run_dir, echo=True, figures=not outcome.interrupted)
    except IncomparableError as exc:
        raise IncomparableError(f"{exc}; the run's records are kept in "
                                f"{outcome.run_dir}") from None
    progress(f"results: {outcome.run_dir}")
    if outcome.exit_code == ExitCode.RUN_FAILED:
        _err("some launches failed; see the table's FAILED notes and the logs in "
             f"{outcome.run_dir / 'logs'}")
    if outcome.exit_code == ExitCode.OK and comparison.unproven:
        _err("vLLM's processes did not prove every launch or pass ran its implementation "
             "(UNPROVEN lines under the table); those passes were left out")
        return int(ExitCode.UNPROVEN)
    if gate and outcome.exit_code in (ExitCode.OK, ExitCode.RUN_FAILED):
        return _gate_and_exit(outcome.run_dir, None, None, None, None, None, inconclusive,
                              False)
    if outcome.exit_code == ExitCode.OK and comparison.parity_violations:
        _err("greedy outputs differ from the baseline where they must not: "
             + ", ".join(comparison.parity_violations))
        return int(ExitCode.PARITY)
    return int(outcome.exit_code)


def _resumed_scenario(resume: Path, scenario: Path | None, run_id: str | None,
                      mde: float | None, budget: float | None, max_cells: int,
                      ) -> tuple[Path | None, Any, Path | None]:
    """The scenario a resumed run continues: the file given, else the run's own file if it is
    still there, else the copy in its manifest (the runner checks that it is unchanged)."""
    from harness.config.scenario import load_scenario, parse_scenario
    from harness.results.store import load_results

    if run_id is not None or mde is not None or budget is not None:
        raise SpecbenchError("--resume continues a run as it was planned: drop --run-id, --mde "
                             "and --budget")
    results = load_results(resume)
    if scenario is None:
        stored = results.manifest.get("scenario_file")
        if stored and Path(stored).is_file():
            scenario = Path(stored)
    if scenario is not None:
        loaded = load_scenario(scenario, max_cells)
        precision = results.manifest["scenario"].get("precision")
        given = loaded.precision.model_dump(mode="json") if loaded.precision else None
        if precision and given != precision:
            # A run started with --mde/--budget/--gate keeps the precision it was given.
            data = loaded.model_dump(mode="json")
            data.update(precision=precision, rounds=results.manifest["scenario"].get("rounds"))
            loaded = parse_scenario(data, str(scenario), max_cells)
        return scenario, loaded, None
    # Relative paths resolve where they did when the run started.
    base = results.manifest.get("plan", {}).get("base_dir")
    accepted = parse_scenario(results.manifest["scenario"], f"{results.path}/manifest.json",
                              max_cells=None)  # its grid was accepted when the run started
    return None, accepted, Path(base) if isinstance(base, str) else None


def _gate_and_exit(run_dir: Path, against: str | None, baselines_dir: Path | None,
                   variant: str | None, junit: Path | None, markdown: Path | None,
                   inconclusive: Inconclusive, force: bool, combine: bool = False) -> int:
    """Judge a stored run, write the gate's files, print the decisions, map the verdict."""
    from harness.present.outputs import gate_run, write_gate_files
    from harness.present.tables import render_gate_terminal

    comparison, result = gate_run(run_dir, against, baselines_dir, variant, force, combine)
    files = write_gate_files(run_dir, comparison, result, junit, markdown,
                             inconclusive_fails=inconclusive == Inconclusive.fails)
    print(render_gate_terminal(result), end="")
    print(f"specbench: gate files: {', '.join(str(f) for f in files)}", file=sys.stderr)
    if result.verdict == "REGRESSION":
        return int(ExitCode.GATE_FAILED)
    if result.verdict == "INCONCLUSIVE":
        return {Inconclusive.passes: 0, Inconclusive.fails: int(ExitCode.GATE_FAILED)}.get(
            inconclusive, int(ExitCode.INCONCLUSIVE))
    return 0


def write_report(run_dir: Path, echo: bool, html: bool = False, figures: bool = True,
                 force: bool = False) -> Any:
    """Write a stored run's outputs (harness.present.outputs) and print its table."""
    from harness.present.outputs import write_outputs

    comparison, text = write_outputs(run_dir, html, figures, force)
    if echo:
        print(text, end="")
    return comparison


@app.command()
def report(
    results: Annotated[Path, typer.Argument(help="A run folder (or results/ for the newest).")],
    markdown: Annotated[bool, typer.Option(help="Print the Markdown copy instead.")] = False,
    html: Annotated[bool, typer.Option(
        "--html", help="Also write report.html: one self-contained page with the tables, "
        "figures, builds, fingerprint and scenario.")] = False,
    force: Annotated[bool, typer.Option(
        help="Compare arms even where their launches ran on unlike nodes (a cluster).")
    ] = False,
) -> int:
    """Re-render the comparison of a stored run from its raw records (tables, figures)."""
    from harness.results.store import resolve_run_dir

    run_dir = resolve_run_dir(results)
    write_report(run_dir, echo=not markdown, html=html, force=force)
    if markdown:
        print((run_dir / "table.md").read_text(), end="")
    if html:
        print(f"specbench: report: {run_dir / 'report.html'}", file=sys.stderr)
    return 0


@app.command()
def compare(
    base: Annotated[Path, typer.Argument(help="Run folder holding the baseline arm.")],
    candidate: Annotated[Path, typer.Argument(help="Run folder holding the candidate arm.")],
    base_variant: Annotated[str | None, typer.Option(
        help="Variant of BASE to use (default: its baseline).")] = None,
    candidate_variant: Annotated[str | None, typer.Option(
        help="Variant of CANDIDATE to use (default: its baseline).")] = None,
    force: Annotated[bool, typer.Option(
        help="Compare even if environments or workloads differ.")] = False,
    markdown: Annotated[bool, typer.Option(help="Print Markdown instead.")] = False,
) -> int:
    """Compare two stored runs (e.g. the same scenario on two git checkouts)."""
    from harness.analysis.compare import compare_runs
    from harness.present.tables import render_markdown, render_terminal
    from harness.results.store import load_results

    a, b = load_results(base), load_results(candidate)
    comparison = compare_runs(a, b, base_variant, candidate_variant, force)
    if markdown:
        print(render_markdown(comparison, a.manifest.get("fingerprint")), end="")
    else:
        print(render_terminal(comparison), end="")
    return 0


@app.command()
def plan(
    scenario: ScenarioArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    from_run: Annotated[Path | None, typer.Option(
        "--from", help="A stored run of this scenario: forecast the blocks and wall time a "
        "minimum detectable effect needs, from its noise and timings.")] = None,
    mde: Annotated[float | None, typer.Option(
        help="Target MDE for --from (default: the scenario's precision.mde, or 0.01).")] = None,
    results_dir: ResultsOpt = Path("results"),
    max_cells: MaxCellsOpt = None,
) -> int:
    """Show what `run` would launch (a sweep: its cells), and how long it will take, timed
    from a stored run (--from, else the newest run of this scenario in --results-dir);
    nothing runs."""
    from harness.config.scenario import MAX_CELLS, load_scenario
    from harness.plan.plan import expand_plan
    from harness.plan.preflight import preflight

    loaded = load_scenario(scenario, max_cells or MAX_CELLS)
    expanded = expand_plan(loaded, scenario_file=scenario)
    # What run would refuse before any engine, hardware aside (plans travel between machines).
    preflight(loaded, expanded, Path(expanded.base_dir), hardware=False)
    if as_json:
        print(expanded.model_dump_json(indent=2))
        return 0
    print(f"scenario {expanded.scenario_name} ({expanded.scenario_hash}): baseline "
          f"{expanded.baseline}, candidates {', '.join(expanded.candidates)}")
    print(f"  {loaded.describe_setup()}")
    precision = loaded.precision
    target = ("" if precision is None else
              f"; precision: MDE ±{100 * precision.mde:g}%" if precision.mde is not None
              and precision.until == "mde" else "; precision: until every gate can decide")
    print(f"  design: {expanded.design}{target}"
          + (f" within {precision.budget_s:g} s" + (" per cell" if expanded.cells else "")
             if precision else ""))
    for name, lines in expanded.overlays.items():
        change = loaded.variants[name].change
        print(f"  variants.{name}.{change}: {getattr(loaded.variants[name], str(change))}")
        for line in lines:
            print(f"    {line}")
    if expanded.cells:
        axes = loaded.sweep.paths if loaded.sweep else []
        print(f"  sweep: {len(expanded.cells)} cells over {', '.join(axes)}; launches in an "
              "order that spreads drift (the cells shuffled anew each round)")
        for cell in expanded.cells:
            print(f"    {cell.id}: {cell.label}")
    for r in expanded.runs:
        impl = (f" impl={r.implementation}" if r.implementation else "") + (
            f" patch={r.patch}" if r.patch else "") + (f" python={r.python}" if r.python else "")
        spec = r.engine_args.get("speculative_config")
        spec_text = f" spec={json.dumps(spec, sort_keys=True)}" if spec else ""
        what = (f"{r.blocks} block(s) of {' '.join(r.block_order)}"
                + (" (at least)" if r.precision else "")
                if r.design == "one-engine" else f"{r.repeats} pass(es)")
        print(f"  {r.order + 1:>3}. {r.run_key:<24} {what} x "
              f"{r.workload.num_prompts} prompts{impl}{spec_text}")
    from harness.analysis.forecast import describe_wall, estimate_wall, newest_run_of
    from harness.results.store import load_results, resolve_run_dir

    stored = (load_results(resolve_run_dir(from_run)) if from_run is not None
              else newest_run_of(results_dir, loaded.name))
    if stored is None:
        print(f"  wall time: unknown until a run of {loaded.name} exists to time it from "
              f"(none in {results_dir}; or give --from RUN)")
    else:
        print(f"  {describe_wall(estimate_wall(expanded, stored))}")
    if from_run is not None and stored is not None and not expanded.cells:
        from harness.analysis.forecast import describe, forecast

        target_mde = mde or (loaded.precision.mde if loaded.precision else None) or 0.01
        for line in describe(forecast(stored, target_mde)):
            print(f"  {line}")
    return 0


@app.command("gate")
def gate_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (or results/ for the newest).")],
    against: Annotated[str | None, typer.Option(
        help="A saved baseline (name or folder): gate this run's variant against it instead "
        "of its own candidates against its baseline.")] = None,
    variant: Annotated[str | None, typer.Option(
        help="With --against: the variant of RUN_DIR to gate (default: its baseline).")] = None,
    baselines_dir: Annotated[Path | None, typer.Option(
        help="Where saved baselines live (default: baselines/).")] = None,
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the Markdown here.")] = None,
    inconclusive: InconclusiveOpt = Inconclusive.inconclusive,
    force: Annotated[bool, typer.Option(
        help="With --against: gate even if environments or workloads differ.")] = False,
    combine: Annotated[bool, typer.Option(
        "--combine", help="Decide on this run and every earlier run of the same comparison "
        "(same scenario, builds and machine, in the same results folder) together, each run "
        "a launch, instead of on this run alone.")] = False,
) -> int:
    """Decide PASS, REGRESSION or INCONCLUSIVE per gated metric of a stored run."""
    from harness.results.store import resolve_run_dir

    return _gate_and_exit(resolve_run_dir(run_dir), against, baselines_dir, variant, junit,
                          markdown, inconclusive, force, combine)


@app.command()
def calibrate(
    scenario: ScenarioArg,
    false_alarm: Annotated[float, typer.Option(
        min=0.0001, max=0.5, help="Chance that an unchanged candidate is called a REGRESSION.")]
    = 0.01,
    results_dir: ResultsOpt = Path("results"),
    models_cache: CacheOpt = None,
) -> int:
    """Run SCENARIO as an A/A (the baseline in both arms) and print a `gates:` block whose
    tolerances its measured noise supports."""
    from harness.analysis.calibrate import calibrate as run_calibration
    from harness.analysis.calibrate import gates_yaml
    from harness.config.scenario import load_scenario

    spec = load_scenario(scenario)
    if spec.sweep is not None:
        raise SpecbenchError(f"{scenario}: calibrate runs one A/A; this scenario is a sweep "
                             "(calibrate a scenario without sweep:)")

    def progress(message: str) -> None:
        print(f"specbench: {message}", file=sys.stderr, flush=True)

    run_dir, tolerances = run_calibration(spec, scenario, results_dir, models_cache, progress,
                                          false_alarm)
    write_report(run_dir, echo=False)
    print(gates_yaml(spec, tolerances, false_alarm, run_dir), end="")
    return 0


baseline_app = typer.Typer(no_args_is_help=True, help="Saved reference runs for gates.")
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
def baseline_save(
    run_dir: Annotated[Path, typer.Argument(help="A complete run folder.")],
    name: Annotated[str, typer.Option(help="Name of the saved baseline.")],
    baselines_dir: Annotated[Path | None, typer.Option(
        help="Where saved baselines live (default: baselines/).")] = None,
) -> int:
    """Save a run as a self-contained reference folder (manifest and raw run records)."""
    from harness.results.store import DEFAULT_BASELINES, resolve_run_dir, save_baseline

    path = save_baseline(resolve_run_dir(run_dir), name, baselines_dir or DEFAULT_BASELINES)
    print(f"saved baseline {name!r}: {path}")
    return 0


@app.command()
def schema() -> int:
    """Print the JSON Schema of scenario files."""
    from harness.config.scenario import scenario_json_schema

    print(json.dumps(scenario_json_schema(), indent=2))
    return 0


@app.command()
def implementations() -> int:
    """List the implementations a variant can swap inside vLLM's workers (the registry)."""
    from harness.engine.swaps import SWAPS

    for name, swap in SWAPS.items():
        print(f"{name}  (methods: {', '.join(swap.methods)}; vLLM {swap.vllm})")
        for choice, text in swap.choices.items():
            forced = swap.forces.get(choice)
            extra = f" [sets {', '.join(f'{k}={v}' for k, v in forced.items())}]" \
                if forced else ""
            print(f"  {name}:{choice:<10} {text}{extra}")
    return 0


@app.command()
def doctor() -> int:
    """What this machine can run: vLLM, torch, platform, devices, usable methods and swaps."""
    from harness.doctor import doctor_lines

    for line in doctor_lines():
        print(line)
    return 0


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
        raise SpecbenchError(f"unknown built-in model(s): {', '.join(unknown)} (known: "
                             f"{', '.join(BUILTIN_MODELS)})")
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
