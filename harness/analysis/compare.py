"""Baseline vs each candidate of one run: every metric with its uncertainty on the design's
independent unit, output parity, what ran (proof), what failed.

Input is a Run (or, for a sweep cell or combined runs, the launches' records with the per-pass
frame); output is a Comparison (harness.analysis.comparison). No formatting here.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import pandas as pd

from harness.analysis.adjusted import KEY as ADJUSTED_KEY
from harness.analysis.adjusted import adjusted_row, declared_part
from harness.analysis.attribution import attribute
from harness.analysis.budget import LaunchStop, launch_stop
from harness.analysis.categories import (
    category_frame,
    compare_categories,
    has_categories,
    requests_per_category,
)
from harness.analysis.comparison import (
    CandidateResult,
    Comparison,
    MetricRow,
    ProfileTable,
    Warmup,
)
from harness.analysis.contention import machine_load
from harness.analysis.metric_row import compare_metric
from harness.analysis.parity import output_parity
from harness.analysis.profiles import arm_profiles, op_deltas
from harness.analysis.proof import Unproven, ran_paths, unproven_passes
from harness.analysis.setup import Setup
from harness.analysis.speedup import decompose
from harness.analysis.stats import Design, holm
from harness.config.catalog import parse_implementation
from harness.config.engine_args import engine_args_for
from harness.config.scenario import PART_ROWS, Scenario, part_of_module
from harness.config.swaps import SWAPS
from harness.env import COMPAT_FIELDS, fingerprint_differences
from harness.errors import IncomparableError, ProofRefused, ResultsError
from harness.results.metrics import (
    METRICS,
    MetricDef,
    chosen_percentiles,
    passes_frame,
    position_metric,
    position_metrics,
)
from harness.results.run import Run
from harness.wire.overlay import OverlaySpec, overlaid_functions
from harness.wire.platform import kv_capacity_differs
from harness.wire.protocol import PROFILES_DIR
from harness.wire.records import RunRecord
from harness.wire.spec import RunSpec


def _failures(runs: list[RunRecord], variant: str) -> list[str]:
    """Launches of `variant` that did not complete; a shared launch is a failure of every arm
    it hosted."""
    return [
        f"{r.run_key}: {r.status}: {r.error}"
        for r in runs
        if variant in r.arms and r.status != "ok"
    ]


# The table's stars: the primary metric's row alone at ALPHA; the other noisy rows after it.
ALPHA = 0.05


def mark_family(rows: list[MetricRow], primary: str) -> None:
    """Each row's place in the family of tests behind the table's stars, in place. The
    primary metric's row is tested alone at 5%. The other rows with a p-value are secondary:
    starred only when the primary row is (a serial gatekeeper), at Holm-adjusted 5% across
    them, so the stars of one candidate's column are wrong together at most 5% of the time
    (strong family-wise control). Without a primary row (not estimated), the secondary rows
    are Holm-adjusted alone. Rows known exactly (the same in every unit) are not tested."""
    main = next((r for r in rows if r.key == primary and not r.estimate.known_exactly), None)
    if main is not None:
        main.role, main.starred = "primary", main.estimate.significant
    open_gate = main is None or main.estimate.significant
    secondary = []
    for row in rows:
        if row is main:
            continue
        if row.estimate.known_exactly:
            row.role, row.starred = "exact", False
        else:
            row.role, row.starred = "secondary", False
            if row.estimate.p_value is not None and math.isfinite(row.estimate.p_value):
                secondary.append(row)
    for row, adjusted in zip(
        secondary, holm([r.estimate.p_value or 1.0 for r in secondary]), strict=True
    ):
        row.adjusted_p = adjusted
        row.starred = open_gate and adjusted < ALPHA


def running_estimate(
    passes: pd.DataFrame,
    baseline: str,
    candidate: str,
    metric_key: str,
    design: str,
    every: int = 4,
) -> pd.DataFrame:
    """A one-engine delta as the blocks came in: the estimate and its 95% interval from each
    launch's first k blocks, for k = every, 2 * every, ... and the last block (where it is the
    table's estimate over the same passes). One row per k: blocks, delta, ci_low, ci_high,
    mde. Empty for launch-per-arm runs (their unit is a launch, not a block)."""
    columns = ["blocks", "delta", "ci_low", "ci_high", "mde"]
    metric = next((m for m in METRICS if m.key == metric_key), None)
    if design != "one-engine" or metric is None or passes.empty or passes["block"].isna().all():
        return pd.DataFrame(columns=columns)
    both = passes[passes["variant"].isin([baseline, candidate])]
    last = int(both["block"].max()) + 1
    rows = []
    for k in sorted({*range(every, last, every), last}):
        row = compare_metric(metric, both[both["block"] < k], baseline, candidate, "one-engine")
        if row is not None and row.estimate.ci_low is not None:
            est = row.estimate
            rows.append(
                {
                    "blocks": k,
                    "delta": est.delta,
                    "ci_low": est.ci_low,
                    "ci_high": est.ci_high,
                    "mde": est.mde,
                }
            )
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class Arms:
    """What a comparison knows of its arms beyond their records: which is the baseline, what
    each must prove it ran, how its outputs and acceptance are read, which row is primary.
    Built from a scenario (Arms.of), a shared launch (Arms.of_launch: the precision look in
    the worker), two runs' variants (Arms.across); by hand only in tests."""

    baseline: str
    candidates: list[str]
    # Arm -> what its vLLM processes must prove they ran ('name:choice', 'patch:...').
    implementations: dict[str, str | None] = field(default_factory=dict)
    greedy: bool = True  # outputs compared per prompt (temperature 0)
    expect_identical: dict[str, bool] = field(default_factory=dict)  # outputs must match
    design: Design = "launch-per-arm"
    tp_sizes: dict[str, int] = field(default_factory=dict)  # processes that must report
    no_speculation: str | None = None  # the arm without speculation, if any
    draft_tokens: dict[str, int] = field(default_factory=dict)  # k of each speculative arm
    primary_metric: str = "output_throughput"  # the row tested alone at 5%
    exact_parity: bool = True  # greedy outputs must repeat bit for bit (Parity.exact)

    @classmethod
    def of(
        cls, scenario: Scenario, design: Design, labels: dict[str, str | None] | None = None
    ) -> Arms:
        """The arms as `scenario` declares them. `labels`: what each arm must prove it ran,
        where the plan decided it (default: the scenario's swaps)."""
        return cls(
            baseline=scenario.baseline,
            candidates=list(scenario.candidates),
            implementations=labels or {n: v.proof_label for n, v in scenario.variants.items()},
            greedy=scenario.workload.temperature == 0.0,
            expect_identical={
                n: scenario.expects_identical_outputs(n) for n in scenario.candidates
            },
            design=design,
            tp_sizes=tp_sizes(scenario),
            no_speculation=scenario.no_speculation_arm,
            draft_tokens=draft_tokens(scenario),
            primary_metric=scenario.primary_metric,
            exact_parity=scenario.exact_parity,
        )

    @classmethod
    def of_launch(cls, run: RunSpec, tp_size: int) -> Arms:
        """The arms a shared (one-engine) launch hosts, as its worker knows them."""
        base = next(a for a in run.arms if a.baseline)
        return cls(
            baseline=base.variant,
            candidates=[a.variant for a in run.arms if not a.baseline],
            implementations={a.variant: a.implementation for a in run.arms},
            greedy=False,
            design="one-engine",
            tp_sizes={a.variant: tp_size for a in run.arms},
        )

    @classmethod
    def across(
        cls, base: Arms, base_arm: str, base_label: str, cand: Arms, cand_arm: str, cand_label: str
    ) -> Arms:
        """One arm of one run (`base`'s) against one arm of another, relabelled; each launch
        its own unit. The primary metric is the base run's."""
        return cls(
            baseline=base_label,
            candidates=[cand_label],
            implementations={
                base_label: base.implementations.get(base_arm),
                cand_label: cand.implementations.get(cand_arm),
            },
            greedy=base.greedy,
            design="launch-per-arm",
            tp_sizes={
                base_label: base.tp_sizes.get(base_arm, 1),
                cand_label: cand.tp_sizes.get(cand_arm, 1),
            },
            primary_metric=base.primary_metric,
        )


