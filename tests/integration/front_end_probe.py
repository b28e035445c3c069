"""Run by test_plugin_processes.py in its own process: a real offline LLM (this process is
vLLM's front end), then one line of JSON: this process's pid and the vLLM and harness modules
it holds."""

from __future__ import annotations

import json
import os
import sys

from harness.engine.models import ensure_models


def main() -> None:
    from vllm import LLM

    paths = ensure_models(["tiny-llama", "tiny-llama-eagle"], log=lambda _: None)
    llm = LLM(
        model=str(paths["tiny-llama"]),
        speculative_config={
            "method": "eagle",
            "model": str(paths["tiny-llama-eagle"]),
            "num_speculative_tokens": 2,
        },
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
        enable_prefix_caching=False,
    )
    llm.generate(["The plugin's front end"], use_tqdm=False)
    prefixes = ("vllm.v1.worker", "vllm.v1.spec_decode", "harness")
    modules = sorted(m for m in sys.modules if m.startswith(prefixes))
    print("PROBE " + json.dumps({"pid": os.getpid(), "modules": modules}), flush=True)


if __name__ == "__main__":
    main()
