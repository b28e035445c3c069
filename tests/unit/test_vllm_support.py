"""The registry of vLLM internals against vLLM's source, read with `ast` (no import): the
installed vLLM has every entry, and a changed source names what is gone, per feature."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from harness.config.vllm_internals import FEATURES, INTERNALS, Internal
from harness.plan.vllm_support import (
    DirSource,
    check_entry,
    check_source,
    installed_source,
    open_source,
    render_matrix,
    rows,
)
from tests.conftest import ROOT, SCENARIOS


def test_the_installed_vllm_has_every_internal_specbench_touches() -> None:
    support = check_source(installed_source())
    assert support.version.startswith("0.32")
    assert {f: v for f, v in support.failures.items() if v} == {}
    assert {e.feature for e in INTERNALS} <= set(FEATURES)


SOURCE = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    VLLM_FLAG: bool = False

class Base:
    def helper(self, a, b): ...

class Proposer(Base):
    def __init__(self):
        self.k, self.model = 3, None
        self.typed: int = 0

    def propose(self, num_speculative_tokens, target_hidden_states): ...

class Fields:
    name: str
    size: int = 0
"""


def _tree(tmp_path: Path) -> DirSource:
    pkg = tmp_path / "vllm" / "spec"
    pkg.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = version = '0.99.0'\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "prop.py").write_text(textwrap.dedent(SOURCE))
    return DirSource(tmp_path, "0.99.0")


def test_each_kind_of_entry_is_found_or_named_with_what_is_missing(tmp_path: Path) -> None:
    src = _tree(tmp_path)

    def check(qualname: str, kind: str, params: tuple[str, ...] | None = None) -> str | None:
        return check_entry(
            src,
            Internal(
                "f",
                "vllm.spec.prop",
                qualname,
                kind,  # type: ignore[arg-type]
                params,
            ),
        )

    assert check("", "module") is None
    assert check("Proposer.propose", "method", ("num_speculative_tokens",)) is None
    assert check("Proposer.propose", "method", ("slot_mappings",)) == (
        "vllm.spec.prop.Proposer.propose has no parameter 'slot_mappings' (has: "
        "num_speculative_tokens, target_hidden_states)"
    )
    assert check("Proposer.helper", "method", ("a", "b")) is None  # inherited
    assert check("Proposer.model", "attribute") is None  # a tuple target of self.*
    assert check("Proposer.typed", "attribute") is None
    assert check("Proposer.drafter", "attribute") == (
        "vllm.spec.prop.Proposer.drafter: no such attribute"
    )
    assert check("VLLM_FLAG", "attribute") is None  # under TYPE_CHECKING
    assert check("Fields", "class", ("name", "size")) is None
    assert check("Fields", "class", ("colour",)) is not None
    assert check("Gone", "class") == "vllm.spec.prop.Gone is gone"
    assert check_entry(src, Internal("f", "vllm.spec.other", "", "module")) == (
        "module vllm.spec.other is gone"
    )
    assert open_source(str(tmp_path)).version == "0.99.0"


def test_a_wheel_is_read_in_place_and_the_matrix_says_why(tmp_path: Path) -> None:
    """A wheel without the Medusa proposer's module: that swap is ✗ with the reason, read from
    the zip (no unpacking), labelled with the wheel's own version."""
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    here = installed_source()
    assert isinstance(here, DirSource)
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm-9.9.9.dist-info/METADATA", "Name: vllm\nVersion: 9.9.9\n")
        for path in {e.module.replace(".", "/") for e in INTERNALS}:
            for name in (f"{path}.py", f"{path}/__init__.py"):
                text = here.read(name)
                if text is not None and not path.endswith("spec_decode/medusa"):
                    z.writestr(name, text)
    later = check_source(open_source(str(wheel)))
    assert later.version == "9.9.9"
    table = render_matrix([check_source(here), later])
    row = next(line for line in table.splitlines() if line.startswith("| swap medusa-proposer"))
    assert row.startswith(
        "| swap medusa-proposer | ✓ | ✗ module vllm.v1.spec_decode.medusa is gone"
    )
    assert row.count("vllm.v1.spec_decode.medusa is gone") == 1  # each reason once
    assert "| swap tp-argmax-reduction (V1) | ✓ | ✓ |" in table
    assert "| swap tp-argmax-reduction (V2) | ✓ | ✓ |" in table


def test_support_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "support"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("| feature | vLLM 0.32") and len(lines) == 2 + len(rows())
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "support", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"specbench: error: {tmp_path}: no vllm/ package in this folder"


def test_a_scenario_is_checked_against_a_version_by_what_it_uses(tmp_path: Path) -> None:
    """`support --scenario`: each shipped scenario runs on the installed vLLM; on a wheel
    without Medusa whose FrontendArgs moved (as 0.33 did) the Medusa scenarios are refused for
    the swap and the built-in Medusa head, with the swap's pinned versions, the EAGLE-only
    ones (and serve) pass, and the 0.33 scenarios pass."""
    from harness.config.scenario import load_scenario
    from harness.plan.plan import expand_plan
    from harness.plan.vllm_support import check_scenario, scenario_needs

    here = installed_source()
    assert isinstance(here, DirSource)
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    moved = {"vllm/entrypoints/launchers/cli_args.py": "vllm/entrypoints/common/cli_args.py"}
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm-9.9.9.dist-info/METADATA", "Name: vllm\nVersion: 9.9.9\n")
        modules = {e.module for e in INTERNALS} | {
            "vllm.engine.arg_utils",
            "vllm.config.speculative",
            "vllm.config.compilation",
        }
        for path in {m.replace(".", "/") for m in modules}:
            for name in (f"{path}.py", f"{path}/__init__.py"):
                text = here.read(name)
                if text is not None and "medusa" not in path:
                    z.writestr(moved.get(name, name), text)
    later = open_source(str(wheel))
    results = {}
    for scenario_file in sorted(SCENARIOS.glob("*.yaml")):
        scenario = load_scenario(scenario_file)
        plan = expand_plan(scenario, scenario_file=scenario_file)
        assert check_scenario(here, scenario, plan) == {}, scenario_file.name
        results[scenario_file.stem] = check_scenario(later, scenario, plan)
        features, keys = scenario_needs(scenario, plan)
        assert "platform" in features and keys
    medusa = results["cpu-medusa-proposer"]
    assert set(medusa) == {"swap medusa-proposer", "built-in Medusa model"}
    assert (
        "the medusa-proposer swap is written for vLLM >=0.32,<0.33"
        in medusa["swap medusa-proposer"]
    )
    assert set(results["cpu-eagle-tp2-argmax-serve"]) == {"swap tp-argmax-reduction"}
    assert results["cpu-eagle-tp2-overlay"] == {}
    assert results["gpu-llama31-8b-eagle3-tp1"] == {}
    assert results["gpu-llama4-maverick-eagle-tp8-v033"] == {}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "support",
            str(wheel),
            "--scenario",
            str(SCENARIOS / "cpu-medusa-proposer.yaml"),
            "--scenario",
            str(SCENARIOS / "gpu-llama31-8b-eagle3-tp1.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("✗ cpu-medusa-proposer on vLLM 9.9.9: swap medusa-proposer: ")
    assert lines[1].startswith("✓ gpu-llama31-8b-eagle3-tp1 on vLLM 9.9.9: uses ")
