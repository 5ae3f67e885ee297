#!/usr/bin/env bash
# Checks that need a CUDA GPU, in one go:
#
#   bash scripts/gpu_check.sh [OUT_DIR] [STEPS]   # OUT_DIR: gpu-check; STEPS: "tests bench recurrent" (or kernels, profile)
#
# kernels    only the Triton kernels' tests, compiled (tests/test_onlstm_triton.py,
#            tests/test_relative_flash.py, tests/test_convolved_kernel.py, and
#            the candidates' tests/test_candidates.py):
#            test_kernels.log; "tests" includes them.  KERNEL_TESTS names other files.
# tests      tests/test_cuda.py: every benchmark architecture on the GPU against
#            the CPU (float32), in float16 and under fp16 autocast, the
#            fused-kernel counts, the ON-LSTM recurrence, fairseq-train /
#            fairseq-generate with --fp16 and --bf16 (the benchmark's rows
#            include the kernel comparisons: P-sdpa is P with the fused
#            attention's own gradient of the score bias);
#            tests/test_onlstm_triton.py, tests/test_relative_flash.py,
#            tests/test_convolved_kernel.py and tests/test_candidates.py (the
#            candidate kernels): the Triton kernels against the reference and
#            the explicit path, compiled;
#            tests/test_onlstm_cpp.py: the CPU's C++ cell built against this
#            (CUDA) torch; activation checkpointing and quant noise on the
#            recurrent layers (about 4 minutes on an H200).
# bench      fairseq-posattn-bench --device cuda --no-decode --repeats 20, every
#            row and the kernel comparisons (P-sdpa, R-sdpa, bilan-sdpa,
#            shawkeys-sdpa, shaw-explicit, struct-explicit, conv2d-triton) and the
#            candidates' rows (conv1d-triton, onlstm-san-persistent,
#            onlstm-san-graph: fairseq_posattn/kernels/candidates), in fp16 and bf16,
#            at the defaults (B=32, T=64) and at --batch 64 --length 64 (about
#            4,096 tokens a batch): bench_{fp16,bf16}_b{32,64}.{txt,json}.
#            BENCH_CONFIGS picks them (default "fp16:32 fp16:64 bf16:32 bf16:64"),
#            BENCH_ROWS the rows (comma-separated labels; default every row).
#            If a row fails (a Triton kernel that does not compile on this card),
#            the others are measured again without the Triton rows (conv2d-triton,
#            conv1d-triton, onlstm-san-persistent, onlstm-san-graph).
# recurrent  fairseq-posattn-bench-recurrent --device cuda --repeats 20 in
#            float32, fp16 and bf16 (the ON-LSTM layer: per-step kernels and the
#            candidates onlstm_persistent and onlstm_cuda_graphs; against cuDNN's LSTM):
#            bench_recurrent_{fp32,fp16,bf16}.{txt,json}; RECURRENT_PRECISIONS picks them.
#            If it fails, it runs again without the candidates (--kernels '').
# profile    fairseq-posattn-bench --device cuda --fp16 --profile ROW for the rows
#            above their targets (temp, bilan, conv1d, conv1d-triton, conv2d, shaw,
#            struct, onlstm-san, onlstm-san-graph, stock-deep): where an update's time
#            goes, on the CPU side and on the GPU: profile_ROW.txt.
#
# It needs a CUDA build of torch with this package installed (docs/setup.md,
# "GPU"); PYTHON names the interpreter (default python3). gpu.txt names the
# card, torch, CUDA and the commit; each step's output goes to OUT_DIR.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-gpu-check}"
STEPS="${2:-tests bench recurrent}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
export PYTHONUNBUFFERED=1

for step in $STEPS; do
    case "$step" in tests|kernels|bench|recurrent|profile) ;; *) echo "gpu_check.sh: unknown step '$step' (tests, kernels, bench, recurrent, profile)" >&2; exit 2 ;; esac
done

