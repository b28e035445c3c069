"""Capture-time code found by reachability in the releases a GPU user runs (vLLM 0.33 and 0.34,
CUDA wheels read in place): a change of a function that runs while the draft's FULL CUDA graph
is recorded is refused before any engine, naming the capture path; host-side code stays
one-engine; eager launches take them all. The changes are made from each wheel's own text (a
line put at the top of the function's body), so they stay valid as the wheels are what they are.
"""

from __future__ import annotations

import ast
import difflib
import os
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.scenario import load_scenario
from harness.plan.capture_reach import capture_reachable
from harness.plan.classify import Classified, classify_in
from harness.plan.diffs import Change, FileChange
from harness.plan.vllm_support import Source, plan_changes, source_package
from harness.wire.overlay import ChangeIdentity
from tests.unit.test_vllm_releases import release

RELEASES = ("0.33.0", "0.34.0")
LOGITS = "vllm/model_executor/layers/logits_processor.py"
EAGLE = "vllm/model_executor/models/llama_eagle.py"
EAGLE3 = "vllm/model_executor/models/llama_eagle3.py"
SPECULATOR = "vllm/v1/worker/gpu/spec_decode/speculator.py"
TARGET_AR = "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py"
HANDOFF = "vllm/v1/worker/gpu/spec_decode/utils.py"  # DraftTokensHandler: the draft hand-off
# Three functions that 0.34 runs while the draft's FULL graph is recorded (an earlier, folder-
# bound search accepted them under FULL_AND_PIECEWISE), and the draft sampler.
CAPTURED = (
    (LOGITS, "LogitsProcessor.get_top_tokens"),
    (EAGLE3, "Eagle3LlamaForCausalLM.compute_logits"),
    (EAGLE, "EagleLlamaForCausalLM.forward"),
    (SPECULATOR, "DraftModelSpeculator.sample_draft"),
)
LINE = "_ = None"


@pytest.fixture(scope="module", params=RELEASES)
def source(request: pytest.FixtureRequest) -> Source:
    return release(request.param)


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    owner, _, name = qualname.rpartition(".")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner)
    return next(
        n
        for n in cls.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )


def with_line(text: str, qualname: str, line: str = LINE) -> str:
    """`text` with `line` first in the body of `qualname` (after its docstring)."""
    fn = _function(ast.parse(text), qualname)
    body = fn.body
    first = body[1] if len(body) > 1 and isinstance(body[0], ast.Expr) else body[0]
    lines = text.splitlines(keepends=True)
    at = first.lineno - 1
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    return "".join(lines[:at] + [f"{indent}{line}\n"] + lines[at:])


def _change(files: dict[str, tuple[str, str]]) -> Change:
    identity = ChangeIdentity(kind="diff", path="t.diff", sha256="0", files=sorted(files))
    return Change(identity, [FileChange(p, old, new) for p, (old, new) in files.items()])


def _edit(source: Source, path: str, qualname: str) -> Change:
    text = source.read(path)
    assert text is not None, path
    return _change({path: (text, with_line(text, qualname))})


def _classify(source: Source, change: Change, graphs: str) -> Classified:
    return classify_in(
        change, source_package(source), compiled=graphs != "NONE", device="cuda", graphs=graphs
    )


def test_the_draft_loop_is_reached_from_the_speculators_capture(source: Source) -> None:
    """The capture search itself: each of the four is reached, through the speculator's
    capture handing over the draft loop; the host-side hand-off and V2's step are not."""
    reach = capture_reachable(source_package(source))
    for path, qualname in CAPTURED:
        assert (path, qualname) in reach, qualname
    how = reach[LOGITS, "LogitsProcessor.get_top_tokens"]
    assert "Speculator.capture hands over" in how and "sample_draft" in how, how
    assert "self.logits_processor.get_top_tokens → LogitsProcessor.get_top_tokens" in how
    assert not any(q.startswith("DraftTokensHandler.") for _, q in reach)
    # V2's step itself is host code: the dummy runs its capture_model makes after the captures
    # (adaptive verification's profile) run eagerly and are not followed.
    runner = "vllm/v1/worker/gpu/model_runner.py"
    assert (runner, "GPUModelRunner.execute_model") not in reach
    assert (runner, "GPUModelRunner.sample_tokens") not in reach


@pytest.mark.parametrize(("path", "qualname"), CAPTURED)
def test_capture_time_functions_are_refused_under_full_graphs(
    source: Source, path: str, qualname: str
) -> None:
    """Under FULL_AND_PIECEWISE (vLLM's default on CUDA) a change of each is refused, naming
    the capture path; under enforce_eager (no graphs) the same change runs in one engine."""
    change = _edit(source, path, qualname)
    full = _classify(source, change, "FULL_AND_PIECEWISE")
    assert not full.overlayable
    line = full.blockers[0].line()
    assert f"{qualname}: body changed — runs while CUDA graphs are captured (" in line, line
    assert "hands over" in line and "cudagraph_mode FULL_AND_PIECEWISE" in line, line
    eager = _classify(source, change, "NONE")
    assert eager.overlayable, [f.line() for f in eager.findings]


