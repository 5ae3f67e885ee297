#!/usr/bin/env bash
# Set up and test the package under each installed Python 3.10-3.13, one at a time.
#
#   nice -n 19 bash scripts/python_matrix.sh [OUT]
#
# For each interpreter (python3.X on the PATH, or a path) that runs, it runs
# scripts/setup_env.sh (PYTHON=python3.X, a fresh VENV under MATRIX_DIR), then
# pytest in one process on a fast subset: the attention, structure and
# recurrence unit tests and fairseq's repairs (MATRIX_UNIT), and one
# fairseq-train / -generate / -interactive run of the ON-LSTM hybrid
# (MATRIX_END_TO_END). It writes one line per Python, then each step's last
# log lines, to OUT (default docs/results/python_matrix/<date>.txt); the full
# logs stay in MATRIX_DIR.
#
# Environment variables:
#   PYTHONS      interpreters to try, names or paths
#                (default: python3.10 python3.11 python3.12 python3.13)
#   MATRIX_DIR   venvs and logs          (default: /tmp/fairseq_posattn_matrix)
#   KEEP_VENVS=1 keep each venv after its tests (default: removed, they hold a torch each)
#   TORCH_SPEC, TRITON_SPEC are passed on to scripts/setup_env.sh.
# Exit status: 0 when every Python found set up and passed, 1 otherwise.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$REPO/docs/results/python_matrix/$(date -u +%Y-%m-%d).txt}"
PYTHONS="${PYTHONS:-python3.10 python3.11 python3.12 python3.13}"
MATRIX_DIR="${MATRIX_DIR:-/tmp/fairseq_posattn_matrix}"
MATRIX_UNIT=(tests/test_attention.py tests/test_structure.py tests/test_recurrent.py
             tests/test_compat_last_batch.py tests/test_compat_hydra.py tests/test_compat_bf16.py
             -m "not slow")
MATRIX_END_TO_END=("tests/test_cli_end_to_end.py::test_train_generate_interactive[onlstm_san_transformer]")

mkdir -p "$MATRIX_DIR" "$(dirname "$OUT")"
SUMMARY=()
DETAILS="$MATRIX_DIR/details.txt"
: >"$DETAILS"
FAILED=0

# one step: its command, its log, its wall time; prints "ok 123 s" or "FAILED (exit N) 123 s"
step() {
    local log="$1"; shift
    local start=$SECONDS
    "$@" >"$log" 2>&1
    local code=$?
    local took=$((SECONDS - start))
    if [[ $code == 0 ]]; then echo "ok ${took} s"; else echo "FAILED (exit $code) ${took} s"; fi
    return $code
}

# pytest's closing line without its rule, e.g. "300 passed, 25 deselected in 98.31s"
last_line() { tail -1 "$1" | tr -d '=' | sed 's/^ *//; s/ *$//'; }

HEADER="$(
    echo "# scripts/python_matrix.sh, started $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- . || echo ' (with uncommitted changes)')"
    echo "# host: $(uname -sm), $(getconf _NPROCESSORS_ONLN) cores; pytest in one process"
    echo "# unit subset: ${MATRIX_UNIT[*]}"
    echo "# end to end:  ${MATRIX_END_TO_END[*]}"
)"

for python in $PYTHONS; do
    if ! version="$("$python" -c 'import platform; print(platform.python_version())' 2>/dev/null)"; then
        SUMMARY+=("$python: not installed (or does not run)")
        continue
    fi
    venv="$MATRIX_DIR/venv-$version"
    logs="$MATRIX_DIR/logs-$version"
    rm -rf "$venv" "$logs"
    mkdir -p "$logs"
    echo "[python_matrix] $python ($version): set-up into $venv" >&2
    env=(env PYTHON="$python" VENV="$venv" FAIRSEQ_POSATTN_CELL_DIR="$venv/onlstm_cell")
    setup="$(step "$logs/setup.log" "${env[@]}" bash "$REPO/scripts/setup_env.sh")"
    line="$python ($version): set-up $setup"
    if [[ $setup == ok* ]]; then
        versions="$("$venv/bin/python" -c 'import torch, fairseq; print("torch", torch.__version__, "fairseq", fairseq.__version__)' 2>&1 | tail -1)"
        echo "[python_matrix] $python: tests" >&2
        pytest=("${env[@]}" "$venv/bin/python" -m pytest -p no:cacheprovider)
        unit="$(cd "$REPO" && step "$logs/unit.log" "${pytest[@]}" "${MATRIX_UNIT[@]}")"
        e2e="$(cd "$REPO" && step "$logs/end_to_end.log" "${pytest[@]}" "${MATRIX_END_TO_END[@]}")"
        line+="; $versions; unit subset $unit ($(last_line "$logs/unit.log"))"
        line+="; end to end $e2e ($(last_line "$logs/end_to_end.log"))"
        [[ $unit == ok* && $e2e == ok* ]] || FAILED=1
    else
        FAILED=1
    fi
    SUMMARY+=("$line")
    {
        echo
        echo "## $line"
        for log in "$logs"/*.log; do
            echo "### $(basename "$log"), last lines"
            tail -15 "$log"
        done
    } >>"$DETAILS"
    [[ "${KEEP_VENVS:-0}" == 1 ]] || rm -rf "$venv"
done

{
    echo "$HEADER"
    echo
    echo "## Summary"
    printf '%s\n' "${SUMMARY[@]}"
    cat "$DETAILS"
} >"$OUT"
printf '%s\n' "${SUMMARY[@]}" >&2
echo "[python_matrix] written: $OUT" >&2
exit $FAILED
