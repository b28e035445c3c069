"""Proof that a launch or a pass ran the implementation its arm chose, from vLLM's own reports.

Pure: both the worker (to stop a precision run on valid passes only) and compare.py (to
discard unproven passes and fail the run) judge the same ImplReports the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.catalog import proof_parts
from harness.results.run import arm_passes
from harness.wire.records import ImplReport, RunRecord


def proof_problems(
    reports: list[ImplReport] | None,
    implementation: str | None,
    tp_size: int,
    harness_pid: int | None,
) -> list[str]:
    """Why `reports` do not prove that `implementation` ran in every vLLM process (empty when
    they do). Missing reports, install errors, another choice, zero calls, a wrong or mixed
    path, a missing TP rank and a report from the harness's own process each count."""
    if implementation is None:
        return []
    if reports is None:
        return ["no implementation reports"]
    name, choice = proof_parts(implementation)
    mine = [r for r in reports if r.implementation == name]
    if not mine:
        return [f"no vLLM process reported running {implementation}"]
    problems = []
    for r in mine:
        who = f"pid {r.pid}" + (f" (TP rank {r.tp_rank})" if r.tp_rank is not None else "")
        if harness_pid is not None and r.pid == harness_pid:
            problems.append(f"{who} is the harness's own worker process, not vLLM's")
        if r.error:
            problems.append(f"{who}: {r.error}")
        elif r.choice != choice:
            problems.append(f"{who} ran {r.implementation}:{r.choice}")
        elif not r.paths or not r.calls:
            problems.append(f"{who}: zero calls")
        elif r.matches_choice is False:
            problems.append(f"{who} ran paths {sorted(r.paths)}")
    problems += _overlay_unreached(mine) if name == "overlay" else []
    if tp_size > 1:
        ranks = {r.tp_rank for r in mine}
        missing = sorted(set(range(tp_size)) - ranks)
        if missing:
            problems.append(f"no report from TP rank(s) {', '.join(map(str, missing))}")
    return problems


def _overlay_unreached(reports: list[ImplReport]) -> list[str]:
    """An overlay's functions that no vLLM process called: each is named, since a change
    that never runs measures nothing. A function vLLM does not have (a change's new helper)
    is owed only by the arms whose change defines it: an arm without it runs code that never
    names it."""
    overlaid: list[str] = []
    for r in reports:
        listed = r.details.get("overlaid")
        if isinstance(listed, list):
            overlaid += [str(k) for k in listed if str(k) not in overlaid]
    called = {key for r in reports for key, n in r.paths.items() if n}
    return [
        f"overlay ran 0 times: {key.partition(':')[2]} ({key.partition(':')[0]}): your "
        "change is not on this scenario's path"
        for key in overlaid
        if key not in called and _owed(key, reports)
    ]


def _owed(key: str, reports: list[ImplReport]) -> bool:
    """Whether the arm these reports ran under must call `key` (see _overlay_unreached)."""
    for r in reports:
        arm_only = r.details.get("arm_only")
        if isinstance(arm_only, dict) and key in arm_only:
            return r.choice in arm_only[key]
    return True


def ran_paths(runs: list[RunRecord], variant: str) -> list[str]:
    """What `variant`'s launches and passes reported running: 'impl:choice -> path'."""
    paths = set()
    for run in runs:
        if run.result is None:
            continue
        if run.variant == variant:
            paths |= {
                f"{rep.implementation}:{rep.choice} -> {rep.path}"
                for rep in run.result.impl_reports
            }
        for p in run.result.passes:
            if p.arm == variant:
                paths |= {
                    f"{rep.implementation}:{rep.choice} -> {path}"
                    for rep in p.impl_reports or []
                    for path in rep.paths
                }
    return sorted(paths)


@dataclass(frozen=True)
class Unproven:
    """A launch whose vLLM processes did not prove its arm's implementation ran: all of it
    (`passes` 0: a launch-per-arm launch, or one refused before its first measured block),
    or `passes` of `variant`'s passes in a shared launch, the first of them pass `first`.
    `why`: what the proof found missing, as proof_problems names it (the refusal's own words
    for a refused launch)."""

    launch: str
    why: str
    variant: str | None = None
    passes: int = 0
    first: int | None = None


