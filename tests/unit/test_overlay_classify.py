"""Overlay classification against the installed vLLM: each diff under tests/fixtures/overlay/
is read and classified, and must come out as expected.yaml says (the known traps included)."""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ScenarioError
from harness.plan.classify import Classified, classify
from harness.plan.diffs import Change, FileChange, read_diff
from harness.wire.overlay import ChangeIdentity

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "overlay"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load(
    (FIXTURES / "expected.yaml").read_text(encoding="utf-8")
)

# Every trap a classifier of vLLM changes must get right; each needs a fixture.
KNOWN_TRAPS = {
    "plain-method-body",  # MedusaProposer.propose
    "base-proposer-method-body",  # SpecDecodeBaseProposer._greedy_sample
    "new-helper-constant-import",  # used by a changed body
    "zero-arg-super",  # gemma4 _greedy_sample -> super()._greedy_sample
    "zero-arg-super-new-override",  # draft_model: a new override calling super()
    "name-mangled-attribute",  # self.__x in a changed method
    "future-annotations-type-checking",  # extract_hidden_states.py
    "helper-imported-by-value",  # spec_decode/utils.py -> llm_base_proposer.py
    "constant-imported-by-others",  # PADDING_SLOT_ID
    "triton-kernel",  # @triton.jit
    "triton-dispatcher",  # @triton_kernel_dispatcher_with_warmup
    "compiled-forward",  # a model forward, compiled
    "eager-forward",  # the same, enforce_eager
    "config-field",  # SpeculativeConfig gains a field
    "config-method",  # a SpeculativeConfig validator
    "startup-load-model",
    "startup-dummy-run",
    "init-new-attribute",  # class layout
    "base-class-change",
    "slots-change",
    "caching-decorator",  # functools.cache / lru_cache
    "compiling-decorator",  # torch.compile
    "module-level-side-effect",  # a registration call at import
    "non-python-in-package",  # a vllm/*.json
    "native-source",  # csrc/*.cu
    "scheduler",
    "engine-core",
    "front-end",
    "bound-at-init",  # self.forward = self.forward_cpu
    "deleted-referenced",
    "deleted-unreferenced",
    "inert-tests-and-docs",
    "does-not-apply",
    # which process runs it
    "shm-broadcast-engine-core",  # MessageQueue.enqueue: the engine core broadcasts too
    "kv-connector-scheduler-side",  # get_num_new_matched_tokens: KVConnectorRole.SCHEDULER
    "kv-connector-build-meta",
    "kv-connector-worker-side",  # start_load_kv: in the workers
    # collectives Dynamo inlines into the compiled forward
    "compiled-all-reduce-cpu",
    "compiled-all-reduce-out-place-cpu",
    "compiled-tp-all-reduce",
    "compiled-all-reduce-out-place-cuda",  # inside torch.ops.vllm.all_reduce: eager
    "compiled-cpu-communicator",
    # copies made at import
    "capture-installed-dict",  # rebound at install
    "capture-in-torch-compile-call",  # torch.compile(f): refused
    "capture-in-register-call",  # direct_register_custom_op(op_func=f): refused
    "capture-method-in-call",  # _register_ubatch_function(UBatchContext.yield_)
    "capture-new-partial",
    "capture-new-default-argument",
    "capture-class-body-method-copy",  # class B: propose = MedusaProposer.propose
    "new-constant-names-later-helper",
    "new-constant-name-error",
    # start-up only, or shadowed on the platform
    "startup-reorder-batch-threshold",
    "startup-make-dummy",
    "startup-helper-of-load-weights",
    "shadowed-cpu-model-runner",  # CPUModelRunner._to_list
    "shadowed-custom-op-forward-native",  # forward_cpu never calls it
    "shadowed-custom-op-forward-cuda",
    "custom-op-forward-native-reached",  # GELU.forward_cpu calls forward_native
    # false refusals
    "dataclass-post-init-per-step",  # SpecDecodeMetadata.__post_init__
    "dataclass-post-init-new-attribute",
    "contextmanager-plain-wrapper",
    "compiled-compute-logits",
    "compiled-logits-processor",
    # words
    "numba-jit",
    "numba-njit",
    "comment-only-a-a",
    "formatting-only-a-a",
    # the second held-out set's kinds
    "wraps-only-decorator-gpu-sync-check",  # @with_gpu_sync_check only wraps the call
    "wraps-only-decorator-eager-break",  # @eager_break_during_capture likewise
    "eager-architecture-around-compiled-model",  # LlamaForCausalLM.forward, compiled engine
    "inside-opaque-attention-op",  # CPUAttentionBackendImpl.forward, compiled
    "loop-entered-once-in-each-worker",  # WorkerProc.worker_busy_loop
    "worker-process-class-in-executor-file",  # WorkerProc._execute_worker_rpc: in the workers
    "engine-core-file-names-its-own-process",  # core.py: the engine core, not its front end
    # diff parsing
    "rename-with-hunk",
    "rename-without-hunk",
    "rename-inert",
    "crlf-line-endings",
}


