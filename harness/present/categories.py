"""Rendering only: the per-category table (harness.analysis.categories) for the terminal and
Markdown: a row per category and metric, every arm's value and each candidate's delta."""

from __future__ import annotations

import math

from harness.analysis.comparison import Comparison

NOTE = ("Per category: the categories share each pass's batch, so output rate is a category's "
        "requests' output tokens over their end-to-end time (tok/s per request); acceptance "
        "length pools the category's requests (1 + accepted / verify steps); deltas on the "
        "design's unit, as above.")


def category_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and rows, cells formatted as the main table's."""
    from harness.present.tables import NOT_SPECULATING as DASH
    from harness.present.tables import format_delta, format_value

    header = ["Category", "Metric", comparison.baseline]
    names = [c.name for c in next(iter(comparison.categories.values()), [])]
    for name in names:
        header += [name, "Delta" if len(names) == 1 else f"Delta {name}"]
    rows: list[list[str]] = []
    for category, results in comparison.categories.items():
        n = comparison.category_requests.get(category)
        label = f"{category} ({n})" if n else category
        keys: list[tuple[str, str]] = []
        for cand in results:
            keys += [(r.key, r.label) for r in cand.rows if (r.key, r.label) not in keys]
        for key, metric in keys:
            base = "n/a"
            cells: list[str] = []
            for cand in results:
                found = next((r for r in cand.rows if r.key == key), None)
                if found is None:
                    cells += ["n/a", ""]
                    continue
                base = DASH if math.isnan(found.baseline) else format_value(found.baseline)
                lacking = math.isnan(found.baseline) or math.isnan(found.candidate)
                cells += [DASH if math.isnan(found.candidate) else format_value(found.candidate),
                          DASH if lacking else format_delta(found)]
            rows.append([label, metric, base, *cells])
            label = ""
    return header, rows