def _proven_passes(
    runs: list[RunRecord], arms: Arms, passes: pd.DataFrame | None
) -> tuple[pd.DataFrame, dict[str, int], list[Unproven]]:
    """The passes whose vLLM processes proved their arm's implementation, how many were
    discarded per arm, and the launches with unproven ones."""
    unproven: list[Unproven] = []
    bad: dict[tuple[str, int], str] = {}
    for variant in [arms.baseline, *arms.candidates]:
        found, lines = unproven_passes(
            runs, variant, arms.implementations.get(variant), arms.tp_sizes.get(variant, 1)
        )
        bad.update(found)
        unproven += lines
    unproven += [Unproven(r.run_key, r.error or "") for r in runs if ProofRefused.refused(r.error)]
    if passes is None:
        passes = passes_frame(runs)
    discarded: dict[str, int] = {}
    if bad and not passes.empty:
        unproven_rows = [k in bad for k in zip(passes["run_key"], passes["repeat"], strict=True)]
        dropped = passes[unproven_rows]
        discarded = {str(k): int(v) for k, v in dropped.groupby("variant").size().items()}
        passes = passes[[not u for u in unproven_rows]]
    return passes, discarded, unproven


def _metrics_of(passes: pd.DataFrame, only: Collection[str] | None) -> list[MetricDef]:
    """The metrics to estimate: the seed rows, the scenario's chosen latency percentiles after
    them, the per-position rows; only those matching `only` where given."""
    metrics = list(METRICS)
    after = next(i for i, m in enumerate(metrics) if m.key == "p99_e2el_ms") + 1
    metrics[after:after] = chosen_percentiles(passes.columns)
    metrics += [
        position_metric(col) for col in (position_metrics(passes) if not passes.empty else [])
    ]
    if only is not None:
        metrics = [m for m in metrics if any(fnmatchcase(m.key, p) for p in only)]
    return metrics


