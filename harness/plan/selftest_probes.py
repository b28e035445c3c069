"""The selftest's planning checks, against the installed vLLM's source (no engine): a change of
one function that changes nothing it computes, as the diff a user would give, and whether the
planner refuses code that vLLM runs while CUDA graphs are captured (capture_refusal_probe) and
keeps host-side code in one engine (host_side_overlay).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.vllm_internals import SELFTEST_HOST_SIDE
from harness.errors import ScenarioError
from harness.plan.capture_reach import capture_reachable
from harness.plan.classify import Classified, classify
from harness.plan.diffs import Change, FileChange
from harness.plan.vllm_source import installed_package, vllm_location
from harness.wire.overlay import ChangeIdentity

# The CUDA-graph mode Model Runner V2 runs under by default on CUDA, which records the draft's
# prefill and decode as FULL graphs: the mode the capture check plans against.
CAPTURE_MODE = "FULL_AND_PIECEWISE"
# Capture-time functions the probe prefers, where the installed vLLM has them (the ones a
# spec-decode PR changes): the draft's logits and sampling, then any function reached.
PREFERRED = ("get_top_tokens", "compute_logits", "sample_draft", "forward")


def with_line(text: str, qualname: str, line: str) -> str:
    """`text` with `line` as the first statement of function `qualname` ('Class.method' or
    'function'), after its docstring, at the body's own indentation."""
    tree = ast.parse(text)
    fn = _find(tree, qualname)
    if fn is None:
        raise ScenarioError(f"no function {qualname} to change")
    body = fn.body
    first = body[1] if len(body) > 1 and _docstring(body[0]) else body[0]
    lines = text.splitlines(keepends=True)
    at = first.lineno - 1
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    return "".join(lines[:at] + [f"{indent}{line}\n"] + lines[at:])


def _docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _find(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    owner, _, name = qualname.rpartition(".")
    scope: list[ast.stmt] = tree.body
    if owner:
        cls = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if cls is None:
            return None
        scope = cls.body
    return next(
        (
            n
            for n in scope
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ),
        None,
    )


def unified_diff(path: str, old: str, new: str) -> str:
    """A `git diff`-style unified diff of one file of the vllm package."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )


def _change(path: str, old: str, new: str) -> Change:
    digest = hashlib.sha256(new.encode()).hexdigest()
    identity = ChangeIdentity(kind="diff", path=f"selftest:{path}", sha256=digest, files=[path])
    return Change(identity, [FileChange(path, old, new)])


def _classify(root: Path, path: str, qualname: str, line: str, graphs: str) -> Classified:
    old = installed_package(str(root)).texts()[path]
    new = with_line(old, qualname, line)
    return classify(_change(path, old, new), root, device="cuda", graphs=graphs)


@dataclass
class Probe:
    """The capture check's outcome: whether the planner held, why, and what it read."""

    ok: bool
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _captured(root: Path) -> dict[tuple[str, str], str]:
    """(file, 'Class.method') -> how a capture call reaches it, in the installed source."""
    return dict(capture_reachable(installed_package(str(root))))


def capture_refusal_probe(root: Path | None = None, line: str = "_ = None") -> Probe:
    """Plan a change of a capture-time function of the installed vLLM under FULL graphs: it
    must be refused, naming the capture; plan a change of a host-side function the same way:
    it must stay one-engine. Both or the probe fails."""
    root = root or vllm_location(None)
    captured = _captured(root)
    if not captured:
        return Probe(
            False,
            "no function of the installed vLLM is reached from a CUDA-graph "
            "capture: the planner's capture search found nothing to refuse",
        )
    target = _pick(captured)
    path, qualname = target
    refused = _classify(root, path, qualname, line, CAPTURE_MODE)
    evidence: dict[str, Any] = {
        "captured_functions": len(captured),
        "changed": f"{path}: {qualname}",
        "capture_path": captured[target],
        "graphs": CAPTURE_MODE,
        "refusal": [b.line() for b in refused.blockers][:2],
    }
    if refused.overlayable:
        return Probe(
            False,
            f"an overlay of {qualname} (reached from a capture: {captured[target]}) was "
            f"planned one-engine under {CAPTURE_MODE}",
            evidence,
        )
    host = _host_side(root, line, CAPTURE_MODE)
    if host is None:
        return Probe(
            False,
            f"{qualname} refused, but no host-side function of the registry stayed one-engine "
            f"under {CAPTURE_MODE}",
            evidence,
        )
    evidence["host_side"] = f"{host[0]}: {host[1]}"
    return Probe(
        True,
        f"{qualname} refused before any engine (captured: {captured[target]}); "
        f"{host[1]} stays one-engine",
        evidence,
    )


def _pick(captured: dict[tuple[str, str], str]) -> tuple[str, str]:
    for name in PREFERRED:
        for key in sorted(captured):
            if key[1].rpartition(".")[2] == name:
                return key
    return sorted(captured)[0]


def _host_side(
    root: Path, line: str, graphs: str, runners: frozenset[str] = frozenset({"V1", "V2"})
) -> tuple[str, str, str] | None:
    """The first of the registry's host-side functions (for `runners`) that the installed vLLM
    has and whose no-op change the planner keeps in one engine under `graphs`: (file,
    qualname, the file's installed text)."""
    texts = installed_package(str(root)).texts()
    for internal in SELFTEST_HOST_SIDE:
        path = internal.module.replace(".", "/") + ".py"
        if internal.runner not in runners or path not in texts:
            continue
        try:
            found = _classify(root, path, internal.qualname, line, graphs)
        except ScenarioError:
            continue
        if found.overlayable:
            return path, internal.qualname, texts[path]
    return None


def host_side_overlay(
    method: str, model_runner: str, line: str, graphs: str = "NONE", root: Path | None = None
) -> tuple[str, str, str] | None:
    """A no-op change of a host-side function the installed vLLM calls every step for
    `method` under `model_runner` (the registry's selftest entries), that the planner keeps
    in one engine under `graphs`: (file, qualname, the diff's text)."""
    runners = frozenset({"V1", "V2"} if model_runner == "auto" else {model_runner})
    found = _host_side(root or vllm_location(None), line, graphs, runners)
    if found is None:
        return None
    path, qualname, old = found
    return path, qualname, unified_diff(path, old, with_line(old, qualname, line))
