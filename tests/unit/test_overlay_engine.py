"""harness.engine.overlay without vLLM: a small package shaped like the known traps is
classified by the parent side (harness.plan.classify), its spec built as Overlays.spec() builds it,
and installed in this process; each arm must then run its own version of every function."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engine import overlay as engine
from harness.plan.classify import Classified, classify
from harness.plan.diffs import Change, FileChange
from harness.plan.overlay import Overlays
from harness.wire.overlay import ChangeIdentity, OverlayCode

SPEC = "v1/spec_decode"

# The installed package: a base class, a subclass, helpers, a __future__ module.
INSTALLED = {
    f"{SPEC}/base.py": """\
class Proposer:
    def sample(self, x):
        return ("installed base", x)
""",
    f"{SPEC}/sub.py": """\
from .base import Proposer


class Draft(Proposer):
    def __init__(self):
        self.__scale = 10
        self.step_fn = self.step

    def sample(self, x):
        return ("installed sub", super().sample(x))

    def scaled(self, x):
        return ("installed", x * self.__scale)

    def step(self, x):
        return ("installed step", x)

    def fails(self, x):
        return x

    @staticmethod
    def width(n):
        return ("installed width", n)

    @classmethod
    def make(cls):
        return ("installed make", cls)
""",
    f"{SPEC}/helpers.py": """\
def pad(x):
    return ("installed pad", x)
""",
    f"{SPEC}/user.py": """\
from .helpers import pad


def use(x):
    return pad(x)
""",
    f"{SPEC}/typed.py": """\
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nowhere import Missing


def describe(m: Missing | None = None) -> str:
    return "installed"
""",
}

# The branch: every function above changed, plus a new helper, constant, import and a new
# private (name-mangled) staticmethod.
CHANGED = {
    f"{SPEC}/base.py": None,
    f"{SPEC}/sub.py": """\
from .base import Proposer


class Draft(Proposer):
    def __init__(self):
        self.__scale = 10
        self.step_fn = self.step

    def sample(self, x):
        return ("branch sub", super().sample(x))

    def scaled(self, x):
        return ("branch", self.__twice(x * self.__scale))

    @staticmethod
    def __twice(x):
        return 2 * x

    def step(self, x):
        return ("branch step", x)

    def fails(self, x):
        # the branch's bug
        raise ValueError(f"branch fails on {x}")

    @staticmethod
    def width(n):
        return ("branch width", n)

    @classmethod
    def make(cls):
        return ("branch make", cls)
""",
    f"{SPEC}/helpers.py": """\
import math

PAD_TO = 8


def pad(x):
    return ("branch pad", _round_up(x))


def _round_up(x):
    return math.ceil(x / PAD_TO) * PAD_TO
""",
    f"{SPEC}/user.py": None,
    f"{SPEC}/typed.py": """\
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nowhere import Missing


def describe(m: Missing | None = None) -> str:
    return "branch"