def test_the_host_side_draft_hand_off_stays_one_engine(source: Source) -> None:
    """DraftTokensHandler.set_draft_tokens (what the v2-draft-handoff swap switches) runs in
    sample_tokens, after the drafter, outside any capture: one engine under FULL graphs."""
    got = _classify(
        source, _edit(source, HANDOFF, "DraftTokensHandler.set_draft_tokens"), "FULL_AND_PIECEWISE"
    )
    assert got.overlayable, [f.line() for f in got.findings]
    assert "not called from a CUDA-graph capture (FULL_AND_PIECEWISE)" in got.findings[0].reason


def test_a_capture_time_helper_the_change_adds_is_refused(source: Source) -> None:
    """Planted defect: the change adds a helper and calls it from the draft prefill the
    speculator's capture records. The installed source has no such function; the changed one
    reaches it, so it is refused too."""
    text = source.read(TARGET_AR)
    assert text is not None
    new = with_line(text, "TargetDependentARSpeculator._prefill", "self._note_prefill()")
    new = new.replace(
        "    def _prefill(\n",
        "    def _note_prefill(self) -> None:\n        return None\n\n    def _prefill(\n",
        1,
    )
    got = _classify(source, _change({TARGET_AR: (text, new)}), "FULL_AND_PIECEWISE")
    helper = next(f for f in got.findings if "_note_prefill (new)" in f.what)
    assert not helper.overlayable
    assert "_prefill, which calls _note_prefill)" in helper.reason, helper.reason


def _wheel(version: str) -> Path:
    release(version)  # downloaded once
    root = os.environ.get("SPECBENCH_CACHE")
    folder = (Path(root).expanduser() if root else Path.home() / ".cache" / "specbench") / "wheels"
    return sorted(folder.glob(f"vllm-{version}-*.whl"))[0]


def _scenario(tmp_path: Path, diff: str, engine: dict[str, object]) -> Path:
    (tmp_path / "branch.diff").write_text(diff)
    spec = {
        "name": "gpu-branch",
        "device": "cuda",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "batch_size": 8,
        "engine": engine,
        "draft": {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 3,
        },
        "workload": {"kind": "random", "num_prompts": 8, "input_len": 16, "max_tokens": 8},
        "variants": {
            "main": {"baseline": True},
            "branch": {"diff": "branch.diff"},
        },
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _diff(source: Source, path: str, qualname: str) -> str:
    text = source.read(path)
    assert text is not None
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            with_line(text, qualname).splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )


def test_support_plans_a_scenarios_diff_against_the_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specbench support WHEEL --scenario FILE`: a GPU scenario's diff of the draft's
    get_top_tokens, written against 0.34 (it does not apply to the installed 0.32), is planned
    against 0.34's source: refused under vLLM's default graphs naming the capture path, exit
    1; with enforce_eager the same diff plans one-engine."""
    wheel = str(_wheel("0.34.0"))
    diff = _diff(release("0.34.0"), LOGITS, "LogitsProcessor.get_top_tokens")
    assert main(["support", wheel, "--scenario", str(_scenario(tmp_path, diff, {}))]) == 1
    out = capsys.readouterr().out
    assert "✗ gpu-branch on vLLM 0.34.0: overlay branch: " in out, out
    assert (
        "LogitsProcessor.get_top_tokens: body changed — runs while CUDA graphs are captured "
        "(AutoRegressiveSpeculator.capture hands over _prefill, which calls sample_draft"
    ) in out, out
    eager_dir = tmp_path / "eager"
    eager_dir.mkdir()
    main(["support", wheel, "--scenario", str(_scenario(eager_dir, diff, {"enforce_eager": True}))])
    out = capsys.readouterr().out
    assert "gpu-branch on vLLM 0.34.0" in out and "overlay branch" not in out, out


def test_support_names_code_only_the_other_runner_runs_on_the_release(tmp_path: Path) -> None:
    """On 0.33 a CUDA EAGLE-3 launch gets Model Runner V2, which never imports V1's proposer:
    a diff of SpecDecodeBaseProposer._greedy_sample would run the same code in both arms.
    Planned against 0.33's source it is named so, even eager (no capture involved)."""
    source = release("0.33.0")
    path = "vllm/v1/spec_decode/llm_base_proposer.py"
    diff = _diff(source, path, "SpecDecodeBaseProposer._greedy_sample")
    scenario = load_scenario(_scenario(tmp_path, diff, {"enforce_eager": True}))
    found = plan_changes(source, scenario, tmp_path)
    assert list(found) == ["branch"], found
    assert "SpecDecodeBaseProposer._greedy_sample — Model Runner V1's code" in found["branch"][0]
    assert "the runner this launch gets on vLLM 0.33.0 is V2" in found["branch"][0]
