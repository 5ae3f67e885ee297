#!/usr/bin/env bash
# Set up (or reuse) the virtual environment and run the test suite.
#
#   bash scripts/test.sh                 # all tests
#   bash scripts/test.sh -k toy -x       # extra arguments go to pytest
#
# VENV, PYTHON and TORCH_SPEC are passed on to scripts/setup_env.sh.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/scripts/setup_env.sh"
VENV="${VENV:-$REPO/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac

cd "$REPO"
echo "[test] $VENV/bin/python -m pytest tests $*" >&2
exec "$VENV/bin/python" -m pytest tests "$@"
