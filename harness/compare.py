"""Baseline vs each candidate: every metric with its uncertainty, output parity, what ran.

Input is raw RunRecords (one results folder, or several checked for comparability); output is
a Comparison that report.py renders and gate.py judges. No formatting here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.catalog import parse_implementation
from harness.env import fingerprint_differences
from harness.errors import IncomparableError, ResultsError
from harness.metrics import (
    METRICS,
    MetricDef,
    itl_samples,
    passes_frame,
    position_metrics,
    requests_frame,
)
from harness.records import RunRecord
from harness.scenario import parse_scenario
from harness.stats import (
    DeltaEstimate,
    pass_level_delta,
    pooled_statistic,
    request_level_delta,
)
from harness.store import RunResults


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


def _ran(runs: list[RunRecord], variant: str) -> list[str]:
    paths = {
        f"{rep.implementation}:{rep.choice} -> {rep.path}"
        for r in runs if r.variant == variant and r.result is not None
        for rep in r.result.impl_reports
    }
    return sorted(paths)


def implementation_problems(runs: list[RunRecord], variant: str,
                            implementation: str | None) -> list[str]:
    """Launches where the swapped implementation was not seen running as chosen."""
    if implementation is None:
        return []
    name, choice = parse_implementation(implementation)
    problems = []
    for run in runs:
        if run.variant != variant or run.status != "ok" or run.result is None:
            continue
        reports = [r for r in run.result.impl_reports if r.implementation == name]
        if not reports:
            problems.append(f"{run.run_key}: no vLLM process reported running {implementation}")
        for r in reports:
            if r.choice != choice or r.matches_choice is False or r.error:
                problems.append(f"{run.run_key}: pid {r.pid} reported {r.implementation}:"
                                f"{r.choice} paths {sorted(r.paths) or r.error}")
    return problems


def _failures(runs: list[RunRecord], variant: str) -> list[str]:
    return [f"{r.run_key}: {r.status}: {r.error}" for r in runs
            if r.variant == variant and r.status != "ok"]


def _outputs(runs: list[RunRecord], variant: str) -> list[dict[int, list[int]]]:
    """Per pass (in launch order), prompt index -> generated token ids."""
    passes = []
    for run in sorted(runs, key=lambda r: r.order):
        if run.variant == variant and run.status == "ok" and run.result is not None:
            for p in run.result.passes:
                passes.append({r.index: r.output_token_ids for r in p.requests})
    return passes


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


def _pass_values(passes: pd.DataFrame, variant: str, key: str) -> pd.Series:
    arm = passes[passes["variant"] == variant].sort_values(["round", "repeat"])
    if key not in arm:
        return pd.Series(dtype=float)
    return arm.set_index(["round", "repeat"])[key].astype(float)


def _request_groups(requests: pd.DataFrame, variant: str, column: str) -> list[np.ndarray]:
    arm = requests[requests["variant"] == variant]
    return [g[column].to_numpy(dtype=float) for _, g in arm.groupby(["round", "repeat"])]


def compare_metric(metric: MetricDef, passes: pd.DataFrame, requests: pd.DataFrame,
                   itl: pd.DataFrame | None, baseline: str, candidate: str) -> MetricRow | None:
    b, c = _pass_values(passes, baseline, metric.key), _pass_values(passes, candidate, metric.key)
    if b.dropna().empty or c.dropna().empty:
        return None
    if metric.request_column is not None and metric.stat is not None:
        # ITL pools every gap of a pass (as vLLM's benchmark does), not per-request means.
        source = itl if metric.request_column == "itl_ms" and itl is not None else requests
        groups_b = _request_groups(source, baseline, metric.request_column)
        groups_c = _request_groups(source, candidate, metric.request_column)
        est = request_level_delta(groups_b, groups_c, metric.stat, metric.delta)
        return MetricRow(metric.key, metric.label, metric.higher_is_better,
                         pooled_statistic(groups_b, metric.stat),
                         pooled_statistic(groups_c, metric.stat), est)
    else:
        paired = list(b.index) == list(c.index)
        est = pass_level_delta(b.to_numpy(), c.to_numpy(), metric.delta, paired)
        rounds = {r for r, _ in b.index} | {r for r, _ in c.index}
        if est.note is None and len(rounds) == 1 and est.n_baseline > 1:
            est = dataclasses.replace(
                est, note="one launch per arm: launch-to-launch noise not sampled")
    return MetricRow(metric.key, metric.label, metric.higher_is_better, float(b.mean()),
                     float(c.mean()), est)


def check_comparable(results: list[RunResults], force: bool = False) -> list[str]:
    """Refuse (or, forced, warn about) results whose fingerprints or workloads differ."""
    problems = []
    first = results[0]
    for other in results[1:]:
        diffs = fingerprint_differences(first.manifest.get("fingerprint", {}),
                                        other.manifest.get("fingerprint", {}))
        if diffs:
            problems.append(f"{first.run_id} vs {other.run_id}: environment differs: "
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
                    expect_identical: dict[str, bool] | None = None) -> Comparison:
    """Compare every candidate with the baseline over the given launches. With a greedy
    workload, outputs are compared per prompt; `expect_identical` names the candidates whose
    outputs must match the baseline's exactly."""
    implementations = implementations or {}
    passes = passes_frame(runs)
    requests = requests_frame(runs)
    itl = itl_samples(runs)
    itl_groups = itl if not itl.empty else None
    warnings = [problem for variant in [baseline, *candidates]
                for problem in implementation_problems(runs, variant,
                                                       implementations.get(variant))]
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
                row = compare_metric(metric, passes, requests, itl_groups, baseline, name)
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
    return Comparison(
        run_id=run_id, scenario=scenario, baseline=baseline, baseline_status=status(baseline),
        baseline_ran=_ran(runs, baseline),
        baseline_implementation=implementations.get(baseline), candidates=results,
        baseline_failures=_failures(runs, baseline),
        passes_per_arm={str(k): int(v) for k, v in per_arm.items()}, warnings=warnings)


