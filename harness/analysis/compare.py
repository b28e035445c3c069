"""Baseline vs each candidate: every metric with its uncertainty, output parity, what ran.

Input is raw RunRecords (one results folder, or several checked for comparability); output is
a Comparison that report.py renders and gate.py judges. No formatting here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.metrics import (
    METRICS,
    MetricDef,
    passes_frame,
    position_metrics,
)
from harness.analysis.proof import proof_problems
from harness.analysis.stats import DeltaEstimate, Design, arm_delta
from harness.config.scenario import Scenario, parse_scenario
from harness.env import BUILD_FIELDS, COMPAT_FIELDS, MACHINE_FIELDS, fingerprint_differences
from harness.errors import IncomparableError, ResultsError
from harness.plan.plan import engine_args_for
from harness.results.records import PassRecord, RunRecord
from harness.results.store import RunResults


@dataclass
class MetricRow:
    """One metric for one candidate."""

    key: str
    label: str
    higher_is_better: bool
    baseline: float
    candidate: float
    estimate: DeltaEstimate

    @property
    def improved(self) -> bool | None:
        """True/False when the delta is significant; None when it is not."""
        if not self.estimate.significant:
            return None
        return (self.estimate.delta > 0) == self.higher_is_better


@dataclass
class Parity:
    """Greedy output parity of a candidate against the baseline's first pass."""

    compared: int  # (pass, prompt) pairs compared
    identical: int
    first_divergence: int | None  # earliest token position where any output differs
    baseline_self_identical: float | None  # baseline passes vs its own first pass
    expected: bool = False  # the scenario says outputs must be identical

    @property
    def fraction(self) -> float:
        return self.identical / self.compared if self.compared else float("nan")

    @property
    def violated(self) -> bool:
        return self.expected and self.identical < self.compared


@dataclass
class CandidateResult:
    name: str
    status: str  # "ok", or "failed" when no launch of this variant completed
    rows: list[MetricRow] = field(default_factory=list)
    parity: Parity | None = None
    implementation: str | None = None
    ran: list[str] = field(default_factory=list)  # code paths the workers reported
    failures: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    run_id: str
    scenario: str
    baseline: str
    baseline_status: str
    baseline_ran: list[str]
    baseline_implementation: str | None
    candidates: list[CandidateResult]
    baseline_failures: list[str]
    passes_per_arm: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    setup: str = ""
    design: str = "launch-per-arm"
    # Passes left out because their vLLM processes did not prove the arm's path, per arm.
    discarded: dict[str, int] = field(default_factory=dict)
    # Launches or passes whose implementation was not proven: `run` exits non-zero.
    unproven: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # why precision launches ended
    warmups: list[str] = field(default_factory=list)  # each shared launch's checked warm-up
    # Arm -> the vLLM build it ran under, one line (harness.plan.builds.describe).
    builds: dict[str, str] = field(default_factory=dict)
    # Arm -> its own change overlaid on vLLM's functions, one line (harness.plan.overlay).
    overlays: dict[str, str] = field(default_factory=dict)

    @property
    def parity_violations(self) -> list[str]:
        return [c.name for c in self.candidates if c.parity is not None and c.parity.violated]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for cand, raw in zip(self.candidates, data["candidates"], strict=True):
            for row, raw_row in zip(cand.rows, raw["rows"], strict=True):
                raw_row["improved"] = row.improved
            if cand.parity is not None:
                raw["parity"]["fraction"] = cand.parity.fraction
                raw["parity"]["violated"] = cand.parity.violated
        return data


def arm_passes(runs: list[RunRecord], variant: str) -> list[tuple[RunRecord, PassRecord]]:
    """The passes of `variant` in successful launches, whichever the design (one-engine
    passes name their arm; launch-per-arm passes belong to their launch's variant)."""
    return [(run, p) for run in sorted(runs, key=lambda r: r.order)
            if run.status == "ok" and run.result is not None
            for p in run.result.passes if (p.arm or run.variant) == variant]


def _ran(runs: list[RunRecord], variant: str) -> list[str]:
    paths = set()
    for run in runs:
        if run.result is None:
            continue
        if run.variant == variant:
            paths |= {f"{rep.implementation}:{rep.choice} -> {rep.path}"
                      for rep in run.result.impl_reports}
        for p in run.result.passes:
            if p.arm == variant:
                paths |= {f"{rep.implementation}:{rep.choice} -> {path}"
                          for rep in p.impl_reports or [] for path in rep.paths}
    return sorted(paths)


