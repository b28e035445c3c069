"""Rendering only: where each speculative arm's speedup over the no-speculation arm goes
(a Decomposition from harness.analysis.speedup), as rows for the terminal and Markdown."""

from __future__ import annotations

import math

from harness.analysis.comparison import Comparison, Decomposition, Factor


def format_factor(f: Factor) -> str:
    text = f"{f.value:.3f}×"
    if f.low is not None and f.high is not None:
        return text + f" [{f.low:.3f}, {f.high:.3f}]"
    return text if f.key == "ideal" else text + " [no CI: one round]"


def _what(d: Decomposition, key: str) -> str:
    """The measured figures behind one factor, raw and unclamped."""
    r = d.raw
    return {
        "ideal": f"k = {d.k} draft tokens, k + 1 = {d.k + 1} tokens per step at most",
        "acceptance": (
            f"{r['tokens_per_step']:.2f} tokens per step against "
            f"{r['tokens_per_step0']:.2f} without speculation ({d.k + 1}× would "
            "be ideal)"
        ),
        "draft": (
            f"draft {r['draft_ms']:.2f} ms per step against a plain step of "
            f"{r['step0_ms']:.2f} ms (c = {d.draft_cost:.3f})"
        ),
        "verification": (
            f"the target's forward {r['forward_ms']:.2f} ms over k + 1 tokens "
            f"against {r['forward0_ms']:.2f} ms over one "
            f"({r['forward_ms'] / r['forward0_ms']:.2f}×)"
        ),
        "per_request": (
            f"acceptance length {d.acceptance_length:.2f} of {d.k + 1} (1 + accepted / drafts)"
        ),
        "batch": (
            f"{r['tokens_per_step'] / r['tokens_per_step0']:.2f}× the tokens per step "
            f"where each request gains {d.acceptance_length:.2f}×: requests finishing "
            "at different steps leave the last steps thinner"
        ),
        "other": (
            f"rest of the step {r['rest_ms']:.2f} ms against {r['rest0_ms']:.2f} ms, "
            "and time outside the steps"
        ),
        "rest_of_step": f"{r['rest_ms']:.2f} ms against {r['rest0_ms']:.2f} ms per step",
        "outside": "outside the timed steps (host scheduling and output processing; under "
        "async scheduling the device's time between them): the remainder of the speedup",
        "measured": "output throughput over the no-speculation arm's, per round",
    }[key]


def decomposition_rows(d: Decomposition) -> list[list[str]]:
    """[term, factor [95% CI], what was measured] rows, the last the measured speedup."""
    return [
        [
            f"  of which {f.label}"
            if part_of
            else "= measured speedup"
            if f.key == "measured"
            else f.label,
            format_factor(f),
            _what(d, f.key),
        ]
        for f, part_of in d.terms()
    ]


def leviathan_line(d: Decomposition) -> str:
    if math.isnan(d.alpha):
        return "Leviathan et al. 2023 (Thm 3.8): no drafts, no bound."
    return (
        f"Leviathan et al. 2023 (Thm 3.8), for reference: alpha = {d.alpha:.3f} (accepted "
        f"/ drafted tokens), k = {d.k}, measured draft cost per step c = "
        f"{d.draft_cost:.3f} (the drafter's measured time per step, not c·k: Medusa drafts "
        "every head in one forward): "
        f"(1 - alpha^(k+1)) / ((1 - alpha)(1 + c)) = {d.leviathan_speedup:.2f}×, assuming "
        "verification at one plain step's cost and no other overhead. 1 + Σ per-position "
        f"acceptance = {d.acceptance_length:.2f} is the measured acceptance length, not "
        f"a prediction of it (the formula's at this alpha: {d.leviathan_tokens:.2f})."
    )


def title(d: Decomposition) -> str:
    rounds = len(d.rounds)
    return (
        f"Where the speedup goes: {d.arm} vs {d.reference} (k = {d.k}; {rounds} round"
        f"{'s' if rounds != 1 else ''}, geometric means [95% CI over rounds]; the "
        "factors multiply to the measured speedup)"
    )


def render_terminal_decompositions(comparison: Comparison) -> list[str]:
    lines: list[str] = []
    for d in comparison.decompositions:
        rows = decomposition_rows(d)
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        lines.append(title(d))
        lines += [f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}" for r in rows]
        lines.append("  " + leviathan_line(d))
    return lines


def render_markdown_decompositions(comparison: Comparison) -> list[str]:
    out: list[str] = []
    for d in comparison.decompositions:
        out += ["", f"**{title(d)}**", "", "| Term | Factor | Measured |", "|:---|---:|:---|"]
        out += [
            "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
            for r in decomposition_rows(d)
        ]
        out += ["", leviathan_line(d)]
    return out
