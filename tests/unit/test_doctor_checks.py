"""`specbench doctor`'s machine checks, as pyperf's `system` checks them:
each ok, warning or unknown with its fix. The /sys trees and nvidia-smi are stand-ins (no
machine here has cpufreq, SMT or a GPU); the heavy process is a real busy loop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.doctor import Check, machine_checks, omp_binding_check


def _sys_tree(root: Path, governor: str, no_turbo: str, smt: str) -> Path:
    cpu = root / "devices/system/cpu"
    for i in range(2):
        (cpu / f"cpu{i}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{i}/cpufreq/scaling_governor").write_text(governor + "\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate/no_turbo").write_text(no_turbo + "\n")
    (cpu / "smt").mkdir()
    (cpu / "smt/active").write_text(smt + "\n")
    (cpu / "smt/control").write_text(("on" if smt == "1" else "off") + "\n")
    return root


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_tuned_and_an_untuned_cpu_are_told_apart_with_their_fixes(tmp_path: Path) -> None:
    untuned = _by_name(machine_checks(0.1, _sys_tree(tmp_path / "a", "powersave", "0", "1")))
    gov, boost, smt = (untuned[k] for k in ("CPU frequency governor", "CPU boost", "SMT"))
    assert gov.status == "warning" and gov.detail.startswith("powersave")
    assert "cpupower frequency-set -g performance" in gov.line()
    assert boost.status == "warning" and "intel_pstate/no_turbo" in boost.fix
    assert smt.status == "warning" and "smt/control" in smt.fix
    tuned = _by_name(machine_checks(0.1, _sys_tree(tmp_path / "b", "performance", "1", "0")))
    assert [tuned[k].status for k in ("CPU frequency governor", "CPU boost", "SMT")] == ["ok"] * 3
    assert "fix:" not in tuned["SMT"].line()
    bare = _by_name(machine_checks(0.1, tmp_path / "empty"))
    assert [bare[k].status for k in ("CPU frequency governor", "CPU boost", "SMT")] == [
        "unknown"
    ] * 3
    assert all(bare[k].fix for k in ("CPU frequency governor", "CPU boost", "SMT"))


def test_a_busy_loop_is_named_as_a_heavy_process(tmp_path: Path) -> None:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        heavy = _by_name(machine_checks(1.0, tmp_path))["other heavy processes"]
    finally:
        hog.kill()
        hog.wait()
    assert heavy.status == "warning", heavy
    # Named among the five heaviest (xdist's other worker may be heavy too, here).
    assert f"pid {hog.pid} python" in heavy.detail, heavy
    assert "renice 19 -p PID" in heavy.fix


def test_gpu_persistence_clocks_and_other_processes_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=*) echo '0, NVIDIA H200, Disabled, 345, 1980' ;;\n"
        "  --query-compute-apps=*) echo 'GPU-1, 4242, python3, 70000' ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    checks = _by_name(machine_checks(0.1, tmp_path))
    pm = checks["GPU 0 (NVIDIA H200) persistence mode"]
    assert pm.status == "warning" and pm.fix == "sudo nvidia-smi -i 0 -pm 1"
    clocks = checks["GPU 0 (NVIDIA H200) clocks"]
    assert clocks.status == "unknown" and "SM 345 MHz now, 1980 MHz at most" in clocks.detail
    assert clocks.fix == "sudo nvidia-smi -i 0 --lock-gpu-clocks=1980,1980"
    apps = checks["other GPU processes"]
    assert apps.status == "warning" and "pid 4242 python3 (70000 MiB)" in apps.detail
    assert main(["doctor", "--sample", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "machine checks (as pyperf's `system` command checks" in out
    assert "  warning  GPU 0 (NVIDIA H200) persistence mode: Disabled" in out


@pytest.mark.parametrize(
    ("value", "cpus", "status"),
    [
        (None, 2, "ok"),
        ("auto", 2, "ok"),
        ("1", 2, "ok"),
        ("0-2|4-6", 8, "ok"),
        ("nobind", 2, "warning"),
        ("0-1", 2, "warning"),
        ("0,1|2,3", 4, "warning"),
        ("cores please", 2, "unknown"),
    ],
)
def test_openmp_on_every_core_is_a_warning(value: str | None, cpus: int, status: str) -> None:
    check = omp_binding_check(value, cpus)
    assert check.status == status, check.line()
    if status != "ok":
        assert "unset VLLM_CPU_OMP_THREADS_BIND" in check.line()


def test_doctor_reads_the_binding_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    checks = _by_name(machine_checks(0.1, tmp_path))
    assert checks["vLLM's OpenMP binding (CPU)"].status == "warning"
