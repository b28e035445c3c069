"""Dataset prompts rendered as chat, as `vllm bench serve` renders them:
with vLLM's own tokenizer loader and the tokenizer's template; a template's tokens show in
every prompt's token count; chat_template: false and token-id prompts are sent as they are."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import Workload, parse_scenario, scenario_hash
from harness.config.workload import load_workload
from harness.engine import chat
from harness.engine.models import is_built, model_dir
from harness.errors import ScenarioError
from tests.conftest import ROOT

SPEC_BENCH = ROOT / "tests/fixtures/datasets/spec_bench_question.jsonl"
# Four words of the built-in vocabulary around each message, one more for the generation
# prompt, and what chat_template_kwargs may add.
TEMPLATE = (
    "{% for m in messages %}w3 w4 {{ m['content'] }} w5{% endfor %}"
    "{% if greeting is defined %} {{ greeting }}{% endif %}"
    "{% if add_generation_prompt %} w6{% endif %}"
)


@pytest.fixture
def tokenizer_dir(tmp_path: Path) -> Path:
    """The built-in tiny model's tokenizer with TEMPLATE as its chat template."""
    built = model_dir("tiny-llama")
    if not is_built("tiny-llama"):
        pytest.skip("the built-in models are not built (scripts/setup.sh builds them)")
    out = tmp_path / "tok"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(built / name, out / name)
    (out / "chat_template.jinja").write_text(TEMPLATE)
    return out


def _count(tokenizer_dir: Path, text: str) -> int:
    from vllm.tokenizers import get_tokenizer

    return len(get_tokenizer(str(tokenizer_dir))(text).input_ids)


def _workload(**extra: Any) -> Workload:
    return Workload(kind="spec_bench", path=str(SPEC_BENCH), num_prompts=6, max_tokens=8, **extra)


def test_a_template_adds_its_tokens_to_every_prompt(tokenizer_dir: Path) -> None:
    workload = _workload()
    raw, _ = load_workload(workload, ROOT, None)
    args = {"model": str(tokenizer_dir)}
    rendered, said = chat.render(workload, args, raw)
    assert said == chat.TEMPLATED == "the tokenizer's chat template"
    for before, after in zip(raw, rendered, strict=True):
        assert isinstance(before, str) and isinstance(after, str)
        assert _count(tokenizer_dir, after) - _count(tokenizer_dir, before) == 4, after
    greeted, said = chat.render(_workload(chat_template_kwargs={"greeting": "w7"}), args, raw)
    assert said == "the tokenizer's chat template (greeting='w7')"
    for g, r in zip(greeted, raw, strict=True):
        assert isinstance(g, str) and isinstance(r, str)
        assert _count(tokenizer_dir, g) - _count(tokenizer_dir, r) == 5, g
    off, said = chat.render(_workload(chat_template=False), args, raw)
    assert off == raw and said == chat.RAW_OFF
    ids, said = chat.render(workload, args, [[5, 6, 7]])
    assert ids == [[5, 6, 7]] and said == chat.RAW_IDS
    (tokenizer_dir / "chat_template.jinja").unlink()
    same, said = chat.render(workload, args, raw)
    assert same == raw and said == chat.RAW_NONE


def test_chat_template_settings_are_checked_and_hashed_where_they_matter(
    scenario_data: dict[str, Any],
) -> None:
    with pytest.raises(ScenarioError, match="workload.*chat_template_kwargs.*random prompts"):
        parse_scenario(
            {
                **scenario_data,
                "workload": {**scenario_data["workload"], "chat_template_kwargs": {"a": 1}},
            },
            "s",
        )
    # Random prompts are token ids: the setting changes nothing, nor the hash.
    plain = parse_scenario(scenario_data, "s")
    off = parse_scenario(
        {**scenario_data, "workload": {**scenario_data["workload"], "chat_template": False}}, "s"
    )
    assert scenario_hash(plain) == scenario_hash(off)
    files = {
        **scenario_data,
        "workload": {
            "kind": "spec_bench",
            "path": str(SPEC_BENCH),
            "num_prompts": 6,
            "max_tokens": 8,
        },
    }
    raw = {**files, "workload": {**files["workload"], "chat_template": False}}
    assert scenario_hash(parse_scenario(files, "s")) != scenario_hash(parse_scenario(raw, "s"))
