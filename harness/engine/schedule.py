"""Drives a shared (one-engine) launch: which arm runs each pass, the switch between passes,
and when a precision run stops. No engine imports: the workers pass in how to measure a pass
and how to switch the implementation inside vLLM's processes.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from harness.analysis.stats import (
    PRECISION_LOOK_EVERY,
    PRECISION_MIN_BLOCKS,
    WARMUP_CHECK_P,
    precision_reached,
    warmup_still_settling,
)
from harness.config.scenario import Precision
from harness.errors import ProofRefused
from harness.wire.progress import FINISHING, PassTally, keep_pass, write_progress
from harness.wire.records import (
    ImplReport,
    PassRecord,
    PrecisionStop,
    RunRecord,
    WorkerResult,
)
from harness.wire.spec import ArmSpec, RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from harness.results.metrics import PassRows

# Checked warm-up (one-engine): at least min(16, blocks) blocks, at most this many.
WARMUP_MIN_BLOCKS = 16
WARMUP_MAX_BLOCKS = 60
# A precision run stops as soon as its interval is narrow enough, so a slow warm-up's tail
# left in its first measured blocks weighs on the few it runs: its warm-up looks for a trend
# at this looser level (warming longer costs time, never validity). Chosen by simulating a
# 10% climb over 60 passes through this scheduler at levels 0.2 (the default), 0.5 and 0.8
# (tests/unit/test_stats_stress.py::test_a_slow_warm_up_stays_in_band_in_a_precision_run;
# the rates are in docs/statistics.md). Holding the stop back while the measured blocks
# still trend gained nothing more.
PRECISION_WARMUP_P = 0.8
# ... and settles only when the last 16 blocks were flat this many blocks earlier as well: a
# 10% climb over 60 passes still ended the warm-up early by chance in 7.5% of simulated runs
# (33% of those A/A significant). Chosen by simulation, as above
# (benchmarks/precision_stress.py; the rates are in docs/statistics.md).
PRECISION_WARMUP_CONFIRM = 4

# (pass index, arm, block) -> the measured pass
MeasureFn = Callable[[int, ArmSpec, int], PassRecord]
# "name:choice" to activate, or None to keep the active one -> reports of the epoch just ended,
# one list per vLLM worker process
SwitchFn = Callable[[str | None], list[list[dict[str, Any]]]]
# Told of each pass as soon as it is whole (its reports in): PassLog's
PassDone = Callable[[PassRecord], None]


def reports_of(raw: list[list[dict[str, Any]]]) -> list[ImplReport]:
    """A switch's reply (per process, its reports of the epoch) as ImplReports."""
    return [ImplReport.from_raw(data) for per_process in raw for data in per_process or []]