def unproven_passes(
    runs: list[RunRecord], variant: str, implementation: str | None, tp_size: int
) -> tuple[dict[tuple[str, int], str], list[Unproven]]:
    """Passes of `variant` whose vLLM processes did not prove its implementation ran:
    (run_key, repeat) -> why, and each launch they are in. One-engine passes carry their own
    reports; a launch-per-arm launch is judged, all its passes alike, on its own."""
    bad: dict[tuple[str, int], str] = {}
    found: list[Unproven] = []
    if implementation is None:
        return bad, found
    for run, p in arm_passes(runs, variant):
        assert run.result is not None
        if p.arm is None:
            continue
        problems = proof_problems(p.impl_reports, implementation, tp_size, run.result.worker_pid)
        if problems:
            bad[(run.run_key, p.repeat)] = "; ".join(problems)
    whole: set[str] = set()
    for run in runs:
        if run.variant != variant or run.status != "ok" or run.result is None:
            continue
        if any(p.arm for p in run.result.passes):
            continue  # a shared launch: judged pass by pass above
        problems = proof_problems(
            run.result.impl_reports, implementation, tp_size, run.result.worker_pid
        )
        if problems:
            found.append(Unproven(run.run_key, "; ".join(problems)))
            whole.add(run.run_key)
            bad.update({(run.run_key, p.repeat): "; ".join(problems) for p in run.result.passes})
    by_launch: dict[str, list[tuple[int, str]]] = {}
    for (key, repeat), why in bad.items():
        if key not in whole:
            by_launch.setdefault(key, []).append((repeat, why))
    found += [
        Unproven(key, items[0][1], variant, len(items), items[0][0])
        for key, items in by_launch.items()
    ]
    return bad, found


def _name(key: str) -> str:
    """'module:Owner.name' -> 'Owner.name (module)', as refusals name a function."""
    module, _, qualname = key.partition(":")
    return f"{qualname} ({module})"


def overlay_evidence(
    startup: list[ImplReport],
    warm: list[ImplReport],
    files: list[ImplReport],
    harness_pid: int | None,
) -> list[str]:
    """Why a one-engine overlay cannot be measured, from where its functions ran before the
    first measured block (empty when it can): `startup` is what each worker process reported
    for the engine's start (up to the first switch), `warm` what they reported for the warm-up
    passes, `files` every process's own report file (the engine core and the front end write
    one too, but never answer the switch). Per function, the first true reason of:
    - it ran in a process the arm switch never reaches (it would stay on the launch's arm);
    - it never ran in the warm-up but something shadows it on this platform;
    - it ran only while the engine started (start-up code: before any switch);
    - it never ran at all (not on this scenario's path)."""
    mine = [r for r in [*startup, *warm, *files] if r.implementation == "overlay"]
    overlaid: list[str] = []
    for r in mine:
        listed = r.details.get("overlaid")
        if isinstance(listed, list):
            overlaid += [str(k) for k in listed if str(k) not in overlaid]
    workers = {r.pid for r in [*startup, *warm] if r.implementation == "overlay"}
    shadows: dict[str, str] = {}
    for r in mine:
        found = r.details.get("shadowed")
        if isinstance(found, dict):
            shadows.update({str(k): str(v) for k, v in found.items()})
    problems = []
    for key in overlaid:
        elsewhere = sorted(
            {
                (r.pid, r.ppid, str(r.details.get("process") or ""))
                for r in files
                if r.implementation == "overlay" and r.pid not in workers and r.paths.get(key)
            }
        )
        started = sum(r.paths.get(key, 0) for r in startup if r.implementation == "overlay")
        warmed = sum(r.paths.get(key, 0) for r in warm if r.implementation == "overlay")
        if elsewhere:
            pid, ppid, process = elsewhere[0]
            where = (
                "the front end (the harness's own process, LLM's)"
                if pid == harness_pid
                else f"vLLM's {process}"
                if process and process != "MainProcess"
                else "the engine core"
                if ppid == harness_pid
                else "a vLLM process"
            )
            problems.append(
                f"{_name(key)} runs in {where} (pid {pid}), which the arm switch "
                "(collective_rpc to vLLM's workers) never reaches: there it would run the "
                "launch's own arm in every pass, so the change would be measured half applied"
            )
        elif warmed:
            continue
        elif key in shadows:
            problems.append(
                f"{_name(key)} never ran: {shadows[key]}, so the changed version "
                "is never called on this platform"
            )
        elif started:
            problems.append(
                f"{_name(key)} ran only while the engine started ({started} call(s) before the "
                "first switch, none in the warm-up's passes): start-up code runs before any "
                "switch between arms, so every arm would measure the launch's own version"
            )
        else:
            problems.append(
                f"overlay ran 0 times: {_name(key)}: your change is not on this "
                "scenario's path (no call while the engine started or in the "
                "warm-up)"
            )
    return problems
