"""The overlay spec: a variant's own vLLM change as the code each arm runs -- classified by the
parent side (harness.plan.classify), compiled and switched between arms inside vLLM's processes
(harness.engine.overlay). It travels in the plan (RunSpec.overlay), the launch's spec file and
the run's manifest, so it lives in the bottom layer: pydantic and the config base only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.config.base import StrictModel

# --- what travels in the plan (RunSpec.overlay) ------------------------------------------------


class ChangeIdentity(StrictModel):
    """Which change an arm runs: enough to tell two runs of different changes apart."""

    kind: Literal["diff", "source"] = Field(description="A unified diff, or a checkout.")
    path: str = Field(description="The diff file or the checkout, as resolved.")
    sha256: str = Field(description="diff: of its bytes; source: of the changed files.")
    commit: str | None = Field(default=None, description="A checkout's git HEAD (+dirty).")
    files: list[str] = Field(description="The changed files, relative to the vllm package.")

    def describe(self) -> str:
        what = Path(self.path).name if self.kind == "diff" else self.path
        commit = (
            f" @ {self.commit[:12]}" + (" (dirty)" if self.commit.endswith("+dirty") else "")
            if self.commit
            else ""
        )
        return f"{what}{commit} (sha256 {self.sha256[:12]})"


class OverlayCode(StrictModel):
    """Source to compile inside vLLM's processes, in a module's own namespace."""

    module: str = Field(description="The module, e.g. vllm.v1.spec_decode.medusa.")
    owner: str | None = Field(default=None, description="The class that owns a method.")
    name: str = Field(description="Function, method or (statements) first bound name.")
    kind: Literal["function", "statement"] = Field(
        description="function: a def to dispatch by arm; statement: a new import, constant, "
        "helper class run once in the module."
    )
    source: str = Field(description="The code, as in the changed file (decorators included).")
    line: int = Field(description="Its first line in the changed file.")
    file: str = Field(description="The changed file, relative to the vllm package's parent.")
    future: list[str] = Field(
        default_factory=list, description="The changed file's __future__ features."
    )

    @property
    def key(self) -> str:
        """'module:Owner.name', the dispatched function's name in reports."""
        return f"{self.module}:{self.owner + '.' if self.owner else ''}{self.name}"


class ArmOverlay(StrictModel):
    """What one arm runs: its change's functions, or (no change) the installed ones."""

    variant: str
    change: ChangeIdentity | None = Field(default=None, description="None: installed vLLM.")
    code: list[OverlayCode] = Field(default_factory=list)


class OverlaySpec(StrictModel):
    """Every arm's versions of every overlaid function, for one launch."""

    arms: list[ArmOverlay]
    functions: list[str] = Field(description="Dispatched functions ('module:qualname').")
    active: str = Field(description="The arm active from the start (the launch's own).")
    vllm_location: str = Field(description="The vllm package the change was read against.")


def overlaid_functions(spec: OverlaySpec) -> dict[str, tuple[list[str], str]]:
    """Arm -> the functions it overlaid (qualnames) and its change's own description, for
    the arms that ran a change of their own."""
    return {
        arm.variant: (
            [c.key.partition(":")[2] for c in arm.code if c.kind == "function"],
            arm.change.describe(),
        )
        for arm in spec.arms
        if arm.change is not None
    }
