"""A stored sweep compared cell by cell, its break-even points, and one tidy DataFrame.

Each cell is a full A/B compared exactly as a run without a sweep (harness.analysis.compare on
the cell's own launches and scenario); the break-even along the chosen axis comes from the
cells' estimates (harness.analysis.breakeven). Library code: the CLI, the reports and notebooks
call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.analysis.breakeven import AxisPoint, Crossing, break_even, describe
from harness.analysis.compare import compare_scenario
from harness.analysis.comparison import Comparison, MetricRow
from harness.config.scenario import Scenario
from harness.errors import ResultsError
from harness.results.metrics import METRICS
from harness.results.run import Run


@dataclass
class CellComparison:
    """One sweep cell's A/B."""

    id: str
    values: dict[str, Any]
    label: str
    comparison: Comparison
    launches: int  # launches the plan had for this cell
    failed: int  # of which did not complete


@dataclass
class BreakEvenLine:
    """The break-even along the axis for one combination of the other swept fields."""

    axis: str
    metric: str
    metric_label: str
    candidate: str
    others: dict[str, Any]  # the other fields' values on this line
    crossing: Crossing | None  # None: fewer than 2 cells with an estimate
    sentence: str
    points: list[tuple[float, MetricRow]] = field(default_factory=list)


@dataclass
class SweepComparison:
    run_id: str
    scenario: str
    axes: list[str]  # swept field paths
    cells: list[CellComparison]
    break_even: list[BreakEvenLine]
    design: str
    # Fields that vary together: each axis alone, each linked group as one.
    groups: list[list[str]]

    def others(self, axis: str) -> list[str]:
        """The swept fields that vary independently of `axis` (not it, nor linked with it)."""
        return other_fields(self.groups, axis)

    @property
    def unproven(self) -> list[str]:
        return [f"{c.id}: {line}" for c in self.cells for line in c.comparison.unproven]

    @property
    def parity_violations(self) -> list[str]:
        return [f"{c.id}: {name}" for c in self.cells for name in c.comparison.parity_violations]

    def frame(self) -> pd.DataFrame:
        """One row per (cell, candidate, metric), a column per swept field: the tidy form for
        pandas and plotting."""
        rows = []
        for cell in self.cells:
            for row in comparison_rows(cell.comparison):
                rows.append({"cell": cell.id, "cell_label": cell.label, **cell.values, **row})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "scenario": self.scenario,
            "axes": self.axes,
            "groups": self.groups,
            "design": self.design,
            "cells": [
                {
                    "id": c.id,
                    "values": c.values,
                    "label": c.label,
                    "launches": c.launches,
                    "failed": c.failed,
                    "comparison": c.comparison.to_dict(),
                }
                for c in self.cells
            ],
            "break_even": [
                {
                    "axis": b.axis,
                    "metric": b.metric,
                    "candidate": b.candidate,
                    "others": b.others,
                    "sentence": b.sentence,
                    "crossing": None
                    if b.crossing is None
                    else {k: _json_number(v) for k, v in vars(b.crossing).items()},
                }
                for b in self.break_even
            ],
        }


def _json_number(value: Any) -> Any:
    """JSON has no infinity: open interval ends are written as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("-inf" if value < 0 else "inf")
    return value


def comparison_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """A comparison's metric rows as plain records (one per candidate and metric)."""
    out = []
    for cand in comparison.candidates:
        for row in cand.rows:
            est = row.estimate
            out.append(
                {
                    "candidate": cand.name,
                    "metric": row.key,
                    "metric_label": row.label,
                    "kind": est.kind,
                    "higher_is_better": row.higher_is_better,
                    "baseline_value": row.baseline,
                    "candidate_value": row.candidate,
                    "delta": est.delta,
                    "ci_low": est.ci_low,
                    "ci_high": est.ci_high,
                    "p_value": est.p_value,
                    "significant": est.significant,
                    "mde": est.mde,
                    "units": est.units,
                    "improved": row.improved,
                }
            )
    return out