def compare_results(results: RunResults) -> Comparison:
    """Compare the variants of one results folder, as its scenario declared them."""
    scenario = parse_scenario(results.manifest["scenario"], f"{results.path}/manifest.json")
    comparison = compare_records(
        results.runs, scenario.baseline, scenario.candidates, results.run_id, scenario.name,
        {n: v.implementation for n, v in scenario.variants.items()},
        greedy=scenario.workload.temperature == 0.0,
        expect_identical={n: scenario.expects_identical_outputs(n) for n in scenario.candidates},
    )
    comparison.setup = scenario.describe_setup()
    return comparison


def compare_runs(base: RunResults, cand: RunResults, base_variant: str | None = None,
                 cand_variant: str | None = None, force: bool = False) -> Comparison:
    """One variant of one run against one variant of another (e.g. two git checkouts).

    Refuses (IncomparableError) when the environments or workloads differ, unless forced.
    """
    problems = check_comparable([base, cand], force)
    chosen = []
    for results, variant in ((base, base_variant), (cand, cand_variant)):
        scenario = parse_scenario(results.manifest["scenario"], f"{results.path}/manifest.json")
        name = variant or scenario.baseline
        if name not in scenario.variants:
            raise ResultsError(f"{results.path}: no variant {name!r} (has: "
                               f"{', '.join(scenario.variants)})")
        chosen.append((results, scenario, name))
    (b_res, b_scn, b_name), (c_res, c_scn, c_name) = chosen
    # Short column labels; the comparison's run_id names both runs in full.
    label_b, label_c = f"A:{b_name}", f"B:{c_name}"
    runs = [r.model_copy(update={"variant": label_b}) for r in b_res.runs if r.variant == b_name]
    runs += [r.model_copy(update={"variant": label_c}) for r in c_res.runs if r.variant == c_name]
    comparison = compare_records(
        runs, label_b, [label_c], f"A={b_res.run_id} vs B={c_res.run_id}", b_scn.name,
        {label_b: b_scn.variants[b_name].implementation,
         label_c: c_scn.variants[c_name].implementation},
        greedy=b_scn.workload.temperature == 0.0,
    )
    comparison.warnings.extend(f"compared anyway: {p}" for p in problems)
    return comparison
