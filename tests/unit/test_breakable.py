"""Breakable CUDA graphs, read from the real 0.33 and 0.34 wheels and the installed 0.32: which
architectures and settings get them, and the model-code overlay they refuse at plan time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.config.platforms import PIECEWISE_WAY_OUT
from harness.config.scenario import parse_scenario
from harness.plan.breakable import breakable_findings, breakable_graphs, read_breakable
from harness.plan.classify import classify
from harness.plan.diffs import read_diff
from harness.plan.vllm_support import Source, installed_source
from tests.unit.test_overlay_plan import vllm_root, write_diff
from tests.unit.test_vllm_releases import release

QWEN35 = {
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MTP",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeMTP",
}
# vLLM 0.34.0's DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES, as its config/vllm.py lists them; a
# release that changes the list fails here, so the change is looked at, not inherited.
DEFAULT_034 = {
    "AliceAIForCausalLM",
    "BeamForCausalLM",
    "DeepseekV32MTPModel",
    "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM",
    "DeepseekV4ForConditionalGeneration",
    "DeepSeekV4MTPModel",
    "DeepseekV41ForCausalLM",
    "Dots3NoteForCausalLM",
    "Dots3NoteMTPModel",
    "Glm5NextForCausalLM",
    "Glm5NextForConditionalGeneration",
    "Glm5NextMTPModel",
    "GlmMoeDsaForCausalLM",
    "HYV4ForCausalLM",
    "HYV4MTPModel",
    "InklingForCausalLM",
    "InklingForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
    "KimiK3MTPModel",
    "KimiK31ForConditionalGeneration",
    "KimiLinearForCausalLM",
    "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration",
    "MistralLarge4ForCausalLM",
    "MuseSparkForCausalLM",
    "MuseSparkForConditionalGeneration",
    "Qwen4ExpForCausalLM",
    "Qwen4ExpForConditionalGeneration",
    "Qwen4ExpMTP",
    "Step5ForCausalLM",
    "Step5ForConditionalGeneration",
}
# 0.33.0 lists these that 0.34 dropped or renamed, and lacks these that 0.34 added.
ONLY_033 = {"MuseSpark1xForCausalLM"}
ADDED_034 = {"KimiK31ForConditionalGeneration", "MistralLarge4ForCausalLM", "MuseSparkForCausalLM"}
# 0.32.0 lacks these of 0.33's list.
ADDED_033 = {
    "AliceAIForCausalLM",
    "BeamForCausalLM",
    "MuseSpark1xForCausalLM",
    "MuseSparkForConditionalGeneration",
    "Step5ForCausalLM",
    "Step5ForConditionalGeneration",
}


def test_each_release_lists_the_architectures_it_records_on_nvidia() -> None:
    """0.34 adds Qwen3.5 on NVIDIA only (its is_cuda() branch); 0.33 and 0.32 return one list
    for every platform but ROCm; the ROCm-only sets never leak into the NVIDIA answer."""
    v34, v33 = read_breakable(release("0.34.0")), read_breakable(release("0.33.0"))
    assert v34.architectures == DEFAULT_034 | QWEN35
    assert v33.architectures == (DEFAULT_034 - ADDED_034) | ONLY_033
    assert not v33.architectures & QWEN35
    installed = read_breakable(installed_source())
    if installed.version.startswith("0.32."):
        assert installed.architectures == v33.architectures - ADDED_033
    for facts in (v34, v33, installed):
        assert facts.batch_invariance  # VLLM_BATCH_INVARIANT=1 can turn them on
        assert facts.switch_on == "1"  # envs: os.environ.get(..., "0") == "1"


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_who_gets_breakable_graphs(version: str) -> None:
    source = release(version)
    qwen = breakable_graphs(source, ["Qwen3_5ForCausalLM"], {})
    assert (qwen is not None) is (version == "0.34.0")
    if qwen:
        assert "by default on NVIDIA for Qwen3_5ForCausalLM" in qwen
    assert breakable_graphs(source, ["DeepseekV32ForCausalLM"], {}) is not None
    assert breakable_graphs(source, ["LlamaForCausalLM"], {}) is None
    invariant = breakable_graphs(source, ["LlamaForCausalLM"], {"VLLM_BATCH_INVARIANT": "1"})
    assert invariant is not None and "VLLM_BATCH_INVARIANT=1 can turn" in invariant
    # vLLM reads VLLM_USE_BREAKABLE_CUDAGRAPH first: set, it decides either way.
    off = {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "VLLM_BATCH_INVARIANT": "1"}
    assert breakable_graphs(source, ["DeepseekV32ForCausalLM"], off) is None
    on = {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}
    assert breakable_graphs(source, ["LlamaForCausalLM"], on) is not None
    # Nothing is captured eagerly or on a CPU.
    deepseek = ["DeepseekV32ForCausalLM"]
    assert breakable_graphs(source, deepseek, {}, graphs="NONE") is None
    assert breakable_graphs(source, deepseek, {}, device="cpu") is None
    assert breakable_graphs(source, deepseek, {}, graphs="PIECEWISE") is not None


def test_the_piecewise_way_out_says_where_it_is_false() -> None:
    assert "breakable CUDA graphs" in PIECEWISE_WAY_OUT
    assert "eager Python" in PIECEWISE_WAY_OUT
    assert "VLLM_BATCH_INVARIANT=1" in PIECEWISE_WAY_OUT
    assert "VLLM_USE_BREAKABLE_CUDAGRAPH: '0'" in PIECEWISE_WAY_OUT


def _scenario(model: Path, engine: dict[str, Any], env: dict[str, str], diff: Path) -> Any:
    return parse_scenario(
        {
            "name": "breakable",
            "device": "cuda",
            "model": str(model),
            "batch_size": 4,
            "max_model_len": 256,
            "engine": engine,
            "env": env,
            "workload": {"kind": "random", "num_prompts": 4, "input_len": 8, "max_tokens": 8},
            "variants": {"base": {"baseline": True}, "cand": {"diff": str(diff)}},
        }
    )


def _model(tmp: Path, arch: str) -> Path:
    folder = tmp / arch
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize(
    ("arch", "version", "engine", "env", "refused"),
    [
        ("Qwen3_5ForCausalLM", "0.34.0", {}, {}, True),
        ("Qwen3_5ForCausalLM", "0.33.0", {}, {}, False),  # not on 0.33's list
        (
            "Qwen3_5ForCausalLM",
            "0.34.0",
            {"compilation_config": {"cudagraph_mode": "PIECEWISE"}},
            {},
            True,  # PIECEWISE is no way out: the breakable capture records the forward
        ),
        ("Qwen3_5ForCausalLM", "0.34.0", {"enforce_eager": True}, {}, False),
        ("Qwen3_5ForCausalLM", "0.34.0", {}, {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, False),
        ("LlamaForCausalLM", "0.34.0", {}, {}, False),
        ("LlamaForCausalLM", "0.34.0", {}, {"VLLM_BATCH_INVARIANT": "1"}, True),
    ],
)
def test_a_model_code_overlay_is_refused_under_breakable_graphs(
    tmp_path: Path,
    arch: str,
    version: str,
    engine: dict[str, Any],
    env: dict[str, str],
    refused: bool,
) -> None:
    """A change to a model class's forward (eager Python around the compiled model, which
    PIECEWISE graphs leave eager) is refused where the release's breakable graphs record it,
    with vLLM's opt-out and eager as the ways out; a draft-side change is not touched."""
    old = "        model_output = self.model(\n"
    diff = write_diff(
        tmp_path,
        "model_executor/models/llama.py",
        old,
        "        positions = positions + 0\n" + old,
    )
    root = vllm_root()
    classified = classify(read_diff(diff, root), root, compiled=True, device="cuda")
    assert classified.overlayable, [f.line() for f in classified.findings]
    source: Source = release(version)
    scenario = _scenario(_model(tmp_path, arch), engine, env, diff)
    found = breakable_findings("cand", classified, scenario, source, tmp_path)
    assert bool(found) is refused
    if refused:
        (finding,) = found
        assert finding.what == "LlamaForCausalLM.forward"
        line = finding.line()
        assert "model code under breakable CUDA graphs" in line
        assert "PIECEWISE too" in line
        assert "VLLM_USE_BREAKABLE_CUDAGRAPH: '0'" in line and "variants.cand.python" in line


