"""What a reader sees first (STYLE 19, lead with the answer): the one-line verdict per
candidate, which rows the default table shows (`--rows pr|all|KEY,...`), rows that say the
same thing folded into one, and local paths made relative. Rendering only: every number comes
from the Comparison (harness.analysis.comparison); harness.present.tables lays it out.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.comparison import CandidateResult, Comparison, MetricRow
from harness.config.metrics import ADJUSTED_METRIC
from harness.errors import SpecbenchError
from harness.present.across import combined_delta
from harness.present.adjusted import withdrawal_reason
from harness.present.stops import budget_advice

# The seed PRs' rows (vLLM #24435 and the Eagle local-argmax PR), in the table's order; the
# primary metric's row, each candidate's own part, parity and the speedup join them.
PR_KEYS = (
    "output_throughput",
    "total_throughput",
    "request_throughput",
    ADJUSTED_METRIC,  # where a run has it: the same delta, the machine's speed taken out
    "acceptance_rate",
    "mean_acceptance_length",
    "mean_tpot_ms",
    "mean_itl_ms",
    "mean_ttft_ms",
    "mean_e2el_ms",
    "goodput",
    "slo_attainment",
)
# Rows that are not one metric: the speedup over no speculation, output parity, and the status
# row of a comparison that compared nothing.
SPEEDUP_ROW, PARITY_ROW, STATUS_ROW = "speedup", "parity", "status"
ALWAYS = (SPEEDUP_ROW, PARITY_ROW, STATUS_ROW)


@dataclass(frozen=True)
class RowChoice:
    """Which rows a table shows: the seed PR layout (`pr`), every row (`all`), or the named
    keys (summary.json's row keys, `parity`, `speedup`)."""

    kind: str  # "pr", "all" or "keys"
    keys: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | RowChoice) -> RowChoice:
        """'pr', 'all' or 'KEY,KEY,...'."""
        if isinstance(text, RowChoice):
            return text
        given = text.strip()
        if given in ("pr", "all"):
            return cls(given)
        keys = tuple(k.strip() for k in given.split(",") if k.strip())
        if not keys:
            raise SpecbenchError("--rows: give pr, all, or row keys separated by commas")
        return cls("keys", keys)

    @property
    def folds(self) -> bool:
        """Whether rows outside the choice go behind a fold (everything but `all`)."""
        return self.kind != "all"

    def wanted(self, comparison: Comparison, known: list[str]) -> set[str]:
        """The row keys to show out of `known` (the table's, in order)."""
        if self.kind == "all":
            return set(known)
        if self.kind == "keys":
            unknown = [k for k in self.keys if k not in known]
            if unknown:
                raise SpecbenchError(
                    f"--rows: no row {', '.join(map(repr, unknown))} here "
                    f"(rows: {', '.join(known)})"
                )
            return set(self.keys) | {STATUS_ROW}
        own = {c.own_part for c in comparison.candidates if c.own_part}
        primary = {r.key for c in comparison.candidates for r in c.rows if r.role == "primary"}
        shown = set(PR_KEYS) | own | primary | set(ALWAYS)
        adjusted = [r for c in comparison.candidates for r in c.rows if r.key == ADJUSTED_METRIC]
        if all(math.isnan(r.estimate.delta) for r in adjusted):  # withdrawn: the verdict says
            shown.discard(ADJUSTED_METRIC)
        return shown


def short_label(label: str) -> str:
    """'Output throughput (tok/s)' -> 'output throughput'; 'Mean TPOT (ms)' -> 'mean TPOT'."""
    name = re.sub(r"\s*\([^)]*\)\s*$", "", label)
    return name[:1].lower() + name[1:] if name[1:2].islower() else name


# -- folding rows that say the same thing ----------------------------------------------------

_UNIT = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^)]*)\)$")


def folded_label(labels: list[str]) -> str:
    """'Output throughput (tok/s)', 'Total throughput (tok/s)', 'Request throughput (req/s)'
    -> 'Output / total / request throughput (tok/s, tok/s, req/s)'."""
    parts = [_UNIT.match(label) for label in labels]
    names = [m["name"] if m else label for m, label in zip(parts, labels, strict=True)]
    units = [m["unit"] if m else "" for m in parts]
    words = [n.split() for n in names]
    common = 0
    while (
        all(len(w) > common + 1 for w in words)
        and len({tuple(w[len(w) - common - 1 :]) for w in words}) == 1
    ):
        common += 1
    tail = " ".join(words[0][len(words[0]) - common :]) if common else ""
    heads = [" ".join(w[: len(w) - common]) for w in words]
    heads = [heads[0]] + [short_label(h) for h in heads[1:]]
    text = " / ".join(heads) + (f" {tail}" if tail else "")
    if any(units):
        text += f" ({units[0]})" if len(set(units)) == 1 else f" ({', '.join(units)})"
    return text


