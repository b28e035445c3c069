"""What the parent assumes about vLLM and the built-in models without importing either, held
to the installed vLLM and the built models (so a new vLLM or model build cannot leave the
pre-flight checks describing something else)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.catalog import BUILTIN_CONFIGS, BUILTIN_WORD_TOKENIZERS
from harness.config.vllm_args import description_path
from harness.engine.models import is_built, model_dir

pytestmark = pytest.mark.integration


def test_shipped_argument_description_is_the_installed_vllms(tmp_path: Path) -> None:
    out = tmp_path / "args.json"
    subprocess.run([sys.executable, "-m", "harness.engine.argspec", str(out)], check=True,
                   capture_output=True, timeout=300)
    fresh = json.loads(out.read_text())
    shipped = json.loads(description_path(fresh["vllm_version"]).read_text())
    assert shipped == fresh, ("regenerate it: python -m harness.engine.argspec "
                              f"harness/data/vllm-args-{fresh['vllm_version']}.json")
    assert fresh["engine_args"]["enforce_eager"] == {"kinds": ["bool"]}
    assert "bfloat16" in fresh["engine_args"]["dtype"]["choices"]


@pytest.mark.parametrize("name", sorted(BUILTIN_CONFIGS))
def test_builtin_configs_match_the_built_models(name: str) -> None:
    assert is_built(name), f"{name} is not built (scripts/setup.sh builds it)"
    config = json.loads((model_dir(name) / "config.json").read_text())
    assert {k: config.get(k) for k in BUILTIN_CONFIGS[name]} == BUILTIN_CONFIGS[name]


@pytest.mark.parametrize("name", sorted(BUILTIN_WORD_TOKENIZERS))
def test_builtin_tokenizer_is_one_token_per_word(name: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir(name) / "tokenizer.json"))
    text = "w5 w6  w7\nw900 w3"
    assert len(tok.encode(text, add_special_tokens=False).ids) == len(text.split())
