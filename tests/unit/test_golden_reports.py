"""What a stored run renders to, byte for byte: table.md and summary.json of three committed
real-run fixtures (launch-per-arm, one-engine at TP 2, an overlaid diff) against copies
rendered before the refactor that split the stages (commit 5ee4690). A change that
means to alter them regenerates them on purpose: SPECBENCH_UPDATE_GOLDEN=1 rewrites them,
and the diff shows what moved. summary.json's floats are held to 1e-9 relative, not to their
last bit: numpy's reductions sum in a different order on another CPU (the fresh-clone CI's
machine moved the 16th digit of an interval's bound), and no figure is printed to 9 digits."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from harness.workflow import write_report
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "fixtures" / "golden"
FIXTURES = ["cpu-medusa-small", "cpu-eagle-tp2-one-engine-small", "cpu-medusa-overlay-20-blocks"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_a_stored_run_renders_as_it_did(
    fixture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECBENCH_NO_INDEX", "1")
    # Paths under the current folder print relative to it: render from one the fixtures' own
    # paths are not under, so the bytes do not depend on where the checkout is.
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / fixture
    shutil.copytree(ROOT / "results" / "fixtures" / fixture, run_dir)
    write_report(run_dir, figures=False)
    for name in ("table.md", "summary.json"):
        made, kept = (run_dir / name).read_bytes(), GOLDEN / fixture / name
        if os.environ.get("SPECBENCH_UPDATE_GOLDEN"):
            kept.write_bytes(made)
        same = (
            _same(json.loads(made), json.loads(kept.read_bytes()))
            if name.endswith(".json")
            else made == kept.read_bytes()
        )
        assert same, (
            f"{fixture}/{name} renders differently from {kept.relative_to(ROOT)}; if that is "
            "meant, rerun with SPECBENCH_UPDATE_GOLDEN=1 and commit the diff"
        )


def _same(made: object, kept: object) -> bool:
    """Equal JSON, floats to 1e-9 relative (the CPU's summation order moves the last bits)."""
    if isinstance(made, float) and isinstance(kept, float | int):
        return math.isclose(made, kept, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(made, dict) and isinstance(kept, dict):
        return made.keys() == kept.keys() and all(_same(made[k], kept[k]) for k in made)
    if isinstance(made, list) and isinstance(kept, list):
        return len(made) == len(kept) and all(map(_same, made, kept))
    return made == kept


def test_the_comparison_holds_floats_to_nine_digits_not_their_last_bit() -> None:
    assert _same({"d": [0.009768705112146227]}, {"d": [0.009768705112145655]})
    assert not _same({"d": [0.0097687]}, {"d": [0.0097688]})
    assert not _same({"d": 1.0}, {"e": 1.0}) and not _same([1.0], [1.0, 2.0])
