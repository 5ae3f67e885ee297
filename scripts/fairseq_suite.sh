#!/usr/bin/env bash
# fairseq's own tests with and without this plugin imported (docs/reliability.md):
#
#   bash scripts/fairseq_suite.sh FAIRSEQ_CHECKOUT [OUT_DIR]     # default OUT_DIR: fairseq-suite
#
# FAIRSEQ_CHECKOUT is a checkout of fairseq at the installed version's tag
# (v0.12.3 for fairseq-fixed 0.12.3.1). Only its tests/ are used, copied to
# OUT_DIR/tests, so that the installed fairseq is what they test (run from the
# checkout, they would import its uncompiled sources). The unit and binary
# tests (tests/test_*.py) run twice in the environment of scripts/setup_env.sh:
# as they are, and with the plugin imported first (pytest -p fairseq_posattn,
# which installs the repairs of fairseq_posattn/compat). OUT_DIR gets pytest's
# JUnit reports without.xml and with.xml, their logs, and from them
# (scripts/fairseq_suite_compare.py) comparison.md: the counts, every test
# whose outcome differs and every failure with the plugin, each with its
# failure's last line; and outcomes.tsv: every test's outcome in both runs.
# TEST_WORKERS=N runs N pytest-xdist workers (default: one per core).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECKOUT="${1:?usage: bash scripts/fairseq_suite.sh FAIRSEQ_CHECKOUT [OUT_DIR]}"
OUT="${2:-fairseq-suite}"
[[ -f "$CHECKOUT/tests/test_binaries.py" ]] || {
    echo "fairseq_suite.sh: $CHECKOUT/tests/test_binaries.py is missing: give a checkout of fairseq's repository" >&2
    exit 2
}
VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
WORKERS="${TEST_WORKERS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
rm -rf "$OUT/tests"
cp -r "$CHECKOUT/tests" "$OUT/tests"
cd "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

for run in without with; do
    plugin=()
    [[ "$run" == with ]] && plugin=(-p fairseq_posattn)
    echo "[fairseq_suite] fairseq's tests $run the plugin ($WORKERS workers) -> $OUT/$run.log" >&2
    "$PY" -m pytest tests/test_*.py "${plugin[@]}" -n "$WORKERS" -p no:cacheprovider -q \
        --junitxml="$OUT/$run.xml" >"$OUT/$run.log" 2>&1 || true
    tail -n 1 "$OUT/$run.log" >&2
done

"$PY" "$REPO/scripts/fairseq_suite_compare.py" "$OUT/without.xml" "$OUT/with.xml" "$OUT"