def unproven_passes(runs: list[RunRecord], variant: str, implementation: str | None,
                    tp_size: int) -> tuple[dict[tuple[str, int], str], list[str]]:
    """Passes of `variant` whose vLLM processes did not prove its implementation ran:
    (run_key, repeat) -> why, and one line per launch for the table. One-engine passes carry
    their own reports; a launch-per-arm launch is judged, all its passes alike, on its own."""
    bad: dict[tuple[str, int], str] = {}
    lines: list[str] = []
    if implementation is None:
        return bad, lines
    for run, p in arm_passes(runs, variant):
        assert run.result is not None
        if p.arm is None:
            continue
        problems = proof_problems(p.impl_reports, implementation, tp_size,
                                  run.result.worker_pid)
        if problems:
            bad[(run.run_key, p.repeat)] = "; ".join(problems)
    for run in runs:
        if run.variant != variant or run.status != "ok" or run.result is None:
            continue
        if any(p.arm for p in run.result.passes):
            continue  # a shared launch: judged pass by pass above
        problems = proof_problems(run.result.impl_reports, implementation, tp_size,
                                  run.result.worker_pid)
        if problems:
            lines.append(f"{run.run_key}: {'; '.join(problems)}")
            bad.update({(run.run_key, p.repeat): "; ".join(problems)
                        for p in run.result.passes})
    by_launch: dict[str, list[str]] = {}
    for (key, repeat), why in bad.items():
        if not any(line.startswith(f"{key}:") for line in lines):
            by_launch.setdefault(key, []).append(f"pass {repeat}: {why}")
    lines += [f"{key}: {variant}: {len(items)} pass(es) unproven (first: {items[0]})"
              for key, items in by_launch.items()]
    return bad, lines


def _failures(runs: list[RunRecord], variant: str) -> list[str]:
    """Launches of `variant` that did not complete; a shared launch (named "a+b", which no
    variant name can contain) is a failure of every arm it hosted."""
    return [f"{r.run_key}: {r.status}: {r.error}" for r in runs
            if variant in r.variant.split("+") and r.status != "ok"]


def _outputs(runs: list[RunRecord], variant: str) -> list[dict[int, list[int]]]:
    """Per pass (in launch order), prompt index -> generated token ids."""
    return [{r.index: r.output_token_ids for r in p.requests}
            for _, p in arm_passes(runs, variant)]


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_parity(runs: list[RunRecord], baseline: str, candidate: str,
                  expected: bool = False) -> Parity | None:
    base, cand = _outputs(runs, baseline), _outputs(runs, candidate)
    if not base or not cand:
        return None
    ref = base[0]
    compared = identical = 0
    first: int | None = None
    for outputs in cand:
        for index, tokens in outputs.items():
            if index not in ref:
                continue
            compared += 1
            pos = _first_divergence(ref[index], tokens)
            if pos is None:
                identical += 1
            else:
                first = pos if first is None else min(first, pos)
    self_pairs = [(ref[i] == t) for outputs in base[1:] for i, t in outputs.items() if i in ref]
    self_identical = float(np.mean(self_pairs)) if self_pairs else None
    return Parity(compared, identical, first, self_identical, expected)


def compare_metric(metric: MetricDef, passes: pd.DataFrame, baseline: str, candidate: str,
                   design: Design) -> MetricRow | None:
    """One metric: each arm's mean over its passes (a pass is what one `vllm bench` run
    reports: its throughput, its median TTFT, ...) and the delta estimated on the design's
    independent unit."""
    if metric.key not in passes:
        return None
    both = passes[passes["variant"].isin([baseline, candidate])]
    b = both.loc[both["variant"] == baseline, metric.key].astype(float)
    c = both.loc[both["variant"] == candidate, metric.key].astype(float)
    if b.dropna().empty or c.dropna().empty:
        return None
    # Every metric, latency statistics included, is one value per pass (a pass's mean, median
    # or p99 over its requests); the unit above the pass (block or launch) carries the error.
    est = arm_delta(both[metric.key].to_numpy(dtype=float),
                    (both["variant"] == candidate).to_numpy(), both["launch"].to_numpy(),
                    both["round"].to_numpy(), both["block"].fillna(0).to_numpy(),
                    metric.delta, design)
    return MetricRow(metric.key, metric.label, metric.higher_is_better, float(b.mean()),
                     float(c.mean()), est)


