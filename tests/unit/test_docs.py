"""The docs a newcomer reads: the README stays a front door (the two commands first, the diff
recipe within its first 100 lines, at most 300 lines), and every relative link in it and in
docs/ leads to a file and, where it names one, a heading that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", ROOT / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in FENCE.sub("", page.read_text()).splitlines()
        if line.startswith("#")
    }


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail to docs/"
    assert lines[3].startswith("bash scripts/setup.sh && .venv/bin/specbench run")
    assert lines[4].startswith("bash scripts/setup.sh --v2 && bash scripts/test.sh")
    recipe = next(i for i, line in enumerate(lines) if line.startswith("## A/B your own branch"))
    assert recipe < 100


def _sentence_lengths(text: str) -> list[int]:
    """Words per sentence of a page's prose: code, tables, headings and comments left out; a
    sentence ends at . ! or ?, a blank line or a list item."""
    prose = FENCE.sub("", text)
    prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)
    prose = re.sub(r"^(\||#).*$", "", prose, flags=re.M)
    parts = re.split(r"(?<=[.!?])\s+|\n\s*\n|\n- ", prose)
    return [len(p.split()) for p in parts if len(p.split()) > 2]


def test_the_readme_speaks_in_short_sentences() -> None:
    """The anchors' READMEs (pyperf, asv, guidellm) have median sentences of 12-17 words."""
    lengths = sorted(_sentence_lengths((ROOT / "README.md").read_text()))
    assert lengths[len(lengths) // 2] <= 17, f"median sentence {lengths[len(lengths) // 2]} words"
    assert lengths[-1] <= 40, f"a README sentence of {lengths[-1]} words"


def test_sentence_lengths_counts_prose_only() -> None:
    text = (
        "One two three four.\n\n```\nnot prose at all here\n```\n\n"
        "| a | table row here |\n\nFive six seven."
    )
    assert _sentence_lengths(text) == [4, 3]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for match in LINK.finditer(FENCE.sub("", page.read_text())):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
