"""report.html and the history page are pages, checked in headless
Chromium: once the page's scripts ran, the DOM has the comparison as a real table (a row per
row of the terminal table, the intervals in the cells), every interactive figure is drawn from
the plotly.js bundled into the file (no network), a click on a heading sorts the rows, and a
screenshot shows a page, not a blank."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.compare import compare_run
from harness.cli import main
from harness.present.headline import verdicts
from harness.present.tables import table_rows
from harness.results.run import load_run
from tests import browser
from tests.conftest import ROOT
from tests.unit.test_history import simulated

ONE_ENGINE = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-one-engine-small"
SWEEP = ROOT / "results" / "fixtures" / "cpu-eagle-tp2-sweep-small"


def _report(fixture: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / fixture.name
    shutil.copytree(fixture, run_dir)
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(run_dir), "--html"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={"SPECBENCH_NO_INDEX": "1", **__import__("os").environ},
    )
    assert result.returncode == 0, result.stderr
    return run_dir / "report.html"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _report(ONE_ENGINE, tmp_path_factory.mktemp("page"))


def _leading_number(cell: str) -> float:
    """The number a cell starts with (a minus sign may be U+2212)."""
    found = re.match(r"[-+]?\d+(\.\d+)?", cell.replace("−", "-"))
    assert found is not None, cell
    return float(found.group(0))


def _no_network(text: str) -> None:
    """Nothing the page loads comes from elsewhere: no script loaded by src, and outside the
    scripts' bodies (plotly.js's own strings name its website) no src= or href= to http(s)."""
    assert "<script src" not in text and '<script type="text/javascript" src' not in text
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    assert not re.search(r"""(src|href)=["']https?://""", markup)


def test_report_page_has_the_table_and_drawn_figures(report: Path, tmp_path: Path) -> None:
    browser.chromium()
    source = report.read_text()
    _no_network(source)
    assert source.count('<script type="text/javascript">/**') == 1  # plotly.js, once
    page = browser.parse(browser.dom(report))
    comparison = compare_run(load_run(report.parent))
    header, rows = table_rows(comparison)
    for line in verdicts(comparison):  # the answer first, as the terminal and table.md lead
        assert html.escape(line) in source.split("<table")[0]
    main_table = page.tables[0]
    assert main_table["header"] == header
    assert main_table["rows"] == rows  # every cell as the terminal shows it, intervals too
    assert any("[" in cell for row in rows for cell in row)
    # throughput over time, latency CDFs, acceptance per position, forest (the fixture's two
    # blocks draw no running estimate): each drawn to an SVG by plotly.
    assert page.figures == 4
    shot = browser.screenshot(report, tmp_path / "report.png")
    _not_blank(shot)


def _not_blank(png: Path) -> None:
    """A page, not a blank: dark pixels (text, lines) on a mostly light page."""
    from matplotlib.image import imread

    pixels = imread(png)[..., :3].mean(axis=-1)
    assert pixels.shape[0] > 1000
    dark = float((pixels < 0.5).mean())
    assert 0.005 < dark < 0.5, dark
    assert len(np.unique(np.round(pixels, 2))) > 20


def test_a_click_on_a_heading_sorts_the_rows(report: Path, tmp_path: Path) -> None:
    """Click the Delta heading (ascending), then again (descending), in the page's own script;
    the row order follows the deltas' numbers, Unicode minus and signs included."""
    browser.chromium()
    text = report.read_text()
    clicks = (
        "<script>const th=document.querySelectorAll('table.results')[0]"
        ".querySelectorAll('thead th')[3];th.click();"
        "document.body.setAttribute('data-up',Array.from(th.closest('table').tBodies[0]"
        ".rows).map(r=>r.cells[3].textContent).join('|'));th.click();</script>"
    )
    clicked = tmp_path / "clicked.html"
    clicked.write_text(text.replace("</body>", clicks + "</body>"))
    dom = browser.dom(clicked)
    up = re.search(r'data-up="([^"]*)"', dom)
    assert up is not None
    first = [
        _leading_number(c)
        for c in up.group(1).replace("&amp;", "&").split("|")
        if re.match(r"[-+−]?\d", c)
    ]
    assert len(first) >= 10 and first == sorted(first)
    rows = browser.parse(dom).tables[0]["rows"]
    down = [_leading_number(r[3]) for r in rows if re.match(r"[-+−]?\d", r[3])]
    assert down == sorted(down, reverse=True)


def test_sweep_page_has_every_cells_table(tmp_path: Path) -> None:
    browser.chromium()
    report = _report(SWEEP, tmp_path)
    page = browser.parse(browser.dom(report))
    from harness.analysis.sweep_comparison import compare_sweep

    cells = compare_sweep(load_run(report.parent)).cells
    assert len(page.tables) == 1 + len(cells)
    assert page.tables[0]["caption"].startswith("cpu-eagle-tp2-sweep-small sweep")
    assert len(page.tables[0]["rows"]) == len(cells)
    for table, cell in zip(page.tables[1:], cells, strict=True):
        assert table["rows"] == table_rows(cell.comparison)[1]
    # throughput over time, latency, acceptance, and a forest per cell
    assert page.figures == 3 + len(cells)


def test_history_page_has_the_runs_and_the_series_figure(tmp_path: Path) -> None:
    browser.chromium()
    for i in range(8):
        simulated(
            tmp_path,
            f"r{i:02d}",
            1000.0 + i,
            -0.05 if i >= 5 else 0.0,
            seed=i,
            commit=f"c{i:02d}" + "0" * 38,
        )
    page_path = tmp_path / "history.html"
    assert main(["history", "unit", "--results-dir", str(tmp_path), "--html", str(page_path)]) == 0
    _no_network(page_path.read_text())
    page = browser.parse(browser.dom(page_path))
    [table] = page.tables
    assert [r[0] for r in table["rows"]] == [f"r{i:02d}" for i in range(8)]
    assert all("[" in r[2] for r in table["rows"])
    assert page.figures == 1
    _not_blank(browser.screenshot(page_path, tmp_path / "history.png", height=1400))
