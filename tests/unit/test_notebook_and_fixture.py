"""Notebook and report paths on a small committed results fixture from a real CPU run:
they need no engine, only the stored raw records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.compare import compare_run
from harness.results.run import load_run
from tests.conftest import ROOT

FIXTURE = ROOT / "results" / "fixtures" / "cpu-medusa-small"
# A real one-engine run: EAGLE TP 2, both arms in one engine, 2 blocks of A B B A.
ONE_ENGINE = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-one-engine-small"


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    target = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, target)
    return target


def test_one_engine_fixture_compares_on_blocks() -> None:
    comparison = compare_run(load_run(ONE_ENGINE))
    assert comparison.design == "one-engine" and not comparison.unproven
    tput = next(r for r in comparison.candidates[0].rows if r.key == "output_throughput")
    assert tput.estimate.units == 2 and tput.estimate.test == "paired t (blocks)"


def test_fixture_loads_and_compares() -> None:
    results = load_run(FIXTURE)
    assert results.manifest["status"] == "complete"
    comparison = compare_run(results)
    assert comparison.candidates[0].status == "ok"
    assert comparison.candidates[0].parity is not None


def test_report_command_rerenders(fixture_copy: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(fixture_copy), "--markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # The throughputs share one interval: one row naming them (every row: --rows all).
    assert "| Output / total / request throughput (tok/s, tok/s, req/s) |" in result.stdout
    assert (fixture_copy / "summary.json").is_file() and (fixture_copy / "table.txt").is_file()
    import pandas as pd

    passes = pd.read_parquet(fixture_copy / "passes.parquet")
    assert len(passes) == 4 and passes["output_throughput"].gt(0).all()
    assert len(pd.read_parquet(fixture_copy / "requests.parquet")) == 4 * 4


def _report_html(fixture: Path, tmp_path: Path) -> tuple[Path, Any]:
    """`specbench report --html` on a copy of a fixture: the copy and the finished command."""
    run_dir = tmp_path / fixture.name
    shutil.copytree(fixture, run_dir)
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(run_dir), "--html"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return run_dir, result


def _markup(page: Path) -> str:
    """The page without its scripts' bodies (plotly.js, bundled, holds such strings too)."""
    import re

    return re.sub(r"<script[^>]*>.*?</script>", "", page.read_text(), flags=re.S)


def test_report_html_and_figures(tmp_path: Path) -> None:
    """`report --html`: figures as PNG and SVG, linked from table.md, embedded in one page
    with the comparison, builds, fingerprint and scenario."""
    run_dir, result = _report_html(ONE_ENGINE, tmp_path)
    # The fixture's 2 blocks draw no running estimate (it needs two looks of 4 blocks).
    names = ["acceptance_per_position", "forest", "latency_cdf", "throughput_over_time"]
    for name in names:
        for suffix in ("png", "svg"):
            path = run_dir / "figures" / f"{name}.{suffix}"
            assert path.is_file() and path.stat().st_size > 5000, path
        assert (run_dir / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"![{name}](figures/{name}.png)" in (run_dir / "table.md").read_text()
    page = _markup(run_dir / "report.html")
    assert page.count('src="data:image/png;base64,') == 4  # the static figures, embedded
    assert "Output throughput (tok/s)" in page and "Environment fingerprint" in page
    assert "cpu-eagle-tp2-argmax" in page and "tp-argmax-reduction:optimized" in page
    assert f"report: {run_dir / 'report.html'}" in result.stderr


@pytest.mark.parametrize("fixture", [FIXTURE, ONE_ENGINE], ids=["launch-per-arm", "one-engine"])
def test_notebook_executes(fixture: Path, tmp_path: Path) -> None:
    nb, figure = _execute("explore_results.ipynb", fixture, tmp_path)
    assert figure.is_file() and figure.stat().st_size > 1000
    assert "| Output / total / request throughput (tok/s, tok/s, req/s) |" in _text(nb)


def _execute(notebook: str, fixture: Path, tmp_path: Path) -> tuple[Any, Path]:
    """Run a notebook headless on a copy of a fixture; the notebook and its saved figure."""
    import nbformat
    from nbclient import NotebookClient

    fixture_copy = tmp_path / fixture.name
    shutil.copytree(fixture, fixture_copy)
    figure = tmp_path / "figure.png"
    nb = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)  # type: ignore[no-untyped-call]
    nb.cells.insert(
        0,
        nbformat.v4.new_code_cell(  # type: ignore[no-untyped-call]
            f"import os; os.environ['SPECBENCH_RESULTS'] = {str(fixture_copy)!r}; "
            f"os.environ['SPECBENCH_FIGURE'] = {str(figure)!r}"
        ),
    )
    os.environ.setdefault("MPLBACKEND", "Agg")
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    return nb, figure


def _text(nb: Any) -> str:
    return "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


# A real sweep: the EAGLE argmax swap at TP 2 over three batch sizes, 2 blocks per cell.
SWEEP = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-sweep-small"


def test_sweep_fixture_is_one_tidy_frame() -> None:
    from harness.analysis.sweep_comparison import compare_sweep

    sweep = compare_sweep(load_run(SWEEP))
    frame = sweep.frame()
    assert [c.id for c in sweep.cells] == ["c00", "c01", "c02"]
    assert {
        "cell",
        "batch_size",
        "workload.num_prompts",
        "candidate",
        "metric",
        "delta",
        "ci_low",
        "ci_high",
        "significant",
    } <= set(frame)
    tput = frame[frame["metric"] == "output_throughput"]
    assert tput["batch_size"].tolist() == [2, 8, 32] and tput["ci_low"].notna().all()
    (line,) = sweep.break_even
    assert line.axis == "batch_size" and line.crossing is not None
    assert line.sentence.startswith("break-even on batch_size")


def test_sweep_notebook_executes(tmp_path: Path) -> None:
    nb, figure = _execute("sweep.ipynb", SWEEP, tmp_path)
    assert figure.is_file() and figure.stat().st_size > 5000
    outputs = _text(nb)
    assert "3 cells over batch_size, workload.num_prompts" in outputs
    assert "break-even on batch_size" in outputs
    # The inline figure of the library's delta-vs-axis plot was drawn.
    assert any(
        o.get("data", {}).get("image/png")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )


def test_sweep_report_renders_every_figure(tmp_path: Path) -> None:
    run_dir, result = _report_html(SWEEP, tmp_path)
    assert "cpu-eagle-tp2-sweep-small sweep" in result.stdout
    names = [
        "delta_vs_batch_size",
        "throughput_over_time",
        "latency_cdf_ttft",
        "latency_cdf_tpot",
        "acceptance_per_position",
    ]
    assert sorted(p.stem for p in (run_dir / "figures").glob("*.png")) == sorted(names)
    for name in names:
        assert f"![{name}](figures/{name}.png)" in (run_dir / "table.md").read_text()
    page = _markup(run_dir / "report.html")
    assert page.count('src="data:image/png;base64,') == len(names)
    assert "break-even on batch_size" in page
