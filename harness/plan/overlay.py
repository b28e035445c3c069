"""Overlays: a variant's own vLLM change -- a unified diff, or a checkout based on the installed
release -- read against the installed vLLM, classified function by function, and turned into
the OverlaySpec that vLLM's processes compile and switch between arms (harness.engine.overlay).

The planner's façade over harness.plan.diffs (reading a change), harness.plan.vllm_source (the
installed vLLM), harness.plan.classify (the classifier) and harness.wire.overlay (the spec).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.config.platforms import RUNNER_WAY_OUT, V2_WAY_OUT
from harness.config.scenario import Scenario
from harness.errors import ScenarioError
from harness.plan.breakable import breakable_findings
from harness.plan.classify import (
    Classified,
    Finding,
    classify,
    engine_graph_mode,
    engine_is_compiled,
)
from harness.plan.diffs import read_change
from harness.plan.vllm_source import vllm_location
from harness.plan.vllm_support import (
    other_runners_code,
    runner_facts,
    runner_for,
    source_at,
)
from harness.wire.overlay import ArmOverlay, OverlaySpec


@dataclass
class Overlays:
    """A scenario's changes, classified: per variant that names one."""

    vllm_root: Path
    variants: dict[str, Classified]
    compiled: bool

    def blocked(self) -> dict[str, list[Finding]]:
        return {n: c.blockers for n, c in self.variants.items() if not c.overlayable}

    def spec(self, arms: list[str], active: str) -> OverlaySpec:
        """The overlay of a launch hosting `arms` (arms without a change run the installed
        code, through the same dispatchers, so their calls are proven too)."""
        functions: list[str] = []
        statements: dict[tuple[str, str], str] = {}
        out = []
        for arm in arms:
            classified = self.variants.get(arm)
            code = classified.code if classified else []
            for c in code:
                if c.kind == "function" and c.key not in functions:
                    functions.append(c.key)
                if c.kind == "statement":
                    seen = statements.setdefault((c.module, c.name), c.source)
                    if seen != c.source:
                        raise ScenarioError(
                            f"variants.{arm}: {c.file}: {c.name} is defined differently by "
                            "two arms' changes; module constants, imports and helper classes "
                            "are shared by every arm in one engine"
                        )
            out.append(
                ArmOverlay(
                    variant=arm,
                    change=classified.change.identity if classified else None,
                    code=code,
                )
            )
        return OverlaySpec(
            arms=out, functions=functions, active=active, vllm_location=str(self.vllm_root)
        )


def resolve_overlays(scenario: Scenario, base_dir: Path) -> Overlays | None:
    """Read and classify the change of every variant that names one (diff: or source:),
    against the vLLM the baseline's interpreter runs. None when no variant names one."""
    named = {n: v for n, v in scenario.variants.items() if v.diff or v.source}
    if not named:
        return None
    base = scenario.variants[scenario.baseline]
    python = base.python
    if python is not None and not Path(python).expanduser().is_absolute():
        python = str(base_dir / python)
    root = vllm_location(python)
    compiled = engine_is_compiled(scenario)
    out: dict[str, Classified] = {}
    for name, v in named.items():
        kind, given = ("diff", v.diff) if v.diff else ("source", v.source)
        assert given is not None
        path = Path(given).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            change = read_change(kind, path, root)
            out[name] = classify(
                change, root, compiled, scenario.device, name, engine_graph_mode(scenario)
            )
        except ScenarioError as exc:
            raise ScenarioError(f"variants.{name}.{kind}: {exc}") from None
        if not change.files:
            raise ScenarioError(
                f"variants.{name}.{kind}: {given} changes nothing in the installed vLLM ({root})"
            )
        out[name].findings.extend(other_runner_findings(out[name], scenario, root))
        out[name].findings.extend(
            breakable_findings(name, out[name], scenario, source_at(root.parent), base_dir)
        )
    return Overlays(root, out, compiled)


def other_runner_findings(classified: Classified, scenario: Scenario, root: Path) -> list[Finding]:
    """The changed functions in code only the other model runner runs: under the runner vLLM
    will build for this scenario they never run, so both arms would run the same code (an A/A
    reading "no change"). Refused with the runner that does run them."""
    source = source_at(root.parent)
    facts = runner_facts(source)
    method = scenario.draft.method if scenario.draft is not None else None
    runner, why = runner_for(scenario.device, scenario.model_runner, method, facts)
    out = []
    files: dict[str, list[str]] = {}
    for code in classified.code:
        if code.kind == "function":
            files.setdefault(code.module, []).append(
                f"{code.owner}.{code.name}" if code.owner else code.name
            )
    for module, names in files.items():
        other = other_runners_code(source, module, runner)
        if other is None:
            continue
        way = RUNNER_WAY_OUT if other == "V1" else V2_WAY_OUT  # the platforms' own
        v2_home = " (V2 drafts in vllm/v1/worker/gpu/spec_decode/)" if other == "V1" else ""
        out.append(
            Finding(
                module.replace(".", "/") + ".py",
                ", ".join(names),
                False,
                f"Model Runner {other}'s code: the runner this launch gets is {runner} ({why}), "
                f"which never imports it{v2_home}, so both arms would run the same code; run it "
                f"on {other} ({way}) or change the code {runner} runs",
                own_way_out=True,
            )
        )
    return out


def refusal(variant: str, kind: str, blockers: list[Finding]) -> str:
    """One line: what cannot be overlaid and what to do."""
    parts = "; ".join(f.line() for f in blockers[:4]) + (
        f" (+{len(blockers) - 4} more)" if len(blockers) > 4 else ""
    )
    if all(f.own_way_out for f in blockers):
        return f"variants.{variant}.{kind}: cannot run: {parts}"
    return (
        f"variants.{variant}.{kind}: cannot run in one engine: {parts}. Give the branch "
        f"as a build (variants.{variant}.python: an environment with it installed) to "
        "run it launch-per-arm, or change only function bodies of worker code"
    )
