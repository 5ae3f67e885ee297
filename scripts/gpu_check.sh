#!/usr/bin/env bash
# The measurements that need a CUDA GPU, in one prepared run (the exact device
# call, wheels included: docs/results/benchmarks/GPU_RUN.md):
#
#   bash scripts/gpu_check.sh OUT_DIR [STEPS]   # STEPS: "wmt recurrent default kernels" (the default), tests, profile
#
# The steps run in the order given (the default's is their order of value),
# each command under `timeout`, its budget cut to what is left of DEADLINE
# seconds (default 500) since the script started; a command the deadline
# leaves no 30 s is skipped. Every output is written as it comes, so a run
# cut short still leaves the figures of the commands that finished.
#
# wmt        fairseq-posattn-bench --config wmt (B=256 x T=64, 16,384 tokens;
#            every row again at half the batch where the GPU runs out of memory)
#            --no-decode --repeats $REPEATS, fp16 then bf16, the rows BENCH_ROWS
#            (default: every row with a target, posattn-off, and the candidates
#            conv1d-triton, onlstm-san-persistent, onlstm-san-graph; stock and
#            stock-deep come as baselines): bench_wmt_{fp16,bf16}.{txt,json}
# recurrent  fairseq-posattn-bench-recurrent --unidirectional --batch 128 (the
#            shape where cuDNN takes its persistent LSTM kernel in fp16; the
#            run names the kernels that ran), the ON-LSTM layer on the per-step
#            kernels and on each candidate, fp16 then bf16:
#            bench_recurrent_{fp16,bf16}.{txt,json}
# default    the wmt step at --config default (B=32 x T=64): bench_default_{fp16,bf16}.*
# kernels    the Triton kernels' tests, compiled: test_kernels.log
# tests      the whole CUDA test step (a run of its own, on the final commit;
#            about 5 minutes on an H100 or H200: give it DEADLINE=540):
#            tests/test_cuda.py, the kernels' tests, the C++ cell built against
#            this torch, activation checkpointing and quant noise on the
#            recurrent layers: build_cell.log, test_cuda.log
# profile    fairseq-posattn-bench --config wmt --fp16 --profile ROW for each of
#            PROFILE_ROWS (the misses verdict.txt names): profile_ROW.txt
#
# Then, whatever ran: verdict.txt (python -m fairseq_posattn.bench.verdict OUT_DIR:
# the candidates' verdicts and the targets table). gpu.txt names the card,
# torch, CUDA, cuDNN and the commit; commands.txt each command, when it
# started, how long it took and its exit status. The outputs are committed
# under docs/results/benchmarks/<gpu>/<commit>/.
#
# Time budget (an H100; REPEATS=7, a repeat at least 200 ms of K updates):
#   one bench config: 16 rows x 7 repeats x (0.2 s train + 0.2 s infer) = 45 s,
#     + calibrating K (two timed blocks per row and phase, ~0.3 s each: 20 s)
#     + building and warming up 16 models, then their peak memory (~1 s each
#       for each: 30 s) + start-up and Triton's compiles (~20 s)  = ~115 s;
#   one recurrent run: 6 rows x 7 x 0.4 s = 17 s + calibration 5 s + start-up 20 s = ~40 s;
#   wmt 2 x 115 + recurrent 2 x 40 + default 2 x 115 + kernels ~100 = ~640 s:
#   DEADLINE=420 (GPU_RUN.md's measuring call, which leaves `tests` its 5 minutes
#   of a session's 15) keeps wmt and recurrent whole and cuts default and kernels
#   (commands.txt says so); they go into a later call.
#
# It needs a CUDA build of torch with this package importable (docs/setup.md,
# "GPU"); PYTHON names the interpreter (default python3).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-gpu-check}"
STEPS="${2:-wmt recurrent default kernels}"
PYTHON="${PYTHON:-python3}"
DEADLINE="${DEADLINE:-500}"
REPEATS="${REPEATS:-7}"
BENCH_ROWS="${BENCH_ROWS:-posattn-off,P,R,PR,temp,conv1d,conv2d,shaw,bilan,struct,onlstm-san,conv1d-triton,onlstm-san-persistent,onlstm-san-graph}"
PROFILE_ROWS="${PROFILE_ROWS:-temp,bilan,conv1d,conv2d,shaw,struct,onlstm-san}"
KERNEL_TESTS="tests/test_onlstm_triton.py tests/test_relative_flash.py tests/test_convolved_kernel.py tests/test_candidates.py"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
export PYTHONUNBUFFERED=1

