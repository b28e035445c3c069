#!/usr/bin/env bash
# The project's static checks, fastest first; .ci/run calls this before any test.
#   ruff check     pyflakes, pycodestyle, imports, bugbear, complexity (C901, at most 15)
#   ruff format    the one code format (`ruff format` applies it)
#   mypy           strict, over harness/, tests/, benchmarks/ and testkit/ (pyproject.toml
#                  says which files)
#   lint-imports   the one-way layers (pyproject.toml's [tool.importlinter] contracts)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PATHS=(harness tests benchmarks testkit scripts notebooks)
"$BIN/ruff" check "${PATHS[@]}"
"$BIN/ruff" format --check "${PATHS[@]}"
"$BIN/mypy"
"$BIN/lint-imports"
echo "lint: ruff check, ruff format, mypy and lint-imports passed"
