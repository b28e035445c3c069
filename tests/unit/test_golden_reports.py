"""What a stored run renders to, byte for byte: table.md and summary.json of three committed
real-run fixtures (launch-per-arm, one-engine at TP 2, an overlaid diff) against copies
rendered before the refactor that split the stages (issue 32, commit 5ee4690). A change that
means to alter them regenerates them on purpose: SPECBENCH_UPDATE_GOLDEN=1 rewrites them,
and the diff shows what moved."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.workflow import write_report
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "fixtures" / "golden"
FIXTURES = ["cpu-medusa-small", "cpu-eagle-tp2-one-engine-small", "cpu-medusa-overlay-20-blocks"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_a_stored_run_renders_as_it_did(fixture: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_NO_INDEX", "1")
    run_dir = tmp_path / fixture
    shutil.copytree(ROOT / "results" / "fixtures" / fixture, run_dir)
    write_report(run_dir, figures=False)
    for name in ("table.md", "summary.json"):
        made, kept = (run_dir / name).read_bytes(), GOLDEN / fixture / name
        if os.environ.get("SPECBENCH_UPDATE_GOLDEN"):
            kept.write_bytes(made)
        assert made == kept.read_bytes(), (
            f"{fixture}/{name} renders differently from {kept.relative_to(ROOT)}; if that is "
            "meant, rerun with SPECBENCH_UPDATE_GOLDEN=1 and commit the diff")