def check_comparable(results: list[RunResults], force: bool = False) -> list[str]:
    """Refuse (or, forced, warn about) results whose fingerprints or workloads differ."""
    problems = []
    first = results[0]
    for other in results[1:]:
        # The machine must match; the vLLM build may differ on purpose (two checkouts), and
        # compare_runs says so under the table.
        diffs = fingerprint_differences(first.manifest.get("fingerprint", {}),
                                        other.manifest.get("fingerprint", {}), MACHINE_FIELDS)
        if diffs:
            problems.append(f"{first.run_id} vs {other.run_id}: machine differs: "
                            + ", ".join(diffs))
        for key in ("mode", "serve"):
            va = first.manifest.get("scenario", {}).get(key)
            vb = other.manifest.get("scenario", {}).get(key)
            if va != vb:
                problems.append(f"{first.run_id} vs {other.run_id}: {key} differs: "
                                f"{json.dumps(va)} vs {json.dumps(vb)}")
        wa = first.manifest.get("scenario", {}).get("workload")
        wb = other.manifest.get("scenario", {}).get("workload")
        if wa != wb:
            keys = sorted(k for k in set(wa or {}) | set(wb or {})
                          if (wa or {}).get(k) != (wb or {}).get(k))
            problems.append(f"{first.run_id} vs {other.run_id}: workload differs: "
                            + ", ".join(f"workload.{k}" for k in keys))
    if problems and not force:
        raise IncomparableError("; ".join(problems) + " (use --force to compare anyway)")
    return problems


def compare_records(runs: list[RunRecord], baseline: str, candidates: list[str], run_id: str,
                    scenario: str, implementations: dict[str, str | None] | None = None,
                    greedy: bool = True,
                    expect_identical: dict[str, bool] | None = None,
                    design: Design = "launch-per-arm",
                    tp_sizes: dict[str, int] | None = None) -> Comparison:
    """Compare every candidate with the baseline over the given launches. With a greedy
    workload, outputs are compared per prompt; `expect_identical` names the candidates whose
    outputs must match the baseline's exactly. Passes whose vLLM processes did not prove the
    arm's implementation are left out of every number and listed in `unproven`."""
    implementations = implementations or {}
    tp_sizes = tp_sizes or {}
    unproven: list[str] = []
    bad: dict[tuple[str, int], str] = {}
    for variant in [baseline, *candidates]:
        found, lines = unproven_passes(runs, variant, implementations.get(variant),
                                       tp_sizes.get(variant, 1))
        bad.update(found)
        unproven += lines
    passes = passes_frame(runs)
    discarded: dict[str, int] = {}
    if bad and not passes.empty:
        unproven_rows = [k in bad for k in zip(passes["run_key"], passes["repeat"], strict=True)]
        dropped = passes[unproven_rows]
        discarded = {str(k): int(v) for k, v in dropped.groupby("variant").size().items()}
        passes = passes[[not u for u in unproven_rows]]
    warnings: list[str] = []
    if not passes.empty and passes["workload_hash"].nunique() > 1:
        warnings.append("passes saw different prompts (workload hashes differ): deltas mix "
                        "workload and variant effects")

    def status(variant: str) -> str:
        has_ok = not passes.empty and (passes["variant"] == variant).any()
        return "ok" if has_ok else "failed"

    metrics = list(METRICS)
    for col in position_metrics(passes) if not passes.empty else []:
        pos = int(col.rsplit("_", 1)[1])
        metrics.append(MetricDef(col, f"Acceptance at position {pos} (%)", True, "points"))

    results = []
    for name in candidates:
        cand = CandidateResult(name=name, status=status(name),
                               implementation=implementations.get(name),
                               ran=_ran(runs, name), failures=_failures(runs, name))
        if cand.status == "ok" and status(baseline) == "ok":
            for metric in metrics:
                row = compare_metric(metric, passes, baseline, name, design)
                if row is not None:
                    cand.rows.append(row)
            if greedy:
                cand.parity = output_parity(runs, baseline, name,
                                            (expect_identical or {}).get(name, False))
                if cand.parity is not None and cand.parity.violated:
                    warnings.append(
                        f"{name}: greedy outputs differ from {baseline}'s where they must not "
                        f"({cand.parity.identical}/{cand.parity.compared} identical, first "
                        f"divergence at token {cand.parity.first_divergence})")
        results.append(cand)
    per_arm = (passes.groupby("variant").size().to_dict() if not passes.empty else {})
    stopped = [f"{r.run_key}: {r.result.stopped}" for r in sorted(runs, key=lambda r: r.order)
               if r.result is not None and r.result.stopped]
    warmups = [f"{r.run_key}: {r.result.warmup_blocks} block(s) "
               + ("and hit its cap still settling" if r.result.warmup_capped
                  else "until the arms' difference settled")
               for r in sorted(runs, key=lambda r: r.order)
               if r.result is not None and r.result.warmup_blocks]
    return Comparison(
        run_id=run_id, scenario=scenario, baseline=baseline, baseline_status=status(baseline),
        baseline_ran=_ran(runs, baseline),
        baseline_implementation=implementations.get(baseline), candidates=results,
        baseline_failures=_failures(runs, baseline),
        passes_per_arm={str(k): int(v) for k, v in per_arm.items()}, warnings=warnings,
        design=design, discarded=discarded, unproven=unproven, stopped=stopped,
        warmups=warmups)


