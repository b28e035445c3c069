"""Regenerates tiny-llama-prompts.jsonl, the prompt set bundled for the CPU serve demo.

Text prompts in the built-in tokenizer's vocabulary (words w3..w1023, one token each), with
lengths spread over 16-96 words so requests differ in prefill cost as real prompts do.
Run: python scenarios/prompts/generate.py (deterministic; the committed file is its output).
"""

import json
import random
from pathlib import Path

COUNT, SHORTEST, LONGEST, SEED = 128, 16, 96, 20261129

rng = random.Random(SEED)
lines = []
for _ in range(COUNT):
    length = rng.randint(SHORTEST, LONGEST)
    lines.append(
        json.dumps({"prompt": " ".join(f"w{rng.randrange(3, 1024)}" for _ in range(length))})
    )
Path(__file__).with_name("tiny-llama-prompts.jsonl").write_text("\n".join(lines) + "\n")
