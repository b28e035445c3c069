"""The GPUs a CUDA run may use, found without torch (harness.env.find_gpus): through nvidia-smi,
whose `--query-gpu` lists whole GPUs and whose `-L` lists MIG devices with their UUIDs; without
it, through the driver's /proc listing or its /dev nodes; CUDA_VISIBLE_DEVICES read as indices,
GPU UUIDs or MIG UUIDs. A refusal says where it looked and what to change. nvidia-smi, /proc and
/dev are stand-ins here (this machine has no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import env
from harness.config.scenario import load_scenario
from harness.errors import HardwareError
from harness.plan.plan import expand_plan
from harness.plan.preflight import check_hardware
from harness.wire.spec import RunSpec
from tests.conftest import SCENARIOS

# A node whose GPU 0 is split into two MIG devices (the -L layout of current drivers).
FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*)
    echo '0, GPU-aaaa-1111, NVIDIA A100-SXM4-40GB, 550.54.15, 1410, 210, 400.00 W, Enabled, Default'
    echo '1, GPU-bbbb-2222, NVIDIA A100-SXM4-40GB, 550.54.15, 1410, 210, 400.00 W, Enabled, Default'
    ;;
  -L)
    echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa-1111)'
    echo '  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4-0001)'
    echo '  MIG 3g.20gb     Device  1: (UUID: MIG-c6d4-0002)'
    echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb-2222)'
    ;;
  *) exit 1 ;;
esac
"""
INFO = (
    "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\nGPU UUID: \t GPU-{uuid}\n"
    "Bus Location: \t {pci}\nDevice Minor: \t {minor}\n"
)


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No nvidia-smi on PATH, an empty /proc listing and /dev: each test adds what it needs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(env, "PROC_GPUS", tmp_path / "proc" / "gpus")
    monkeypatch.setattr(env, "PROC_DRIVER", tmp_path / "proc" / "version")
    monkeypatch.setattr(env, "DEV_DIR", tmp_path / "dev")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


@pytest.fixture
def smi(nowhere: Path) -> Path:
    fake = nowhere / "bin" / "nvidia-smi"
    fake.write_text(FAKE_SMI)
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, ["GPU-aaaa-1111", "GPU-bbbb-2222"]),  # unset: the whole GPUs, not their slices
        ("1", ["GPU-bbbb-2222"]),
        ("GPU-bbbb-2222", ["GPU-bbbb-2222"]),
        ("GPU-bbbb", ["GPU-bbbb-2222"]),  # a prefix, as CUDA takes it
        ("MIG-c6d4-0002", ["MIG-c6d4-0002"]),  # listed only by nvidia-smi -L
        ("MIG-GPU-aaaa-1111/1/0", ["MIG-GPU-aaaa-1111/1/0"]),  # the older drivers' MIG UUID
        ("MIG-c6d4-0001,MIG-c6d4-0002", ["MIG-c6d4-0001", "MIG-c6d4-0002"]),
        ("MIG-ffff-9999", []),
    ],
)
def test_indices_gpu_uuids_and_mig_uuids_are_found_through_nvidia_smi(
    smi: Path, monkeypatch: pytest.MonkeyPatch, visible: str | None, expected: list[str]
) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    search = env.find_gpus()
    assert [g["uuid"] for g in search.gpus] == expected
    assert search.looked == [f"{smi} (2 GPU(s))"]


