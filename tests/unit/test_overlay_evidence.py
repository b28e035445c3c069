"""Where an overlay's code really runs, from evidence rather than folder names: captures made
by import-time code are rebound (harness.engine.overlay.install), a dispatcher traced into a
real torch.compile graph refuses instead of replaying constants, and the check before the
first measured block (harness.analysis.proof.overlay_evidence) names each function with the
true reason: another process, shadowed, start-up only, or nowhere."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.proof import overlay_evidence
from harness.engine import overlay as engine
from harness.wire.protocol import overlay_refusal
from harness.wire.records import ImplReport

INSTALLED = """\
import functools


def merge(a, b):
    return ("installed merge", a, b)


def unchanged(a, fn=merge):
    return fn(a, 0)


TABLE = {"merge": merge}
CHAIN = [merge]
HALF = functools.partial(merge, 1)


class Copier:
    combine = merge

    def run(self, x, *, fn=merge):
        return fn(x, 2)


class Base:
    def step(self, x):
        return ("installed step", x)


class Borrower:
    step = Base.step
"""

# The branch: merge and Base.step change; a new helper with a default argument naming another
# new helper defined further down, and new constants that capture the changed function.
BRANCH_FUNCTIONS = {
    ("merge", None): """\
def merge(a, b):
    return ("branch merge", a, b)
""",
    ("step", "Base"): """\
    def step(self, x):
        return ("branch step", x)
""",
    ("combine_all", None): """\
def combine_all(items, fn=_pairwise):
    return fn(items)
""",
    ("_pairwise", None): """\
def _pairwise(items):
    return [merge(a, b) for a, b in zip(items, items[1:], strict=False)]
""",
}
BRANCH_STATEMENTS = {
    "NEW_TABLE": 'NEW_TABLE = {"merge": merge, "all": combine_all}\n',
    "NEW_HALF": "NEW_HALF = functools.partial(merge, 5)\n",
}


def _spec(module: str) -> dict[str, Any]:
    """The spec Overlays.spec() builds for arms base (installed) and branch, in the changed
    file's order: statements first in the file, then the helpers, as a branch would write."""
    line = 100
    code: list[dict[str, Any]] = []
    for name, source in BRANCH_STATEMENTS.items():
        code.append(
            {
                "module": module,
                "owner": None,
                "name": name,
                "kind": "statement",
                "source": source,
                "line": line,
                "file": "vllm/x.py",
                "future": [],
            }
        )
        line += 2
    for (name, owner), source in BRANCH_FUNCTIONS.items():
        code.append(
            {
                "module": module,
                "owner": owner,
                "name": name,
                "kind": "function",
                "source": source,
                "line": line,
                "file": "vllm/x.py",
                "future": [],
            }
        )
        line += 1 + source.count("\n")
    functions = [
        f"{module}:{(c['owner'] + '.') if c['owner'] else ''}{c['name']}"
        for c in code
        if c["kind"] == "function"
    ]
    return {
        "arms": [
            {"variant": "base", "change": None, "code": []},
            {"variant": "branch", "change": None, "code": code},
        ],
        "functions": functions,
        "active": "base",
        "vllm_location": ".",
    }


class Installed:
    def __init__(self, module: Any) -> None:
        self.module = module
        self.arm = "base"
        self.hits: list[tuple[str, str]] = []
        self.facts: dict[str, Any] = {}

    def active(self) -> str:
        return self.arm

    def hit(self, key: str, facts: dict[str, Any]) -> None:
        self.hits.append((self.arm, key.partition(":")[2]))

    def each(self, call: Any) -> dict[str, Any]:
        out = {}
        for arm in ("base", "branch"):
            self.arm = arm
            out[arm] = call()
        return out


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Installed]:
    package = f"specbench_capture_{uuid.uuid4().hex[:12]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "x.py").write_text(INSTALLED)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(f"{package}.x")
        h = Installed(module)
        h.facts = engine.install(_spec(module.__name__), h.hit, h.active)
        yield h
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith(package)]:
            del sys.modules[name]


