#!/usr/bin/env bash
# Quickstart: a few minutes on a laptop CPU, no downloads besides the Python packages.
#
#   bash examples/quickstart/run.sh
#
# 1. sets up the virtual environment (scripts/setup_env.sh; a no-op when current)
# 2. writes the synthetic English -> German-like toy corpus (with CoNLL-U trees
#    of the source side) made by fairseq_posattn.data.toy_corpus
# 3. fairseq-preprocess with a joined dictionary (word level: the vocabulary
#    is ~200 types, so no BPE is needed)
# 4. fairseq-train --user-dir fairseq_posattn --arch $ARCH, small model
# 5. fairseq-generate (beam 4) on the test split, BLEU of the detokenized
#    hypotheses against the detokenized references with sacrebleu
# 6. fairseq-interactive on two raw sentences
#
# Environment variables:
#   WORK=DIR          working directory (default examples/quickstart/work)
#   ARCH=NAME         architecture (default transformer_posattn)
#   MAX_UPDATE=N      training updates (default 800)
#   THREADS=N         torch threads (default: number of cores, at most 4)
#   RETRAIN=1         delete this arch's checkpoints and train again
#   TRAIN_SIZE=N      training sentences (default 6000)
# Re-running is cheap: the corpus, the binarized data and a model trained for
# MAX_UPDATE updates are reused (a marker file in the checkpoint directory);
# with a larger MAX_UPDATE fairseq-train resumes from checkpoint_last.pt and
# continues; generation and BLEU always run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${WORK:-$REPO/examples/quickstart/work}"
case "$WORK" in /*) ;; *) WORK="$PWD/$WORK" ;; esac
ARCH="${ARCH:-transformer_posattn}"
MAX_UPDATE="${MAX_UPDATE:-800}"
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
BIN="$WORK/data-bin"
CKPT="$WORK/checkpoints/$ARCH"
mkdir -p "$WORK"

# --- 1. corpus ---------------------------------------------------------------
if [[ ! -f "$RAW/.done-$TRAIN_SIZE" ]]; then
    say "writing the toy corpus ($TRAIN_SIZE/300/300 sentences) to $RAW"
    rm -rf "$RAW" "$BIN"
    fairseq-posattn-toy-corpus --out "$RAW" --train "$TRAIN_SIZE" --valid 300 --test 300 \
        --seed "$SEED" --src-lang en --tgt-lang de
    touch "$RAW/.done-$TRAIN_SIZE"
else
    say "reusing the corpus in $RAW"
fi

# --- 2. binarize -------------------------------------------------------------
if [[ ! -f "$BIN/.done" ]]; then
    say "fairseq-preprocess -> $BIN"
    rm -rf "$BIN"
    fairseq-preprocess --source-lang en --target-lang de \
        --trainpref "$RAW/train" --validpref "$RAW/valid" --testpref "$RAW/test" \
        --destdir "$BIN" --joined-dictionary --workers 1 >"$WORK/preprocess.log" 2>&1
    touch "$BIN/.done"
else
    say "reusing the binarized data in $BIN"
fi

# --- 3. train ----------------------------------------------------------------
if [[ "${RETRAIN:-0}" == 1 ]]; then
    say "RETRAIN=1: removing $CKPT"
    rm -rf "$CKPT"
fi
mkdir -p "$CKPT"
if [[ -f "$CKPT/.done-$MAX_UPDATE" && -f "$CKPT/checkpoint_best.pt" ]]; then
    say "reusing $CKPT (trained for $MAX_UPDATE updates; RETRAIN=1 to train again)"
else
    say "fairseq-train --arch $ARCH ($MAX_UPDATE updates, $THREADS threads; log: $CKPT/train.log)"
    T0=$SECONDS
    fairseq-train "$BIN" --user-dir "$USER_DIR" --task translation --arch "$ARCH" \
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
    python -c '
import json, sys
last = {}
for line in open(sys.argv[1], encoding="utf-8"):
    if "| valid | {" in line:
        last = json.loads(line[line.index("| valid | {") + 10:])
if last:
    print("[quickstart] after %s updates: valid loss %s (best %s), nll loss %s" % (
        last["valid_num_updates"], last["valid_loss"], last["valid_best_loss"],
        last["valid_nll_loss"]))
' "$CKPT/train.log"
    say "training took $(( SECONDS - T0 )) s"
    touch "$CKPT/.done-$MAX_UPDATE"
fi

# --- 4. generate + BLEU ------------------------------------------------------
say "fairseq-generate (beam 4) on the test split"
fairseq-generate "$BIN" --user-dir "$USER_DIR" --task translation \
    --source-lang en --target-lang de \
    --path "$CKPT/checkpoint_best.pt" --gen-subset test \
    --beam 4 --batch-size 128 \
    --cpu --num-workers 0 >"$WORK/generate-test.txt" 2>"$WORK/generate-test.log"

python - "$WORK/generate-test.txt" "$RAW/test.de" <<'EOF'
import sys

from sacrebleu.metrics import BLEU

from fairseq_posattn.data.toy_corpus import detokenize

gen_path, ref_path = sys.argv[1:3]
hyps = {}
with open(gen_path, encoding="utf-8") as f:
    for line in f:
        if line.startswith("H-"):
            key, _score, text = line.rstrip("\n").split("\t")
            hyps[int(key[2:])] = text.split()
with open(ref_path, encoding="utf-8") as f:
    refs = [detokenize(line.split()) for line in f]
missing = [i for i in range(len(refs)) if i not in hyps]
if missing:
    sys.exit("[quickstart] ERROR: no hypothesis for test sentences %s" % missing[:10])
sys_out = [detokenize(hyps[i]) for i in range(len(refs))]
bleu = BLEU()
score = bleu.corpus_score(sys_out, [refs])
exact = sum(h == r for h, r in zip(sys_out, refs))
print("[quickstart] %d test sentences, %d translated exactly" % (len(refs), exact))
print("[quickstart] %s" % score)
print("[quickstart] sacrebleu signature: %s" % bleu.get_signature())
EOF

# --- 5. interactive ----------------------------------------------------------
say "fairseq-interactive on two raw sentences"
printf '%s\n' \
    "the old teacher has read the letter because the cat sleeps ." \
    "when the dog eats the cake , the girl that the man sees laughs ." |
    fairseq-interactive "$BIN" --user-dir "$USER_DIR" --task translation \
        --source-lang en --target-lang de \
        --path "$CKPT/checkpoint_best.pt" --beam 4 --cpu 2>/dev/null |
    awk -F'\t' '/^S-/ {print "[quickstart]   " $1 "  " $2} /^H-/ {print "[quickstart]   " $1 "  " $3}'

say "done in $(( SECONDS - START )) s (work dir: $WORK)"
