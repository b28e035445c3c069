"""The words for what else loaded the machine during a run (harness.analysis.contention's
facts): one line under the table, and the findings among its warnings, which summary.json
keeps as `contention` for the run store (`history` marks such runs)."""

from __future__ import annotations

from harness.analysis.contention import BUSY_SHARE, Load, MachineUse


def machine_use_line(use: MachineUse) -> str:
    """How the run used the machine: shared, or a wait for another benchmark."""
    if use.shared:
        return (
            "shared (--shared-machine): no machine lock was taken, so another benchmark "
            "may have run beside this one"
        )
    return (
        f"waited {use.waited_s:.0f}s for {use.waited_for}, then "
        "held the machine's lock (one benchmark at a time)"
    )


def load_line(load: Load) -> str:
    """The median share, over how many passes, and the worst block (or pass)."""
    if load.worst_block is not None:
        worst = f", worst block {load.worst_block} of {load.worst_launch} {100 * load.worst:.1f}%"
    else:
        worst = f", worst pass {100 * load.worst:.1f}%"
    return (
        f"other processes used a median {100 * load.median:.1f}% of the machine's CPUs during "
        f"the {load.passes} measured passes{worst}"
    )


def load_findings(load: Load | None) -> list[str]:
    """A busy machine (all or part of the run), and each disturbance lined up with an arm."""
    if load is None:
        return []
    out = []
    threshold = f"{100 * BUSY_SHARE:.0f}%"
    if load.busy == "busy":
        out.append(
            f"the machine was busy: other processes used a median {100 * load.median:.1f}% "
            f"of its CPUs during the passes (above {threshold}): the interval carries their "
            "noise, and a disturbance that varies with them may bias the delta"
        )
    elif load.busy == "part":
        since = (
            f", from block {load.busy_from[1]} of {load.busy_from[0]} on" if load.busy_from else ""
        )
        out.append(
            f"the machine was busy in part of the run: other processes used more than "
            f"{threshold} of its CPUs in {load.busy_passes} of {load.passes} passes{since}: "
            "those passes carry their noise"
        )
    out.extend(
        f"a disturbance lined up with {a.arm}: other processes used {100 * a.points:.1f} "
        f"points more of the CPUs during its passes (p={a.p:.2g}); a bias the interval "
        "cannot show, not noise"
        for a in load.aligned
    )
    return out