def test_plan_refuses_it_through_the_installed_vllm(tmp_path: Path) -> None:
    """The planner's hook: a GPU scenario whose target the installed vLLM (0.32 here) records
    with breakable graphs by default is refused before any engine starts, under PIECEWISE too;
    the same change on a Llama target passes that stage."""
    from harness.errors import ScenarioError
    from harness.plan.plan import expand_plan

    old = "        model_output = self.model(\n"
    diff = write_diff(
        tmp_path, "model_executor/models/llama.py", old, "        positions = positions + 0\n" + old
    )
    piecewise = {"compilation_config": {"cudagraph_mode": "PIECEWISE"}}
    for arch, refused in (("DeepseekV32ForCausalLM", True), ("LlamaForCausalLM", False)):
        model = _model(tmp_path, arch)
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "vocab_size": 32000}))
        try:
            expand_plan(_scenario(model, piecewise, {}, diff), base_dir=tmp_path)
            message = ""
        except ScenarioError as exc:
            message = str(exc)
        assert ("model code under breakable CUDA graphs" in message) is refused, message
        if refused:
            assert message.startswith("variants.cand.diff: cannot run: ")
            assert "for DeepseekV32ForCausalLM" in message


def _wheel_diff(tmp: Path, source: Source, rel: str, old: str, new: str) -> Path:
    """A diff of one of a release's files, written as git does."""
    import difflib

    text = source.read(f"vllm/{rel}")
    assert text is not None and old in text, rel
    lines = difflib.unified_diff(
        text.splitlines(keepends=True),
        text.replace(old, new, 1).splitlines(keepends=True),
        f"a/vllm/{rel}",
        f"b/vllm/{rel}",
    )
    diff = tmp / "wheel.diff"
    diff.write_text("".join(lines))
    return diff


@pytest.mark.parametrize(("version", "refused"), [("0.34.0", True), ("0.33.0", False)])
def test_support_plans_it_against_the_release(tmp_path: Path, version: str, refused: bool) -> None:
    """`specbench support WHEEL --scenario`: a Qwen3.5 target's model-code change under
    PIECEWISE is refused on 0.34 (on its NVIDIA list) and not on 0.33, from each wheel."""
    from harness.plan.vllm_support import plan_changes

    source = release(version)
    old = "        model_output = self.model(\n"
    diff = _wheel_diff(
        tmp_path,
        source,
        "model_executor/models/llama.py",
        old,
        "        positions = positions + 0\n" + old,
    )
    piecewise = {"compilation_config": {"cudagraph_mode": "PIECEWISE"}}
    scenario = _scenario(_model(tmp_path, "Qwen3_5ForCausalLM"), piecewise, {}, diff)
    found = plan_changes(source, scenario, tmp_path).get("cand", [])
    assert any("model code under breakable CUDA graphs" in f for f in found) is refused, found
    if not refused:
        assert found == []  # the change reads against 0.33 and overlays under PIECEWISE
