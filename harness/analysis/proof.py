"""Proof that a launch or a pass ran the implementation its arm chose, from vLLM's own reports.

Pure: both the worker (to stop a precision run on valid passes only) and compare.py (to
discard unproven passes and fail the run) judge the same ImplReports the same way.
"""

from __future__ import annotations

from harness.config.catalog import proof_parts
from harness.results.records import ImplReport


def proof_problems(reports: list[ImplReport] | None, implementation: str | None, tp_size: int,
                   harness_pid: int | None) -> list[str]:
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
    that never runs measures nothing."""
    overlaid: list[str] = []
    for r in reports:
        listed = r.details.get("overlaid")
        if isinstance(listed, list):
            overlaid += [str(k) for k in listed if str(k) not in overlaid]
    called = {key for r in reports for key, n in r.paths.items() if n}
    return [f"overlay ran 0 times: {key.partition(':')[2]} ({key.partition(':')[0]}): your "
            "change is not on this scenario's path" for key in overlaid if key not in called]