def _fill_candidate(
    cand: CandidateResult,
    runs: list[RunRecord],
    passes: pd.DataFrame,
    arms: Arms,
    metrics: list[MetricDef],
) -> None:
    """A candidate that ran, and whose baseline ran: its rows, family marks and (greedy) output
    parity (present words a parity that must hold and does not as a warning)."""
    baseline, name = arms.baseline, cand.name
    for metric in metrics:
        row = (
            adjusted_row(
                passes,
                baseline,
                name,
                declared_part(arms.implementations.get(name)),
                arms.design,
                robust=any(r.estimate.robust for r in cand.rows if r.key == "output_throughput"),
            )
            if metric.key == ADJUSTED_KEY
            else compare_metric(
                metric,
                passes,
                baseline,
                name,
                arms.design,
                one_side_may_lack=arms.no_speculation in (baseline, name),
            )
        )
        if row is not None:
            cand.rows.append(row)
    mark_family(cand.rows, arms.primary_metric)
    if arms.greedy:
        cand.parity = output_parity(
            runs, baseline, name, arms.expect_identical.get(name, False), arms.exact_parity
        )


def _stops_and_warmups(runs: list[RunRecord]) -> tuple[list[LaunchStop], list[Warmup]]:
    """Per launch, in run order: why its measuring stopped early, and how long it warmed up."""
    ordered = sorted(runs, key=lambda r: r.order)
    stops = [s for s in map(launch_stop, ordered) if s is not None]
    warmups = [
        Warmup(r.run_key, r.result.warmup_blocks, r.result.warmup_capped)
        for r in ordered
        if r.result is not None and r.result.warmup_blocks
    ]
    return stops, warmups


