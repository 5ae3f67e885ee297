#!/usr/bin/env bash
# PoS tagging on UD treebanks as in Dufter et al. (2020), Table 2: every
# variant x seed is trained with fairseq-train (task pos_tagging, criterion
# tagging_cross_entropy, RMSprop lr 1e-3, batches of 32 pieces of at most 60
# words, early stopping on dev accuracy), its best checkpoint tags the test
# split; then a Markdown table of mean +- std over seeds per variant (test
# accuracy on all / OOV / ambiguous words) and, per treebank, the dev-accuracy
# learning curves of the first seed (fairseq-posattn-plot-curves).
#
#   bash examples/pos_tagging/run.sh
#   TREEBANKS="UD_Afrikaans-AfriBooms UD_Hungarian-Szeged" VARIANTS="pe_add p r conv2d" \
#       MAX_EPOCH=15 bash examples/pos_tagging/run.sh
#
# Environment variables:
#   UD=DIR          treebank folders UD_<Language>-<Treebank> with the *-ud-{train,dev,test}.conllu
#                   files (required: universaldependencies.org; licences per treebank)
#   TREEBANKS="..." folders under $UD (default: UD_Afrikaans-AfriBooms)
#   VARIANTS="..."  rows of Table 2 (default: all): san (no positions), pe_add,
#                   pe_con, p, r, pr, temp, conv1d, conv2d; the archs are
#                   posattn_tagger (pe_add) and posattn_tagger_<variant>
#   SEEDS="1 2 3"   random seeds (the paper reports 3)
#   MAX_EPOCH=100   epochs at most; PATIENCE=3 validations without a better dev
#                   accuracy stop a run (the authors' early stopping)
#   WORK=DIR        output (default examples/pos_tagging/work): WORK/<treebank>/
#                   <variant>/seed<N>/{train.log,checkpoint_best.pt,test.json}
#   THREADS=1       torch threads per run; JOBS=1 runs at a time
#   EXTRA="..."     more fairseq-train arguments (e.g. "--pretrained-word-vectors
#                   cc.af.300.vec", "--tag-column xpos")
#   EXPORT_DIR=DIR  copy each finished run's test.json and training summary
#                   train.json (updates, wall time, dev accuracy per epoch, the
#                   settings) to DIR/<treebank>/<variant>/seed<N>/: small files
#                   to commit; fairseq-posattn-pos-table DIR makes the table
# Each run records its settings (commit, seed, treebank, the training command)
# in settings.txt and refuses a directory that holds a run of other settings.
# A run whose test.json exists is skipped, so re-running resumes a sweep.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
UD="${UD:-}"
if [[ -z "$UD" ]]; then
    echo "[pos_tagging] ERROR: set UD=<directory of UD treebank folders, e.g. UD_Afrikaans-AfriBooms>:" \
        "Universal Dependencies releases (universaldependencies.org, or the treebanks' GitHub" \
        "repositories; each treebank has its own licence, several are non-commercial)" >&2
    exit 1
fi
TREEBANKS="${TREEBANKS:-UD_Afrikaans-AfriBooms}"
VARIANTS="${VARIANTS:-san pe_add pe_con p r pr temp conv1d conv2d}"
SEEDS="${SEEDS:-1 2 3}"
MAX_EPOCH="${MAX_EPOCH:-100}"
PATIENCE="${PATIENCE:-3}"
WORK="${WORK:-$REPO/examples/pos_tagging/work}"
THREADS="${THREADS:-1}"
JOBS="${JOBS:-1}"
EXPORT_DIR="${EXPORT_DIR:-}"
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
PY="${VENV:-$REPO/.venv}/bin"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

say() { echo "[pos_tagging] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
source "$REPO/examples/common/run_settings.sh"

arch_of() {
    case "$1" in
        pe_add) echo posattn_tagger ;;
        san|pe_con|p|r|pr|temp|conv1d|conv2d) echo "posattn_tagger_$1" ;;
        *) say "ERROR: unknown variant '$1'"; exit 2 ;;
    esac
}

train_and_score() {  # treebank variant seed
    local out="$WORK/$1/$2/seed$3"
    if [[ ! -f "$out/test.json" ]]; then
        local command=(
            "$PY/fairseq-train" "$UD/$1" --user-dir "$REPO/fairseq_posattn"
            --task pos_tagging --arch "$(arch_of "$2")" --criterion tagging_cross_entropy
            --optimizer rmsprop --lr 1e-3 --batch-size 32 --max-epoch "$MAX_EPOCH"
            --patience "$PATIENCE" --best-checkpoint-metric accuracy
            --maximize-best-checkpoint-metric --no-epoch-checkpoints --no-last-checkpoints
            --no-save-optimizer-state --seed "$3" --save-dir "$out" --cpu --num-workers 0
            --log-format json --log-interval 20 "${EXTRA_ARGS[@]}"
        )
        check_run_settings "$out" "$(printf '%s\n' "commit=$(code_version)" "seed=$3" \
            "treebank=$1" "command=$(printf '%q ' "${command[@]}")")" "threads=$THREADS"
        local start=$SECONDS
        mark_run_start "$out" pos_tagging >"$out/train.log"  # a fresh training: no last checkpoint
        "${command[@]}" >>"$out/train.log" 2>&1 \
            || { say "ERROR: training failed, see $out/train.log"; return 1; }
        "$PY/python" -m fairseq_posattn.evaluation.pos_tagging --path "$out/checkpoint_best.pt" \
            --split test --json "$out/test.json.tmp" --output "$out/test.tags"
        "$PY/fairseq-posattn-train-log" --log "$out/train.log" --settings "$out/settings.txt" \
            --out "$out/train.json" >/dev/null
        mv "$out/test.json.tmp" "$out/test.json"
        say "$1 $2 seed $3: $((SECONDS - start)) s"
    fi
    if [[ -n "$EXPORT_DIR" ]]; then
        mkdir -p "$EXPORT_DIR/$1/$2/seed$3"
        cp "$out/test.json" "$out/train.json" "$EXPORT_DIR/$1/$2/seed$3/"
    fi
}

for tb in $TREEBANKS; do
    [[ -d "$UD/$tb" ]] || { say "ERROR: no treebank $UD/$tb (set UD=DIR)"; exit 2; }
done
running=0
for tb in $TREEBANKS; do
    for variant in $VARIANTS; do
        arch_of "$variant" > /dev/null
        for seed in $SEEDS; do
            train_and_score "$tb" "$variant" "$seed" &
            running=$((running + 1))
            if (( running >= JOBS )); then wait -n; running=$((running - 1)); fi
        done
    done
done
while (( running > 0 )); do wait -n; running=$((running - 1)); done

"$PY/fairseq-posattn-pos-table" "$WORK" | tee "$WORK/results.md"
first_seed="${SEEDS%% *}"
for tb in $TREEBANKS; do
    logs=() labels=()
    for variant in $VARIANTS; do
        logs+=("$WORK/$tb/$variant/seed$first_seed/train.log") labels+=(--label "$variant")
    done
    "$PY/fairseq-posattn-plot-curves" "${logs[@]}" "${labels[@]}" \
        --metric accuracy --out "$WORK/$tb/curves.png"
done
