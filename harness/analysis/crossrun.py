"""One variant of one stored run against one variant of another (two git checkouts, two
builds): launches of different runs share nothing, so each launch is its own unit.
"""

from __future__ import annotations

import json
from typing import Any

from harness.analysis.compare import Arms, compare_records
from harness.analysis.comparison import Comparison
from harness.env import BUILD_FIELDS, MACHINE_FIELDS, fingerprint_differences
from harness.errors import IncomparableError, ResultsError
from harness.results.run import Run
from harness.wire.records import RunRecord


def check_comparable(results: list[Run], force: bool = False) -> list[str]:
    """Refuse (or, forced, warn about) results whose fingerprints or workloads differ."""
    problems = []
    first = results[0]
    for other in results[1:]:
        # The machine must match; the vLLM build may differ on purpose (two checkouts), and
        # compare_runs says so under the table.
        diffs = fingerprint_differences(
            first.manifest.fingerprint, other.manifest.fingerprint, MACHINE_FIELDS
        )
        if diffs:
            problems.append(
                f"{first.run_id} vs {other.run_id}: machine differs: " + ", ".join(diffs)
            )
        for key in ("mode", "serve"):
            va = first.manifest.scenario.get(key)
            vb = other.manifest.scenario.get(key)
            if va != vb:
                problems.append(
                    f"{first.run_id} vs {other.run_id}: {key} differs: "
                    f"{json.dumps(va)} vs {json.dumps(vb)}"
                )
        wa = first.manifest.scenario.get("workload")
        wb = other.manifest.scenario.get("workload")
        if wa != wb:
            keys = sorted(
                k for k in set(wa or {}) | set(wb or {}) if (wa or {}).get(k) != (wb or {}).get(k)
            )
            problems.append(
                f"{first.run_id} vs {other.run_id}: workload differs: "
                + ", ".join(f"workload.{k}" for k in keys)
            )
    if problems and not force:
        raise IncomparableError("; ".join(problems) + " (use --force to compare anyway)")
    return problems


def _launches_of(results: Run, variant: str, label: str, offset: int) -> list[RunRecord]:
    """The launches that ran `variant` (a shared launch keeps only that arm's passes),
    relabelled for a cross-run comparison."""
    out = []
    for r in results.runs:
        shared = r.result is not None and any(p.arm for p in r.result.passes)
        if not shared and r.variant != variant:
            continue
        update: dict[str, Any] = {
            "variant": label,
            "order": r.order + offset,
            "round": r.round + offset,
        }
        if shared and r.result is not None:
            passes = [
                p.model_copy(update={"arm": label}) for p in r.result.passes if p.arm == variant
            ]
            update["result"] = r.result.model_copy(update={"passes": passes})
        out.append(r.model_copy(update=update))
    return out


def compare_runs(
    base: Run,
    cand: Run,
    base_variant: str | None = None,
    cand_variant: str | None = None,
    force: bool = False,
) -> Comparison:
    """One variant of one run against one variant of another (e.g. two git checkouts).

    Refuses (IncomparableError) when the environments or workloads differ, unless forced.
    """
    for run in (base, cand):
        if run.is_sweep:
            raise ResultsError(
                f"{run.path}: a sweep; compare runs of one A/B (its "
                "cells are compared with each other in its own report)"
            )
    problems = check_comparable([base, cand], force)
    chosen = []
    for run, variant in ((base, base_variant), (cand, cand_variant)):
        name = variant or run.scenario.baseline
        if name not in run.scenario.variants:
            raise ResultsError(
                f"{run.path}: no variant {name!r} (has: {', '.join(run.scenario.variants)})"
            )
        chosen.append((run, run.scenario, name))
    (b_res, b_scn, b_name), (c_res, c_scn, c_name) = chosen
    # Short column labels; the comparison's run_id names both runs in full.
    label_b, label_c = f"A:{b_name}", f"B:{c_name}"
    # Launches of different runs share nothing: each is its own unit, and rounds of B are
    # offset so that they never pair with A's.
    runs = _launches_of(b_res, b_name, label_b, 0) + _launches_of(c_res, c_name, label_c, 10_000)
    arms = Arms.across(
        Arms.of(b_scn, "launch-per-arm"),
        b_name,
        label_b,
        Arms.of(c_scn, "launch-per-arm"),
        c_name,
        label_c,
    )
    comparison = compare_records(runs, arms, f"A={b_res.run_id} vs B={c_res.run_id}", b_scn.name)
    comparison.compared_anyway.extend(problems)
    comparison.builds = {
        **b_res.builds_of({b_name: label_b}),
        **c_res.builds_of({c_name: label_c}),
    }
    comparison.builds_differ = fingerprint_differences(
        base.manifest.fingerprint, cand.manifest.fingerprint, BUILD_FIELDS
    )
    return comparison
