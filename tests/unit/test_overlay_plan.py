"""Overlays in scenarios and plans: the design they lead to, the refusals before any engine,
a checkout as source:, and what the plan carries to the workers (no engine starts here; the
installed vLLM's files are read, never imported)."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.scenario import parse_scenario
from harness.errors import ScenarioError
from harness.plan.design import one_engine_blocker
from harness.plan.diffs import read_diff, read_source
from harness.plan.plan import expand_plan
from harness.wire.overlay import OverlaySpec
from tests.conftest import ROOT, SCENARIOS

DIFFS = SCENARIOS / "diffs"
MEDUSA_DIFF = DIFFS / "medusa-propose-tolist.diff"
EAGLE_DIFF = DIFFS / "eagle-local-argmax.diff"
FIXTURES = ROOT / "tests" / "fixtures" / "overlay"


def vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0])


def overlay_scenario(**variants: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "cpu-medusa-overlay.yaml").read_text())
    data.pop("precision")
    if variants:
        data["variants"] = variants
    return data


def plan_of(data: dict[str, Any], base: Path = SCENARIOS) -> Any:
    return expand_plan(parse_scenario(copy.deepcopy(data)), base_dir=base)


def test_the_seed_diff_shares_one_engine_and_every_arm_is_proven() -> None:
    plan = plan_of(overlay_scenario())
    assert plan.design == "one-engine"
    (run,) = plan.runs
    assert run.overlay is not None
    spec = run.overlay
    assert spec.functions == ["vllm.v1.spec_decode.medusa:MedusaProposer.propose"]
    arms = {a.variant: a for a in spec.arms}
    # The baseline runs the diff's propose, the candidate the installed one (no code).
    assert [c.name for c in arms["baseline"].code] == ["propose"]
    assert arms["optimized"].code == [] and arms["optimized"].change is None
    change = arms["baseline"].change
    assert change is not None
    assert change.sha256 == hashlib.sha256(MEDUSA_DIFF.read_bytes()).hexdigest()
    assert change.files == ["vllm/v1/spec_decode/medusa.py"]
    # Every arm proves its dispatchers ran, the installed code's arm included.
    assert [a.implementation for a in run.arms] == ["overlay:baseline", "overlay:optimized"]
    assert plan.proof_labels == {"baseline": "overlay:baseline", "optimized": "overlay:optimized"}
    assert plan.overlays == {
        "baseline": ["vllm/v1/spec_decode/medusa.py: MedusaProposer.propose: body changed"]
    }
    # The spec survives the trip through spec.json.
    assert OverlaySpec.model_validate_json(spec.model_dump_json()) == spec
    # vLLM's compile cache would load a forward compiled without the overlay, untraced.
    assert run.env["VLLM_DISABLE_COMPILE_CACHE"] == "1"


def test_an_overlay_launch_keeps_the_compile_cache_setting_the_scenario_gives() -> None:
    data = overlay_scenario()
    data["env"] = {"VLLM_DISABLE_COMPILE_CACHE": "0"}
    assert plan_of(data).runs[0].env["VLLM_DISABLE_COMPILE_CACHE"] == "0"
    swap = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    assert "VLLM_DISABLE_COMPILE_CACHE" not in plan_of(swap).runs[0].env


def test_baseline_and_candidate_each_overlay_their_own_diff() -> None:
    plan = plan_of(
        overlay_scenario(
            old={"baseline": True, "diff": str(MEDUSA_DIFF)}, new={"diff": str(EAGLE_DIFF)}
        )
    )
    (run,) = plan.runs
    assert run.overlay is not None
    assert set(run.overlay.functions) == {
        "vllm.v1.spec_decode.medusa:MedusaProposer.propose",
        "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer._greedy_sample",
    }
    assert {a.variant: len(a.code) for a in run.overlay.arms} == {"old": 1, "new": 1}


def write_diff(tmp: Path, rel: str, old: str, new: str) -> Path:
    """A diff of one installed file with `old` replaced by `new` (written as git does)."""
    installed = (vllm_root() / rel).read_text()
    assert old in installed, f"{old!r} not in {rel}"
    a, b = tmp / "a" / "vllm" / rel, tmp / "b" / "vllm" / rel
    for path, text in ((a, installed), (b, installed.replace(old, new, 1))):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = subprocess.run(
        ["diff", "-u", f"a/vllm/{rel}", f"b/vllm/{rel}"],
        cwd=tmp,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    lines = out.splitlines(keepends=True)
    lines[:2] = [line.split("\t")[0] + "\n" for line in lines[:2]]
    diff = tmp / f"{Path(rel).stem}.diff"
    diff.write_text("".join(lines))
    return diff


CONFIG_FIELD = (
    "config/speculative.py",
    "    num_speculative_tokens: int = Field(default=None, gt=0)  # type: ignore[assignment]\n",
)


def test_a_config_field_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    anchor = CONFIG_FIELD[1]
    diff = write_diff(
        tmp_path,
        CONFIG_FIELD[0],
        anchor,
        anchor + "    use_fused_argmax: bool = False\n"
        '    """Gather (max, index) pairs across TP ranks."""\n',
    )
    with pytest.raises(ScenarioError) as err:
        plan_of(overlay_scenario(base={"baseline": True}, cand={"diff": str(diff)}))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("variants.cand.diff: cannot run in one engine: ")
    assert (
        "vllm/config/speculative.py: SpeculativeConfig gains field use_fused_argmax — a "
        "config class cannot be overlaid"
    ) in message
    assert "variants.cand.python" in message  # what to do


def test_with_a_build_a_change_that_cannot_be_overlaid_runs_launch_per_arm(tmp_path: Path) -> None:
    line = "        self.num_speculative_tokens = self.spec_config.num_speculative_tokens\n"
    diff = write_diff(
        tmp_path, "v1/spec_decode/medusa.py", line, line + "        self.heads_on_device = True\n"
    )
    data = overlay_scenario(
        base={"baseline": True}, cand={"diff": str(diff), "python": sys.executable}
    )
    plan = plan_of(data)
    assert plan.design == "launch-per-arm"
    by_variant = {r.variant: r for r in plan.runs}
    assert by_variant["cand"].overlay is None and by_variant["cand"].python == sys.executable
    assert plan.proof_labels == {"base": None, "cand": None}
    assert any("__init__" in line and "start-up" in line for line in plan.overlays["cand"])
    # The refusal names this variant's own field, never a placeholder.
    assert any("variants.cand.python" in line for line in plan.overlays["cand"])
    assert not any("variants.NAME" in line for line in plan.overlays["cand"])
    # Precision needs one engine: refused, naming the change.
    with pytest.raises(
        ScenarioError,
        match=r"precision: needs the one-engine design \("
        r"variants.cand.diff cannot be overlaid",
    ):
        plan_of({**data, "precision": {"mde": 0.02, "budget_s": 100}})


def test_an_overlayable_change_with_other_settings_overlays_in_its_own_engine() -> None:
    data = overlay_scenario(
        base={"baseline": True}, cand={"diff": str(MEDUSA_DIFF), "engine": {"block_size": 32}}
    )
    plan = plan_of(data)
    assert plan.design == "launch-per-arm"
    by_variant = {r.variant: r for r in plan.runs}
    assert by_variant["base"].overlay is None
    cand = by_variant["cand"].overlay
    assert cand is not None and cand.active == "cand" and len(cand.arms) == 1
    assert plan.proof_labels == {"base": None, "cand": "overlay:cand"}


def test_a_diff_that_does_not_apply_names_file_and_hunk(tmp_path: Path) -> None:
    bad = tmp_path / "stale.diff"
    bad.write_text(
        MEDUSA_DIFF.read_text().replace(
            "         # Generate blocks and compute logits",
            "         # Generate the blocks, then compute logits",
        )
    )
    with pytest.raises(ScenarioError) as err:
        plan_of(overlay_scenario(base={"baseline": True}, cand={"diff": str(bad)}))
    message = str(err.value)
    assert message.startswith(
        f"variants.cand.diff: diff {bad}: vllm/v1/spec_decode/medusa.py, "
        "hunk 1 (@@ -43,17 +43,17 @@) does not apply to the installed "
        "vLLM: line "
    )
    assert "Generate the blocks" in message and "\n" not in message


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("", "no file changes in it"),
        ("just some words\n", "no file changes in it"),
    ],
)
def test_a_file_that_is_not_a_diff_is_one_line(tmp_path: Path, content: str, why: str) -> None:
    bad = tmp_path / "x.diff"
    bad.write_text(content)
    with pytest.raises(ScenarioError, match=why):
        read_diff(bad, vllm_root())


def test_scenario_fields_refuse_mixing_changes_with_swaps() -> None:
    with pytest.raises(ScenarioError, match="diff and source both name your change"):
        parse_scenario(
            overlay_scenario(base={"baseline": True}, cand={"diff": "a.diff", "source": "x"})
        )
    with pytest.raises(ScenarioError, match="diff and implementation both swap code"):
        parse_scenario(
            overlay_scenario(
                base={"baseline": True},
                cand={"diff": "a.diff", "implementation": "medusa-proposer:optimized"},
            )
        )
    data = overlay_scenario(
        base={"baseline": True, "implementation": "medusa-proposer:baseline"},
        cand={"diff": str(MEDUSA_DIFF)},
    )
    assert "one engine hosts one or the other" in str(one_engine_blocker(parse_scenario(data)))
    with pytest.raises(ScenarioError, match="a sweep cannot vary this field"):
        parse_scenario(
            {
                **overlay_scenario(),
                "sweep": {"axes": {"variants.baseline.diff": ["a.diff", "b.diff"]}},
            }
        )


def copy_package(tmp: Path) -> Path:
    """A checkout-like copy of the installed vllm package's Python files (no wheels' .so)."""
    dest = tmp / "checkout" / "vllm"
    shutil.copytree(
        vllm_root(),
        dest,
        ignore=lambda d, names: [
            n
            for n in names
            if n == "__pycache__" or (Path(d, n).is_file() and not n.endswith(".py"))
        ],
    )
    return dest


def test_a_checkout_as_source_classifies_like_its_diff(tmp_path: Path) -> None:
    package = copy_package(tmp_path)
    medusa = package / "v1" / "spec_decode" / "medusa.py"
    expected = read_diff(MEDUSA_DIFF, vllm_root()).files[0].new
    assert expected is not None
    medusa.write_text(expected)
    t = time.perf_counter()
    change = read_source(package.parent, vllm_root())
    elapsed = time.perf_counter() - t
    assert [f.path for f in change.files] == ["vllm/v1/spec_decode/medusa.py"]
    assert change.identity.kind == "source" and change.identity.commit is None
    assert elapsed < 30, elapsed
    plan = plan_of(overlay_scenario(base={"baseline": True}, cand={"source": str(package.parent)}))
    assert plan.design == "one-engine"
    assert plan.overlays["cand"] == [
        "vllm/v1/spec_decode/medusa.py: MedusaProposer.propose: body changed"
    ]


def test_a_checkout_of_another_vllm_is_refused_with_the_count(tmp_path: Path) -> None:
    package = copy_package(tmp_path)
    for path in [p for p in sorted(package.rglob("*.py")) if p.name != "_version.py"][:60]:
        path.write_text(path.read_text() + "\n# another vLLM\n")
    with pytest.raises(ScenarioError) as err:
        read_source(package.parent, vllm_root())
    message = str(err.value)
    assert "differs from the installed vLLM" in message, message
    assert ") in 60 files, more than a branch's own" in message, message
    assert "Base the branch on the release tag v0.32.0 (git rebase --onto v0.32.0)" in message


def test_plan_prints_the_classification() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "plan",
            str(SCENARIOS / "cpu-eagle-tp2-overlay.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "variants.local-argmax.diff: diffs/eagle-local-argmax.diff" in out.stdout
    assert (
        "vllm/v1/spec_decode/llm_base_proposer.py: SpecDecodeBaseProposer._greedy_sample: "
        "body changed"
    ) in out.stdout
