#!/usr/bin/env bash
# The test command (README, .ci/run), tier by tier, each timed:
#   unit         no engine: simulations through the shipped code, fakes, committed fixtures,
#                and the integration tests marked engine_free (fake workers and servers, real
#                vLLM imported at most); in one process per core (pytest-xdist)
#   integration  real vLLM engines and servers, one test at a time: they use every core and
#                some of them time what they run, so nothing runs beside them (run beside the
#                unit tier at the lowest priority, they took 22 min instead of 17 and two
#                timing checks failed)
# The slow tier (the Ray executor, sweeps, a bisect without a slowdown) is left out, as in any
# default pytest run here; run it with `.venv/bin/python -m pytest -m slow`. Extra arguments
# go to both pytest runs. The closing line gives each tier's count and time.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
WORKERS=${SPECBENCH_TEST_WORKERS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
summary=""

counts() {  # pytest's closing counts ("12 passed, 1 deselected") from its output
  grep -E "^=+ .*(passed|failed|error|deselected|no tests ran).* in [0-9.]+s" "$1" | tail -1 \
    | sed -E 's/^=+ //; s/ in [0-9.]+s.*//'
}

clock() { echo "$(($1 / 60)) min $(($1 % 60)) s"; }

tier() {  # tier NAME PYTEST-ARGS...: run it, print its line, remember it
  local name=$1 start=$SECONDS rc
  shift
  "$PY" -m pytest "$@" 2>&1 | tee "$work/$name.log"
  rc=${PIPESTATUS[0]}
  echo "tier $name: $(counts "$work/$name.log") in $(clock $((SECONDS - start))) (exit $rc)"
  summary="$summary$name $(counts "$work/$name.log") in $(clock $((SECONDS - start))); "
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=$rc  # 5: nothing selected in this tier
}

total=$SECONDS
tier unit tests/unit tests/integration -m "not slow and (not integration or engine_free)" \
  -n "$WORKERS" "$@"
tier integration tests/integration -m "not slow and not engine_free" "$@"
echo "tests: $summary$(clock $((SECONDS - total))) in all (exit $status)"
exit "$status"