"$PYTHON" - <<'PY' | tee "$OUT/gpu.txt"
import subprocess
import torch, fairseq
assert torch.cuda.is_available(), "no CUDA device visible to torch"
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = ""
print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| cuDNN", torch.backends.cudnn.version(), "| fairseq", fairseq.__version__, "| commit", commit or "unknown")
PY
TRITON_TESTS="tests/test_onlstm_triton.py tests/test_relative_flash.py tests/test_convolved_kernel.py tests/test_candidates.py"
TRITON_ROWS="conv2d-triton conv1d-triton onlstm-san-persistent onlstm-san-graph"  # the bench rows on Triton kernels
status=0  # a failing test does not stop the benchmarks; the script's exit status reports it
for step in $STEPS; do
    echo "== gpu_check.sh: $step, from ${SECONDS}s"
    case "$step" in
    tests)
        # the CPU's C++ cell, built ahead as scripts/setup_env.sh does (fairseq-posattn-build-cell)
        "$PYTHON" -m fairseq_posattn.kernels.onlstm_cpp 2>&1 | tail -n 1 | tee "$OUT/build_cell.log" || status=1
        # shellcheck disable=SC2086  # a list of files
        "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_cuda.py $TRITON_TESTS tests/test_onlstm_cpp.py \
            "tests/test_standard_flags.py::test_activation_checkpointing_gives_the_same_gradients" \
            "tests/test_standard_flags.py::test_quant_noise_changes_recurrent_outputs_in_training_only" \
            2>&1 | tee "$OUT/test_cuda.log" || status=1
        ;;
    kernels)
        # shellcheck disable=SC2086  # a list of files
        "$PYTHON" -m pytest -q -p no:cacheprovider ${KERNEL_TESTS:-$TRITON_TESTS} 2>&1 | tee "$OUT/test_kernels.log" \
            || status=1
        ;;
    bench)
        rows="${BENCH_ROWS:-$("$PYTHON" -c 'from fairseq_posattn.bench.models import ROWS; print(",".join(r.label for r in ROWS))')}"
        for config in ${BENCH_CONFIGS:-fp16:32 fp16:64 bf16:32 bf16:64}; do
            precision="${config%:*}" batch="${config#*:}"
            name="bench_${precision}_b$batch"
            flags=(--device cuda --"$precision" --batch "$batch" --length 64 --no-decode --repeats 20 --json "$OUT/$name.json")
            if ! "$PYTHON" -m fairseq_posattn.bench.models "${flags[@]}" --rows "$rows" 2>&1 | tee "$OUT/$name.txt"; then
                status=1  # most likely a Triton kernel that does not compile here: the other rows still get measured
                fallback=()
                for row in ${rows//,/ }; do [[ " $TRITON_ROWS " == *" $row "* ]] || fallback+=("$row"); done
                "$PYTHON" -m fairseq_posattn.bench.models "${flags[@]}" --rows "$(IFS=,; echo "${fallback[*]}")" \
                    | tee -a "$OUT/$name.txt" || true
            fi
        done
        ;;
    recurrent)
        for precision in ${RECURRENT_PRECISIONS:-fp32 fp16 bf16}; do
            flags=(--device cuda --repeats 20 --json "$OUT/bench_recurrent_$precision.json")
            [[ "$precision" != fp32 ]] && flags+=(--"$precision")
            if ! "$PYTHON" -m fairseq_posattn.bench.recurrent "${flags[@]}" 2>&1 \
                    | tee "$OUT/bench_recurrent_$precision.txt"; then
                status=1
                "$PYTHON" -m fairseq_posattn.bench.recurrent "${flags[@]}" --kernels '' 2>&1 \
                    | tee -a "$OUT/bench_recurrent_$precision.txt" || true
            fi
        done
        ;;
    profile)
        for row in temp bilan conv1d conv1d-triton conv2d shaw struct onlstm-san onlstm-san-graph stock-deep; do
            "$PYTHON" -m fairseq_posattn.bench.models --device cuda --fp16 --profile "$row" > "$OUT/profile_$row.txt" 2>&1 \
                || status=1
        done
        ;;
    esac
done
echo "== gpu_check.sh: done at ${SECONDS}s"
exit "$status"
