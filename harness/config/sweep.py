"""Sweeps: the grid a scenario may declare (its axes, linked groups and break-even), and its
expansion into cells, each a complete scenario of its own."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any, Literal

from pydantic import Field, model_validator

from harness.config.base import StrictModel
from harness.errors import ScenarioError

# Scenario fields a sweep may not vary: what names the run and the sweep itself.
SWEEP_FIXED = ("name", "description", "sweep")


# The most cells a sweep may have unless raised on purpose (`--max-cells`): every cell is a
# whole A/B, and a grid of a million would take `plan` minutes only to list.
MAX_CELLS = 1000


def _canonical(value: Any) -> str:
    """One text per JSON value (key order ignored), to find values listed twice."""
    return json.dumps(value, sort_keys=True)


class BreakEven(StrictModel):
    """Where a candidate's delta crosses zero along one swept axis."""

    axis: str = Field(
        description="The swept field (its path) along which to look, e.g. "
        "batch_size; its values must be numbers."
    )
    metric: str = Field(
        default="output_throughput",
        description="The metric whose delta "
        "is followed (a key of the comparison table, e.g. mean_tpot_ms).",
    )
    candidate: str | None = Field(default=None, description="The candidate (default: the first).")
    scale: Literal["auto", "log", "linear"] = Field(
        default="auto",
        description="How to interpolate between neighbouring values: log "
        "(batch sizes, vocabularies: values growing by factors), linear, or auto (log when "
        "every value is positive and the largest is at least 4 times the smallest).",
    )


def _check_paths(where: str, group: dict[str, list[Any]], seen: set[str]) -> None:
    """Each path of one group names a field a sweep may vary, once in the whole sweep, with
    values; `seen` gathers the paths across groups."""
    for path, values in group.items():
        at = path if where == "axes" else f"{where}.{path}"
        parts = path.split(".")
        if not path or any(not part for part in parts):
            raise ValueError(f"{where}: {path!r} is not a field path")
        if (
            parts[0] in SWEEP_FIXED
            or parts == ["variants"]
            or (
                parts[0] == "variants"
                and (len(parts) < 3 or parts[2] in ("baseline", "diff", "source"))
            )
        ):
            raise ValueError(f"{where}.{path}: a sweep cannot vary this field")
        if path in seen:
            raise ValueError(f"{at}: swept twice")
        seen.add(path)
        if not values:
            raise ValueError(f"{at}: no values")


def _check_steps_differ(where: str, group: dict[str, list[Any]]) -> None:
    """Every step of an axis (a tuple, in a linked group) differs from the others (one pass
    over the steps: a long axis costs its length, not its square)."""
    listed: set[str] = set()
    for step in zip(*group.values(), strict=True):
        key = _canonical(step)
        if key in listed:
            shown = step[0] if len(step) == 1 else dict(zip(group, step, strict=True))
            raise ValueError(
                f"{where if where != 'axes' else next(iter(group))}: {shown!r} is listed twice"
            )
        listed.add(key)


class Sweep(StrictModel):
    """A grid of cells, each a full A/B of the variants: every combination of `axes`, each
    combined with every step of each `linked` group."""

    axes: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Field path (batch_size, tensor_parallel_size, "
        "draft.num_speculative_tokens, model, serve.request_rate, engine.<key>, "
        "variants.<name>.engine.<key>, ...) -> the values it takes; axes combine as a "
        "product.",
    )
    linked: list[dict[str, list[Any]]] = Field(
        default_factory=list,
        description="Groups of fields varied together (zip): within a "
        "group every list has the same length and the i-th values go together, e.g. model "
        "and draft.model; each group combines with the axes as one more axis.",
    )
    break_even: BreakEven | None = Field(
        default=None,
        description="Estimate where the candidate's delta crosses zero along "
        "one axis, with an interval.",
    )

    @model_validator(mode="after")
    def _shape(self) -> Sweep:
        seen: set[str] = set()
        groups = [("axes", {k: v}) for k, v in self.axes.items()] + [
            (f"linked.{i}", g) for i, g in enumerate(self.linked)
        ]
        if not groups:
            raise ValueError("axes: a sweep needs at least one axis (or linked group)")
        for where, group in groups:
            if not group:
                raise ValueError(f"{where}: an empty group")
            lengths = {len(v) for v in group.values()}
            if len(lengths) > 1:
                raise ValueError(
                    f"{where}: linked lists differ in length "
                    f"({', '.join(f'{k}: {len(v)}' for k, v in group.items())})"
                )
            _check_paths(where, group, seen)
            _check_steps_differ(where, group)
        self._check_break_even()
        return self

    def _check_break_even(self) -> None:
        be = self.break_even
        if be is None:
            return
        axis = self.values_of(be.axis)
        if axis is None:
            raise ValueError(
                f"break_even.axis: {be.axis!r} is not swept (swept: {', '.join(self.paths)})"
            )
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in axis):
            raise ValueError(f"break_even.axis: {be.axis} takes values that are not all numbers")
        if len(axis) < 2:
            raise ValueError(f"break_even.axis: {be.axis} needs at least 2 values")
        if be.scale == "log" and min(axis) <= 0:
            raise ValueError("break_even.scale: log needs positive values")

    @property
    def paths(self) -> list[str]:
        """Every swept field, axes first, in the order written."""
        return [*self.axes, *(path for group in self.linked for path in group)]

    @property
    def sizes(self) -> dict[str, int]:
        """Each dimension of the grid -> its number of steps: an axis by its path, a linked
        group (which counts once) by its paths joined with '+'."""
        return {
            **{path: len(values) for path, values in self.axes.items()},
            **{"+".join(group): len(next(iter(group.values()))) for group in self.linked},
        }

    @property
    def cell_count(self) -> int:
        """How many cells the grid has, counted without expanding it."""
        return math.prod(self.sizes.values())

    def check_size(self, max_cells: int) -> None:
        """Refuse a grid of more than `max_cells` cells before anything expands it."""
        count = self.cell_count
        if count > max_cells:
            dims = " x ".join(f"{name} {size}" for name, size in self.sizes.items())
            raise ScenarioError(
                f"sweep: {count} cells ({dims}) is more than the limit of "
                f"{max_cells} cells; make the grid smaller, or raise the limit "
                "on purpose (--max-cells N)"
            )

    def values_of(self, path: str) -> list[Any] | None:
        if path in self.axes:
            return self.axes[path]
        return next((g[path] for g in self.linked if path in g), None)

    def steps(self) -> list[dict[str, Any]]:
        """Every cell's values (path -> value) in grid order: the axes as a product (the last
        varying fastest), each linked group as one more axis."""
        dims: list[list[dict[str, Any]]] = [
            [{path: v} for v in values] for path, values in self.axes.items()
        ]
        for group in self.linked:
            n = len(next(iter(group.values())))
            dims.append([{path: values[i] for path, values in group.items()} for i in range(n)])
        return [
            {k: v for part in combo for k, v in part.items()} for combo in itertools.product(*dims)
        ]


def cell_label(values: dict[str, Any]) -> str:
    """A sweep cell's values in one line: 'batch_size=4, model=tiny-llama-32k'."""
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items())


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set `path` (dotted) in a scenario mapping, creating the mappings of free-form fields
    (engine, env, draft.config, variants.<name>.engine) on the way."""
    parts = path.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if node.get(part) is None and part == "draft":
            raise ScenarioError(f"{'.'.join(parts[: i + 1])}: the scenario has no draft to vary")
        if part not in node or node[part] is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ScenarioError(
                f"{'.'.join(parts[: i + 1])}: not a mapping, so {path} is not a field"
            )
    node[parts[-1]] = value
