"""Datasets with categories from local files (tests/fixtures/datasets: the same 12 prompts in
3 categories, in each format): read without vLLM, taken round-robin across categories, refused
in one line when wrong, and a per-category table from each format's categories."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from harness.analysis.compare import Arms, compare_records
from harness.config.scenario import Workload, parse_scenario
from harness.config.workload import load_workload
from harness.errors import ScenarioError
from harness.present.tables import render_markdown, render_terminal
from harness.wire.records import PassRecord, RequestRecord, SpecDecodeCounters
from testkit.factory import run
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "datasets"
FORMATS = {
    "spec_bench": "spec_bench_question.jsonl",
    "speed_bench": "speed_bench",
    "jsonl": "custom_with_category.jsonl",
}
CATEGORIES = ["translation", "summarization", "math_reasoning"]


def workload(kind: str, n: int = 6, **more: Any) -> Workload:
    return Workload(
        kind=kind,
        path=FORMATS[kind],
        num_prompts=n,
        max_tokens=8,
        **more,
    )


@pytest.mark.parametrize("kind", list(FORMATS))
def test_each_format_reads_the_same_prompts_round_robin(kind: str) -> None:
    prompts, categories = load_workload(workload(kind), FIXTURES, 1024)
    # The file lists 4 prompts per category, category by category: a pass of 6 takes two of
    # each, in turn.
    assert categories == CATEGORIES * 2
    rows = [
        json.loads(line)
        for line in (FIXTURES / "spec_bench_question.jsonl").read_text().splitlines()
    ]
    assert prompts == [
        rows[0]["turns"][0],
        rows[4]["turns"][0],
        rows[8]["turns"][0],
        rows[1]["turns"][0],
        rows[5]["turns"][0],
        rows[9]["turns"][0],
    ]
    only, cats = load_workload(workload(kind, 4, categories=["math_reasoning"]), FIXTURES, 1024)
    assert cats == ["math_reasoning"] * 4 and only[0] == rows[8]["turns"][0]


def test_files_without_categories_keep_their_order() -> None:
    w = Workload(
        kind="jsonl", path="scenarios/prompts/tiny-llama-prompts.jsonl", num_prompts=5, max_tokens=8
    )
    prompts, categories = load_workload(w, ROOT, 1024)
    lines = (ROOT / w.path).read_text().splitlines()[:5]  # type: ignore[operator]
    assert prompts == [json.loads(line)["prompt"] for line in lines]
    assert categories == [None] * 5


def test_reading_imports_no_vllm() -> None:
    code = (
        "import sys; from harness.config.scenario import Workload; "
        "from harness.config.workload import load_workload; from pathlib import Path; "
        f"load_workload(Workload(kind='spec_bench', path='{FORMATS['spec_bench']}', "
        f"num_prompts=12, max_tokens=4), Path('{FIXTURES}'), None); "
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"categories": ["coding"]}, "workload.categories: 'coding' is not in "),
        ({"num_prompts": 5, "categories": ["translation"]}, "workload.num_prompts: 5 asked, "),
        ({"subset": "quantitative"}, "quantitative.jsonl"),
    ],
)
def test_what_a_dataset_refuses(change: dict[str, Any], message: str) -> None:
    fields = {"n": change.pop("num_prompts", 6), **change}
    with pytest.raises(ScenarioError) as err:
        load_workload(workload("speed_bench", **fields), FIXTURES, 1024)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_fields_that_need_a_dataset(scenario_data: dict[str, Any]) -> None:
    for extra, message in (
        ({"subset": "x"}, "'subset' is only for speed_bench"),
        ({"categories": ["x"]}, "'categories': random prompts have none"),
    ):
        scenario_data["workload"] = {"num_prompts": 2, "max_tokens": 4, **extra}
        with pytest.raises(ScenarioError, match=message):
            parse_scenario(scenario_data)


def category_runs(categories: list[str | None]) -> list[Any]:
    """Two arms, 3 launches each of 2 passes; each request's acceptance by its category (the
    candidate accepts one more token a step in 'math_reasoning' only)."""
    gain = {"translation": (2, 0), "summarization": (1, 0), "math_reasoning": (1, 1)}

    def one_pass(repeat: int, arm: int, jitter: float) -> PassRecord:
        requests = []
        for i, category in enumerate(categories):
            base, extra = gain[category or "translation"]
            accepted = base + arm * extra
            requests.append(
                RequestRecord(
                    index=i,
                    prompt_tokens=10,
                    output_tokens=9,
                    ttft_s=0.1,
                    e2el_s=0.1 + (0.8 + jitter) / (1 + accepted),
                    finish_reason="length",
                    output_token_ids=list(range(9)),
                    spec_histogram=[0] * accepted + [4],
                    spec_draft_tokens=12,
                    category=category,
                )
            )
        return PassRecord(
            repeat=repeat,
            started_unix=0.0,
            duration_s=1.0,
            requests=requests,
            spec_decode=SpecDecodeCounters(
                num_drafts=4, num_draft_tokens=12, num_accepted_tokens=4, accepted_per_pos=[4]
            ),
            workload_hash="w",
        )

    return [
        run(arm, r, 2 * r + i, [one_pass(p, i, 0.01 * (r + p)) for p in range(2)])
        for r in range(3)
        for i, arm in enumerate(["base", "cand"])
    ]


@pytest.mark.parametrize("kind", list(FORMATS))
def test_a_per_category_table_from_each_format(kind: str) -> None:
    _, categories = load_workload(workload(kind), FIXTURES, 1024)
    comparison = compare_records(category_runs(categories), Arms("base", ["cand"]), "r", "unit")
    assert list(comparison.categories) == CATEGORIES
    assert comparison.category_requests == dict.fromkeys(CATEGORIES, 2)
    rows = {c: {r.key: r for r in results[0].rows} for c, results in comparison.categories.items()}
    # Acceptance length 1 + accepted per step: 3 vs 3 in translation, 2 vs 3 in math.
    assert rows["translation"]["acceptance_length"].baseline == pytest.approx(3.0)
    math_row = rows["math_reasoning"]["acceptance_length"]
    assert math_row.baseline == pytest.approx(2.0) and math_row.candidate == pytest.approx(3.0)
    assert rows["translation"]["acceptance_length"].estimate.known_exactly
    rate = rows["math_reasoning"]["output_rate"]
    assert rate.estimate.delta > 0.3 and rate.estimate.ci_low is not None
    assert rate.estimate.ci_low > 0  # faster, significantly, over 3 rounds
    text = render_terminal(comparison)
    assert "Per category" in text and "math_reasoning (2)" in text
    assert "Output rate (tok/s per request)" in text
    md = render_markdown(comparison)
    assert "**Per category**" in md and "| math_reasoning (2) | Acceptance length |" in md


def test_no_categories_no_table() -> None:
    comparison = compare_records(category_runs([None, None]), Arms("base", ["cand"]), "r", "unit")
    assert comparison.categories == {}
    assert "Per category" not in render_terminal(comparison)