def fold_duplicates(
    rows: list[list[str]], deltas: list[int], blank: tuple[str, ...], star: str = "*"
) -> list[list[str]]:
    """Neighbouring rows whose every delta cell (`deltas`: their columns) reads the same,
    `star` aside, and says something (not one of `blank`), as one row naming them all, values
    joined by ' / ', the delta cells the first row's (the throughputs of an offline run move
    together: one interval, said once, starred as the primary is)."""
    out: list[list[str]] = []
    group: list[list[str]] = []

    def flush() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            label = folded_label([g[0] for g in group])
            cells = [
                " / ".join(g[i] for g in group) if i not in deltas else group[0][i]
                for i in range(1, len(group[0]))
            ]
            out.append([label, *cells])
        group.clear()

    def said(row: list[str]) -> list[str]:
        # The delta and its interval; a star is the family's rule about a row (the primary
        # is tested alone), not something the rows say differently.
        return [row[i].removesuffix(f" {star}") for i in deltas]

    for row in rows:
        key = said(row)
        foldable = bool(deltas) and all(k and k not in blank for k in key)
        if group and foldable and key == said(group[0]):
            group.append(row)
            continue
        flush()
        if foldable:
            group.append(row)
        else:
            out.append(row)
    flush()
    return out


# -- the verdict -----------------------------------------------------------------------------


def _interval(row: MetricRow) -> str:
    est = row.estimate
    if est.kind == "relative":
        text = f"{100 * est.delta:+.1f}%"
        if est.ci_low is not None and est.ci_high is not None:
            text += f" [{100 * est.ci_low:+.1f}, {100 * est.ci_high:+.1f}]"
    else:
        text = f"{est.delta:+.2f}pp"
        if est.ci_low is not None and est.ci_high is not None:
            text += f" [{est.ci_low:+.2f}, {est.ci_high:+.2f}]"
    return text


def headline_row(cand: CandidateResult) -> MetricRow | None:
    """The row a candidate's verdict is about: the primary metric's, else output
    throughput's."""
    return next((r for r in cand.rows if r.role == "primary"), None) or next(
        (r for r in cand.rows if r.key == "output_throughput"), None
    )


def _judgement(row: MetricRow) -> str:
    est = row.estimate
    if est.known_exactly:
        return "exact (the same in every unit)"
    if row.star:
        return "significant, " + ("better" if row.improved else "worse")
    if est.significant and row.role == "secondary":
        return "not significant under the primary's rule"
    mde = est.mde
    if mde is None:
        return "not significant"
    size = f"±{100 * mde:.1f}%" if est.kind == "relative" else f"±{mde:.2f}pp"
    return f"not significant (could detect {size})"


def no_result(comparison: Comparison, cand: CandidateResult) -> str | None:
    """Why a candidate has no result to read, or None when it has one."""
    if comparison.interpreted:
        return (
            "not performance: Model Runner V2 under Triton's interpreter, its timings are numpy's"
        )
    if comparison.baseline_status != "ok":
        return f"the baseline {comparison.baseline} failed (no launch completed; FAILED below)"
    if cand.status != "ok":
        return "it failed (no launch completed; FAILED below)"
    row = headline_row(cand)
    if row is None:
        return (
            "UNPROVEN: no pass proved its implementation ran"
            if comparison.unproven
            else "no output-throughput row"
        )
    est = row.estimate
    if est.delta is None or math.isnan(est.delta):
        return f"no {short_label(row.label)} estimate" + (f" ({est.note})" if est.note else "")
    if (est.ci_low is None or est.ci_high is None) and not est.known_exactly:
        why = est.note or "fewer than 2 units"
        short = next((s.short for s in comparison.stops if s.short is not None), None)
        return f"{short_label(row.label)} {_interval(row)} has no interval: {why}" + (
            f"; the precision budget ran out: {budget_advice(short)}" if short else ""
        )
    return None


def _parity(cand: CandidateResult) -> str | None:
    parity = cand.parity
    if parity is None or not parity.compared:
        return None
    if parity.identical == parity.compared:
        return "outputs identical"
    where = (
        f", first divergence at token {parity.first_divergence}"
        if parity.first_divergence is not None
        else ""
    )
    if parity.violated:
        return f"outputs MISMATCH ({100 * parity.fraction:.1f}% identical{where})"
    if parity.expected and not parity.exact:
        return (
            f"outputs {100 * parity.fraction:.1f}% identical (as often as the baseline "
            "repeats its own)"
            if parity.judged
            else f"outputs {100 * parity.fraction:.1f}% identical (not judged)"
        )
    return f"outputs {100 * parity.fraction:.1f}% identical"