def compare_sweep(run: Run, force: bool = False) -> SweepComparison:
    """Every cell of a stored sweep compared on its own launches, and the break-even lines."""
    scenario = run.scenario
    if scenario.sweep is None:
        raise ResultsError(f"{run.path}: not a sweep")
    planned = run.manifest.plan.launches_per_cell()
    passes = run.passes
    cells = []
    for cell in run.cells:
        runs = [r for r in run.runs if r.cell == cell.id]
        comparison = compare_scenario(
            runs,
            cell.scenario,
            f"{run.run_id} {cell.id}",
            run.design,
            force,
            run.proof_labels,
            passes[passes["cell"] == cell.id] if not passes.empty else passes,
        )
        failed = sum(r.status != "ok" for r in runs)
        launches = planned.get(cell.id, len(runs))
        cells.append(
            CellComparison(
                cell.id,
                cell.values,
                cell.label,
                comparison,
                launches,
                failed + max(0, launches - len(runs)),
            )
        )
    return SweepComparison(
        run.run_id,
        scenario.name,
        scenario.sweep.paths,
        cells,
        break_even_lines(scenario, cells),
        run.design,
        groups_of(scenario),
    )


def groups_of(scenario: Scenario) -> list[list[str]]:
    """A sweep's fields as they vary: each axis alone, each linked group together."""
    assert scenario.sweep is not None
    return [[path] for path in scenario.sweep.axes] + [list(g) for g in scenario.sweep.linked]


def other_fields(groups: list[list[str]], axis: str) -> list[str]:
    """The fields of `groups` that vary independently of `axis`."""
    return [p for group in groups if axis not in group for p in group]


def _metric_label(key: str) -> tuple[str, bool]:
    for m in METRICS:
        if m.key == key:
            return m.label, m.higher_is_better
    if key.startswith("acceptance_pos_"):
        return f"Acceptance at position {key.rsplit('_', 1)[1]} (%)", True
    return key, True


def break_even_lines(scenario: Scenario, cells: list[CellComparison]) -> list[BreakEvenLine]:
    """One break-even per combination of the swept fields other than the axis (and the fields
    linked with it)."""
    assert scenario.sweep is not None
    spec = scenario.sweep.break_even
    if spec is None:
        return []
    candidate = spec.candidate or scenario.candidates[0]
    others = other_fields(groups_of(scenario), spec.axis)
    label, higher = _metric_label(spec.metric)
    lines: dict[str, list[CellComparison]] = {}
    for cell in cells:
        key = repr([cell.values[p] for p in others])
        lines.setdefault(key, []).append(cell)
    out = []
    for members in lines.values():
        fixed = {p: members[0].values[p] for p in others}
        points: list[tuple[float, MetricRow]] = []
        missing = []
        for cell in members:
            cand = next((c for c in cell.comparison.candidates if c.name == candidate), None)
            row = next((r for r in cand.rows if r.key == spec.metric), None) if cand else None
            if row is None or row.estimate.delta is None or not math.isfinite(row.estimate.delta):
                missing.append(cell.label)
            else:
                points.append((float(cell.values[spec.axis]), row))
        where = (" at " + ", ".join(f"{k}={v}" for k, v in fixed.items())) if fixed else ""
        if len(points) < 2:
            sentence = (
                f"break-even on {spec.axis}{where}: not estimable, fewer than 2 cells "
                f"have a {label} delta" + (f" (none for: {'; '.join(missing)})" if missing else "")
            )
            out.append(
                BreakEvenLine(
                    spec.axis, spec.metric, label, candidate, fixed, None, sentence, points
                )
            )
            continue
        crossing = break_even([_axis_point(x, row) for x, row in points], spec.scale)
        sentence = describe(crossing, spec.axis, candidate, label, higher)
        if where:
            sentence = sentence.replace(
                f"break-even on {spec.axis}:", f"break-even on {spec.axis}{where}:", 1
            )
        if missing:
            sentence += f"; cells without an estimate: {'; '.join(missing)}"
        out.append(
            BreakEvenLine(
                spec.axis, spec.metric, label, candidate, fixed, crossing, sentence, points
            )
        )
    return out


def _axis_point(x: float, row: MetricRow) -> AxisPoint:
    """A cell's estimate on the analysis scale the stats used (log ratio, or points)."""
    est = row.estimate
    value = math.log1p(est.delta) if est.kind == "relative" else est.delta
    return AxisPoint(x, value, est.se, est.df)