def compare_records(
    runs: list[RunRecord],
    arms: Arms,
    run_id: str,
    scenario: str,
    passes: pd.DataFrame | None = None,
    only: Collection[str] | None = None,
) -> Comparison:
    """Compare every candidate with the baseline over the given launches, as `arms` declares
    them. With a greedy workload, outputs are compared per prompt; `arms.expect_identical`
    names the candidates whose outputs must match the baseline's exactly. Passes whose vLLM
    processes did not prove the arm's implementation are left out of every number and listed
    in `unproven`. `passes`: the launches' per-pass frame when the caller holds it (a Run's),
    else built here. `only`: the metrics to estimate (fnmatch patterns, e.g. a precision
    look's targets), not all. `arms.no_speculation`: the arm without speculation (its
    acceptance rows are '—'; a baseline without speculation leaves the candidates' acceptance
    without a delta); with it, each speculative arm's speedup over it and where it goes.
    `arms.primary_metric`: the row tested alone at 5%; the others are secondary
    (mark_family)."""
    baseline, candidates, design = arms.baseline, arms.candidates, arms.design
    implementations = arms.implementations
    no_speculation, primary_metric = arms.no_speculation, arms.primary_metric
    passes, discarded, unproven = _proven_passes(runs, arms, passes)
    mixed_workloads = not passes.empty and bool(passes["workload_hash"].nunique() > 1)

    def status(variant: str) -> str:
        has_ok = not passes.empty and (passes["variant"] == variant).any()
        return "ok" if has_ok else "failed"

    metrics = _metrics_of(passes, only)
    results = []
    for name in candidates:
        cand = CandidateResult(
            name=name,
            status=status(name),
            implementation=implementations.get(name),
            ran=ran_paths(runs, name),
            failures=_failures(runs, name),
        )
        if cand.status == "ok" and status(baseline) == "ok":
            _fill_candidate(cand, runs, passes, arms, metrics)
        results.append(cand)
    per_arm = passes.groupby("variant").size().to_dict() if not passes.empty else {}
    stops, warmups = _stops_and_warmups(runs)
    comparison = Comparison(
        run_id=run_id,
        scenario=scenario,
        baseline=baseline,
        baseline_status=status(baseline),
        baseline_ran=ran_paths(runs, baseline),
        baseline_implementation=implementations.get(baseline),
        candidates=results,
        baseline_failures=_failures(runs, baseline),
        passes_per_arm={str(k): int(v) for k, v in per_arm.items()},
        mixed_workloads=mixed_workloads,
        design=design,
        discarded=discarded,
        unproven=unproven,
        stops=stops,
        warmups=warmups,
        no_speculation=no_speculation,
        primary_metric=primary_metric,
    )
    if has_categories(runs) and status(baseline) == "ok":
        keep = set(zip(passes["run_key"], passes["repeat"], strict=True))
        frame = category_frame(runs, keep)
        comparison.categories = compare_categories(
            frame, baseline, [c.name for c in results if c.status == "ok"], design
        )
        comparison.category_requests = requests_per_category(frame)
    if status(baseline) == "ok" and only is None:  # (a precision look reads its rows only)
        for cand in (c for c in results if c.status == "ok"):
            split = attribute(passes, baseline, cand.name, design)
            if split is not None:
                comparison.attributions.append(split)
    if no_speculation is not None and status(no_speculation) == "ok":
        add_speedups(
            comparison,
            passes,
            no_speculation,
            {arm: k for arm, k in arms.draft_tokens.items() if status(arm) == "ok"},
            design,
        )
    return comparison


def node_differences(runs: list[RunRecord], baseline: str, candidates: list[str]) -> list[str]:
    """Arms whose launches ran on unlike nodes (a cluster executor's records carry each node's
    fingerprint): 'baseline vs cand: cpu_model (...) differ', naming the fields. Launches on
    this machine (no node) are alike by construction."""

    def nodes(variant: str) -> list[dict[str, Any]]:
        return [
            r.node.get("fingerprint") or {}
            for r in runs
            if r.node is not None and r.status == "ok" and variant in r.arms
        ]

    problems = []
    first = nodes(baseline)
    for name in [baseline, *candidates]:
        for fp in nodes(name):
            diffs = fingerprint_differences(first[0], fp, COMPAT_FIELDS) if first else []
            if diffs:
                problems.append(
                    f"{baseline} vs {name}: launches ran on unlike nodes: " + ", ".join(diffs)
                )
                break
    return problems