def test_import_time_captures_are_rebound(installed: Installed) -> None:
    m = installed.module
    branch = ("branch merge", 1, 0)
    assert installed.each(lambda: m.unchanged(1)) == {
        "base": ("installed merge", 1, 0),
        "branch": branch,
    }
    assert installed.each(lambda: m.TABLE["merge"](1, 0))["branch"] == branch
    assert installed.each(lambda: m.CHAIN[0](1, 0))["branch"] == branch
    assert installed.each(lambda: m.HALF(0))["branch"] == ("branch merge", 1, 0)
    assert installed.each(lambda: m.Copier.combine(1, 0))["branch"] == branch
    assert installed.each(lambda: m.Copier().run(1))["branch"] == ("branch merge", 1, 2)
    # A method copied by value into another class body.
    assert installed.each(lambda: m.Borrower().step(3)) == {
        "base": ("installed step", 3),
        "branch": ("branch step", 3),
    }
    rebound = " ".join(installed.facts["rebound"][f"{m.__name__}:merge"])
    for where in (
        "TABLE (dict)",
        "CHAIN (list)",
        "HALF (partial)",
        "Copier.combine (class body)",
        "Copier.run (default argument)",
        "unchanged (default argument)",
    ):
        assert where in rebound, (where, rebound)


def test_new_statements_and_defaults_see_the_dispatchers(installed: Installed) -> None:
    m = installed.module
    # New constants capture the dispatcher, so they follow the switch like the module does.
    assert installed.each(lambda: m.NEW_TABLE["merge"](1, 2)) == {
        "base": ("installed merge", 1, 2),
        "branch": ("branch merge", 1, 2),
    }
    assert installed.each(lambda: m.NEW_HALF(1))["branch"] == ("branch merge", 5, 1)
    # A new function's default names a new helper defined further down: no NameError.
    installed.arm = "branch"
    assert m.NEW_TABLE["all"]([1, 2, 3]) == [("branch merge", 1, 2), ("branch merge", 2, 3)]


def test_a_new_helper_is_owed_only_by_the_arms_that_define_it(installed: Installed) -> None:
    """The held-out case: a change adds a helper and calls it from a changed method. The
    baseline has no version of it, so its passes never call it, and that is no reason to call
    them unproven (a real run lost all 70 baseline passes so); the branch's passes still must."""
    from harness.analysis.proof import proof_problems

    m = installed.module.__name__
    new = {f"{m}:combine_all", f"{m}:_pairwise"}
    assert installed.facts["arm_only"] == dict.fromkeys(new, ["branch"])
    old = {f"{m}:merge": 3, f"{m}:Base.step": 1}

    def report(arm: str, paths: dict[str, int]) -> ImplReport:
        return ImplReport.from_raw(
            {
                "implementation": "overlay",
                "choice": arm,
                "path": next(iter(paths)),
                "paths": paths,
                "pid": 20,
                "ppid": 1,
                "calls": sum(paths.values()),
                "overlaid": installed.facts["overlaid"],
                "arm_only": installed.facts["arm_only"],
            }
        )

    assert proof_problems([report("base", old)], "overlay:base", 1, HARNESS) == []
    every = {**old, **dict.fromkeys(new, 2)}
    assert proof_problems([report("branch", every)], "overlay:branch", 1, HARNESS) == []
    (problem,) = proof_problems(
        [report("branch", {**old, f"{m}:combine_all": 1})], "overlay:branch", 1, HARNESS
    )
    assert problem.startswith("overlay ran 0 times: _pairwise")
    # Code vLLM has is owed by every arm, the baseline's too.
    (problem,) = proof_problems([report("base", {f"{m}:merge": 3})], "overlay:base", 1, HARNESS)
    assert problem.startswith("overlay ran 0 times: Base.step")


torch = pytest.importorskip("torch")


def test_a_dispatcher_traced_by_torch_compile_refuses_by_name(installed: Installed) -> None:
    m = installed.module
    installed.arm = "branch"
    calls = len(installed.hits)

    def forward(x: Any) -> Any:
        return x * len(m.merge(1, 2))

    assert forward(torch.ones(1)).item() == 3.0  # it ran eagerly first: the trap's order
    compiled = torch.compile(forward, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="specbench overlay traced") as info:
        compiled(torch.ones(1))
    refusal = overlay_refusal(str(info.value))
    assert refusal is not None and refusal.startswith(
        f"overlay refused: merge ({m.__name__}) runs inside a graph: torch.compile traced it"
    )
    # Nothing was counted while tracing: only the eager call above.
    assert len(installed.hits) == calls + 1


