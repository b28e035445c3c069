"""The registry and the support matrix against the releases this CPU cannot run (vLLM 0.33 and
0.34, CUDA wheels read in place, never imported), and the V2 wrap points' meaning in their
source, not only their names: what `specbench support` prints for 0.34 must be true there.
The wheels come from PyPI with `pip download --no-deps` (cached under $SPECBENCH_CACHE/wheels;
about 6 s each here); a wheel that cannot be had fails these tests."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from harness.config.scenario import load_scenario
from harness.errors import ScenarioError
from harness.plan.inert_knobs import check_knobs, inert_knobs
from harness.plan.plan import expand_plan
from harness.plan.runners import check_runner
from harness.plan.vllm_support import (
    Source,
    check_scenario,
    check_source,
    installed_source,
    open_source,
    row_label,
    rows,
    runner_facts,
)
from tests.conftest import ROOT, SCENARIOS

RELEASES = ("0.33.0", "0.34.0")


def _cache() -> Path:
    root = os.environ.get("SPECBENCH_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "specbench") / "wheels"


def release(version: str) -> Source:
    """vLLM `version`'s CUDA wheel, downloaded once (a lock keeps test workers to one pip)."""
    folder = _cache()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / f"vllm-{version}.lock")):
        found = sorted(folder.glob(f"vllm-{version}-*.whl"))
        if not found:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "-q",
                    "-d",
                    str(folder),
                    f"vllm=={version}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert out.returncode == 0, out.stderr[-2000:]
            found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    assert found, f"pip download left no vllm {version} wheel in {folder}"
    return open_source(str(found[0]))


@pytest.fixture(scope="module", params=RELEASES)
def source(request: pytest.FixtureRequest) -> Source:
    return release(request.param)


def test_the_matrix_on_each_release(source: Source) -> None:
    """0.33: both runners' rows hold, Medusa is gone. 0.34: every V2 row holds (the step timer,
    the platform, the seed-002 swap), every V1 row fails naming the missing module."""
    failures = check_source(source).failures
    v2_rows = ["step timer (V2)", "platform (V2)", "swap tp-argmax-reduction (V2)"]
    v1_rows = ["step timer (V1)", "platform (V1)", "swap tp-argmax-reduction (V1)"]
    assert all(failures[row] == [] for row in v2_rows), {r: failures[r] for r in v2_rows}
    assert failures["swap medusa-proposer"] and failures["built-in Medusa model"]
    if source.version == "0.33.0":
        assert all(failures[row] == [] for row in v1_rows), {r: failures[r] for r in v1_rows}
    else:
        for row in v1_rows:
            assert failures[row] and all("is gone" in why for why in failures[row]), row
    shared = {
        r: w
        for r, w in failures.items()
        if "(" not in r and "Medusa" not in r and "medusa" not in r and w
    }
    assert shared == {}


def _function(source: Source, module: str, qualname: str) -> ast.FunctionDef:
    tree = source.tree(module)
    assert tree is not None, module
    owner, name = qualname.split(".")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return fn


def _calls(fn: ast.FunctionDef) -> list[str]:
    """The dotted names of the calls in a function, in source order."""
    found = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            found.append((node.lineno, node.col_offset, ast.unparse(node.func)))
    return [name for *_, name in sorted(found)]


def test_the_v2_step_timers_wrap_points_mean_what_it_says(source: Source) -> None:
    """In V2's execute_model the forward starts at step_timing.forward_start() and the model
    runs (FULL replay, PIECEWISE or eager) before kv_connector.finish_forward(); the draft
    runs in sample_tokens through the speculator's propose (0.34: after prepare_propose)."""
    runner = "vllm.v1.worker.gpu.model_runner"
    calls = _calls(_function(source, runner, "GPUModelRunner.execute_model"))
    start = calls.index("self.step_timing.forward_start")
    end = calls.index("self.kv_connector.finish_forward")
    between = calls[start:end]
    assert "self.cudagraph_manager.run_fullgraph" in between
    assert "self.model" in between
    sample = _calls(_function(source, runner, "GPUModelRunner.sample_tokens"))
    assert "self.speculator.propose" in sample
    if source.version == "0.34.0":
        assert sample.index("self.speculator.prepare_propose") < sample.index(
            "self.speculator.propose"
        )


def test_seed_002s_flag_is_read_per_call_on_v2(source: Source) -> None:
    """V2 copies use_local_argmax_reduction into the speculator at init and reads the
    attribute in sample_draft (what the swap sets per call), choosing get_top_tokens."""
    module = "vllm.v1.worker.gpu.spec_decode.speculator"
    text = ast.unparse(_function(source, module, "DraftModelSpeculator.sample_draft"))
    assert "self.use_local_argmax_reduction" in text and "get_draft_top_tokens" in text
    init = ast.unparse(_function(source, module, "DraftModelSpeculator.__init__"))
    assert "self.use_local_argmax_reduction = " in init


