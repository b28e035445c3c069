"""Profiles per arm: torch profiler traces read back as self time per op
(harness.analysis.profiles), the scenario's `profile:` and `run --profile`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.profiles import ArmProfile, op_deltas, read_trace, self_times
from harness.config.scenario import parse_scenario, scenario_hash, with_profile
from harness.errors import ScenarioError


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_self_time_is_duration_less_children_on_the_same_thread(tmp_path: Path) -> None:
    events = [
        _x("medusa.py(96): propose", 0, 100, "python_function"),
        _x("aten::argmax", 10, 30),  # child of propose
        _x("aten::copy_", 15, 5),  # child of argmax
        _x(
            "<built-in method tolist of Tensor object at 0x7f00ab>", 50, 20, "python_function"
        ),  # child of propose
        _x(
            "<built-in method tolist of Tensor object at 0x7f11cd>", 120, 10, "python_function"
        ),  # a sibling, same name once addressless
        _x("shm_broadcast.py(830): acquire_read", 200, 500, "python_function"),  # a wait
        _x("<built-in function sched_yield>", 700, 50, "python_function"),  # a spin-wait
        _x("threading.py(331): wait", 0, 900, "python_function", tid=2),  # no op on thread 2
        {"ph": "i", "name": "marker", "ts": 3, "pid": 7, "tid": 1},
    ]
    got = self_times(events)
    assert got[("python_function", "medusa.py(96): propose")] == 50  # 100 - 30 - 20
    assert got[("cpu_op", "aten::argmax")] == 25
    assert got[("cpu_op", "aten::copy_")] == 5
    assert got[("python_function", "<built-in method tolist of Tensor object>")] == 30
    assert not any(w in name for _, name in got for w in ("wait", "acquire_read", "yield"))
    path = tmp_path / "a-0_rank0.1.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert read_trace(path) == events


def test_ops_are_ranked_by_how_much_their_self_time_moved() -> None:
    base = ArmProfile(
        "a",
        2,
        {("cpu_op", "x"): 1000.0, ("cpu_op", "y"): 5000.0, ("python_function", "p"): 200.0},
        0.1,
    )
    cand = ArmProfile(
        "b",
        2,
        {("cpu_op", "x"): 1100.0, ("cpu_op", "y"): 2000.0, ("python_function", "q"): 900.0},
        0.1,
    )
    rows = op_deltas(base, cand, 3)
    # p and q ran in one arm only (the change's own code): first, however small; then the
    # shared ops by how far their self time moved.
    assert [(r.name, round(r.delta_ms, 3), r.only) for r in rows] == [
        ("q", 0.9, "b"),
        ("p", -0.2, "a"),
        ("y", -3.0, None),
    ]
    assert rows[0].share == pytest.approx(0.009)  # 0.9 ms of a 0.1 s pass
    assert [r.name for r in op_deltas(base, cand, 4)][3] == "x"


def test_profile_is_offline_kept_outside_the_hash_and_set_by_the_flag(
    scenario_data: dict[str, Any],
) -> None:
    plain = parse_scenario(scenario_data)
    profiled = with_profile(plain)
    assert profiled.profile is not None and profiled.profile.passes == 2
    assert scenario_hash(plain) == scenario_hash(profiled)  # the measured passes are alike
    assert with_profile(profiled) is profiled
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**scenario_data, "mode": "serve", "profile": {}}, "s.yaml")
    assert "profile: offline mode only" in str(err.value)
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**scenario_data, "profile": {"passes": 0}}, "s.yaml")
    assert "profile.passes" in str(err.value) and "\n" not in str(err.value)
    from harness.plan.plan import expand_plan

    assert {r.profile_passes for r in expand_plan(profiled).runs} == {2}
    assert {r.profile_passes for r in expand_plan(plain).runs} == {0}


def test_profiled_passes_alternate_the_arms_and_keep_their_proof(
    scenario_data: dict[str, Any],
) -> None:
    """The worker's profile_arms (through a stand-in LLM: the seam vLLM's LLM fills): each arm
    switched to before its pass, start/stop_profile around exactly that pass, A B B A order,
    the switch's reports kept as the pass's proof."""
    from harness.engine.worker import profile_arms
    from harness.plan.plan import expand_plan

    [run] = expand_plan(with_profile(parse_scenario(scenario_data))).runs
    calls: list[str] = []

    class LLM:
        def start_profile(self, profile_prefix: str) -> None:
            calls.append(f"start {profile_prefix}")

        def stop_profile(self) -> None:
            calls.append("stop")

        def generate(self, *_: Any, **__: Any) -> None:
            calls.append("generate")

    active: list[str] = []

    def switch(choice: str | None) -> list[list[dict[str, Any]]]:
        if choice is not None:
            active.append(choice)
            calls.append(f"switch {choice}")
            return [[]]
        path = {
            "medusa-proposer:baseline": "medusa.propose.tolist",
            "medusa-proposer:optimized": "medusa.propose.tensor",
        }
        return [
            [
                {
                    "implementation": "medusa-proposer",
                    "choice": active[-1],
                    "pid": 1,
                    "calls": 3,
                    "path": path[active[-1]],
                    "paths": {path[active[-1]]: 3},
                }
            ]
        ]

    out = profile_arms(run, LLM(), switch, [], [], lambda: [])
    assert [(p.arm, p.index, p.prefix) for p in out] == [
        ("base", 0, "base-0"),
        ("opt", 0, "opt-0"),
        ("opt", 1, "opt-1"),
        ("base", 1, "base-1"),
    ]
    assert calls[:4] == ["switch medusa-proposer:baseline", "start base-0", "generate", "stop"]
    assert [p.paths for p in out] == [
        ["medusa.propose.tolist"],
        ["medusa.propose.tensor"],
        ["medusa.propose.tensor"],
        ["medusa.propose.tolist"],
    ]
