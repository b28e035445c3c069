"""Headless Chromium for the page tests: the DOM a page has once its scripts ran, and a
screenshot. Debian's chromium (`.ci/run` installs it; `apt-get install chromium` here). Without
it the page tests skip, saying so, unless SPECBENCH_REQUIRE_BROWSER is set (CI sets it), where
they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import TypedDict

import pytest

# No background networking: this machine's closed network refuses Chromium's own calls home.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "no headless Chromium (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("SPECBENCH_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def _run(args: list[str], page: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="specbench-chromium-") as profile:
        result = subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def dom(page: Path) -> str:
    """The page's DOM after its scripts ran (plotly drew its figures)."""
    return _run(["--dump-dom"], page)


def screenshot(page: Path, out: Path, width: int = 1300, height: int = 2600) -> Path:
    _run([f"--window-size={width},{height}", f"--screenshot={out}"], page)
    assert out.is_file()
    return out


class Table(TypedDict):
    """One <table class="results">: its caption, heading cells and body rows' cell texts."""

    caption: str
    header: list[str]
    rows: list[list[str]]


class Tables(HTMLParser):
    """Every <table class="results">: its caption, heading cells and body rows' cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._in: str | None = None
        self.figures = 0  # <div class="figure"> holding a drawn plotly <svg class="main-svg">
        self._figure_depth: int | None = None
        self._depth = 0
        self._drawn = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div":
            self._depth += 1
            if "figure" in classes and self._figure_depth is None:
                self._figure_depth, self._drawn = self._depth, False
        if tag == "svg" and "main-svg" in classes and self._figure_depth is not None:
            self._drawn = True
        if tag == "table" and "results" in classes:
            self.tables.append({"caption": "", "header": [], "rows": []})
        elif self.tables and tag in ("caption", "thead", "tbody"):
            self._in = tag
        elif self.tables and tag == "tr":
            self._row = []
        elif self.tables and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            if self._figure_depth == self._depth:
                self.figures += self._drawn
                self._figure_depth = None
            self._depth -= 1
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            key = "header" if self._in == "thead" else "rows"
            if key == "header":
                self.tables[-1]["header"] = self._row
            else:
                self.tables[-1]["rows"].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._in == "caption" and self.tables:
            self.tables[-1]["caption"] += data


def parse(text: str) -> Tables:
    parser = Tables()
    parser.feed(text)
    return parser