def test_the_runner_each_release_builds_is_known_before_the_engine(source: Source) -> None:
    """0.34 has no V1 runner: model_runner: V1 is refused at plan time, and the V2 scenario is
    planned on V2; 0.33's V2 still refuses suffix (read from its own list)."""
    facts = runner_facts(source)
    path = SCENARIOS / "cpu-eagle-tp2-argmax.yaml"
    run = expand_plan(load_scenario(path), scenario_file=path).runs[0]
    cuda = run.model_copy(
        update={"device": "cuda", "engine_args": {**run.engine_args, "enforce_eager": True}}
    )
    forced = cuda.model_copy(update={"model_runner": "V1"})
    if source.version == "0.34.0":
        assert not facts.has_v1 and facts.has_v2
        with pytest.raises(ScenarioError, match=r"^model_runner: V1: vLLM 0\.34\.0 has no V1"):
            check_runner(forced, facts)
    else:
        assert facts.has_v1 and "suffix" in facts.v2_unsupported_methods
        check_runner(forced, facts)
    check_runner(cuda, facts)  # eager: the swap switches on V2 (no FULL graph captures it)
    graphed = cuda.model_copy(
        update={"engine_args": {k: v for k, v in cuda.engine_args.items() if k != "enforce_eager"}}
    )
    with pytest.raises(ScenarioError, match="platform refused before the engine starts"):
        check_runner(graphed, facts)


def test_support_scenario_reads_the_runner_the_release_builds(source: Source) -> None:
    """`support --scenario` on 0.34 checks a CPU EAGLE scenario's features on V2 (the only
    runner there): the step timer and the swap pass, nothing of V1 is asked."""
    path = SCENARIOS / "cpu-v2-eagle-argmax.yaml"
    scenario = load_scenario(path)
    failures = check_scenario(source, scenario, expand_plan(scenario, scenario_file=path))
    assert "step timer" not in failures and "swap tp-argmax-reduction" not in failures


KNOBS = frozenset(
    {
        "enforce_eager",
        "parallel_drafting",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "suffix_decoding_max_tree_depth",
        "method",
        "num_speculative_tokens",
        "model",
        "use_local_argmax_reduction",
    }
)


def test_knobs_that_change_nothing_are_read_from_each_releases_source(source: Source) -> None:
    """0.34: speculative enforce_eager (the draft takes the target's), parallel_drafting
    (vLLM's own 'deprecated and has no effect') and two suffix fields that are validated and
    never read change nothing, and a scenario setting one is refused before the engine starts.
    0.33 still reads them, and 0.32's too (below): the same reader finds no inert knob there."""
    found = inert_knobs(source, KNOBS)
    if source.version == "0.34.0":
        assert set(found) == {
            "enforce_eager",
            "parallel_drafting",
            "suffix_decoding_max_spec_factor",
            "suffix_decoding_min_token_prob",
        }
        assert (
            "says so ('parallel_drafting is deprecated and has no effect')"
            in found["parallel_drafting"]
        )
        path = SCENARIOS / "cpu-v2-eagle-argmax.yaml"
        run = expand_plan(load_scenario(path), scenario_file=path).runs[0]
        spec = {**run.engine_args["speculative_config"], "enforce_eager": True}
        run = run.model_copy(
            update={"engine_args": {**run.engine_args, "speculative_config": spec}}
        )
        with pytest.raises(
            ScenarioError,
            match=r"^speculative_config\.enforce_eager: nothing "
            r"in vLLM 0\.34\.0 reads it .*remove it",
        ):
            check_knobs(run, source)
    else:
        assert "enforce_eager" not in found and "suffix_decoding_max_spec_factor" not in found
    assert not inert_knobs(installed_source(), KNOBS)  # 0.32 reads every one of them


def _readme_matrix() -> tuple[list[str], dict[str, list[str]]]:
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- support-matrix -->")[1].split("<!-- /support-matrix -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    cells = {}
    for line in lines[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        cells[row[0]] = row[1:]
    return head, cells


def test_the_readmes_matrix_is_what_the_source_says() -> None:
    """Every row the registry has, and each cell's ✓ or ✗ as check_source finds it: the
    installed 0.32 (whose every ✓ the tests here run) and the 0.33 and 0.34 wheels."""
    head, cells = _readme_matrix()
    assert head == ["vLLM 0.32.0", "vLLM 0.33.0", "vLLM 0.34.0"]
    assert list(cells) == [row_label(f, r) for f, r in rows()]
    supports = [check_source(installed_source()), *(check_source(release(v)) for v in RELEASES)]
    for column, support in enumerate(supports):
        assert support.version == head[column].removeprefix("vLLM ")
        for label, row in cells.items():
            ok = not support.failures[label]
            evidence = "✓ T" if column == 0 else "✓ S"
            assert row[column] == evidence if ok else row[column].startswith("✗"), (
                support.version,
                label,
                row[column],
                support.failures[label],
            )