def precision_status(
    run: RunSpec,
    passes: list[PassRecord],
    tp_size: int,
    harness_pid: int | None,
    kept: PassRows | None = None,
    frame: pd.DataFrame | None = None,
) -> Look:
    """Whether the precision target is reached on the proven passes so far, compared exactly
    as the report will compare them, and where it stands. `kept`: the rows of
    passes an earlier look summarised (each look then summarises only its new passes).

    until: mde   - every candidate's output-throughput MDE is at most precision.mde;
    until: gates - every gated metric's MDE is at most its gate tolerance (a metric identical
                   in every unit is settled), so each gate can decide with 80% power."""
    from fnmatch import fnmatchcase

    from harness.analysis.compare import Arms, compare_records
    from harness.results.metrics import passes_frame

    assert run.precision is not None
    record = RunRecord(
        run_key=run.run_key,
        variant=run.variant,
        round=run.round,
        order=run.order,
        status="ok",
        wall_s=0.0,
        result=WorkerResult(
            run_key=run.run_key,
            status="ok",
            passes=passes if frame is None else [],
            worker_pid=harness_pid,
        ),
    )
    if run.precision.until == "mde":
        targets = {run.precision.metric: run.precision.mde or 0.0}
    else:
        assert run.gates is not None
        targets = run.gates.metrics
    # Only what the rule reads: the targets, and the output-throughput MDE it reports.
    comparison = compare_records(
        [record],
        Arms.of_launch(run, tp_size),
        run.run_key,
        run.run_key,
        passes_frame([record], kept=kept) if frame is None else frame,
        only=[*targets, "output_throughput"],
    )
    open_items: list[str] = []
    worst: float | None = None
    # The MDE the progress line shows: the targeted row's (until: mde), else throughput's.
    shown_key = run.precision.metric if run.precision.until == "mde" else "output_throughput"
    for cand in comparison.candidates:
        for pattern, target in targets.items():
            rows = [r for r in cand.rows if fnmatchcase(r.key, pattern)]
            if not rows:
                open_items.append(f"{cand.name} {pattern}: no data")
            for row in rows:
                est = row.estimate
                if est.mde is None and est.known_exactly:
                    continue  # identical in every unit: nothing left to estimate
                if row.key == shown_key and est.mde is not None:
                    worst = max(worst or 0.0, est.mde)
                if est.mde is None or not precision_reached(est, target, PRECISION_MIN_BLOCKS - 1):
                    short = est.mde is not None and est.mde <= target and est.df is not None
                    open_items.append(
                        f"{cand.name} {row.key}"
                        + (
                            f" (df {est.df:.0f}; the stop needs {PRECISION_MIN_BLOCKS - 1})"
                            if short
                            else ""
                        )
                    )
    return Look(not open_items, shown_key, worst, open_items)


@dataclass(frozen=True)
class Look:
    """One precision look: reached or not, the MDE of the row it shows (`shown`: the
    targeted row, else output throughput; None: not estimable yet), and the rows not yet
    precise."""

    reached: bool
    shown: str
    worst: float | None
    open_items: list[str]

    def line(self) -> str:
        """The look in the worker's log."""
        what = "output-throughput" if self.shown == "output_throughput" else self.shown
        line = (
            f"{what} MDE ±{100 * self.worst:.2f}%"
            if self.worst is not None
            else f"{what} MDE not estimable yet"
        )
        if self.open_items:
            line += f"; not yet precise: {', '.join(self.open_items[:4])}" + (
                f" (+{len(self.open_items) - 4})" if len(self.open_items) > 4 else ""
            )
        return line


@dataclass
class WarmUp:
    """The checked warm-up of a shared launch: its passes (kept, never measured), how many
    blocks it took, and whether it hit its cap still settling."""

    passes: list[PassRecord] = field(default_factory=list)
    blocks: int = 0
    capped: bool = False


def pass_throughput(record: PassRecord) -> float:
    """Output tokens per second of one pass (what the warm-up check watches)."""
    tokens = sum(r.output_tokens for r in record.requests)
    return tokens / record.duration_s if record.duration_s > 0 else 0.0


def warmup_minimum(run: RunSpec) -> int:
    """Blocks every checked warm-up runs: as many as the launch will measure, up to 16 (16
    for a precision run); a slow climb shows as a trend only over 16 blocks or so at this
    machine's noise, and a short run is as exposed to it as a long one."""
    if run.precision is not None:  # blocks is only its minimum: it may run to hundreds
        return WARMUP_MIN_BLOCKS
    return min(WARMUP_MIN_BLOCKS, max(1, run.blocks))


def _settled(
    run: RunSpec,
    warm: list[PassRecord],
    p_value: float = WARMUP_CHECK_P,
    confirm: int = 0,
    logs: dict[int, tuple[PassRecord, float | None]] | None = None,
) -> bool:
    """Whether no candidate's difference from the baseline is still settling over the
    blocks of `warm` (stats.warmup_still_settling on block differences of log output
    throughput, its trend test at `p_value`, confirmed `confirm` blocks apart). `logs`: each
    pass's log throughput from earlier checks, by id (filled as it goes)."""
    base = next(a.variant for a in run.arms if a.baseline)
    by_block: dict[int, dict[str, list[float]]] = {}
    for p in warm:
        held = logs.get(id(p)) if logs is not None else None
        if held is None or held[0] is not p:
            value = pass_throughput(p)
            held = (p, math.log(value) if value > 0 else None)
            if logs is not None:
                logs[id(p)] = held
        if held[1] is not None and p.block is not None and p.arm is not None:
            by_block.setdefault(p.block, {}).setdefault(p.arm, []).append(held[1])
    for cand in (a.variant for a in run.arms if not a.baseline):
        # Plain means of a block's two or so passes: np.mean per block was most of a
        # simulated precision run's warm-up check.
        d = np.array(
            [
                sum(arms[cand]) / len(arms[cand]) - sum(arms[base]) / len(arms[base])
                for _, arms in sorted(by_block.items())
                if cand in arms and base in arms
            ]
        )
        if warmup_still_settling(d, p_value, confirm):
            return False
    return True


