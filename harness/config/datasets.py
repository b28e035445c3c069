"""The datasets people benchmark speculative decoding on, read from local files with each
prompt's category, strictly (one line naming file, line and field), without importing vLLM.

vLLM 0.32's own classes (vllm.benchmarks.datasets: SpecBench, SpeedBench, CustomDataset)
drop the category, raise a raw KeyError on a row without one, read .jsonl only, and cost an
import of vLLM (about 8 s); the parent checks files here before any engine starts, and the
worker loads the same prompts through vLLM's class and checks that they agree
(harness.engine.worker).

Formats:
- spec_bench: Spec-Bench's question.jsonl (also MT-Bench's question file, same shape): one
  object per line with 'category' and 'turns' (a list of strings; the first is the prompt).
- speed_bench: SPEED-Bench as its prepare script lays it out: a folder holding
  <subset>.jsonl (default qualitative), one object per line with 'category' and 'messages'
  (a list of {role, content}; the first message's content is the prompt), or that file.
- jsonl: 'prompt' (text) or 'prompt_token_ids', and optionally 'category' (vLLM's
  CustomDataset reads the text form).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import ScenarioError

# A prompt is token ids (exact lengths, no tokenizer needed) or text; with its category.
Prompt = list[int] | str
Item = tuple[Prompt, str | None]

SPEED_BENCH_SUBSET = "qualitative"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r})"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None


def json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """('path:line', object) for every non-blank line of a JSONL file."""
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not JSON ({exc.msg})") from None


def category_of(item: dict[str, Any], where: str, required: bool, form: str) -> str | None:
    value = item.get("category")
    if value is None:
        if required:
            raise ScenarioError(
                f"{where}: no 'category' ({form} gives every prompt one; "
                "the per-category table needs it)"
            )
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(
            f"{where}: 'category' must be a non-empty string, got {json.dumps(value)}"
        )
    return value


def read_spec_bench(path: Path) -> list[Item]:
    items: list[Item] = []
    for where, row in json_lines(path):
        turns = row.get("turns") if isinstance(row, dict) else None
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise ScenarioError(
                f"{where}: expected an object with 'turns', a list of strings "
                "(Spec-Bench's question.jsonl)"
            )
        if not turns[0].strip():
            raise ScenarioError(f"{where}: empty first turn")
        assert isinstance(row, dict)
        items.append((turns[0], category_of(row, where, True, "Spec-Bench")))
    return items


def speed_bench_file(path: Path, subset: str | None) -> Path:
    """SPEED-Bench's file: <folder>/<subset>.jsonl, or the .jsonl named itself."""
    return path / f"{subset or SPEED_BENCH_SUBSET}.jsonl" if path.is_dir() else path


def read_speed_bench(path: Path) -> list[Item]:
    items: list[Item] = []
    for where, row in json_lines(path):
        messages = row.get("messages") if isinstance(row, dict) else None
        first = messages[0] if isinstance(messages, list) and messages else None
        if not isinstance(first, dict) or not isinstance(first.get("content"), str):
            raise ScenarioError(
                f"{where}: expected an object with 'messages', a list of "
                "{role, content} (SPEED-Bench)"
            )
        if not first["content"].strip():
            raise ScenarioError(f"{where}: empty first message")
        assert isinstance(row, dict)
        items.append((first["content"], category_of(row, where, True, "SPEED-Bench")))
    return items


def stratified(items: list[Item], n: int) -> list[Item]:
    """The first `n` prompts taken round-robin across categories in the order they first
    appear, each category's in file order: Spec-Bench lists its 480 questions category by
    category, so a pass of 16 taken from the top would hold one category only. Without
    categories (or with one), the file's first `n`."""
    groups: dict[str | None, list[Item]] = {}
    for item in items:
        groups.setdefault(item[1], []).append(item)
    if len(groups) <= 1:
        return items[:n]
    out: list[Item] = []
    queues = [list(reversed(g)) for g in groups.values()]
    while len(out) < n and any(queues):
        for queue in queues:
            if queue and len(out) < n:
                out.append(queue.pop())
    return out