""",
}
# The changed file's own line of the branch's `raise`.
FAILS_LINE = next(
    i
    for i, line in enumerate(CHANGED[f"{SPEC}/sub.py"].splitlines(), 1)  # type: ignore[union-attr]
    if "raise ValueError" in line
)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in {root, *(p.parent for p in root.rglob("*.py"))}:
        init = folder / "__init__.py"
        while folder != root.parent and not init.exists():
            init.write_text("", encoding="utf-8")
            folder = folder.parent
            init = folder / "__init__.py"


def _classified(tmp_path: Path) -> Classified:
    """The branch classified by the parent side, against the installed files laid out as a
    vllm package (classify's path rules are vLLM's: vllm/v1/spec_decode/...)."""
    root = tmp_path / "parent" / "vllm"
    _write(root, INSTALLED)
    files = [
        FileChange(f"vllm/{rel}", INSTALLED[rel], new)
        for rel, new in CHANGED.items()
        if new is not None
    ]
    identity = ChangeIdentity(
        kind="diff", path="branch.diff", sha256="0" * 64, files=[f.path for f in files]
    )
    got = classify(Change(identity, files), root)
    assert got.overlayable, [f.line() for f in got.blockers]
    return got


@dataclasses.dataclass
class Harness:
    """One overlay installed in this process, in a package of its own."""

    package: str
    arm: list[str]
    hits: list[tuple[str, str]]
    facts: dict[str, Any]
    spec: dict[str, Any]

    def module(self, name: str) -> Any:
        return importlib.import_module(f"{self.package}.{SPEC.replace('/', '.')}.{name}")

    def use(self, arm: str) -> None:
        self.arm[0] = arm

    def install(self) -> dict[str, Any]:
        return engine.install(self.spec, self.hit, self.active)

    def hit(self, key: str, facts: dict[str, Any]) -> None:
        self.hits.append((self.arm[0], key.partition(":")[2]))

    def active(self) -> str:
        return self.arm[0]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    classified = _classified(tmp_path)
    package = f"specbench_overlay_{uuid.uuid4().hex[:12]}"
    _write(tmp_path / "importable" / package, INSTALLED)

    def rename(code: OverlayCode) -> OverlayCode:
        return code.model_copy(update={"module": package + code.module.removeprefix("vllm")})

    renamed = dataclasses.replace(classified, code=[rename(c) for c in classified.code])
    spec = Overlays(tmp_path / "parent" / "vllm", {"branch": renamed}, compiled=False).spec(
        ["base", "branch"], active="base"
    )
    sys.path.insert(0, str(tmp_path / "importable"))
    try:
        h = Harness(package, ["base"], [], {}, json.loads(spec.model_dump_json()))
        user = h.module("user")  # imported before install: holds the original pad by value
        assert user.pad is h.module("helpers").pad
        h.facts = h.install()
        yield h
    finally:
        sys.path.remove(str(tmp_path / "importable"))
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]


def _each_arm(h: Harness, call: Callable[[], Any]) -> dict[str, Any]:
    out = {}
    for arm in ("base", "branch"):
        h.use(arm)
        out[arm] = call()
    return out


def test_spec_names_every_changed_function(harness: Harness) -> None:
    keys = [k.partition(":")[2] for k in harness.spec["functions"]]
    assert sorted(keys) == sorted(
        [
            "Draft.sample",
            "Draft.scaled",
            "Draft.__twice",
            "Draft.step",
            "Draft.fails",
            "Draft.width",
            "Draft.make",
            "pad",
            "_round_up",
            "describe",
        ]
    )
    assert harness.facts["overlaid"] == harness.spec["functions"]


def test_each_arm_runs_its_own_version_and_counts_its_calls(harness: Harness) -> None:
    draft = harness.module("sub").Draft()
    assert _each_arm(harness, lambda: draft.step(1)) == {
        "base": ("installed step", 1),
        "branch": ("branch step", 1),
    }
    harness.use("branch")
    draft.step(2)
    assert harness.hits == [
        ("base", "Draft.step"),
        ("branch", "Draft.step"),
        ("branch", "Draft.step"),
    ]


def test_zero_argument_super_reaches_the_real_base_class(harness: Harness) -> None:
    draft = harness.module("sub").Draft()
    assert _each_arm(harness, lambda: draft.sample(3)) == {
        "base": ("installed sub", ("installed base", 3)),
        "branch": ("branch sub", ("installed base", 3)),
    }
    assert harness.module("sub").Draft.sample.__name__ == "sample"


def test_name_mangling_reads_the_real_private_attribute(harness: Harness) -> None:
    """The branch reads self.__scale (set by the installed __init__ as _Draft__scale) and
    calls a new private staticmethod self.__twice."""
    draft = harness.module("sub").Draft()
    assert _each_arm(harness, lambda: draft.scaled(2)) == {
        "base": ("installed", 20),
        "branch": ("branch", 40),
    }
    assert "__twice" not in vars(harness.module("sub").Draft)


def test_importer_holding_the_function_by_value_is_rebound(harness: Harness) -> None:
    user, helpers = harness.module("user"), harness.module("helpers")
    assert user.pad is helpers.pad
    assert getattr(user.pad, engine.MARK) == f"{harness.package}.v1.spec_decode.helpers:pad"
    assert _each_arm(harness, lambda: user.use(3)) == {
        "base": ("installed pad", 3),
        "branch": ("branch pad", 8),
    }
    rebound = harness.facts["rebound"][f"{harness.package}.v1.spec_decode.helpers:pad"]
    assert f"{harness.package}.v1.spec_decode.user.pad" in rebound


def test_new_helper_constant_and_import_are_in_the_module(harness: Harness) -> None:
    helpers = harness.module("helpers")
    assert helpers.PAD_TO == 8 and helpers.math.ceil(0.5) == 1
    harness.use("branch")
    assert helpers._round_up(9) == 16


def test_staticmethod_and_classmethod_keep_their_kind(harness: Harness) -> None:
    draft_cls = harness.module("sub").Draft
    assert isinstance(vars(draft_cls)["width"], staticmethod)
    assert isinstance(vars(draft_cls)["make"], classmethod)

    class Child(draft_cls):  # type: ignore[misc, valid-type]
        pass

    assert _each_arm(harness, lambda: (draft_cls.width(1), draft_cls().width(2), Child.make())) == {
        "base": (("installed width", 1), ("installed width", 2), ("installed make", Child)),
        "branch": (("branch width", 1), ("branch width", 2), ("branch make", Child)),
    }


def test_future_annotations_with_type_checking_only_names(harness: Harness) -> None:
    typed = harness.module("typed")
    assert _each_arm(harness, typed.describe) == {"base": "installed", "branch": "branch"}
    harness.use("branch")
    assert typed.describe.__wrapped__.__annotations__ == {"m": "Missing | None", "return": "str"}


def test_binding_cached_at_init_dispatches(harness: Harness) -> None:
    """`self.step_fn = self.step` in __init__: an instance built after install (vLLM builds
    its proposers after the plugin installs the overlay) holds the dispatcher."""
    draft = harness.module("sub").Draft()
    assert _each_arm(harness, lambda: draft.step_fn(5)) == {
        "base": ("installed step", 5),
        "branch": ("branch step", 5),
    }


def test_a_second_install_is_a_no_op(harness: Harness) -> None:
    draft_cls, helpers = harness.module("sub").Draft, harness.module("helpers")
    before = {name: vars(draft_cls)[name] for name in ("sample", "width", "make")}
    pad, constant = helpers.pad, helpers.PAD_TO
    helpers.PAD_TO = 16  # a statement run again would reset it
    harness.install()
    assert {name: vars(draft_cls)[name] for name in before} == before
    assert helpers.pad is pad and helpers.PAD_TO == 16 != constant
    harness.use("branch")
    assert helpers.pad(9) == ("branch pad", 16)
    # One count per call, recorded as each returns (the inner helper first).
    assert harness.hits == [("branch", "_round_up"), ("branch", "pad")]


def test_a_branch_traceback_points_at_the_changed_file(harness: Harness) -> None:
    draft = harness.module("sub").Draft()
    harness.use("base")
    assert draft.fails(1) == 1
    harness.use("branch")
    with pytest.raises(ValueError, match="branch fails on 2") as info:
        draft.fails(2)
    frame = traceback.extract_tb(info.tb)[-1]
    assert frame.filename == "<specbench overlay vllm/v1/spec_decode/sub.py>"
    assert (frame.lineno, FAILS_LINE) == (24, 24)
    # The changed file's line itself, although it is on no disk here.
    assert frame.line is not None and "branch fails on" in frame.line
