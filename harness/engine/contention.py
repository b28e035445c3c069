"""What else loads the machine while a pass runs: the CPU time that processes other than the
launch's own used during the pass, as a share of the machine's CPUs, read from /proc (Linux;
elsewhere nothing is recorded). The launch's own processes are the worker's session (the
worker leads it; vLLM's engine core, its workers and a server inherit it) and the specbench
process that started the worker.

Sampled just before and just after each pass, outside the timed region: the cost is a read of
/proc/stat and of each process's stat file (benchmarks/contention_cost.py measures it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Sample:
    """Busy CPU time of the whole machine and of the launch's own processes (seconds), at a
    monotonic time."""

    at: float
    machine_s: float
    own_s: float


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def _machine_busy_s(ticks: float) -> float:
    """Every CPU's busy time since boot: all of /proc/stat's first line but idle and iowait."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / ticks


def _process_s(stat: str, ticks: float) -> tuple[int, int, float]:
    """(pid, session, user + system seconds) of one /proc/<pid>/stat line."""
    pid = int(stat[: stat.index(" ")])
    rest = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    session, utime, stime = int(rest[3]), int(rest[11]), int(rest[12])
    return pid, session, (utime + stime) / ticks


def own_session() -> int | None:
    """This worker's session when it leads one (the executors start it so), else None: a
    session shared with a shell would count its other programs as the launch's own."""
    sid = os.getsid(0)
    return sid if sid == os.getpid() else None


def sample(session: int | None, also: frozenset[int] = frozenset()) -> Sample | None:
    """The machine's and the launch's busy CPU seconds now; None where /proc cannot say, or
    without a session of the launch's own."""
    import time

    if session is None:
        return None
    try:
        ticks = _ticks()
        at = time.monotonic()
        machine = _machine_busy_s(ticks)
        own = 0.0
        for entry in PROC.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                pid, sid, cpu = _process_s((entry / "stat").read_text(), ticks)
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile, or unreadable
            if sid == session or pid in also:
                own += cpu
        return Sample(at, machine, own)
    except (OSError, ValueError, IndexError):
        return None


def foreign_share(
    before: Sample | None, after: Sample | None, cpus: int | None = None
) -> float | None:
    """The share of the machine's CPUs (0..1) that other processes kept busy between the two
    samples; None without both. Own processes that ended meanwhile take their time with them
    (a dying process's ticks leave the sum), so a negative result is clipped at 0."""
    if before is None or after is None or after.at <= before.at:
        return None
    cpus = cpus or os.cpu_count() or 1
    other = (after.machine_s - before.machine_s) - (after.own_s - before.own_s)
    return max(0.0, other / ((after.at - before.at) * cpus))


def _comm(stat: str) -> str:
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def _per_process(ticks: float) -> dict[int, tuple[str, float]]:
    """pid -> (command, user + system seconds) of every readable process now."""
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                pid, _, cpu = _process_s(stat, ticks)
            except (OSError, ValueError, IndexError):
                continue
            out[pid] = (_comm(stat), cpu)
    return out


def _steal_s(ticks: float) -> float:
    """Time the hypervisor ran other guests on this machine's CPUs (/proc/stat's steal)."""
    fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    return int(fields[7]) / ticks if len(fields) > 7 else 0.0


@dataclass(frozen=True)
class Busy:
    """Who used the CPUs over a sampled interval: processes (pid, command, share of one
    CPU), the machine's busy share of all its CPUs, and the hypervisor's steal share."""

    interval_s: float
    processes: list[tuple[int, str, float]]
    machine_share: float
    steal_share: float


def busy_processes(interval_s: float = 1.0, exclude: frozenset[int] = frozenset()) -> Busy | None:
    """Sample /proc twice, `interval_s` apart (`specbench doctor`); None where /proc cannot
    say. Processes are sorted by share, largest first; `exclude` (the caller) left out."""
    import time

    try:
        ticks = _ticks()
        t0, m0, s0, p0 = (
            time.monotonic(),
            _machine_busy_s(ticks),
            _steal_s(ticks),
            _per_process(ticks),
        )
        time.sleep(interval_s)
        t1, m1, s1, p1 = (
            time.monotonic(),
            _machine_busy_s(ticks),
            _steal_s(ticks),
            _per_process(ticks),
        )
    except (OSError, ValueError, IndexError):
        return None
    wall = max(t1 - t0, 1e-9)
    cpus = os.cpu_count() or 1
    shares = [
        (pid, comm, (cpu - p0[pid][1]) / wall)
        for pid, (comm, cpu) in p1.items()
        if pid in p0 and pid not in exclude
    ]
    return Busy(
        wall,
        sorted((x for x in shares if x[2] > 0), key=lambda x: -x[2]),
        max(0.0, (m1 - m0) / (wall * cpus)),
        max(0.0, (s1 - s0) / (wall * cpus)),
    )


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
