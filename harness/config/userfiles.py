"""The files a user names (a scenario, a workload's prompts), read strictly: something that is
not a regular file is named for what it is, and in YAML a malformed document or a key written
twice in one mapping (which YAML would resolve silently to its last value) is one ScenarioError
naming the line.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ScenarioError

MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's parser where PyYAML has it (several times faster on long lists), same safe types.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NOT_FOUND = "was not found"  # file_problem() of a path where nothing is
# What a path that is not a regular file is, by its st_mode.
FILE_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file, in words that finish 'PATH ...': 'was not found',
    'is a directory', 'is not a regular file (a FIFO)'; None for a regular file (symbolic links
    followed). Reading a device or a FIFO to its end may never return, so callers refuse them
    before opening anything."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return NOT_FOUND
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    kind = next((name for test, name in FILE_KINDS if test(mode)), "an unknown kind of file")
    return f"is not a regular file ({kind})"


def require_regular_file(path: Path, missing: str, unusable: str) -> None:
    """Refuse, in one line, a path that is not a readable regular file: `missing` when there
    is nothing there, else `unusable` with {problem} filled in (file_problem's words)."""
    problem = file_problem(path)
    if problem == NOT_FOUND:
        raise ScenarioError(missing)
    if problem is not None:
        raise ScenarioError(unusable.replace("{problem}", problem))


def load_yaml_file(path: Path) -> Any:
    """A scenario file's data (load_yaml), refusing what is not a readable regular file."""
    require_regular_file(
        path,
        f"{path}: scenario file not found",
        f"{path}: cannot read it as a scenario: it {{problem}} (a scenario is a YAML file)",
    )
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file ({exc.strerror})") from None
    return load_yaml(text, str(path))


def load_yaml(text: str, source: str) -> Any:
    """The data of one YAML document (safe types only), refusing duplicate mapping keys at any
    depth: '<source>:<line>: key 'a.b' is written twice (lines 3 and 7) ...'."""
    loader = LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(loader, node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{source}{where}: malformed YAML: {problem}") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(loader: Any, root: yaml.Node, source: str) -> None:
    """Walk the composed document once (each node once, so aliases cost nothing extra) and
    refuse the first mapping that holds a key twice. Keys are compared as the values YAML
    constructs (1 and 0x1 are one key); '<<' merge keys are YAML's own overriding, allowed."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children: list[tuple[yaml.Node, str]] = []
        if isinstance(node, yaml.SequenceNode):
            children = [
                (item, f"{path}.{i}" if path else str(i)) for i, item in enumerate(node.value)
            ]
        elif isinstance(node, yaml.MappingNode):
            lines: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    children.append((value_node, path))
                    continue
                shown = (
                    str(key_node.value)
                    if isinstance(key_node, yaml.ScalarNode)
                    else "(a complex key)"
                )
                where = f"{path}.{shown}" if path else shown
                children.append((value_node, where))
                try:
                    key = loader.construct_object(key_node, deep=True)
                    hash(key)
                except (TypeError, yaml.YAMLError):
                    continue  # an unhashable key: the constructor refuses it in its own words
                line = key_node.start_mark.line + 1
                if key in lines:
                    raise ScenarioError(
                        f"{source}:{line}: key {where!r} is written twice (lines "
                        f"{lines[key]} and {line}); YAML would keep only the second, so "
                        "remove one"
                    )
                lines[key] = line
        todo.extend(reversed(children))  # a stack: children in the order written