def _vllm_root() -> Path | None:
    """The installed vllm package, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


ROOT = _vllm_root()
needs_vllm = pytest.mark.skipif(ROOT is None, reason="no vLLM installed to classify against")


@pytest.fixture(scope="module")
def root() -> Path:
    assert ROOT is not None
    return ROOT


def test_every_known_trap_has_a_fixture() -> None:
    traps = [entry["trap"] for entry in EXPECTED.values()]
    assert len(traps) == len(set(traps)), "one trap name per fixture"
    assert KNOWN_TRAPS <= set(traps), sorted(KNOWN_TRAPS - set(traps))


def test_fixtures_and_expectations_match() -> None:
    diffs = {p.name for p in FIXTURES.glob("*.diff")}
    assert diffs == set(EXPECTED)
    assert len(diffs) >= 22
    for name, entry in EXPECTED.items():
        assert re.fullmatch(r"\d\d-[a-z0-9-]+\.diff", name), name
        assert set(entry) <= {
            "trap",
            "overlayable",
            "compiled",
            "device",
            "reason",
            "functions",
            "applies",
        }, name
        assert ("overlayable" in entry) != (entry.get("applies", True) is False), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_is_a_git_style_diff(name: str) -> None:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    headers = [ln for ln in text.splitlines() if ln.startswith(("--- ", "+++ "))]
    assert headers or "\nrename from " in text, name  # a pure rename has no hunk
    for line in headers:
        assert "\t" not in line, f"{name}: timestamp in {line!r}"
        path = line[4:]
        assert path == "/dev/null" or path.startswith(("a/", "b/")), line


@cache
def classified(name: str) -> Classified:
    """A fixture classified as expected.yaml says to (once per test process: the tests of the
    classification, of the compiled code and of the install with vLLM share it)."""
    assert ROOT is not None
    want = EXPECTED[name]
    return classify(
        read_diff(FIXTURES / name, ROOT),
        ROOT,
        compiled=want.get("compiled", False),
        device=want.get("device", "cpu"),
    )


@needs_vllm
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classifies_as_expected(name: str, root: Path) -> None:
    want = EXPECTED[name]
    diff = FIXTURES / name
    if want.get("applies", True) is False:
        with pytest.raises(ScenarioError) as info:
            read_diff(diff, root)
        message = str(info.value)
        assert want["reason"] in message
        assert "\n" not in message
        return
    got = classified(name)
    lines = "\n".join(("ok  " if f.overlayable else "NO  ") + f.line() for f in got.findings)
    assert got.findings, name
    assert got.overlayable is want["overlayable"], lines
    if want["overlayable"]:
        assert not got.blockers
        if "reason" in want:
            assert any(want["reason"] in f.line() for f in got.findings), lines
    else:
        assert any(want["reason"] in f.line() for f in got.blockers), lines
        for f in got.blockers:
            assert f.reason and "\n" not in f.line(), f.line()
    if "functions" in want:
        assert got.functions == want["functions"], lines


@needs_vllm
@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e.get("overlayable")))
def test_overlay_code_compiles_as_the_engine_compiles_it(name: str, root: Path) -> None:
    """Each piece of code the engine will compile parses where the engine puts it: a method
    inside `class Owner:` at its own line, a function or statement at module level."""
    got = classified(name)
    for code in got.code:
        changed = next(f for f in got.change.files if f.path == code.file)
        assert changed.new is not None
        first = changed.new.splitlines(keepends=True)[code.line - 1]
        assert code.source.startswith(first), code.key
        text = (f"class {code.owner}:\n" + code.source) if code.owner else code.source
        tree = ast.parse(text)
        node = tree.body[0].body[0] if code.owner else tree.body[0]  # type: ignore[attr-defined]
        if code.kind == "function":
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            assert node.name == code.name


@needs_vllm
def test_inert_files_are_named_and_ignored(root: Path) -> None:
    change = read_diff(FIXTURES / "35-tests-and-docs-alongside.diff", root)
    assert change.inert == [
        "docs/features/speculative_decoding/medusa.md",
        "tests/v1/spec_decode/test_medusa_propose.py",
    ]
    assert [f.path for f in change.files] == ["vllm/v1/spec_decode/medusa.py"]


@needs_vllm
def test_does_not_apply_names_the_line_it_expected(root: Path) -> None:
    with pytest.raises(
        ScenarioError,
        match=r"line 50 reads 'logits = self\.model\."
        r"compute_logits\(blocks\)', the diff expects",
    ):
        read_diff(FIXTURES / "36-does-not-apply.diff", root)


def _fake_vllm(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package laid out like vllm (worker paths) holding only `files`."""
    root = tmp_path / "vllm"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _change(root: Path, rel: str, new: str | None) -> Change:
    old = (root / rel).read_text(encoding="utf-8")
    path = f"vllm/{rel}"
    identity = ChangeIdentity(kind="diff", path="x.diff", sha256="0", files=[path])
    return Change(identity, [FileChange(path, old, new)])


