#!/usr/bin/env bash
# Set up (or reuse) the virtual environment and run the test suite.
#
#   bash scripts/test.sh                 # all tests
#   bash scripts/test.sh -k toy -x       # extra arguments go to pytest
#
# The tests run in TEST_WORKERS parallel pytest-xdist workers (default: one
# per core; 1 runs them in this process).  --dist worksteal hands each worker
# a contiguous run of tests and lets an idle worker take half of a busy one's
# rest, so the long recipe tests do not queue behind one another.
# VENV, PYTHON and TORCH_SPEC are passed on to scripts/setup_env.sh.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/scripts/setup_env.sh"
VENV="${VENV:-$REPO/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac

WORKERS="${TEST_WORKERS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}"
PARALLEL=()
[[ "$WORKERS" -le 1 ]] || PARALLEL=(-n "$WORKERS" --dist worksteal)

cd "$REPO"
echo "[test] $VENV/bin/python -m pytest tests ${PARALLEL[*]} $*" >&2
exec "$VENV/bin/python" -m pytest tests "${PARALLEL[@]}" "$@"
