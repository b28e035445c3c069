"""Proof that a launch or a pass ran the implementation its arm chose, from vLLM's own reports.

Pure: both the worker (to stop a precision run on valid passes only) and compare.py (to
discard unproven passes and fail the run) judge the same ImplReports the same way.
"""

from __future__ import annotations

from harness.config.catalog import proof_parts
from harness.results.records import ImplReport, RunRecord
from harness.results.run import arm_passes


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


def ran_paths(runs: list[RunRecord], variant: str) -> list[str]:
    """What `variant`'s launches and passes reported running: 'impl:choice -> path'."""
    paths = set()
    for run in runs:
        if run.result is None:
            continue
        if run.variant == variant:
            paths |= {f"{rep.implementation}:{rep.choice} -> {rep.path}"
                      for rep in run.result.impl_reports}
        for p in run.result.passes:
            if p.arm == variant:
                paths |= {f"{rep.implementation}:{rep.choice} -> {path}"
                          for rep in p.impl_reports or [] for path in rep.paths}
    return sorted(paths)


def unproven_passes(runs: list[RunRecord], variant: str, implementation: str | None,
                    tp_size: int) -> tuple[dict[tuple[str, int], str], list[str]]:
    """Passes of `variant` whose vLLM processes did not prove its implementation ran:
    (run_key, repeat) -> why, and one line per launch for the table. One-engine passes carry
    their own reports; a launch-per-arm launch is judged, all its passes alike, on its own."""
    bad: dict[tuple[str, int], str] = {}
    lines: list[str] = []
    if implementation is None:
        return bad, lines
    for run, p in arm_passes(runs, variant):
        assert run.result is not None
        if p.arm is None:
            continue
        problems = proof_problems(p.impl_reports, implementation, tp_size,
                                  run.result.worker_pid)
        if problems:
            bad[(run.run_key, p.repeat)] = "; ".join(problems)
    for run in runs:
        if run.variant != variant or run.status != "ok" or run.result is None:
            continue
        if any(p.arm for p in run.result.passes):
            continue  # a shared launch: judged pass by pass above
        problems = proof_problems(run.result.impl_reports, implementation, tp_size,
                                  run.result.worker_pid)
        if problems:
            lines.append(f"{run.run_key}: {'; '.join(problems)}")
            bad.update({(run.run_key, p.repeat): "; ".join(problems)
                        for p in run.result.passes})
    by_launch: dict[str, list[str]] = {}
    for (key, repeat), why in bad.items():
        if not any(line.startswith(f"{key}:") for line in lines):
            by_launch.setdefault(key, []).append(f"pass {repeat}: {why}")
    lines += [f"{key}: {variant}: {len(items)} pass(es) unproven (first: {items[0]})"
              for key, items in by_launch.items()]
    return bad, lines