def compare_scenario(
    runs: list[RunRecord],
    scenario: Scenario,
    run_id: str,
    design: Design,
    force: bool = False,
    labels: dict[str, str | None] | None = None,
    passes: pd.DataFrame | None = None,
) -> Comparison:
    """Compare the variants of `scenario` (a whole run, or one sweep cell) over `runs`.
    Refuses (IncomparableError) arms that ran on unlike nodes, unless forced. `labels`: what
    each arm must prove it ran, where the plan decided it (default: the scenario's swaps).
    `passes`: these launches' per-pass frame when the caller holds it."""
    unlike = node_differences(runs, scenario.baseline, scenario.candidates)
    if unlike and not force:
        raise IncomparableError(
            "; ".join(unlike) + " (pin the arms to one node with --pin "
            "node, or compare anyway with specbench report --force)"
        )
    comparison = compare_records(
        runs, Arms.of(scenario, design, labels), run_id, scenario.name, passes
    )
    comparison.setup = Setup.of(scenario)
    comparison.platforms = {
        r.run_key: r.result.platform.model_copy(update={"rank": None})
        for r in runs
        if r.result is not None and r.result.platform is not None
    }
    told = sorted(
        {
            r.result.prompts_as
            for r in runs
            if r.result is not None and r.result.prompts_as is not None
        }
    )
    comparison.prompts = told
    comparison.kv_blocks = kv_capacity_differs(
        {
            r.run_key: (r.variant, r.result.platform if r.result else None)
            for r in runs
            if len(r.arms) <= 1
        }
    )
    comparison.interpreted = any(
        r.result.platform.interpreted
        for r in runs
        if r.result is not None and r.result.platform is not None
    )
    comparison.left_out = list(
        dict.fromkeys(x for r in runs if r.result is not None for x in r.result.left_out)
    )
    comparison.load = machine_load(runs, scenario.baseline)
    comparison.unrealistic_acceptance = scenario.unrealistic_acceptance
    comparison.compared_anyway.extend(unlike)
    launches = {r.order for r in runs if r.status == "ok"}
    if design == "one-engine" and len(launches) == 1 and scenario.tensor_parallel_size > 1:
        comparison.tp_in_one_launch = scenario.tensor_parallel_size
    mark_own_parts(comparison, scenario)  # compare_run adds what its overlay says
    return comparison


def add_speedups(
    comparison: Comparison,
    passes: pd.DataFrame,
    reference: str,
    draft_tokens: dict[str, int],
    design: Design,
) -> None:
    """Each speculative arm's output throughput over the no-speculation arm's (the 'Speedup
    vs no speculation' row, on the design's unit), and where it goes (from step times).
    `draft_tokens`: k of each speculative arm."""
    throughput = next(m for m in METRICS if m.key == "output_throughput")
    for arm, k in draft_tokens.items():
        row = compare_metric(throughput, passes, reference, arm, design)
        if row is None:
            continue
        comparison.speedups[arm] = row.estimate
        found = decompose(passes, arm, reference, k)
        if found is not None:
            comparison.decompositions.append(found)


def mark_own_parts(
    comparison: Comparison, scenario: Scenario, overlay: OverlaySpec | None = None
) -> None:
    """Each candidate's own part (CandidateResult.own_part): the row of the part of the step
    its change runs in, where that is known: its swap's declared part, or the part every
    function its overlay replaces runs in (config.scenario.part_of_module). Marks only."""
    for cand in comparison.candidates:
        variant = scenario.variants.get(cand.name)
        part: str | None = None
        why: str | None = None
        base = scenario.variants.get(comparison.baseline)
        if (
            variant is not None
            and variant.implementation
            and (base is None or base.implementation != variant.implementation)
        ):
            # (the same choice in both arms, an A/A, changes nothing)
            name = parse_implementation(variant.implementation)[0]
            swap = SWAPS.get(name)
            if swap is not None and swap.part is not None:
                part, why = (
                    swap.part,
                    f"the swap {name} changes it"
                    + (f"; {swap.part_leaves_out}" if swap.part_leaves_out else ""),
                )
        arm = next(
            (
                a
                for a in (overlay.arms if overlay else [])
                if a.variant == cand.name and a.change is not None
            ),
            None,
        )
        if arm is not None:
            modules = sorted({c.module for c in arm.code if c.kind == "function"})
            parts = {part_of_module(m) for m in modules}
            part, why = (
                (parts.pop(), "its overlay's functions run there (" + ", ".join(modules) + ")")
                if len(parts) == 1 and None not in parts
                else (None, None)
            )
        row = PART_ROWS.get(part or "")
        if row is not None and any(r.key == row for r in cand.rows):
            cand.own_part, cand.own_part_why = row, why


