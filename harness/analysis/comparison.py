"""What a comparison is: per candidate, every metric's delta with its uncertainty, output
parity, what ran and what failed. Built by harness.analysis.compare (one run) and
harness.analysis.crossrun (two runs); rendered by harness.present, judged by
harness.analysis.gate. No computation here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from harness.analysis.budget import LaunchStop
from harness.analysis.contention import Load, MachineUse
from harness.analysis.profiles import OpDelta
from harness.analysis.proof import Unproven
from harness.analysis.setup import Setup
from harness.analysis.stats import DeltaEstimate
from harness.wire.platform import Platform


@dataclass(frozen=True)
class Check:
    """A mean block difference (log scale) with its interval at `level`."""

    mean: float
    low: float
    high: float
    level: float

    def moved(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Withdrawal:
    """Why the speed-adjusted row is withdrawn: the covariate's own delta moved (`pair`
    None), or the checked pair's ratio is not within ±`margin` (`check` at 90%)."""

    check: Check
    pair: tuple[str, str] | None = None
    margin: float | None = None


@dataclass(frozen=True)
class SpeedAdjustment:
    """The speed-adjusted row's facts (harness.analysis.adjusted): what it adjusted by (the
    covariate's name; `probe`: the speed probe, else step parts), the change's declared part,
    the blocks, theta, the share of the variance removed, the widening for the parts' own
    move, and why it is withdrawn (None: shown). harness.present.tables words its note."""

    covariate: str
    part: str | None
    units: int
    theta: float
    removed: float
    widen: float
    withdrawn: Withdrawal | None = None
    probe: bool = False  # the covariate is the speed probe (no change touches it)
    twin: bool = False  # ... checked against its twin in another process (harness.engine.twin)
    contrast: Check | None = None  # the checked pair's ratio, 90%; None: no pair was checked


@dataclass
class MetricRow:
    """One metric for one candidate."""

    key: str
    label: str
    higher_is_better: bool
    baseline: float
    candidate: float
    estimate: DeltaEstimate
    # Its place in the table's family of tests (harness.analysis.compare.mark_family):
    # "primary" (tested alone at 5%), "secondary" (starred only after the primary is, at
    # Holm-adjusted 5% across the secondary rows), "exact" (the same in every unit: not
    # tested); None where no family was declared (each row alone at 5%).
    role: str | None = None
    adjusted_p: float | None = None  # secondary rows: Holm's adjusted p-value
    starred: bool | None = None  # the star under the family's rule (None: no family)
    adjustment: SpeedAdjustment | None = None  # the speed-adjusted row's facts

    @property
    def star(self) -> bool:
        """Whether the table stars this row: under the family's rule where one was declared,
        else the row's own 5% test."""
        return self.estimate.significant if self.starred is None else self.starred

    @property
    def improved(self) -> bool | None:
        """True/False when the delta is significant; None when it is not."""
        if not self.estimate.significant:
            return None
        return (self.estimate.delta > 0) == self.higher_is_better


