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

pytestmark = [pytest.mark.integration, pytest.mark.engine_free]  # vLLM imported, no engine


def test_shipped_argument_description_is_the_installed_vllms(tmp_path: Path) -> None:
    out = tmp_path / "args.json"
    subprocess.run(
        [sys.executable, "-m", "harness.engine.argspec", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    fresh = json.loads(out.read_text())
    shipped = json.loads(description_path(fresh["vllm_version"]).read_text())
    assert shipped == fresh, (
        "regenerate it: python -m harness.engine.argspec "
        f"harness/data/vllm-args-{fresh['vllm_version']}.json"
    )
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


def test_vllms_dataset_classes_read_the_fixtures_as_specbench_does(tmp_path: Path) -> None:
    """The worker loads Spec-Bench and SPEED-Bench through vLLM's own classes and checks them
    against specbench's reader, which adds the categories vLLM's drop; here both, on the
    fixtures, and the raw KeyError vLLM gives a row without a category once a category is
    asked for (the parent refuses such a file in one line instead)."""
    code = r"""
import json, sys
from pathlib import Path
from harness.config.scenario import Workload
from harness.config.workload import READERS, workload_file
from harness.engine.worker import check_against_vllm, vllm_dataset_prompts
base = Path(sys.argv[1])
out = {}
for kind, path in (("spec_bench", "spec_bench_question.jsonl"), ("speed_bench", "speed_bench")):
    w = Workload(kind=kind, path=path, num_prompts=12, max_tokens=4)
    check_against_vllm(w, base)
    out[kind] = [vllm_dataset_prompts(w, base),
                 [p for p, _ in READERS[kind](workload_file(w, base))]]
bad = Path(sys.argv[2])
bad.write_text(json.dumps({"turns": ["w5 w6"]}) + "\n")
from vllm.benchmarks.datasets import SpecBench
try:
    SpecBench(dataset_path=str(bad), disable_shuffle=True)  # reads: no category asked
    SpecBench(dataset_path=str(bad), disable_shuffle=True, category="qa")
    out["no_category"] = "read"
except KeyError as exc:
    out["no_category"] = f"KeyError: {exc}"
print(json.dumps(out))
"""
    from tests.conftest import ROOT

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT / "tests/fixtures/datasets"),
            str(tmp_path / "bad.jsonl"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for kind in ("spec_bench", "speed_bench"):
        theirs, ours = found[kind]
        assert theirs == ours and len(ours) == 12
    assert found["no_category"] == "KeyError: 'category'"