HELPERS = "def pick(x):\n    return x\n"


def test_importer_copying_a_helper_into_a_tuple_at_import_blocks_it(tmp_path: Path) -> None:
    """`from m import f` is rebound in the engine, and so are dicts, lists and sets the
    importer built from f at import; a tuple is not, so the changed f would never run
    through it."""
    root = _fake_vllm(
        tmp_path,
        {
            "v1/spec_decode/helpers.py": HELPERS,
            "v1/spec_decode/user.py": "from vllm.v1.spec_decode.helpers import pick\n\n"
            "TABLE = {'pick': pick}\nORDER = (pick,)\n",
        },
    )
    got = classify(
        _change(root, "v1/spec_decode/helpers.py", "def pick(x):\n    return x + 1\n"),
        root,
        variant="cand",
    )
    assert not got.overlayable
    assert (
        "pick: body changed — captured at import (vllm/v1/spec_decode/user.py, line 4: "
        "ORDER = (pick,)) in a tuple: that copy keeps the installed version and cannot be "
        "rebound"
    ) in got.blockers[0].line()


def test_importer_copying_a_helper_into_a_dict_at_import_is_rebound(tmp_path: Path) -> None:
    root = _fake_vllm(
        tmp_path,
        {
            "v1/spec_decode/helpers.py": HELPERS,
            "v1/spec_decode/user.py": "from vllm.v1.spec_decode.helpers import pick\n\n"
            "TABLE = {'pick': pick}\n",
        },
    )
    got = classify(
        _change(root, "v1/spec_decode/helpers.py", "def pick(x):\n    return x + 1\n"), root
    )
    assert got.overlayable
    assert (
        "captured at import (vllm/v1/spec_decode/user.py, line 3: TABLE = {'pick': pick}): "
        "rebound to the dispatcher at install"
    ) in got.findings[0].line()


def test_importer_rebinding_alone_is_a_note(tmp_path: Path) -> None:
    root = _fake_vllm(
        tmp_path,
        {
            "v1/spec_decode/helpers.py": HELPERS,
            "v1/spec_decode/user.py": "from .helpers import pick\n\n\ndef use(x):\n"
            "    return pick(x)\n",
        },
    )
    got = classify(
        _change(root, "v1/spec_decode/helpers.py", "def pick(x):\n    return x + 1\n"), root
    )
    assert got.overlayable
    assert (
        "imported by value into 1 module(s) (vllm/v1/spec_decode/user.py)" in got.findings[0].line()
    )


def test_deleted_method_named_elsewhere_blocks(tmp_path: Path) -> None:
    """Deleting an override: the branch would run the base class's method, but an overlay
    cannot remove the installed override, so the changed arm would keep running it."""
    root = _fake_vllm(
        tmp_path,
        {
            "v1/spec_decode/base.py": "class Base:\n    def step(self):\n        return 0\n\n"
            "    def run(self):\n        return self.step()\n",
            "v1/spec_decode/sub.py": "from .base import Base\n\n\nclass Sub(Base):\n"
            "    def step(self):\n        return 1\n",
        },
    )
    got = classify(
        _change(
            root,
            "v1/spec_decode/sub.py",
            "from .base import Base\n\n\nclass Sub(Base):\n    pass\n",
        ),
        root,
    )
    assert not got.overlayable
    assert (
        "method Sub.step deleted — still referenced (vllm/v1/spec_decode/base.py)"
        in got.blockers[0].line()
    )