@dataclass
class Parity:
    """Greedy output parity of a candidate against the baseline's first pass, judged against
    the baseline's own: where exact parity cannot be demanded (vLLM on a GPU is not
    batch-invariant by default, and serve batches follow arrival times), a candidate is a
    mismatch only when its passes repeat the baseline's outputs less often than the baseline's
    own later passes do (a one-sided permutation test on the passes' identical fractions, at
    PARITY_ALPHA; the pass is the unit, since one pass's batches move many outputs at once)."""

    compared: int  # (pass, prompt) pairs compared
    identical: int
    first_divergence: int | None  # earliest token position where any output differs
    baseline_self_identical: float | None  # baseline passes vs its own first pass
    expected: bool = False  # the scenario says outputs must be identical
    exact: bool = True  # exact parity is demanded (a CPU, or VLLM_BATCH_INVARIANT=1)
    # Per pass, the fraction of its outputs identical to the baseline's first pass: the
    # candidate's passes, and the baseline's own later passes.
    pass_identical: list[float] = field(default_factory=list)
    self_pass_identical: list[float] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return self.identical / self.compared if self.compared else float("nan")

    @property
    def judged(self) -> bool:
        """Whether a mismatch can be told: exact parity, or enough of the baseline's own
        repeats that the test can reach PARITY_ALPHA at all."""
        n, m = len(self.pass_identical), len(self.self_pass_identical)
        return self.exact or (n > 0 and m > 0 and 1 / math.comb(n + m, m) < PARITY_ALPHA)

    @cached_property  # 1,999 resamples; the table, the verdict and the exit code each ask
    def p_value(self) -> float | None:
        """The one-sided permutation p of 'the candidate repeats the baseline less often than
        the baseline repeats itself' (None: exact parity, or not judged)."""
        if self.exact or not self.judged:
            return None
        from scipy.stats import permutation_test

        cand = np.asarray(self.pass_identical)
        own = np.asarray(self.self_pass_identical)
        if np.all(cand == own[0]) and np.all(own == own[0]):
            return 1.0
        result = permutation_test(
            (cand, own),
            lambda a, b: np.mean(a) - np.mean(b),
            permutation_type="independent",
            alternative="less",
            n_resamples=1999,
            random_state=0,
        )
        return float(result.pvalue)

    @property
    def violated(self) -> bool:
        if not self.expected or self.identical == self.compared:
            return False
        if self.exact:
            return True
        p = self.p_value
        return p is not None and p < PARITY_ALPHA


PARITY_ALPHA = 0.05


@dataclass
class CandidateResult:
    name: str
    status: str  # "ok", or "failed" when no launch of this variant completed
    rows: list[MetricRow] = field(default_factory=list)
    parity: Parity | None = None
    implementation: str | None = None
    ran: list[str] = field(default_factory=list)  # code paths the workers reported
    failures: list[str] = field(default_factory=list)
    # The row of the part of the step the change lives in (its swap's part, or where its
    # overlaid functions run), and why; the table marks it. None: not one known part.
    own_part: str | None = None
    own_part_why: str | None = None


@dataclass
class Factor:
    """One multiplicative term of a speedup: its geometric mean over rounds and 95% CI."""

    key: str
    label: str
    value: float
    low: float | None
    high: float | None


@dataclass
class ProfileTable:
    """A profiled run (harness.analysis.profiles): the ops whose self time per pass differs
    most between a candidate and the baseline, from passes profiled after the measured ones."""

    candidate: str
    baseline: str
    passes: dict[str, int]  # arm -> profiled passes
    pass_s: dict[str, float]  # arm -> mean wall time of a profiled pass
    measured_s: dict[str, float]  # arm -> median wall time of a measured pass
    traces: str  # where the trace files are, relative to the run folder
    rows: list[OpDelta]


@dataclass
class Attribution:
    """Where a candidate's output-throughput delta comes from (harness.analysis.attribution):
    each part's contribution to it (fractions; they add up to `measured` in every unit), with
    95% intervals over the design's units."""

    candidate: str
    baseline: str
    units: int
    unit: str  # "blocks" or "rounds"
    measured: Factor  # the mean of the per-unit deltas (the parts' sum)
    parts: list[Factor]  # draft time, verification forward, rest of the step, outside, tokens
    carrier: str | None  # the part with the largest significant contribution, if any
    finding: str | None  # a significant share outside the timed steps