def node_differences(runs: list[RunRecord], baseline: str,
                     candidates: list[str]) -> list[str]:
    """Arms whose launches ran on unlike nodes (a cluster executor's records carry each node's
    fingerprint): 'baseline vs cand: cpu_model (...) differ', naming the fields. Launches on
    this machine (no node) are alike by construction."""
    def nodes(variant: str) -> list[dict[str, Any]]:
        return [r.node.get("fingerprint") or {} for r in runs if r.node is not None
                and r.status == "ok" and variant in r.variant.split("+")]

    problems = []
    first = nodes(baseline)
    for name in [baseline, *candidates]:
        for fp in nodes(name):
            diffs = fingerprint_differences(first[0], fp, COMPAT_FIELDS) if first else []
            if diffs:
                problems.append(f"{baseline} vs {name}: launches ran on unlike nodes: "
                                + ", ".join(diffs))
                break
    return problems


def compare_scenario(runs: list[RunRecord], scenario: Scenario, run_id: str,
                     design: Design, force: bool = False,
                     labels: dict[str, str | None] | None = None) -> Comparison:
    """Compare the variants of `scenario` (a whole run, or one sweep cell) over `runs`.
    Refuses (IncomparableError) arms that ran on unlike nodes, unless forced. `labels`: what
    each arm must prove it ran, where the plan decided it (default: the scenario's swaps)."""
    unlike = node_differences(runs, scenario.baseline, scenario.candidates)
    if unlike and not force:
        raise IncomparableError("; ".join(unlike) + " (pin the arms to one node with --pin "
                                "node, or compare anyway with specbench report --force)")
    comparison = compare_records(
        runs, scenario.baseline, scenario.candidates, run_id, scenario.name,
        labels or {n: v.proof_label for n, v in scenario.variants.items()},
        greedy=scenario.workload.temperature == 0.0,
        expect_identical={n: scenario.expects_identical_outputs(n) for n in scenario.candidates},
        design=design, tp_sizes=tp_sizes(scenario),
    )
    comparison.setup = scenario.describe_setup()
    comparison.warnings.extend(f"compared anyway: {line}" for line in unlike)
    launches = {r.order for r in runs if r.status == "ok"}
    if design == "one-engine" and len(launches) == 1 and scenario.tensor_parallel_size > 1:
        comparison.warnings.append(
            f"TP {scenario.tensor_parallel_size} in one launch: on this kind of machine the "
            "effect differed between TP 2 launches by more than one launch's interval shows "
            "(docs/vllm_on_cpu.md); this interval leaves that out: give rounds: 3 or more")
    return comparison


def compare_results(results: RunResults, force: bool = False) -> Comparison:
    """Compare the variants of one results folder, as its scenario declared them (a sweep:
    see compare_sweep, one comparison per cell)."""
    scenario = parse_scenario(results.manifest["scenario"], f"{results.path}/manifest.json",
                              max_cells=None)
    if scenario.sweep is not None:
        raise ResultsError(f"{results.path}: a sweep of {scenario.sweep.cell_count} cells; "
                           "compare it with compare_sweep (one comparison per cell)")
    comparison = compare_scenario(results.runs, scenario, results.run_id, run_design(results),
                                  force, planned_labels(results))
    comparison.builds = _builds(results, {n: n for n in scenario.variants})
    comparison.overlays = overlay_notes(results)
    return comparison


def planned_labels(results: RunResults) -> dict[str, str | None] | None:
    """What the stored plan said each arm must prove (None: runs from before plans said)."""
    labels = results.manifest.get("plan", {}).get("proof_labels")
    return dict(labels) if labels else None