for step in $STEPS; do
    case "$step" in wmt|recurrent|default|kernels|tests|profile) ;; *)
        echo "gpu_check.sh: unknown step '$step' (wmt, recurrent, default, kernels, tests, profile)" >&2; exit 2 ;;
    esac
done

"$PYTHON" - <<'PY' | tee "$OUT/gpu.txt"
import subprocess
import torch, fairseq
assert torch.cuda.is_available(), "no CUDA device visible to torch"
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| cuDNN", torch.backends.cudnn.version(), "| fairseq", fairseq.__version__, "| commit", commit or "unknown")
PY
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1

status=0  # a failing command does not stop the others; the script's exit status reports it
# timed NAME BUDGET COMMAND...: the command under timeout, its output in OUT/NAME (and the log), its line in commands.txt
timed() {
    local name="$1" budget="$2" left=$((DEADLINE - SECONDS)) start=$SECONDS rc
    shift 2
    if ((left < 30)); then
        echo "$name: skipped, ${left}s left of DEADLINE=${DEADLINE}s: $*" | tee -a "$OUT/commands.txt"
        status=1
        return
    fi
    ((budget > left)) && budget=$left
    echo "== gpu_check.sh: $name from ${start}s, budget ${budget}s: $*"
    timeout "$budget" "$@" 2>&1 | tee "$OUT/$name"
    rc=${PIPESTATUS[0]}
    echo "$name: from ${start}s, $((SECONDS - start))s, exit $rc$( ((rc == 124)) && echo ' (budget reached)'): $*" \
        >> "$OUT/commands.txt"
    ((rc == 0)) || status=1
}

bench() {  # bench CONFIG PRECISION BUDGET
    timed "bench_$1_$2.txt" "$3" "$PYTHON" -m fairseq_posattn.bench.models --device cuda --config "$1" --"$2" \
        --no-decode --repeats "$REPEATS" --rows "$BENCH_ROWS" --json "$OUT/bench_$1_$2.json"
}

for step in $STEPS; do
    case "$step" in
    wmt) bench wmt fp16 150; bench wmt bf16 130 ;;
    default) bench default fp16 110; bench default bf16 100 ;;
    recurrent)
        for precision in fp16 bf16; do
            timed "bench_recurrent_$precision.txt" 60 "$PYTHON" -m fairseq_posattn.bench.recurrent --device cuda \
                --"$precision" --unidirectional --batch 128 --repeats "$REPEATS" --json "$OUT/bench_recurrent_$precision.json"
        done
        ;;
    kernels)
        # shellcheck disable=SC2086  # a list of files
        timed test_kernels.log 150 "$PYTHON" -m pytest -q -p no:cacheprovider $KERNEL_TESTS
        ;;
    tests)
        # the CPU's C++ cell, built ahead as scripts/setup_env.sh does (fairseq-posattn-build-cell)
        timed build_cell.log 120 "$PYTHON" -m fairseq_posattn.kernels.onlstm_cpp
        # shellcheck disable=SC2086  # a list of files
        timed test_cuda.log 540 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_cuda.py $KERNEL_TESTS \
            tests/test_onlstm_cpp.py \
            "tests/test_standard_flags.py::test_activation_checkpointing_gives_the_same_gradients" \
            "tests/test_standard_flags.py::test_quant_noise_changes_recurrent_outputs_in_training_only"
        ;;
    profile)
        for row in ${PROFILE_ROWS//,/ }; do
            timed "profile_$row.txt" 40 "$PYTHON" -m fairseq_posattn.bench.models --device cuda --config wmt --fp16 \
                --profile "$row"
        done
        ;;
    esac
done
if compgen -G "$OUT/bench_*.json" > /dev/null; then
    DEADLINE=$((SECONDS + 60)) timed verdict.txt 30 "$PYTHON" -m fairseq_posattn.bench.verdict "$OUT"
fi
echo "== gpu_check.sh: done at ${SECONDS}s, exit $status"
exit "$status"