def test_a_mig_device_is_named_by_its_profile_and_keeps_its_parents_driver(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-c6d4-0001")
    [mig] = env.gpu_details()
    assert mig["name"] == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert mig["parent_uuid"] == "GPU-aaaa-1111" and mig["driver_version"] == "550.54.15"
    assert env.gpu_ids([mig]) == ["MIG-c6d4-0001"]


def _proc(root: Path) -> None:
    for minor, (pci, uuid) in enumerate(
        [("0000:3b:00.0", "bbbb-2222"), ("0000:19:00.0", "aaaa-1111")]
    ):
        folder = root / "proc" / "gpus" / pci
        folder.mkdir(parents=True)
        (folder / "information").write_text(INFO.format(uuid=uuid, pci=pci, minor=minor))
    (root / "proc" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    )


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, ["GPU-aaaa-1111", "GPU-bbbb-2222"]),  # PCI order, as nvidia-smi numbers them
        ("1", ["GPU-bbbb-2222"]),
        ("GPU-aaaa", ["GPU-aaaa-1111"]),
        ("MIG-c6d4-0002", ["MIG-c6d4-0002"]),  # /proc lists no MIG devices: taken on trust
        ("GPU-ffff", []),
    ],
)
def test_without_nvidia_smi_the_drivers_proc_listing_is_read(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, visible: str | None, expected: list[str]
) -> None:
    _proc(nowhere)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    search = env.find_gpus()
    assert [g["uuid"] for g in search.gpus] == expected
    assert search.looked[0] == "nvidia-smi (not on PATH)"
    if search.gpus and "parent_uuid" not in search.gpus[0] and visible != "MIG-c6d4-0002":
        assert search.gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
        assert search.gpus[0]["driver_version"] == "550.54.15"


def test_without_nvidia_smi_or_proc_the_dev_nodes_count(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (nowhere / "dev").mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"):
        (nowhere / "dev" / name).touch()
    assert [g["index"] for g in env.gpu_details()] == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa-1111")  # no UUIDs to check it by
    assert env.gpu_ids(env.gpu_details()) == ["GPU-aaaa-1111"]


def _gpu_run() -> RunSpec:
    scenario = load_scenario(SCENARIOS / "gpu-mistral-medusa.yaml")
    return expand_plan(scenario, SCENARIOS).runs[0]


def test_a_refusal_says_where_it_looked_and_how_to_fix_it(nowhere: Path) -> None:
    with pytest.raises(HardwareError) as refused:
        check_hardware(_gpu_run())
    line = str(refused.value)
    assert "\n" not in line and "found GPUs: none (looked at nvidia-smi (not on PATH); " in line
    assert f"{nowhere / 'proc' / 'gpus'} (absent)" in line and "install the NVIDIA driver" in line


def test_a_refusal_names_the_gpus_that_cuda_visible_devices_missed(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(HardwareError) as refused:
        check_hardware(_gpu_run())
    assert (
        "found GPUs: none: CUDA_VISIBLE_DEVICES='7' names none of the GPUs "
        f"{smi} (2 GPU(s)) shows (0 GPU-aaaa-1111, 1 GPU-bbbb-2222, 0:0 MIG-c6d4-0001, "
        "0:1 MIG-c6d4-0002); set CUDA_VISIBLE_DEVICES"
    ) in str(refused.value)


def test_nvidia_smi_that_fails_is_named_and_the_driver_is_read_instead(nowhere: Path) -> None:
    broken = nowhere / "bin" / "nvidia-smi"
    broken.write_text(
        "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n"
    )
    broken.chmod(0o755)
    _proc(nowhere)
    search = env.find_gpus()
    assert len(search.gpus) == 2
    assert search.looked[0] == (
        f"{broken} (failed: Failed to initialize NVML: Driver/library version mismatch)"
    )


def test_doctor_names_a_mig_device_and_says_where_it_looked_when_there_is_none(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.doctor import doctor_lines

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-c6d4-0002")
    assert "devices: NVIDIA A100-SXM4-40GB MIG 3g.20gb" in doctor_lines()
    smi.unlink()
    [line] = [x for x in doctor_lines() if x.startswith("devices: ")]
    assert "no CUDA GPU" in line and "looked at nvidia-smi (not on PATH); " in line


def test_too_few_gpus_says_how_many_cuda_visible_devices_left_of_the_machines(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert env.find_gpus().explain() == (
        f"1 (NVIDIA A100-SXM4-40GB; CUDA_VISIBLE_DEVICES='1' leaves 1 of the 2 that {smi} "
        "(2 GPU(s)) shows)"
    )


def test_a_mig_uuid_is_taken_on_trust_when_nvidia_smi_l_fails(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi.write_text(FAKE_SMI.replace("  -L)\n", "  -L)\n    exit 9\n"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-c6d4-0002")
    [mig] = env.gpu_details()
    assert mig["name"] == "MIG-c6d4-0002 (not checked: only `nvidia-smi -L` lists MIG devices)"