def verdict(comparison: Comparison, cand: CandidateResult) -> str:
    """'optimized: output throughput -2.4% [-4.4, -0.4], significant, worse; its own part,
    draft time per step, +4.2% [+1.8, +6.7]; outputs identical'; where there is no result,
    'optimized: no result: <why>' first."""
    parts: list[str] = []
    why = no_result(comparison, cand)
    row = headline_row(cand)
    if why is not None:
        parts.append(f"no result: {why}")
    elif row is not None:
        plan = _plan(comparison, cand)
        alone = "this run alone " if plan is not None else ""
        parts.append(f"{short_label(row.label)} {_interval(row)}, {alone}{_judgement(row)}")
        if plan is not None:
            parts.append(plan)
        if comparison.unproven:
            parts.append("UNPROVEN passes left out (below)")
    speedup = comparison.speedups.get(cand.name)
    if speedup is not None and not math.isnan(speedup.delta) and why is None:
        text = f"{1 + speedup.delta:.2f}×"
        if speedup.ci_low is not None and speedup.ci_high is not None:
            text += f" [{1 + speedup.ci_low:.2f}, {1 + speedup.ci_high:.2f}]"
        parts.append(f"{text} over {comparison.no_speculation} (no speculation)")
    adjusted = next((r for r in cand.rows if r.key == ADJUSTED_METRIC), None)
    if adjusted is not None and adjusted is not row and why is None:
        parts.append(_adjusted(adjusted))
    own = next((r for r in cand.rows if r.key == cand.own_part), None)
    if own is not None and own is not row and cand.status == "ok":
        parts.append(f"its own part, {short_label(own.label)}, {_interval(own)}")
    parity = _parity(cand)
    if parity:
        parts.append(parity)
    return f"{cand.name}: " + "; ".join(parts)


def _plan(comparison: Comparison, cand: CandidateResult) -> str | None:
    """A planned series' look (planned_runs), which decides rather than this run alone: its
    combined delta and judgement, or that the run is past the plan."""
    across = comparison.across
    if across is None or across.planned is None:
        return None
    if across.past_plan:
        return f"past its plan of {across.planned} runs: no verdict (the notes say why)"
    if across.failed is not None:
        return "the plan's verdict: none, the runs could not be combined (the notes say why)"
    row = next((r for r in across.rows if r.candidate == cand.name), None)
    if row is None:
        return None
    which = f"the plan's verdict, look {across.runs} of {across.planned}"
    if (row.ci_low is None or row.ci_high is None) and not row.known_exactly:
        return f"{which}: none ({row.note or 'no interval'})"
    judged = "significant" if row.significant else "not significant"
    return f"{which}: {combined_delta(row)}, {judged}"


def _adjusted(row: MetricRow) -> str:
    """The speed-adjusted row in a few words: what it is adjusted by and its interval, or
    that it was withdrawn."""
    a = row.adjustment
    if math.isnan(row.estimate.delta):
        if a is None or a.withdrawn is None:
            return "speed-adjusted row withdrawn"
        return f"speed-adjusted row withdrawn ({withdrawal_reason(a, short=True)})"
    if a is None:
        return f"speed-adjusted {_interval(row)}"
    return f"speed-adjusted (by the {'speed probe' if a.probe else 'step parts'}) {_interval(row)}"


def verdicts(comparison: Comparison) -> list[str]:
    """One verdict line per candidate (a comparison with none: why)."""
    if not comparison.candidates:
        return [f"no result: no candidate to compare with {comparison.baseline}"]
    return [verdict(comparison, c) for c in comparison.candidates]


# -- notes -----------------------------------------------------------------------------------

NOTE_LIMIT = 5  # lines of notes under the default table; the rest are one fold away
SHORT_NOTE = 200  # characters a note keeps there (in full behind the fold)


def shorten(note: str, limit: int = SHORT_NOTE) -> str:
    """The note up to its last clause that fits in `limit` characters, then ' …'."""
    if len(note) <= limit:
        return note
    cut = max(note.rfind("; ", 0, limit), note.rfind(". ", 0, limit), note.rfind(": ", 0, limit))
    if cut < limit // 2:
        cut = note.rfind(" ", 0, limit)
    return note[:cut].rstrip(" ;:.,") + " …"


def pick_notes(first: list[str], limit: int = NOTE_LIMIT) -> tuple[list[str], int]:
    """At most `limit` lines in the given order (most important first), whole: a warning's
    advice is its end. Returns the lines and how many were left out (the fold has them)."""
    kept = first[:limit]
    return kept, len(first) - len(kept)


# -- paths -----------------------------------------------------------------------------------

_ABSOLUTE = re.compile(r"(?<![\w.~:/-])/[^\s;,()\[\]'\"`]+")


def tidy_paths(text: str, roots: tuple[Path, ...] | None = None) -> str:
    """Absolute paths under one of `roots` (default: the current directory) made relative to
    it, and those under the home folder written with '~'."""
    bases = [str(Path(r).resolve()) for r in (roots if roots is not None else (Path.cwd(),))]
    home = str(Path.home())

    def tidy(match: re.Match[str]) -> str:
        path = match.group(0)
        for base in bases:
            if path == base:
                return "."
            if base != "/" and path.startswith(base + "/"):
                return os.path.relpath(path, base)
        if home not in ("", "/") and path.startswith(home + "/"):
            return "~" + path[len(home) :]
        return path

    return _ABSOLUTE.sub(tidy, text)