def test_non_worker_file_gains_nothing_silently(tmp_path: Path) -> None:
    """A new constant in scheduler code would run where the switch never reaches; it is
    named, not dropped (a change with no finding would look overlayable)."""
    root = _fake_vllm(tmp_path, {"v1/core/sched/policy.py": "A = 1\n"})
    got = classify(_change(root, "v1/core/sched/policy.py", "A = 1\nB = 2\n"), root)
    assert not got.overlayable
    assert "new module constant B — runs in the scheduler" in got.blockers[0].line()


def _edited(root: Path, rel: str, old: str, new: str) -> Change:
    """A one-edit change to an installed vLLM file."""
    text = (root / rel).read_text(encoding="utf-8")
    assert text.count(old) == 1, rel
    path = f"vllm/{rel}"
    identity = ChangeIdentity(kind="diff", path="x.diff", sha256="0", files=[path])
    return Change(identity, [FileChange(path, text, text.replace(old, new))])


@needs_vllm
@pytest.mark.parametrize(
    ("graphs", "refused"),
    [
        ("FULL_AND_PIECEWISE", True),
        ("FULL", True),
        ("FULL_DECODE_ONLY", True),
        ("PIECEWISE", False),
        ("NONE", False),
    ],
)
def test_capture_time_code_is_refused_under_full_graphs(
    root: Path, graphs: str, refused: bool
) -> None:
    """Item 6: code FULL CUDA graphs record at capture and replay in both arms, refused at plan
    time on CUDA: V2's draft sampling (the README's own diff, handed to the speculator's
    capture through _prefill), an attention backend's forward (inside the captured op) and a
    metadata builder (the graphs are captured from what it built). PIECEWISE and eager keep
    them eager, so they stay overlayable."""
    device = "cpu" if graphs == "NONE" else "cuda"
    readme = classify(
        read_diff(
            Path(__file__).resolve().parents[2] / "scenarios" / "diffs" / "v2-draft-argmax.diff",
            root,
        ),
        root,
        compiled=True,
        device=device,
        graphs=graphs,
    )
    impl = classify(
        read_diff(FIXTURES / "82-attention-impl-inside-custom-op.diff", root),
        root,
        compiled=True,
        device=device,
        graphs=graphs,
    )
    builder = classify(
        _edited(
            root,
            "v1/attention/backends/cpu_attn.py",
            "        num_reqs = common_attn_metadata.num_reqs\n",
            "        num_reqs = int(common_attn_metadata.num_reqs)\n",
        ),
        root,
        compiled=True,
        device=device,
        graphs=graphs,
    )
    for got in (readme, impl, builder):
        assert got.overlayable is not refused, [f.line() for f in got.findings]
    if refused:
        # The capture path, from a speculator's capture to the draft sampler it records.
        assert re.search(
            r"DraftModelSpeculator\.sample_draft: body changed — runs while CUDA graphs are "
            r"captured \(\w+Speculator\.capture hands over \w+, which calls sample_draft\): "
            rf"under FULL CUDA graphs \(cudagraph_mode {graphs}\)",
            readme.blockers[0].line(),
        ), readme.blockers[0].line()
        assert "runs inside the attention op, which FULL CUDA graphs" in impl.blockers[0].line()
        assert "an attention metadata builder: FULL CUDA graphs" in builder.blockers[0].line()
        for got in (readme, impl, builder):
            assert "cudagraph_mode: PIECEWISE" in got.blockers[0].reason


@needs_vllm
def test_the_scenario_names_its_graph_mode() -> None:
    from harness.plan.classify import engine_graph_mode

    def scenario(device: str, engine: dict[str, Any]) -> Any:
        return type("S", (), {"device": device, "engine": engine})()

    assert engine_graph_mode(scenario("cpu", {})) == "NONE"
    assert engine_graph_mode(scenario("cuda", {})) == "FULL_AND_PIECEWISE"
    assert engine_graph_mode(scenario("cuda", {"enforce_eager": True})) == "NONE"
    assert (
        engine_graph_mode(scenario("cuda", {"compilation_config": {"cudagraph_mode": "piecewise"}}))
        == "PIECEWISE"
    )