def test_a_graph_break_at_the_dispatcher_runs_each_arm_eagerly(installed: Installed) -> None:
    m = installed.module

    def forward(x: Any) -> Any:
        return x + float(m.merge(1, 2)[0].startswith("branch"))

    compiled = torch.compile(forward, backend="eager")  # not fullgraph: Dynamo breaks there
    torch._dynamo.reset()
    got = installed.each(lambda: compiled(torch.zeros(1)).item())
    assert got == {"base": 0.0, "branch": 1.0}
    assert installed.hits[-2:] == [("base", "merge"), ("branch", "merge")]


def _report(
    pid: int, paths: dict[str, int], *, ppid: int = 1, process: str = "", **details: Any
) -> ImplReport:
    return ImplReport.from_raw(
        {
            "implementation": "overlay",
            "choice": "base",
            "path": next(iter(paths), None),
            "paths": paths,
            "pid": pid,
            "ppid": ppid,
            "calls": sum(paths.values()),
            "overlaid": ["vllm.a:f", "vllm.b:C.g"],
            "process": process,
            **details,
        }
    )


HARNESS = 10


def test_evidence_passes_code_that_every_worker_ran_in_the_warm_up() -> None:
    startup = [_report(20, {}), _report(21, {})]
    warm = [
        _report(20, {"vllm.a:f": 3, "vllm.b:C.g": 1}),
        _report(21, {"vllm.a:f": 3, "vllm.b:C.g": 1}),
    ]
    # Worker report files come back too, and are no evidence against them.
    assert overlay_evidence(startup, warm, warm, HARNESS) == []


def test_evidence_names_a_process_the_switch_never_reaches() -> None:
    startup = [_report(20, {})]
    warm = [_report(20, {"vllm.a:f": 3, "vllm.b:C.g": 1})]
    core = _report(15, {"vllm.a:f": 40}, ppid=HARNESS, process="EngineCore_DP0")
    (problem,) = overlay_evidence(startup, warm, [core], HARNESS)
    assert problem.startswith(
        "f (vllm.a) runs in vLLM's EngineCore_DP0 (pid 15), which the "
        "arm switch (collective_rpc to vLLM's workers) never reaches"
    )
    front = _report(HARNESS, {"vllm.b:C.g": 1})
    (problem,) = overlay_evidence(startup, warm, [front], HARNESS)
    assert "C.g (vllm.b) runs in the front end (the harness's own process" in problem


def test_evidence_names_start_up_only_shadowed_and_unreached_code() -> None:
    startup = [_report(20, {"vllm.a:f": 2})]
    warm = [_report(20, {}, shadowed={"vllm.b:C.g": "CPUModelRunner.g (vllm.cpu) overrides it"})]
    problems = overlay_evidence(startup, warm, [], HARNESS)
    assert problems[0].startswith(
        "f (vllm.a) ran only while the engine started (2 call(s) "
        "before the first switch, none in the warm-up's passes)"
    )
    assert problems[1] == (
        "C.g (vllm.b) never ran: CPUModelRunner.g (vllm.cpu) overrides it, "
        "so the changed version is never called on this platform"
    )
    (problem, _) = overlay_evidence([_report(20, {})], [_report(20, {})], [], HARNESS)
    assert problem.startswith(
        "overlay ran 0 times: f (vllm.a): your change is not on this scenario's path"
    )


def test_shadowing_is_found_in_this_process() -> None:
    class Base:
        def g(self) -> int:
            return 1

    class Platform(Base):
        def g(self) -> int:
            return 2

    class Unused(Base):  # loaded, overriding, but no instance of it lives: no evidence
        def g(self) -> int:
            return 3

    module = type(sys)("specbench_shadow_probe")
    module.Base = Base  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    key = f"{module.__name__}:Base.g"
    try:
        assert engine.shadowed([key]) == {}
        live = Platform()
        found = engine.shadowed([key])
    finally:
        del sys.modules[module.__name__]
    assert found == {key: f"Platform.g ({__name__}) overrides it"}
    assert live.g() == 2
