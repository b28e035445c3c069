"""Describe the installed vLLM's engine and speculative arguments as plain JSON: for each key
the kinds of value it takes (bool, int, float, str, null, dict, list, or any) and, where vLLM
fixes them, the accepted choices (dtype's Literal, an enum's names).

The parent never imports vLLM: it reads this description (harness.config.vllm_args), shipped for the
pinned vLLM and written once to the cache for any other version by running this module.

    python -m harness.engine.argspec OUT.json
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import enum
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

from harness.atomic import write_json_atomic

# harness.config.vllm_args reads descriptions of this version (bump when the layout changes).
DESCRIPTION_VERSION = 1

_SCALARS: dict[type, list[str]] = {
    bool: ["bool"],
    int: ["int"],
    float: ["float", "int"],
    str: ["str"],
    type(None): ["null"],
}


def describe_type(tp: Any) -> dict[str, Any]:
    """{"kinds": [...], "choices": [...]?} for one annotation; anything unclear is "any"
    (never refuse what vLLM might accept)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return describe_type(typing.get_args(tp)[0])
    if tp is Any or isinstance(tp, (str, typing.TypeVar)):
        return {"kinds": ["any"]}
    if origin is typing.Literal:
        values = list(typing.get_args(tp))
        kinds = sorted({k for v in values for k in _SCALARS.get(type(v), ["any"])})
        return {"kinds": kinds, "choices": values}
    if origin in (typing.Union, types.UnionType):
        parts = [describe_type(a) for a in typing.get_args(tp)]
        kinds = sorted({k for p in parts for k in p["kinds"]})
        if "any" in kinds:
            return {"kinds": ["any"]}
        # Choices hold only when every non-null member is a closed set.
        closed = [p for p in parts if p["kinds"] != ["null"]]
        if closed and all("choices" in p for p in closed):
            choices = [c for p in closed for c in p["choices"]]
            return {"kinds": kinds, "choices": choices}
        return {"kinds": kinds}
    base = origin or tp
    if base in _SCALARS:
        return {"kinds": list(_SCALARS[base])}
    if isinstance(base, type):
        if issubclass(base, enum.Enum):
            return {"kinds": ["str"], "choices": [m.name for m in base]}
        if issubclass(base, (dict, collections.abc.Mapping)):
            return {"kinds": ["dict"]}
        if issubclass(base, (list, tuple, set, frozenset)):
            return {"kinds": ["list"]}
        if dataclasses.is_dataclass(base) or hasattr(base, "model_fields"):
            return {"kinds": ["dict"]}  # a vLLM config class, given as a mapping
    return {"kinds": ["any"]}


def _hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # forward references vLLM never resolves at run time
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    kinds = sorted(set(a["kinds"]) | set(b["kinds"]))
    if "any" in kinds:
        return {"kinds": ["any"]}
    if "choices" in a and "choices" in b:
        return {
            "kinds": kinds,
            "choices": a["choices"] + [c for c in b["choices"] if c not in a["choices"]],
        }
    return {"kinds": kinds}


def describe() -> dict[str, Any]:
    """The description of the vLLM imported here."""
    import vllm
    from vllm.config import SpeculativeConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.llm import LLM

    engine_hints = _hints(EngineArgs)
    engine = {
        f.name: describe_type(engine_hints.get(f.name, f.type))
        for f in dataclasses.fields(EngineArgs)
    }
    # The worker calls LLM(**engine_args): its own keywords take more than EngineArgs says
    # (compilation_config also takes an int level, for one).
    for name, param in inspect.signature(LLM.__init__).parameters.items():
        if name in ("self", "kwargs") or param.kind is param.VAR_KEYWORD:
            continue
        try:
            hint = typing.get_type_hints(LLM.__init__, include_extras=True).get(name, Any)
        except Exception:
            hint = Any
        described = describe_type(hint)
        engine[name] = _merge(engine[name], described) if name in engine else described
    spec_hints = _hints(SpeculativeConfig)
    speculative = {}
    internal = []
    for f in dataclasses.fields(SpeculativeConfig):
        hint = spec_hints.get(f.name, f.type)
        # Filled in by vLLM from the target (ModelConfig, ParallelConfig): not a user's key.
        if typing.get_origin(hint) is typing.Annotated or not f.init:
            internal.append(f.name)
            continue
        speculative[f.name] = describe_type(hint)
    return {
        "description_version": DESCRIPTION_VERSION,
        "vllm_version": vllm.__version__,
        "engine_args": dict(sorted(engine.items())),
        "speculative_config": dict(sorted(speculative.items())),
        "speculative_internal": sorted(internal),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="Where to write the JSON description.")
    args = parser.parse_args(argv)
    data = describe()
    write_json_atomic(args.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