def overlay_notes(results: RunResults) -> dict[str, str]:
    """Arm -> 'overlay: N function(s) (...) from <change>' for arms that ran their own change."""
    from harness.plan.overlay import OverlaySpec, describe_spec

    for run in results.manifest.get("plan", {}).get("runs", []):
        if isinstance(run, dict) and run.get("overlay"):
            return describe_spec(OverlaySpec.model_validate(run["overlay"]))
    return {}


def _builds(results: RunResults, labels: dict[str, str]) -> dict[str, str]:
    """label -> one line on the build each variant ran under (runs from before builds were
    recorded have none)."""
    from harness.plan.builds import describe

    found = results.manifest.get("builds") or {}
    return {label: describe(found[name]) for name, label in labels.items()
            if isinstance(found.get(name), dict)}


def _launches_of(results: RunResults, variant: str, label: str,
                 offset: int) -> list[RunRecord]:
    """The launches that ran `variant` (a shared launch keeps only that arm's passes),
    relabelled for a cross-run comparison."""
    out = []
    for r in results.runs:
        shared = r.result is not None and any(p.arm for p in r.result.passes)
        if not shared and r.variant != variant:
            continue
        update: dict[str, Any] = {"variant": label, "order": r.order + offset,
                                  "round": r.round + offset}
        if shared and r.result is not None:
            passes = [p.model_copy(update={"arm": label}) for p in r.result.passes
                      if p.arm == variant]
            update["result"] = r.result.model_copy(update={"passes": passes})
        out.append(r.model_copy(update=update))
    return out


def run_design(results: RunResults) -> Design:
    """The design a stored run used (runs before schema 3 were all launch-per-arm)."""
    design = results.manifest.get("plan", {}).get("design", "launch-per-arm")
    return "one-engine" if design == "one-engine" else "launch-per-arm"


def tp_sizes(scenario: Scenario) -> dict[str, int]:
    """Tensor-parallel ranks each variant runs with: how many processes must report."""
    return {name: int(engine_args_for(scenario, name).get("tensor_parallel_size", 1))
            for name in scenario.variants}


def compare_runs(base: RunResults, cand: RunResults, base_variant: str | None = None,
                 cand_variant: str | None = None, force: bool = False) -> Comparison:
    """One variant of one run against one variant of another (e.g. two git checkouts).

    Refuses (IncomparableError) when the environments or workloads differ, unless forced.
    """
    for results in (base, cand):
        if results.manifest.get("scenario", {}).get("sweep"):
            raise ResultsError(f"{results.path}: a sweep; compare runs of one A/B (its "
                               "cells are compared with each other in its own report)")
    problems = check_comparable([base, cand], force)
    chosen = []
    for results, variant in ((base, base_variant), (cand, cand_variant)):
        scenario = parse_scenario(results.manifest["scenario"],
                                  f"{results.path}/manifest.json", max_cells=None)
        name = variant or scenario.baseline
        if name not in scenario.variants:
            raise ResultsError(f"{results.path}: no variant {name!r} (has: "
                               f"{', '.join(scenario.variants)})")
        chosen.append((results, scenario, name))
    (b_res, b_scn, b_name), (c_res, c_scn, c_name) = chosen
    # Short column labels; the comparison's run_id names both runs in full.
    label_b, label_c = f"A:{b_name}", f"B:{c_name}"
    # Launches of different runs share nothing: each is its own unit, and rounds of B are
    # offset so that they never pair with A's.
    runs = _launches_of(b_res, b_name, label_b, 0) + _launches_of(c_res, c_name, label_c, 10_000)
    comparison = compare_records(
        runs, label_b, [label_c], f"A={b_res.run_id} vs B={c_res.run_id}", b_scn.name,
        {label_b: b_scn.variants[b_name].proof_label,
         label_c: c_scn.variants[c_name].proof_label},
        greedy=b_scn.workload.temperature == 0.0, design="launch-per-arm",
        tp_sizes={label_b: tp_sizes(b_scn)[b_name], label_c: tp_sizes(c_scn)[c_name]},
    )
    comparison.warnings.extend(f"compared anyway: {p}" for p in problems)
    comparison.builds = {**_builds(b_res, {b_name: label_b}), **_builds(c_res, {c_name: label_c})}
    builds_differ = fingerprint_differences(base.manifest.get("fingerprint", {}),
                                            cand.manifest.get("fingerprint", {}), BUILD_FIELDS)
    if builds_differ:
        comparison.warnings.append("the builds differ (on purpose, comparing two builds): "
                                   + ", ".join(builds_differ))
    return comparison
