"""The runbook's capture-time overlay on vLLM 0.34 (docs/gpu-runbook.md): 0.34 samples the greedy
draft with greedy_argmax(logits), so the 0.32 diff no longer applies, and its 0.34 variant
(scenarios/diffs/v2-draft-argmax-0.34.diff) applies to the real 0.34 wheel, is refused under
vLLM's CUDA default graphs and overlays under PIECEWISE, as the runbook says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.plan.classify import classify
from harness.plan.diffs import read_diff
from harness.plan.vllm_support import WheelSource
from tests.conftest import SCENARIOS
from tests.unit.test_vllm_releases import release

DIFFS = SCENARIOS / "diffs"


@pytest.fixture(scope="module")
def vllm_034(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 0.34 wheel's Python files, unpacked (the classifier reads a package folder)."""
    wheel = release("0.34.0")
    assert isinstance(wheel, WheelSource)
    root = tmp_path_factory.mktemp("vllm-0.34.0")
    for name in wheel.names:
        if name.startswith("vllm/") and name.endswith(".py"):
            wheel.zip.extract(name, root)
    return root


def _applies(diff: Path, root: Path) -> bool:
    return (
        subprocess.run(
            ["git", "apply", "--check", "-p1", str(diff)],
            cwd=root,
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def test_the_034_diff_applies_to_034_and_the_032_one_does_not(vllm_034: Path) -> None:
    assert _applies(DIFFS / "v2-draft-argmax-0.34.diff", vllm_034)
    assert not _applies(DIFFS / "v2-draft-argmax.diff", vllm_034)


@pytest.mark.parametrize(
    ("graphs", "refused"), [("FULL_AND_PIECEWISE", True), ("PIECEWISE", False)]
)
def test_the_034_diff_is_refused_under_full_graphs(
    vllm_034: Path, graphs: str, refused: bool
) -> None:
    root = vllm_034 / "vllm"
    got = classify(
        read_diff(DIFFS / "v2-draft-argmax-0.34.diff", root),
        root,
        compiled=True,
        device="cuda",
        graphs=graphs,
    )
    assert got.overlayable is not refused, [f.line() for f in got.findings]
    lines = [f.line() for f in got.findings]
    assert any("DraftModelSpeculator.sample_draft: body changed" in line for line in lines)
    if refused:
        assert "runs while CUDA graphs are captured" in got.blockers[0].line()