@dataclass
class Decomposition:
    """Where a speculative arm's speedup over the no-speculation arm goes
    (harness.analysis.speedup): `factors` multiply to `measured` in every round."""

    arm: str
    reference: str
    k: int  # draft tokens per step
    rounds: list[int]
    measured: Factor
    factors: list[Factor]  # ideal, acceptance, draft, verification, other
    parts_of_acceptance: list[Factor]  # per-request acceptance, the batch draining unevenly
    parts_of_other: list[Factor]  # rest of the step, outside the steps
    raw: dict[str, float]  # per-step milliseconds and tokens, both arms
    alpha: float  # pooled acceptance rate (accepted / drafted tokens)
    acceptance_length: float  # 1 + accepted / drafts: the measured one
    draft_cost: float  # c: draft time per step over a plain step's time
    leviathan_tokens: float  # (1 - alpha^(k+1)) / (1 - alpha)
    leviathan_speedup: float  # leviathan_tokens / (1 + c)

    def terms(self) -> list[tuple[Factor, str | None]]:
        """Every factor in reading order, each with the factor it is a part of (None for the
        five that multiply to the measured speedup, and for the measured one, last)."""
        parts = {"acceptance": self.parts_of_acceptance, "other": self.parts_of_other}
        out: list[tuple[Factor, str | None]] = []
        for f in self.factors:
            out.append((f, None))
            out += [(part, f.key) for part in parts.get(f.key, [])]
        return [*out, (self.measured, None)]


@dataclass
class Warmup:
    """A shared launch's checked warm-up: how many blocks, and whether it hit its cap still
    settling (else the arms' difference settled)."""

    launch: str
    blocks: int
    capped: bool


@dataclass
class AcrossRow:
    """One candidate's primary-metric delta over every run of the comparison combined
    (repeats.combined): its interval anytime-valid across re-runs."""

    candidate: str
    label: str
    kind: str  # "relative" or "points" (DeltaEstimate.kind)
    delta: float
    ci_low: float | None
    ci_high: float | None
    significant: bool
    known_exactly: bool
    note: str | None


@dataclass
class AcrossRuns:
    """The earlier runs of this comparison the run store held when it ran (`earlier`, their
    folders' names), and all of them with this one combined as `gate --combine` combines
    them: `runs` combined (0: none), the primary metric's rows, or why they could not be
    combined (`failed`). `kept`: a version-1 across_runs.json's notes, kept as written.
    `planned`: the scenario's planned_runs, whose look the rows are (the first run's too)."""

    earlier: list[str] = field(default_factory=list)
    runs: int = 0
    rows: list[AcrossRow] = field(default_factory=list)
    failed: str | None = None
    kept: list[str] = field(default_factory=list)
    planned: int | None = None  # the scenario's planned_runs: the rows are that plan's look

    @property
    def past_plan(self) -> bool:
        """The plan's runs were all made before this one: no look combines it."""
        return self.planned is not None and len(self.earlier) >= self.planned


