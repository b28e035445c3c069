"""Drives a shared (one-engine) launch: which arm runs each pass, the switch between passes,
and when a precision run stops. No engine imports: the workers pass in how to measure a pass
and how to switch the implementation inside vLLM's processes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.plan import ArmSpec, RunSpec
from harness.records import ImplReport, PassRecord, RunRecord, WorkerResult
from harness.stats import PRECISION_LOOK_EVERY, PRECISION_MIN_BLOCKS, precision_reached

# (pass index, arm, block) -> the measured pass
MeasureFn = Callable[[int, ArmSpec, int], PassRecord]
# "name:choice" to activate, or None to keep the active one -> reports of the epoch just ended,
# one list per vLLM worker process
SwitchFn = Callable[[str | None], list[list[dict[str, Any]]]]


def _reports(raw: list[list[dict[str, Any]]]) -> list[ImplReport]:
    return [ImplReport.from_raw(data) for per_process in raw for data in per_process or []]


def precision_status(run: RunSpec, passes: list[PassRecord], tp_size: int,
                     harness_pid: int | None) -> tuple[bool, str]:
    """Whether the precision target is reached on the proven passes so far, compared exactly
    as the report will compare them; and a few words on where it stands.

    until: mde   - every candidate's output-throughput MDE is at most precision.mde;
    until: gates - every gated metric's MDE is at most its gate tolerance (a metric identical
                   in every unit is settled), so each gate can decide with 80% power."""
    from fnmatch import fnmatchcase

    from harness.compare import compare_records

    assert run.precision is not None
    base = next(a for a in run.arms if a.baseline)
    record = RunRecord(run_key=run.run_key, variant=run.variant, round=run.round,
                       order=run.order, status="ok", wall_s=0.0,
                       result=WorkerResult(run_key=run.run_key, status="ok", passes=passes,
                                           worker_pid=harness_pid))
    comparison = compare_records(
        [record], base.variant, [a.variant for a in run.arms if not a.baseline], run.run_key,
        run.run_key, {a.variant: a.implementation for a in run.arms}, greedy=False,
        design="one-engine", tp_sizes={a.variant: tp_size for a in run.arms})
    if run.precision.until == "mde":
        targets = {"output_throughput": run.precision.mde or 0.0}
    else:
        assert run.gates is not None
        targets = run.gates.metrics
    open_items: list[str] = []
    worst: float | None = None
    for cand in comparison.candidates:
        for pattern, target in targets.items():
            rows = [r for r in cand.rows if fnmatchcase(r.key, pattern)]
            if not rows:
                open_items.append(f"{cand.name} {pattern}: no data")
            for row in rows:
                est = row.estimate
                if est.mde is None and est.note and est.note.startswith("no spread"):
                    continue  # identical in every unit: nothing left to estimate
                if row.key == "output_throughput" and est.mde is not None:
                    worst = max(worst or 0.0, est.mde)
                if est.mde is None or not precision_reached(est, target):
                    open_items.append(f"{cand.name} {row.key}")
    shown = f"output-throughput MDE ±{100 * worst:.2f}%" if worst is not None else \
        "output-throughput MDE not estimable yet"
    if open_items:
        more = f"; not yet precise: {', '.join(open_items[:4])}" + (
            f" (+{len(open_items) - 4})" if len(open_items) > 4 else "")
        return False, shown + more
    return True, shown


def drive_shared_launch(run: RunSpec, measure: MeasureFn, switch: SwitchFn | None,
                        deadline_unix: float | None, tp_size: int,
                        harness_pid: int | None,
                        log: Callable[[str], None] = print,
                        passes: list[PassRecord] | None = None,
                        ) -> tuple[list[PassRecord], str | None]:
    """Run balanced blocks of passes, switching the arm before each pass and collecting each
    pass's reports right after it. Returns the passes (appended to `passes` as they end, so a
    failure keeps them) and, for precision runs, why it stopped.

    `switch` is None when no arm swaps an implementation (e.g. an A/A of one configuration).
    """
    passes = [] if passes is None else passes
    arms = {a.variant: a for a in run.arms}
    precision = run.precision
    stopped: str | None = None
    block = 0
    block_seconds: list[float] = []
    while True:
        if precision is None:
            if block >= run.blocks:
                break
        else:
            if block >= run.blocks and block >= PRECISION_MIN_BLOCKS \
                    and block % PRECISION_LOOK_EVERY == 0:
                reached, where = precision_status(run, passes, tp_size, harness_pid)
                target = (f"MDE <= ±{100 * precision.mde:.2f}%"
                          if precision.until == "mde" and precision.mde is not None
                          else "every gated metric's MDE <= its tolerance")
                log(f"specbench: look after {block} blocks: {where} (target: {target})")
                if reached:
                    stopped = f"target reached ({target}) after {block} blocks: {where}"
                    break
            if block >= precision.max_blocks:
                stopped = f"max_blocks={precision.max_blocks} reached"
                break
            typical = float(np.median(block_seconds[-8:])) if block_seconds else 0.0
            if deadline_unix is not None and time.time() + typical > deadline_unix:
                stopped = f"time budget budget_s={precision.budget_s:g} spent after {block} blocks"
                break
        t = time.perf_counter()
        for name in run.block_order:
            arm = arms[name]
            if switch is not None:
                # The epoch between passes must be empty; what ran before belongs to no pass.
                switch(arm.switch_to)
            record = measure(len(passes), arm, block)
            if switch is not None:
                record.impl_reports = _reports(switch(None))
            passes.append(record)
        block_seconds.append(time.perf_counter() - t)
        block += 1
    return passes, stopped


def warm_up_arms(run: RunSpec, warm: Callable[[], None], switch: SwitchFn | None) -> None:
    """Warm every arm's code path once, then discard what the warm-up ran."""
    for arm in run.arms:
        if switch is not None:
            switch(arm.switch_to)
        warm()
    if switch is not None:
        switch(None)


def measure_launch(run: RunSpec, measure: Callable[[int, str | None, int | None], PassRecord],
                   warm_up: Callable[[], None] | None, switch: SwitchFn,
                   deadline_unix: float | None, tp_size: int, harness_pid: int,
                   passes: list[PassRecord]) -> tuple[str | None, float]:
    """What both workers do between engine start and shutdown, either design: warm up, then
    measure into `passes`. Returns why a precision run stopped and the warm-up's seconds."""
    from harness.progress import write_progress

    expected, at_least = run.expected_passes, run.precision is not None
    write_progress("warming up", passes, expected, at_least, None)
    t = time.perf_counter()
    since: float | None = None

    def timed(repeat: int, variant: str | None, block: int | None) -> PassRecord:
        """A pass, then the note the parent shows (the caller appends the pass)."""
        nonlocal since
        since = since or time.time()
        record = measure(repeat, variant, block)
        write_progress("measuring", [*passes, record], expected, at_least, since)
        return record

    if run.design != "one-engine":
        if warm_up is not None:
            warm_up()
        warm_s = time.perf_counter() - t
        for repeat in range(run.repeats):
            passes.append(timed(repeat, None, None))
        return None, warm_s
    swap = switch if any(a.switch_to for a in run.arms) else None
    if warm_up is not None:
        warm_up_arms(run, warm_up, swap)
    warm_s = time.perf_counter() - t
    _, stopped = drive_shared_launch(
        run, lambda i, arm, block: timed(i, arm.variant, block), swap, deadline_unix, tp_size,
        harness_pid, log=lambda m: print(m, file=sys.stderr, flush=True), passes=passes)
    return stopped, warm_s