def block_arms(order: list[str], block: int, seed: int, stream: int = 0) -> list[str]:
    """The arms of block `block`: every arm, then the same in reverse (the plan's balanced
    order, A B B A, so a linear drift inside the block hits every arm alike), the arms of its
    first half in an order drawn at random per block: A B B A or B A A B with two arms. Drawn
    from the launch's `seed` (recorded as WorkerResult.block_seed) and `stream` (0 measured
    blocks, 1 the warm-up's), so a launch's order can be told again.

    Why random: a fixed pattern (A B B A, then its mirror B A A B) gives the arm contrast an
    8-pass period with odd harmonics, and a disturbance near 8 or 8/3 passes (a timer or a
    background task at ~1 s: a pass here is 0.3 s) then added the same bias to every block,
    which the t interval read as effect: 13% and 53% A/A false positives at a 2% precision
    target with a 1.5% sine (the statistics audit, 1000 trials). Drawn at random, such a
    disturbance enters each block with a random sign: noise the interval sees, not bias. The
    junctions between blocks repeat an arm by chance, so AR(1) pass noise leaves neighbouring
    block differences uncorrelated on average (repeating A B B A made them correlate, and the
    interval short: the reason for the mirror this replaces)."""
    half = order[: len(order) // 2]
    rng = np.random.default_rng([seed, stream, block])
    first = [half[i] for i in rng.permutation(len(half))]
    return first + first[::-1]


def new_block_seed() -> int:
    """A launch's own seed for its blocks' orientation: fresh entropy, so that re-running a
    scenario does not repeat one draw (and whatever a disturbance made of it)."""
    return secrets.randbits(31)


def _blocks(
    run: RunSpec,
    arms: dict[str, ArmSpec],
    measure: MeasureFn,
    switch: SwitchFn | None,
    block: int,
    index: int,
    seed: int,
    stream: int,
    done: PassDone | None = None,
) -> list[PassRecord]:
    """One balanced block: the arm switched before each pass, its reports collected after;
    `done` gets each pass once it is whole."""
    out: list[PassRecord] = []
    for name in block_arms(run.block_order, block, seed, stream):
        arm = arms[name]
        if switch is not None:
            # The epoch between passes must be empty; what ran before belongs to no pass.
            switch(arm.switch_to)
        record = measure(index + len(out), arm, block)
        if switch is not None:
            record.impl_reports = reports_of(switch(None))
        out.append(record)
        if done is not None:
            done(record)
    return out


def warm_until_settled(
    run: RunSpec,
    measure: MeasureFn,
    switch: SwitchFn | None,
    deadline_unix: float | None,
    warmup: WarmUp,
    log: Callable[[str], None] = print,
    block_seed: int = 0,
    done: PassDone | None = None,
) -> None:
    """Warm-up checked, not assumed: balanced blocks, measured but never counted, until the
    arms' difference has stopped settling (at least warmup_minimum blocks; at most
    WARMUP_MAX_BLOCKS, named when hit), so an arm that warms slowly (compiles, allocates or
    captures on its first calls) does not bias the delta. `block_seed`: block_arms's; `done`
    gets each warm-up pass once it is whole."""
    arms = {a.variant: a for a in run.arms}
    typical: list[float] = []
    logs: dict[int, tuple[PassRecord, float | None]] = {}
    while True:
        if warmup.blocks >= warmup_minimum(run) and (
            _settled(run, warmup.passes, PRECISION_WARMUP_P, PRECISION_WARMUP_CONFIRM, logs)
            if run.precision
            else _settled(run, warmup.passes, logs=logs)
        ):
            break
        if warmup.blocks >= WARMUP_MAX_BLOCKS:
            warmup.capped = True
            log(f"specbench: warm-up hit its cap of {WARMUP_MAX_BLOCKS} blocks still settling")
            break
        if (
            deadline_unix is not None
            and typical
            and time.time() + 2 * float(np.median(typical)) > deadline_unix
        ):
            warmup.capped = True
            break
        t = time.perf_counter()
        warmup.passes += _blocks(
            run,
            arms,
            measure,
            switch,
            warmup.blocks,
            len(warmup.passes),
            block_seed,
            stream=1,
            done=done,
        )
        typical.append(time.perf_counter() - t)
        warmup.blocks += 1
    if warmup.blocks > warmup_minimum(run):
        log(f"specbench: warm-up settled after {warmup.blocks} blocks")


def drive_shared_launch(
    run: RunSpec,
    measure: MeasureFn,
    switch: SwitchFn | None,
    deadline_unix: float | None,
    tp_size: int,
    harness_pid: int | None,
    log: Callable[[str], None] = print,
    passes: list[PassRecord] | None = None,
    warmup: WarmUp | None = None,
    block_seed: int = 0,
    done: PassDone | None = None,
    look: Callable[[], Look] | None = None,
) -> tuple[list[PassRecord], PrecisionStop | None]:
    """Run balanced blocks of passes, switching the arm before each pass and collecting each
    pass's reports right after it. Returns the passes (appended to `passes` as they end, so a
    failure keeps them) and, for precision runs, why it stopped. With `warmup`, first warm
    until settled (warm_until_settled) into it.

    `switch` is None when no arm swaps an implementation (e.g. an A/A of one configuration).
    `block_seed` draws each block's orientation (block_arms): a launch draws its own
    (new_block_seed) and records it; simulations pass theirs. `done` gets each measured pass
    once it is whole (its reports in), before the rest of its block runs. `look`: where
    `done` keeps the passes itself (PassLog, slim), the precision look over what it kept;
    the passes are then not put in `passes`.
    """
    passes = [] if passes is None else passes
    arms = {a.variant: a for a in run.arms}
    if warmup is not None:
        warm_until_settled(run, measure, switch, deadline_unix, warmup, log, block_seed)
    precision = run.precision
    stopped: PrecisionStop | None = None
    block = 0
    block_seconds: list[float] = []
    kept: PassRows = {}  # each pass summarised once across the precision looks
    count = len(passes)
    while True:
        if precision is None:
            if block >= run.blocks:
                break
        else:
            if (
                block >= run.blocks
                and block >= PRECISION_MIN_BLOCKS
                and block % PRECISION_LOOK_EVERY == 0
            ):
                seen = (
                    look()
                    if look is not None
                    else precision_status(run, passes, tp_size, harness_pid, kept)
                )
                aim = _aim(precision)
                log(f"specbench: look after {block} blocks: {seen.line()} (target: {aim})")
                if seen.reached:
                    stopped = _stop(precision, "target", block, seen.worst)
                    break
            if block >= precision.max_blocks:
                stopped = _stop(precision, "max_blocks", block)
                break
            typical = float(np.median(block_seconds[-8:])) if block_seconds else 0.0
            if deadline_unix is not None and time.time() + typical > deadline_unix:
                stopped = _stop(precision, "budget", block)
                break
        t = time.perf_counter()
        for record in _blocks(
            run, arms, measure, switch, block, count, block_seed, stream=0, done=done
        ):
            if look is None:
                passes.append(record)
            count += 1
        block_seconds.append(time.perf_counter() - t)
        block += 1
    return passes, stopped


def _aim(precision: Precision) -> str:
    """The precision target, for the worker's log of each look (the table's words for a
    reached one are present.stops')."""
    if precision.until == "mde" and precision.mde is not None:
        named = "" if precision.metric == "output_throughput" else f"{precision.metric} "
        return f"{named}MDE <= ±{100 * precision.mde:.2f}%"
    return "every gated metric's MDE <= its tolerance"


def _stop(
    precision: Precision,
    reason: Literal["target", "max_blocks", "budget"],
    blocks: int,
    reached: float | None = None,
) -> PrecisionStop:
    """Why a precision launch stopped, with the target or the limit it met."""
    by_mde = precision.until == "mde" and precision.mde is not None
    return PrecisionStop(
        reason=reason,
        blocks=blocks,
        metric=precision.metric if by_mde else None,
        mde=precision.mde if by_mde else None,
        reached_mde=reached,
        max_blocks=precision.max_blocks if reason == "max_blocks" else None,
        budget_s=precision.budget_s if reason == "budget" else None,
    )


def warm_up_arms(run: RunSpec, warm: Callable[[], None], switch: SwitchFn | None) -> None:
    """Warm every arm's code path once, then discard what the warm-up ran."""
    for arm in run.arms:
        if switch is not None:
            switch(arm.switch_to)
        warm()
    if switch is not None:
        switch(None)


class OverlayRefused(RuntimeError):
    """A one-engine overlay whose functions, by where they ran before the first measured
    block, cannot be measured per arm (harness.analysis.proof.overlay_evidence)."""


class _Recorded:
    """A switch that keeps what every call returned until told to stop: the first call's is
    the engine's start, the rest the warm-up's (the evidence of where an overlay runs)."""

    def __init__(self, switch: SwitchFn) -> None:
        self.switch = switch
        self.epochs: list[list[ImplReport]] = []
        self.recording = True

    def __call__(self, choice: str | None) -> list[list[dict[str, Any]]]:
        raw = self.switch(choice)
        if self.recording:
            self.epochs.append(reports_of(raw))
        return raw


def check_overlay_evidence(
    run: RunSpec, recorded: _Recorded, files: Callable[[], list[ImplReport]], harness_pid: int
) -> None:
    """Refuse, before any measured block, an overlay that runs where the switch cannot reach,
    only at start-up, shadowed, or nowhere: raises OverlayRefused naming each function, and
    the way to measure it anyway (launch-per-arm on a build of the branch)."""
    from harness.analysis.proof import overlay_evidence

    recorded.recording = False
    if not recorded.epochs:
        return
    startup, *warm = recorded.epochs
    problems = overlay_evidence(startup, [r for epoch in warm for r in epoch], files(), harness_pid)
    if problems:
        changed = [a.variant for a in run.overlay.arms if a.change] if run.overlay else []
        builds = " or ".join(f"variants.{name}.python" for name in changed) or "python:"
        raise OverlayRefused(
            "overlay refused before the first measured block: "
            + "; ".join(problems)
            + f". To measure it, give the branch as a build ({builds}: an environment with "
            "it installed): it then runs launch-per-arm"
        )


def check_warmup_proof(
    run: RunSpec, warm: list[PassRecord], tp_size: int, harness_pid: int
) -> None:
    """Refuse, before the first measured block, an arm whose warm-up passes all fail the
    proof its measured passes will be judged by: the switch did not change what the proof
    records (another choice ran, zero calls, a wrong path, a rank missing). One passing
    warm-up pass is enough; the measured passes are each judged again."""
    from harness.analysis.proof import proof_problems

    for arm in run.arms:
        mine = [p for p in warm if p.arm == arm.variant]
        if arm.implementation is None or not mine:
            continue
        problems = [
            proof_problems(p.impl_reports, arm.implementation, tp_size, harness_pid) for p in mine
        ]
        if all(problems):
            raise ProofRefused(
                f"proof failed in all {len(mine)} warm-up pass(es) of {arm.variant}, before "
                f"the first measured block: {'; '.join(problems[-1])}. Its measured passes "
                f"would all be unproven ({arm.implementation} did not run as switched)"
            )


class PassLog:
    """A launch's measured passes as each one ends: kept on disk at once (wire.progress
    .keep_pass, so a launch that never writes its result still keeps them), counted in the
    progress note the parent shows and its stall watchdog bounds (wire.progress
    .write_progress), and put in `result.passes`.

    `slim`: a pass kept on disk stays only there (`result.passes_in_file` counts them; the
    parent reads them back), and a precision run's looks read each pass's row, packed, and
    whether it proved its arm's implementation, both taken once as it ended. The worker's
    memory then grows by a few hundred bytes a pass however long it measures (it held every
    pass, requests and all, before: about 52 KiB a pass of the demo). `check_pass`: why a
    pass's step times cannot be trusted (None: they can); the first such line withdraws
    every pass's step times."""

    def __init__(
        self,
        run: RunSpec,
        result: WorkerResult,
        slim: bool = False,
        tp_size: int = 1,
        harness_pid: int | None = None,
        check_pass: Callable[[PassRecord], str | None] | None = None,
    ) -> None:
        from harness.results.metrics import PassTable

        if slim and run.precision is not None:
            # What a look imports, now rather than at the first look mid-measuring (about
            # 11 MiB of the worker's memory: the soak saw it as a step after 100 passes).
            import harness.analysis.compare  # noqa: F401

        self.run, self.result, self.slim = run, result, slim
        self.tp_size, self.harness_pid, self.check_pass = tp_size, harness_pid, check_pass
        self.expected, self.at_least = run.expected_passes, run.precision is not None
        self.implementations = {a.variant: a.implementation for a in run.arms}
        self.tally = PassTally()
        self.parts_problem: str | None = None
        # A slim precision run's looks: each pass's row, and whether it proved its arm.
        self.table = PassTable()
        self.proven: list[bool] = []
        self.kept: PassRows = {}  # the other looks': each pass summarised once
        self.warm = 0
        self.warm_since: float | None = None
        self.measuring_since: float | None = None

    def warming(self) -> None:
        """The warm-up starts, or its checked passes do (one-engine)."""
        self.warm_since = time.time()
        self._note("warming up")

    def warm_pass(self, record: PassRecord) -> None:
        keep_pass(record, warmup=True)
        self.warm += 1
        self._note("warming up")

    def measuring(self) -> None:
        """A measured pass starts (the first one's start is the measuring's)."""
        self.measuring_since = self.measuring_since or time.time()

    def measured_pass(self, record: PassRecord) -> None:
        on_disk = keep_pass(record)
        self.tally.add(record)
        if self.check_pass is not None and self.parts_problem is None:
            self.parts_problem = self.check_pass(record)
        if self.slim and self.at_least:
            self._summarise(record)
        if self.slim and on_disk:
            self.result.passes_in_file += 1
        else:
            self.result.passes.append(record)
        self._note("measuring")

    def _summarise(self, record: PassRecord) -> None:
        from harness.analysis.proof import proof_problems
        from harness.results.metrics import pass_head, pass_row

        run = self.run
        head = pass_head(
            run.run_key,
            record.arm or run.variant,
            run.round,
            run.cell,
            run.order,
            record.block,
            record.repeat,
        )
        self.table.add(head, pass_row(record))
        implementation = self.implementations.get(record.arm or "")
        self.proven.append(
            implementation is None
            or record.arm is None
            or not proof_problems(
                record.impl_reports, implementation, self.tp_size, self.harness_pid
            )
        )

    def look(self) -> Look:
        """The precision look (precision_status) over every measured pass so far; a slim
        launch's unproven passes enter no number, as compare's rule has it."""
        if not self.slim:
            return precision_status(
                self.run, self.result.passes, self.tp_size, self.harness_pid, self.kept
            )
        with _object_strings():
            frame = self.table.frame(self.proven)
            return precision_status(self.run, [], self.tp_size, self.harness_pid, frame=frame)

    def finished(self) -> None:
        """Every pass is measured: what is left (profiled passes, the engine's shutdown) runs
        no pass the stall watchdog bounds as one. Withdraws the step times where a pass's
        parts did not add up."""
        if self.parts_problem is not None:
            print(f"specbench: {self.parts_problem}", file=sys.stderr)
            self.result.left_out.append(self.parts_problem)
            self.result.step_times_withdrawn = True
            self.result.passes = [
                p.model_copy(update={"step_times": None}) for p in self.result.passes
            ]
        self._note(FINISHING)

    def _note(self, stage: str) -> None:
        write_progress(
            stage,
            [],
            self.expected,
            self.at_least,
            self.measuring_since,
            self.warm,
            self.warm_since,
            self.tally,
        )


@contextlib.contextmanager
def _object_strings() -> Iterator[None]:
    """Text as Python objects, not pandas 3's Arrow strings, while a slim look runs: the
    Arrow buffers each look made went to Arrow's own allocator, which kept them, and the
    worker grew by about 3 KiB a pass (a probe through PassLog.look on the demo's real
    passes: 3.3 KiB a pass with them, 0.44 without). pandas 3 deprecates the option it
    takes (pandas 2 has it off already; where it is gone, the look runs as it is)."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pd.get_option("future.infer_string")
            context: contextlib.AbstractContextManager[object] = pd.option_context(
                "future.infer_string", False
            )
        except KeyError:  # pandas without the option (its OptionError)
            context = contextlib.nullcontext()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with context:
            yield


def measure_launch(
    run: RunSpec,
    measure: Callable[[int, str | None, int | None], PassRecord],
    warm_up: Callable[[], None] | None,
    switch: SwitchFn,
    deadline_unix: float | None,
    tp_size: int,
    harness_pid: int,
    result: WorkerResult,
    impl_files: Callable[[], list[ImplReport]] = list,
    slim: bool = False,
    check_pass: Callable[[PassRecord], str | None] | None = None,
) -> tuple[PrecisionStop | None, float]:
    """What both workers do between engine start and shutdown, either design: warm up, then
    measure into `result.passes` (one-engine: the checked warm-up's passes into
    `result.warmup_passes`). Returns why a precision run stopped and the warm-up's seconds.
    A one-engine overlay is first checked on where its functions ran during the engine's
    start and the warm-up (every process's report files: `impl_files`), and refused before
    the first measured block when they cannot be measured per arm. `slim` and
    `check_pass`: PassLog's (a slim launch's passes are in its pass file, not in
    `result.passes`)."""
    told = PassLog(run, result, slim, tp_size, harness_pid, check_pass)
    told.warming()
    t = time.perf_counter()

    def timed(repeat: int, variant: str | None, block: int | None) -> PassRecord:
        told.measuring()
        return measure(repeat, variant, block)

    if run.design != "one-engine":
        if warm_up is not None:
            warm_up()
        warm_s = time.perf_counter() - t
        for repeat in range(run.repeats):
            told.measured_pass(timed(repeat, None, None))
        told.finished()
        return None, warm_s
    swap: SwitchFn | None = switch if any(a.switch_to for a in run.arms) else None
    recorded = _Recorded(switch) if swap is not None and run.overlay is not None else None
    swap = recorded or swap
    if warm_up is not None:
        warm_up_arms(run, warm_up, swap)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    warm = WarmUp(passes=result.warmup_passes)
    seed = result.block_seed = new_block_seed()
    told.warming()  # the checked warm-up's passes start: each is bounded like a measured one
    warm_until_settled(
        run,
        lambda i, arm, block: measure(i, arm.variant, block),
        swap,
        deadline_unix,
        warm,
        log,
        seed,
        done=told.warm_pass,
    )
    if recorded is not None:
        check_overlay_evidence(run, recorded, impl_files, harness_pid)
    if swap is not None:
        check_warmup_proof(run, result.warmup_passes, tp_size, harness_pid)
    result.warmup_blocks, result.warmup_capped = warm.blocks, warm.capped
    warm_s = time.perf_counter() - t
    _, stopped = drive_shared_launch(
        run,
        lambda i, arm, block: timed(i, arm.variant, block),
        swap,
        deadline_unix,
        tp_size,
        harness_pid,
        log=log,
        block_seed=seed,
        done=told.measured_pass,
        look=told.look,
    )
    told.finished()
    return stopped, warm_s
