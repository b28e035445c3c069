"""Hub-id models on a GPU scenario, read from a stand-in local Hugging Face cache (no download):
random prompts draw from the vocabulary in its config.json (text_config for Llama 4), in
pre-flight and in the worker alike; a model it cannot read is refused before any engine; the
context limit is read from text_config too, and an unset max_model_len on a 1M-token model is
refused; every shipped GPU scenario passes `specbench plan` with its models' configs cached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.config.scenario import load_scenario, parse_scenario
from harness.config.workload import model_vocab_size
from harness.errors import ScenarioError
from harness.plan.plan import expand_plan
from harness.plan.preflight import check_run, preflight
from harness.wire.records import WorkerResult
from harness.wire.spec import RunSpec
from tests.conftest import SCENARIOS

LLAMA31 = "meta-llama/Llama-3.1-8B-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8"

# Stand-ins for the config.json files of the shipped GPU scenarios' models (the fields
# specbench and vLLM's start-up read, with the Hub's values).
LLAMA4_TEXT = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_local_experts": 128,
    "attention_chunk_size": 8192,
    "max_position_embeddings": 1048576,
    "vocab_size": 202048,
}
CONFIGS: dict[str, dict[str, Any]] = {
    LLAMA31: {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 8.0,
            "rope_type": "llama3",
            "original_max_position_embeddings": 8192,
        },
        "vocab_size": 128256,
        "torch_dtype": "bfloat16",
    },
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
    },
    MAVERICK: {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": LLAMA4_TEXT,
        "vision_config": {"model_type": "llama4_vision_model", "image_size": 336},
        "quantization_config": {"quant_method": "fbgemm_fp8"},
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "morgendave/EAGLE-Llama-4-Maverick-17B-128E-Instruct": {
        "architectures": ["EagleLlama4ForCausalLM"],
        **LLAMA4_TEXT,
        "num_hidden_layers": 1,
    },
    "mistralai/Mistral-7B-Instruct-v0.2": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "max_position_embeddings": 32768,
        "vocab_size": 32000,
    },
    "text-generation-inference/Mistral-7B-Instruct-v0.2-medusa": {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "medusa_num_heads": 3,
        "medusa_num_layers": 1,
        "hidden_size": 4096,
        "vocab_size": 32000,
    },
}


def _cache(root: Path, configs: dict[str, dict[str, Any]]) -> Path:
    """A Hugging Face hub cache folder (huggingface_hub's layout) holding `configs`."""
    for repo, config in configs.items():
        folder = root / f"models--{repo.replace('/', '--')}"
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text("0123abcd")
        snapshot = folder / "snapshots" / "0123abcd"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = _cache(tmp_path / "hf" / "hub", CONFIGS)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # set after huggingface_hub's import
    return cache


def _random_run(
    scenario_data: dict[str, Any], model: str, max_model_len: int | None = None, **workload: Any
) -> RunSpec:
    scenario_data.update(device="cuda", model=model, draft=None, max_model_len=max_model_len)
    for variant in scenario_data["variants"].values():
        variant.pop("implementation", None)
    scenario_data["workload"] = {
        "kind": "random",
        "num_prompts": 4,
        "input_len": 16,
        "max_tokens": 8,
        **workload,
    }
    return expand_plan(parse_scenario(scenario_data)).runs[0]


def test_vocab_of_a_hub_id_comes_from_the_local_cache(hub_cache: Path) -> None:
    assert model_vocab_size(LLAMA31) == 128256
    assert model_vocab_size(MAVERICK) == 202048  # under text_config
    assert model_vocab_size("org/not-cached") is None


def test_the_worker_draws_random_prompts_for_a_hub_id(
    hub_cache: Path, scenario_data: dict[str, Any], tmp_path: Path
) -> None:
    from harness.engine.worker import prepare_launch

    run = _random_run(scenario_data, MAVERICK, max_model_len=4096)
    result = WorkerResult(run_key=run.run_key, status="failed")
    _args, prompts, _warm, _categories = prepare_launch(run, tmp_path, None, result)
    assert len(prompts) == 4 and all(isinstance(p, list) and len(p) == 16 for p in prompts)
    assert max(max(p) for p in prompts if isinstance(p, list)) < 202048
    assert max(max(p) for p in prompts if isinstance(p, list)) >= 1024  # not a tiny vocab


def test_random_prompts_for_an_uncached_hub_id_are_refused_before_any_engine(
    hub_cache: Path, scenario_data: dict[str, Any], tmp_path: Path
) -> None:
    check_run(_random_run(scenario_data, LLAMA31), tmp_path)
    run = _random_run(scenario_data, "meta-llama/Not-Downloaded")
    with pytest.raises(
        ScenarioError,
        match=r"^workload\.kind: random .*not in the local "
        r"Hugging Face cache .*huggingface-cli download meta-llama/Not-Down",
    ) as err:
        check_run(run, tmp_path)
    assert str(hub_cache) in str(err.value) and "\n" not in str(err.value)


def test_the_context_limit_is_read_from_text_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_data: dict[str, Any]
) -> None:
    small = {**CONFIGS[MAVERICK], "text_config": {**LLAMA4_TEXT, "max_position_embeddings": 4096}}
    monkeypatch.setenv("HF_HUB_CACHE", str(_cache(tmp_path / "hub", {MAVERICK: small})))
    run = _random_run(scenario_data, MAVERICK, input_len=4000, max_tokens=256)
    with pytest.raises(ScenarioError, match="exceeds the model's max_position_embeddings 4096"):
        check_run(run, tmp_path)


def test_an_unset_max_model_len_on_a_1m_token_model_is_refused(
    hub_cache: Path, scenario_data: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(
        ScenarioError,
        match=r"^max_model_len: unset, .*1048576 .*set "
        r"max_model_len: ",
    ) as err:
        check_run(_random_run(scenario_data, MAVERICK), tmp_path)
    assert "\n" not in str(err.value)
    check_run(_random_run(scenario_data, LLAMA31), tmp_path)  # 131072: vLLM's KV check copes


def _sharegpt(path: Path, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": f"Question {i}?"}]}
                for i in range(count)
            ]
        )
    )


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("gpu-*.yaml")), ids=lambda p: p.name)
def test_shipped_gpu_scenarios_pass_plan_with_their_configs_cached(
    hub_cache: Path, tmp_path: Path, path: Path
) -> None:
    """What `specbench plan` checks (hardware aside), with every model's config in the cache:
    the draft's vocabulary against the target's, the context, the workload."""
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    data = yaml.safe_load(path.read_text())
    _sharegpt(copy.parent / data["workload"]["path"], data["workload"]["num_prompts"])
    scenario = load_scenario(copy)
    for model in (scenario.model, scenario.draft.model if scenario.draft else None):
        assert model is None or model in CONFIGS, f"{model}: add its config.json stand-in"
    preflight(scenario, expand_plan(scenario, scenario_file=copy), tmp_path, hardware=False)
