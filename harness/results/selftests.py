"""Which `specbench selftest` passed on this machine, per device, model runner and vLLM version:
a small record under the cache folder (not a results folder: a run reads it wherever its
results go), so that `run` on a GPU can say in one line when none has.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

from harness.atomic import write_text_atomic
from harness.env import cpu_model, gpu_details

# Where the records go, when not under the cache folder (tests keep theirs apart).
SELFTESTS_ENV = "SPECBENCH_SELFTESTS"


def _folder() -> Path:
    own = os.environ.get(SELFTESTS_ENV)
    if own:
        return Path(own).expanduser()
    root = os.environ.get("SPECBENCH_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "specbench") / "selftest"


def _key(device: str, model_runner: str, vllm: str) -> str:
    """This machine (its CPU, its GPUs by name and driver), the device, runner and vLLM."""
    gpus = [(g.get("name", ""), g.get("driver", "")) for g in gpu_details()]
    blob = json.dumps(
        [platform.node(), cpu_model(), gpus, device, model_runner, vllm], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def record_passed(device: str, model_runner: str, vllm: str, evidence: Path) -> None:
    """Remember that a selftest passed here (its selftest.json's path, for the line)."""
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        folder / f"{_key(device, model_runner, vllm)}.json",
        json.dumps(
            {"vllm": vllm, "device": device, "runner": model_runner, "evidence": str(evidence)}
        )
        + "\n",
    )


def passed_selftest(device: str, model_runner: str, vllm: str) -> str | None:
    """The evidence of a selftest that passed here for this vLLM (None: none did). A run
    under the runner "auto" counts one of any runner."""
    runners = (model_runner,) if model_runner != "auto" else ("auto", "V1", "V2")
    for runner in runners:
        path = _folder() / f"{_key(device, runner, vllm)}.json"
        try:
            return str(json.loads(path.read_text())["evidence"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