def profile_tables(run: Run, comparison: Comparison, top: int) -> list[ProfileTable]:
    """Per candidate, the ops whose self time per pass differs most from the baseline's, from
    the run's traces (analysis.profiles), with each arm's profiled and measured pass times."""
    found = arm_profiles(run.path, run.runs)
    base = found.get(comparison.baseline)
    if base is None:
        return []
    frame = run.passes
    measured = (
        {str(k): float(v) for k, v in frame.groupby("variant")["duration_s"].median().items()}
        if not frame.empty
        else {}
    )
    keys = sorted({r.run_key for r in run.runs if r.result and r.result.profiled})
    out = []
    for cand in comparison.candidates:
        prof = found.get(cand.name)
        if prof is None:
            continue
        arms = (comparison.baseline, cand.name)
        out.append(
            ProfileTable(
                candidate=cand.name,
                baseline=comparison.baseline,
                passes={a: found[a].passes for a in arms},
                pass_s={a: found[a].pass_s for a in arms},
                measured_s={a: measured[a] for a in arms if a in measured},
                traces=", ".join(f"{PROFILES_DIR}/{k}/" for k in keys),
                rows=op_deltas(base, prof, top),
            )
        )
    return out


def compare_run(
    run: Run, force: bool = False, records: list[RunRecord] | None = None
) -> Comparison:
    """Compare the variants of one stored run, as its scenario declared them (a sweep: see
    harness.analysis.sweep_comparison, one comparison per cell). `records`: launches to
    compare in place of the run's own, under its scenario and builds (its repeats combined:
    harness.analysis.repeats)."""
    if run.is_sweep:
        assert run.scenario.sweep is not None
        raise ResultsError(
            f"{run.path}: a sweep of {run.scenario.sweep.cell_count} cells; "
            "compare it with compare_sweep (one comparison per cell)"
        )
    comparison = compare_scenario(
        run.runs if records is None else records,
        run.scenario,
        run.run_id,
        run.design,
        force,
        run.proof_labels,
        run.passes if records is None else None,
    )
    comparison.builds = run.builds_of({n: n for n in run.scenario.variants})
    overlay = run.manifest.plan.overlay()
    comparison.overlays = overlaid_functions(overlay) if overlay is not None else {}
    mark_own_parts(comparison, run.scenario, overlay)
    if run.scenario.profile is not None and records is None:
        comparison.profiles = profile_tables(run, comparison, run.scenario.profile.top)
    if records is None and run.design == "one-engine":
        for cand in comparison.candidates:
            frame = running_estimate(
                run.passes, comparison.baseline, cand.name, "output_throughput", run.design
            )
            comparison.running[cand.name] = frame.to_dict("records")
    return comparison


def draft_tokens(scenario: Scenario) -> dict[str, int]:
    """k (num_speculative_tokens) of each arm that speculates."""
    found = {}
    for name in scenario.variants:
        spec = engine_args_for(scenario, name).get("speculative_config")
        if spec is not None:
            found[name] = int(spec.get("num_speculative_tokens", 0))
    return found


def tp_sizes(scenario: Scenario) -> dict[str, int]:
    """Tensor-parallel ranks each variant runs with: how many processes must report."""
    return {
        name: int(engine_args_for(scenario, name).get("tensor_parallel_size", 1))
        for name in scenario.variants
    }
