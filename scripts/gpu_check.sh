#!/usr/bin/env bash
# Checks that need a CUDA GPU, in one go (a few minutes on one GPU):
#
#   bash scripts/gpu_check.sh [OUT_DIR]       # default OUT_DIR: gpu-check
#
# 1. tests/test_cuda.py: every benchmark architecture on the GPU against the
#    CPU (float32), in float16 and under fp16 autocast, the fused-kernel counts,
#    the ON-LSTM recurrence, fairseq-train / fairseq-generate with --fp16 and --bf16;
#    tests/test_onlstm_triton.py: the ON-LSTM's fused Triton steps against the
#    reference, compiled; tests/test_relative_flash.py: the Triton kernel of Shaw
#    relative keys and values against the explicit path, compiled;
#    tests/test_onlstm_cpp.py: the CPU's C++ cell built
#    against this (CUDA) torch by fairseq-posattn-build-cell; tests/test_standard_flags.py -k cuda:
#    activation checkpointing, offloading and quant noise on the recurrent layers;
# 2. fairseq-posattn-bench --device cuda, --fp16 and float32 (every row);
# 3. fairseq-posattn-bench-recurrent --device cuda (ON-LSTM layer, fused step and loop, against cuDNN's LSTM).
#
# It needs a CUDA build of torch with this package installed (docs/setup.md,
# "GPU"); PYTHON names the interpreter (default python3). Each step's output
# is written to OUT_DIR (gpu.txt, test_cuda.log, bench_cuda_{fp32,fp16}.{txt,json},
# bench_recurrent_cuda.{txt,json}).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-gpu-check}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
export PYTHONUNBUFFERED=1

"$PYTHON" - <<'PY' | tee "$OUT/gpu.txt"
import torch, fairseq
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| fairseq", fairseq.__version__)
PY
status=0  # a failing test does not stop the benchmarks; the script's exit status reports it
# the CPU's C++ cell, built ahead as scripts/setup_env.sh does (fairseq-posattn-build-cell)
"$PYTHON" -m fairseq_posattn.modules.onlstm.cpu_cell 2>&1 | tail -n 1 | tee "$OUT/build_cell.log" || status=1
"$PYTHON" -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_onlstm_triton.py tests/test_relative_flash.py \
    tests/test_onlstm_cpp.py \
    "tests/test_standard_flags.py::test_activation_checkpointing_gives_the_same_gradients" \
    "tests/test_standard_flags.py::test_quant_noise_changes_recurrent_outputs_in_training_only" \
    2>&1 | tee "$OUT/test_cuda.log" || status=1
for precision in fp16 fp32; do  # fp16 first: what a GPU user trains with
    flags=(--device cuda --repeats 20 --json "$OUT/bench_cuda_$precision.json")
    [[ "$precision" == fp16 ]] && flags+=(--fp16)
    "$PYTHON" -m fairseq_posattn.bench.models "${flags[@]}" | tee "$OUT/bench_cuda_$precision.txt"
done
"$PYTHON" -m fairseq_posattn.bench.recurrent --device cuda --repeats 20 \
    --json "$OUT/bench_recurrent_cuda.json" | tee "$OUT/bench_recurrent_cuda.txt"
exit "$status"