@dataclass
class HistoryLook:
    """What a gate against history read: `runs` earlier runs of the scenario on this
    machine, and the folders the store's history left out, each with why."""

    scenario: str
    runs: int
    skipped: list[str] = field(default_factory=list)


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
    # Differences a --force comparison went past (each as its refusal would name it).
    compared_anyway: list[str] = field(default_factory=list)
    # Two runs' comparison (crossrun): the build fields that differ, on purpose.
    builds_differ: list[str] = field(default_factory=list)
    # gate --combine: the runs combined, oldest first (each a launch).
    combined: list[str] = field(default_factory=list)
    # The scenario's planned_runs, where the combination is a look of that plan.
    planned: int | None = None
    across: AcrossRuns | None = None  # this comparison's earlier runs, and all combined
    history: HistoryLook | None = None  # a gate against history: what it read
    setup: Setup | None = None  # how each pass was driven
    # A launch ran under Triton's interpreter (Model Runner V2 on a CPU): its timings are
    # not performance (present puts config.interpreter.NOT_PERFORMANCE first).
    interpreted: bool = False
    # The passes saw different prompts (their workload hashes differ).
    mixed_workloads: bool = False
    # What the launches' workers left out on their platform, one line each, as they said it.
    left_out: list[str] = field(default_factory=list)
    # The TP size of a one-engine run measured in a single launch (TP > 1 only): the effect
    # differs between TP launches by more than one launch's interval shows.
    tp_in_one_launch: int | None = None
    # Each launch's KV capacity in blocks, where the arms' launches got different ones
    # (wire.platform.kv_capacity_differs); empty where they agree.
    kv_blocks: dict[str, int] = field(default_factory=dict)
    # What each launch's engine ran on (its rank-0 worker's Platform); launches that
    # reported none (older runs, a worker that died early) are not in it.
    platforms: dict[str, Platform] = field(default_factory=dict)
    # How the prompts were sent, as the workers said (engine.chat: chat template, raw, ids).
    prompts: list[str] = field(default_factory=list)
    # How the run used the machine (shared, or a wait for another benchmark): workflow.
    machine: MachineUse | None = None
    # What else loaded the machine during the passes (analysis.contention's facts; its
    # findings, a busy machine or a disturbance lined up with an arm, are worded by
    # present.contention among the warnings, and summary.json keeps them for `history`).
    load: Load | None = None
    # Why acceptance here is unlike real text's (config.Scenario.unrealistic_acceptance:
    # "random", "ignore_eos"); present words it.
    unrealistic_acceptance: list[str] = field(default_factory=list)
    design: str = "launch-per-arm"
    # Passes left out because their vLLM processes did not prove the arm's path, per arm.
    discarded: dict[str, int] = field(default_factory=dict)
    # Launches or passes whose implementation was not proven: `run` exits non-zero.
    unproven: list[Unproven] = field(default_factory=list)
    stops: list[LaunchStop] = field(default_factory=list)  # why precision launches ended
    warmups: list[Warmup] = field(default_factory=list)  # each shared launch's checked warm-up
    # Arm -> the vLLM build it ran under (the manifest's build record: vllm, distribution,
    # location, git, python).
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Arm -> its own change overlaid on vLLM's functions: their qualnames, and the change's
    # own description (harness.wire.overlay.overlaid_functions).
    overlays: dict[str, tuple[list[str], str]] = field(default_factory=dict)
    # The arm that runs without speculation, each speculative arm's output throughput over
    # it (a relative delta: the speedup minus one), and where each speedup goes.
    no_speculation: str | None = None
    speedups: dict[str, DeltaEstimate] = field(default_factory=dict)
    decompositions: list[Decomposition] = field(default_factory=list)
    # Where each candidate's delta comes from, from the step timer (step_times runs).
    attributions: list[Attribution] = field(default_factory=list)
    # Profiled runs: the ops whose self time differs most per candidate.
    profiles: list[ProfileTable] = field(default_factory=list)
    # Prompts with categories (harness.analysis.categories): category -> one result per
    # candidate with its per-category rows, and the requests of each category in a pass.
    categories: dict[str, list[CandidateResult]] = field(default_factory=dict)
    category_requests: dict[str, int] = field(default_factory=dict)
    # The scenario's primary metric: the rule behind the table's stars (MetricRow.role);
    # None for comparisons without a declared family (each row alone at 5%).
    primary_metric: str | None = None
    # One-engine runs: candidate -> its output-throughput delta as the blocks came in, one
    # point per 4 blocks (harness.analysis.compare.running_estimate: blocks, delta, ci_low,
    # ci_high, mde), the last the table's estimate. Drawn, not stored in summary.json.
    running: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    @property
    def parity_violations(self) -> list[str]:
        return [c.name for c in self.candidates if c.parity is not None and c.parity.violated]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("running")
        data["platforms"] = {k: p.model_dump() for k, p in self.platforms.items()}
        for stop, raw_stop in zip(self.stops, data["stops"], strict=True):
            raw_stop["stop"] = stop.stop.model_dump() if stop.stop is not None else None
        for cand, raw in zip(self.candidates, data["candidates"], strict=True):
            for row, raw_row in zip(cand.rows, raw["rows"], strict=True):
                raw_row["improved"] = row.improved
                raw_row["star"] = row.star
                raw_row["estimate"]["known_exactly"] = row.estimate.known_exactly
                raw_row["estimate"]["findings"] = [
                    {"kind": type(f).__name__, **asdict(f)} for f in row.estimate.findings
                ]
                if row.estimate.runs == 1:  # a single run's fixed interval: as before
                    del raw_row["estimate"]["alpha"], raw_row["estimate"]["runs"]
            if cand.parity is not None:
                raw["parity"]["fraction"] = cand.parity.fraction
                raw["parity"]["violated"] = cand.parity.violated
        return data
