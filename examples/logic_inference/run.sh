#!/usr/bin/env bash
# Logical inference (Bowman et al. 2015) as in Hao et al. (2019), Sec. 3.3 and
# Fig. 1: train SAN, LSTM, ON-LSTM and the ON-LSTM + SAN hybrid (two hidden
# layers each) on the formulas with at most 6 operators, then print the
# accuracy by number of operators (1-12) and draw the figure.
#
#   bash examples/logic_inference/run.sh
#   DIM=64 MAX_UPDATE=1000 bash examples/logic_inference/run.sh   # a short CPU run
#
# Environment variables:
#   DATA=DIR        Bowman et al.'s train0..train12 and test0..test12 (required:
#                   github.com/sleepinyourhat/vector-entailment, propositionallogic/;
#                   no licence stated there: research use, cite Bowman et al. 2015)
#   WORK=DIR        checkpoints, logs, table.md, figure.png
#                   (default: examples/logic_inference/work)
#   ARCHS="..."     architectures, one column each
#                   (default: logic_san logic_lstm logic_onlstm logic_onlstm_san)
#   DIM=N           encoder and classifier width (default 128); FFN=N (default 2*DIM)
#   MAX_UPDATE=N    updates per model (default 20000, about 20 epochs)
#   BATCH=N         sentence pairs per update (default 128)
#   LR=X            Adam learning rate (default 1e-3)
#   SEEDS="1 2"     random seeds, one run each per architecture (default: 1); the
#                   table gives the mean over seeds and each seed
#   THREADS=N       torch threads (default: number of cores, at most 4)
#   EXTRA="..."     further fairseq-train flags for every model
#   EXPORT_DIR=DIR  copy each run's training summary RUN.train.json and test
#                   counts RUN.counts.json there as soon as it is done, and at
#                   the end table.md, counts.json and figure.png
#   EVALUATE=0      train only; TRAIN=0 evaluate only. Each run is evaluated
#                   right after its training (WORK/counts/RUN.json) and the
#                   table is made from the counts of all ARCHS x SEEDS runs, so
#                   two invocations with other SEEDS can run side by side on
#                   two cores, and a later TRAIN=0 run makes the whole table
# A run is ARCH.seedN. It records its settings (commit, seed, the training
# command) in WORK/checkpoints/RUN/settings.txt and refuses a directory that
# holds a run of other settings; a run whose checkpoint_last.pt already reached
# MAX_UPDATE is not trained again (fairseq-train resumes from it and stops).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DATA="${DATA:-}"
if [[ -z "$DATA" ]]; then
    echo "[logic_inference] ERROR: set DATA=<directory with train0..train12, test0..test12>: the" \
        "propositional-logic data of Bowman et al. (2015), folder propositionallogic/ of" \
        "github.com/sleepinyourhat/vector-entailment (no licence stated: research use)" >&2
    exit 1
fi
WORK="${WORK:-$REPO/examples/logic_inference/work}"
ARCHS="${ARCHS:-logic_san logic_lstm logic_onlstm logic_onlstm_san}"
DIM="${DIM:-128}"
FFN="${FFN:-$(( 2 * DIM ))}"
MAX_UPDATE="${MAX_UPDATE:-20000}"
BATCH="${BATCH:-128}"
LR="${LR:-1e-3}"
SEEDS="${SEEDS:-${SEED:-1}}"
EXPORT_DIR="${EXPORT_DIR:-}"
TRAIN="${TRAIN:-1}" EVALUATE="${EVALUATE:-1}"
EXTRA="${EXTRA:-}"
NPROC="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
THREADS="${THREADS:-$(( NPROC < 4 ? NPROC : 4 ))}"
VENV="${VENV:-$REPO/.venv}"
export PATH="$VENV/bin:$PATH" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

say() { echo "[logic_inference] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
source "$REPO/examples/common/run_settings.sh"
trap 'say "ERROR: command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

if [[ ! -f "$DATA/train0" || ! -f "$DATA/test12" ]]; then
    say "ERROR: $DATA lacks Bowman et al.'s train0..train12/test0..test12; set DATA=DIR"
    exit 2
fi
mkdir -p "$WORK/logs" "$WORK/counts"
[[ -z "$EXPORT_DIR" ]] || mkdir -p "$EXPORT_DIR"

label() {
    case "$1" in
        logic_san) echo SAN ;;
        logic_lstm) echo LSTM ;;
        logic_onlstm) echo ON-LSTM ;;
        logic_onlstm_san) echo ON-LSTM+SAN ;;
        *) echo "$1" ;;
    esac
}

COUNTS=()
for ARCH in $ARCHS; do
  for SEED in $SEEDS; do
    RUN="$ARCH.seed$SEED"
    SAVE="$WORK/checkpoints/$RUN"
    LOG="$WORK/logs/$RUN.log"
    COUNTS+=("$WORK/counts/$RUN.json")
    if [[ "$TRAIN" == 1 ]]; then
        # shellcheck disable=SC2206
        COMMAND=(fairseq-train "$DATA" --user-dir "$REPO/fairseq_posattn"
            --task logic_inference --max-train-operators 6 --arch "$ARCH"
            --encoder-embed-dim "$DIM" --encoder-ffn-embed-dim "$FFN"
            --criterion sentence_prediction --optimizer adam --lr "$LR" --clip-norm 1.0
            --batch-size "$BATCH" --max-update "$MAX_UPDATE" --seed "$SEED"
            --best-checkpoint-metric accuracy --maximize-best-checkpoint-metric
            --no-epoch-checkpoints --num-workers 0 --no-progress-bar --log-interval 100
            --log-format json --save-dir "$SAVE" $EXTRA)
        check_run_settings "$SAVE" "$(printf '%s\n' "commit=$(code_version)" "seed=$SEED" \
            "command=$(printf '%q ' "${COMMAND[@]}")")" "threads=$THREADS"
        say "training $RUN ($MAX_UPDATE updates, d=$DIM, $THREADS thread(s)) -> $SAVE"
        mark_run_start "$SAVE" logic_inference >>"$LOG"
        "${COMMAND[@]}" >>"$LOG" 2>&1
        # the last validation is on held-out training formulas
        say "  $RUN: $(fairseq-posattn-train-log --log "$LOG" --settings "$SAVE/settings.txt" \
            --out "$WORK/logs/$RUN.train.json")"
        [[ -z "$EXPORT_DIR" ]] || cp "$WORK/logs/$RUN.train.json" "$EXPORT_DIR/"
    fi
    [[ "$EVALUATE" == 1 ]] || continue
    if [[ ! "$WORK/counts/$RUN.json" -nt "$SAVE/checkpoint_best.pt" ]]; then
        say "evaluating $RUN on test1 ... test12"
        fairseq-posattn-logic-report "$DATA" --checkpoint "$(label "$ARCH")=$SAVE/checkpoint_best.pt" \
            --counts-out "$WORK/counts/$RUN.json" >/dev/null
    fi
    [[ -z "$EXPORT_DIR" ]] || cp "$WORK/counts/$RUN.json" "$EXPORT_DIR/$RUN.counts.json"
  done
done

[[ "$EVALUATE" == 1 ]] || exit 0
fairseq-posattn-logic-report --counts "${COUNTS[@]}" --counts-out "$WORK/counts.json" \
    --plot "$WORK/figure.png" | tee "$WORK/table.md"
if [[ -n "$EXPORT_DIR" ]]; then
    cp "$WORK/table.md" "$WORK/counts.json" "$WORK/figure.png" "$EXPORT_DIR/"
    say "copied the table, counts and figure to $EXPORT_DIR"
fi
