# Shared steps of the recipes in examples/*/run.sh; sourced, not run.
#
# A recipe sets RECIPE, HERE (its directory), SRC, TGT, VALID_SET, TEST_SETS
# and its own defaults, sources this file, brings its raw text into
# $WORK/raw (stages 0-1) and calls the stage functions below:
#
#   2 tokenize_and_clean  Moses tokenization (sacremoses) or Chinese word
#                         segmentation; the training pairs cleaned by length/ratio
#   3 split_subwords      joint (or per-language) BPE with subword-nmt, or
#                         sentencepiece (SUBWORD=spm)
#   4 binarize            fairseq-preprocess
#   5 add_trees           fairseq-posattn-parse of the tokenized source, then
#                         fairseq-posattn-preprocess --trees-only (only when
#                         ARCH reads dependency trees, i.e. --task translation_struct;
#                         CONTROL_TREES=left-neighbour|random-projective writes
#                         deliberately wrong trees over the same words instead,
#                         into a data directory of their own)
#   6 train_model         fairseq-train (GPUs: --fp16, all GPUs, update-freq
#                         for BATCH_TOKENS per update; no GPU: --cpu); the run's
#                         settings (commit, data, command) are recorded, and a
#                         directory that holds a run of other settings is refused;
#                         PARAMS_LIKE="ARCH [ARGS]" refuses a model whose parameter
#                         count misses that model's by more than PARAMS_TOLERANCE
#   7 evaluate_model      checkpoint averaging, fairseq-generate (beam 4,
#                         lenpen 0.6), sacreBLEU (+ tokenized compound-split BLEU),
#                         a summary of the training log; EXPORT_DIR=D copies the
#                         hypotheses and the summary to D/RUN.SET.hyp, D/RUN.train.json
#   8 compare_systems     sacrebleu paired bootstrap against COMPARE_TO
#
# Files under $WORK:
#   raw/{train,$VALID_SET,$TEST_SETS}.{$SRC,$TGT}  untokenized text (extra
#       references of a set: raw/SET.$TGT.ref1, .ref2, ...)
#   tok/          tokenized words (what the parser reads)
#   bpe32000/ or spm32000/   subword pieces (+ links to the trees)
#   trees-$PARSER/SET.$SRC.conllu    parses of the tokenized source
#   data-bin/bpe32000/    binarized data, trees beside the source
#   data-bin/bpe32000.$CONTROL_TREES-trees/   the same data with control trees
#   checkpoints/bpe32000/$RUN/, results/bpe32000/$RUN/   RUN = $NAME.seed$SEED
# CHECK_ONLY=1 prepares the data (stages up to 4), checks the model (its arch
# and flags, PARAMS_LIKE) and stops. Every step leaves a marker file; a re-run skips what is done, and a killed
# training resumes from its last checkpoint when rerun with the same settings.

REPO="$(cd "$HERE/../.." && pwd)"
source "$REPO/examples/common/run_settings.sh"

# ---- options (a recipe may have set any of them before) ---------------------
: "${WORK:=$HERE/work}"
case "$WORK" in /*) ;; *) WORK="$PWD/$WORK" ;; esac
: "${FROM_STAGE:=0}" "${TO_STAGE:=8}"
NPROC="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
: "${WORKERS:=$NPROC}"                  # processes for tokenization, BPE, binarization, trees
# text
: "${AGGRESSIVE_DASHES:=1}"             # Moses -a: a-b -> a @-@ b
: "${SEGMENT_LANG=}"                    # a language segmented instead of tokenized (zh)
: "${SEGMENTER:=stanza}"                # stanza | udpipe
: "${CLEAN_MIN_LEN:=1}" "${CLEAN_MAX_LEN:=250}" "${CLEAN_RATIO:=1.5}"
: "${SUBWORD:=bpe}"                     # bpe (subword-nmt) | spm (sentencepiece)
: "${BPE_MERGES:=32000}" "${SPM_VOCAB:=32000}" "${SPM_COVERAGE:=1.0}"
: "${JOINT_VOCAB:=1}"                   # 1: one subword model and dictionary for both sides
# parsing
: "${PARSER:=stanza}"                   # stanza | spacy | udpipe | conllu
: "${PARSER_MODEL=}"                    # spacy pipeline / UDPipe model (default per parser)
: "${STANZA_DIR=}" "${STANZA_DOWNLOAD:=0}"
: "${PARSE_WORKERS:=1}" "${PARSE_SHARD=}"
: "${CONLLU_DIR=}"                      # PARSER=conllu: SET.$SRC.conllu files
: "${CONTROL_TREES=}" "${CONTROL_TREES_SEED:=1}"  # wrong trees for a control run (stage 5)
# model and training (ARCH_ARGS come after MODEL_ARGS: a flag in both takes ARCH_ARGS' value)
: "${ARCH:=transformer_struct}" "${ARCH_ARGS=}" "${MODEL_ARGS=}" "${TRAIN_ARGS=}"
: "${PARAMS_LIKE=}" "${PARAMS_TOLERANCE:=0.02}" "${CHECK_ONLY:=0}"
: "${MAX_TOKENS:=4096}" "${BATCH_TOKENS:=25000}" "${UPDATE_FREQ:=auto}"
: "${LR:=auto}" "${WARMUP:=4000}" "${MAX_UPDATE:=auto}" "${MAX_EPOCH=}" "${TIME_LIMIT_HOURS=}"
: "${SAVE_INTERVAL:=1000}" "${LOG_INTERVAL:=100}" "${SEED:=1}"
: "${NGPUS:=auto}" "${NNODES:=1}" "${NODE_RANK:=0}" "${MASTER_ADDR:=127.0.0.1}"
: "${MASTER_PORT:=29500}" "${FP16:=1}" "${THREADS:=$NPROC}"
# evaluation
: "${CHECKPOINT:=average}" "${AVG:=auto}" "${BEAM:=4}" "${LENPEN:=0.6}" "${GEN_MAX_TOKENS:=8000}"
: "${EVAL_SETS:=$VALID_SET $TEST_SETS}"
: "${LOWERCASE_BLEU:=0}" "${COMPOUND_SPLIT:=0}"
: "${SACREBLEU_TESTSET=}" "${SACREBLEU_SET=}"  # e.g. wmt14/full, scored as set SACREBLEU_SET
: "${COMPARE_TO=}"                       # the baseline's NAME (same SEED)
: "${EXPORT_DIR=}"

say() { echo "[$RECIPE] $*" >&2; }
die() { echo "[$RECIPE] ERROR: $*" >&2; exit 1; }
set -o errtrace  # the trap below also fires inside functions
trap 'echo "[$RECIPE] ERROR: command failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

# stage N TITLE: true when stage N is inside FROM_STAGE..TO_STAGE
stage() {
    if (( FROM_STAGE <= $1 && $1 <= TO_STAGE )); then
        say "stage $1: $2"
        return 0
    fi
    return 1
}

need_file() {  # need_file PATH "what to do"
    [[ -e "$1" ]] || die "$1 is missing: $2"
}

# done_before MARKER WHAT: true, saying so, when a step left MARKER
done_before() {
    if [[ -f "$1" ]]; then
        say "reusing $2"
        return 0
    fi
    return 1
}

same_length() {  # same_length FILE1 FILE2: die unless they have as many lines
    local n1 n2
    n1=$(wc -l <"$1") n2=$(wc -l <"$2")
    (( n1 == n2 )) || die "$1 has $n1 lines but $2 has $n2; they must be sentence-aligned"
}

# run_logged LOG CMD...: CMD's output goes to LOG; on failure its tail is shown
run_logged() {
    local log="$1"
    shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "$1 failed (whole log: $log)"
    fi
}

# ---- environment ------------------------------------------------------------
VENV="${VENV:-$REPO/.venv}"
if [[ -x "$VENV/bin/python" ]]; then
    export PATH="$VENV/bin:$PATH"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
python -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("fairseq") and u.find_spec("sacremoses")))' \
    || die "no Python environment with fairseq: run 'bash scripts/setup_env.sh' (creates $REPO/.venv) or set VENV"
USER_DIR="$REPO/fairseq_posattn"
corpus() { fairseq-posattn-corpus "$@"; }
scoring() { fairseq-posattn-score "$@"; }

RAW="$WORK/raw"
TOK="$WORK/tok"
if [[ "$SUBWORD" == bpe ]]; then
    SUBWORD_TAG="bpe$BPE_MERGES" REMOVE_BPE="subword_nmt" SCHEME=subword_nmt
elif [[ "$SUBWORD" == spm ]]; then
    SUBWORD_TAG="spm$SPM_VOCAB" REMOVE_BPE="sentencepiece" SCHEME=sentencepiece
else
    die "SUBWORD must be bpe or spm, not '$SUBWORD'"
fi
SUB="$WORK/$SUBWORD_TAG"
BIN="$WORK/data-bin/$SUBWORD_TAG"
TREES="$WORK/trees-$PARSER"
# the experiment: NAME defaults to the arch, its extra flags and the control
# trees, with NAME_SUFFIX after them; a run is one seed of it
: "${NAME_SUFFIX=}"
if [[ -z "${NAME:-}" ]]; then
    NAME="$ARCH"
    if [[ -n "$ARCH_ARGS" ]]; then
        NAME="${ARCH}_$(echo "$ARCH_ARGS" | tr -cs 'A-Za-z0-9.' '_' | sed 's/^_*//; s/_*$//')"
    fi
    if [[ -n "$CONTROL_TREES" ]]; then NAME="${NAME}_${CONTROL_TREES//-/_}_trees"; fi
    NAME+="$NAME_SUFFIX"
fi
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$SEED'"
RUN="$NAME.seed$SEED"
CKPT="$WORK/checkpoints/$SUBWORD_TAG/$RUN"
RESULTS="$WORK/results/$SUBWORD_TAG/$RUN"
# the data the model reads: the binarized text, with the control trees beside it
DATA_BIN="$BIN"
if [[ -n "$CONTROL_TREES" ]]; then DATA_BIN="$BIN.$CONTROL_TREES-trees"; fi
read -r -a TEST_ARRAY <<<"$TEST_SETS"
read -r -a ARCH_FLAGS <<<"$MODEL_ARGS $ARCH_ARGS"
read -r -a EXTRA_TRAIN_FLAGS <<<"$TRAIN_ARGS"

# fairseq's split name of a set: valid, test, test1, test2, ...
split_of() {
    local k
    [[ "$1" == "$VALID_SET" ]] && { echo valid; return; }
    for k in "${!TEST_ARRAY[@]}"; do
        if [[ "${TEST_ARRAY[$k]}" == "$1" ]]; then
            (( k == 0 )) && echo test || echo "test$k"
            return
        fi
    done
    die "set '$1' is neither VALID_SET ($VALID_SET) nor one of TEST_SETS ($TEST_SETS)"
}

all_sets() { echo train "$VALID_SET" "${TEST_ARRAY[@]}"; }

# REFS=(the raw references of set $1): SET.TGT, then SET.TGT.ref1, .ref2, ...
set_references() {
    local extra
    REFS=("$RAW/$1.$TGT")
    for extra in "$RAW/$1.$TGT".ref*; do
        if [[ -e "$extra" ]]; then REFS+=("$extra"); fi
    done
}

# ---- 2. tokenize, clean -----------------------------------------------------
tokenize_and_clean() {
    if done_before "$TOK/.done" "the tokenized text in $TOK"; then return; fi
    mkdir -p "$TOK"
    local lang set inputs outputs
    for lang in "$SRC" "$TGT"; do
        inputs=() outputs=()
        for set in $(all_sets); do
            need_file "$RAW/$set.$lang" "stage 1 writes it (raw text of set $set)"
            inputs+=("$RAW/$set.$lang")
            # the training text is cleaned below
            [[ "$set" == train ]] && outputs+=("$TOK/train.all.$lang") || outputs+=("$TOK/$set.$lang")
        done
        if [[ "$lang" == "$SEGMENT_LANG" ]]; then
            local seg_flags=(--segmenter "$SEGMENTER" --lang "$lang")
            if [[ -n "$STANZA_DIR" ]]; then seg_flags+=(--stanza-dir "$STANZA_DIR"); fi
            if [[ "$STANZA_DOWNLOAD" == 1 ]]; then seg_flags+=(--download); fi
            if [[ "$SEGMENTER" == udpipe && -n "$PARSER_MODEL" ]]; then seg_flags+=(--model "$PARSER_MODEL"); fi
            say "segmenting $lang ($SEGMENTER)"
            corpus segment "${seg_flags[@]}" --input "${inputs[@]}" --output "${outputs[@]}"
        else
            local tok_flags=(--lang "$lang" --workers "$WORKERS")
            if [[ "$AGGRESSIVE_DASHES" == 1 ]]; then tok_flags+=(--aggressive-dashes); fi
            say "tokenizing $lang (sacremoses, $WORKERS workers)"
            corpus tokenize "${tok_flags[@]}" --input "${inputs[@]}" --output "${outputs[@]}"
        fi
    done
    corpus clean --src-input "$TOK/train.all.$SRC" --tgt-input "$TOK/train.all.$TGT" \
        --src-output "$TOK/train.$SRC" --tgt-output "$TOK/train.$TGT" \
        --min-len "$CLEAN_MIN_LEN" --max-len "$CLEAN_MAX_LEN" --ratio "$CLEAN_RATIO"
    touch "$TOK/.done"
}

# ---- 3. subwords ------------------------------------------------------------
split_subwords() {
    if done_before "$SUB/.done" "the subword pieces in $SUB"; then return; fi
    mkdir -p "$SUB"
    local lang set group groups
    # one model for both sides (JOINT_VOCAB=1) or one per language
    if [[ "$JOINT_VOCAB" == 1 ]]; then groups=(joint); else groups=("$SRC" "$TGT"); fi
    for group in "${groups[@]}"; do
        local train_files=() langs=()
        if [[ "$group" == joint ]]; then langs=("$SRC" "$TGT"); else langs=("$group"); fi
        for lang in "${langs[@]}"; do train_files+=("$TOK/train.$lang"); done
        if [[ "$SUBWORD" == bpe ]]; then
            say "learning BPE ($BPE_MERGES merges, subword-nmt) on ${train_files[*]}"
            cat "${train_files[@]}" | subword-nmt learn-bpe -s "$BPE_MERGES" >"$SUB/codes.$group.tmp"
            mv "$SUB/codes.$group.tmp" "$SUB/codes.$group"
        else
            say "training sentencepiece ($SPM_VOCAB pieces) on ${train_files[*]}"
            corpus spm-train --input "${train_files[@]}" --model-prefix "$SUB/spm.$group" \
                --vocab-size "$SPM_VOCAB" --character-coverage "$SPM_COVERAGE"
        fi
        for lang in "${langs[@]}"; do
            for set in $(all_sets); do
                if [[ "$SUBWORD" == bpe ]]; then
                    subword-nmt apply-bpe -c "$SUB/codes.$group" --num-workers "$WORKERS" \
                        --input "$TOK/$set.$lang" --output "$SUB/$set.$lang.tmp"
                    mv "$SUB/$set.$lang.tmp" "$SUB/$set.$lang"
                else
                    corpus spm-encode --model "$SUB/spm.$group.model" --workers "$WORKERS" \
                        --input "$TOK/$set.$lang" --output "$SUB/$set.$lang"
                fi
            done
        done
    done
    touch "$SUB/.done"
}

# fairseq-preprocess prefixes: --trainpref ... --validpref ... --testpref a,b
tests=()
for set in "${TEST_ARRAY[@]}"; do tests+=("$SUB/$set"); done
PREFIX_FLAGS=(--trainpref "$SUB/train" --validpref "$SUB/$VALID_SET"
              --testpref "$(IFS=,; echo "${tests[*]}")")
unset tests set

# ---- 4. binarize ------------------------------------------------------------
binarize() {
    if done_before "$BIN/.done" "the binarized data in $BIN"; then return; fi
    mkdir -p "$BIN"
    local dict_flags=()
    if [[ "$JOINT_VOCAB" == 1 ]]; then dict_flags=(--joined-dictionary); fi
    say "fairseq-preprocess -> $BIN (log: $BIN/preprocess.log)"
    run_logged "$BIN/preprocess.log" fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
        "${PREFIX_FLAGS[@]}" --destdir "$BIN" "${dict_flags[@]}" --workers "$WORKERS"
    touch "$BIN/.done"
}

# ---- arch plan: task, size, GPUs ---------------------------------------------
plan_arch() {
    local line out
    if ! out="$(fairseq-posattn-arch-plan --arch "$ARCH" "${ARCH_FLAGS[@]}" 2>&1)"; then
        echo "$out" | tail -n 1 >&2
        die "ARCH=$ARCH with ARCH_ARGS='$ARCH_ARGS' MODEL_ARGS='$MODEL_ARGS' is not a valid fairseq model"
    fi
    while IFS='=' read -r key value; do
        case "$key" in
            TASK) TASK="$value" ;; SIZE) SIZE="$value" ;; GPUS) DETECTED_GPUS="$value" ;;
        esac
    done < <(echo "$out" | grep -E '^(TASK|SIZE|GPUS)=')
    if [[ "$NGPUS" == auto ]]; then NGPUS="$DETECTED_GPUS"; fi
    TASK_FLAGS=(--task "$TASK")
    if [[ "$TASK" == translation_struct ]]; then TASK_FLAGS+=(--subword-scheme "$SCHEME"); fi
    if [[ "$LR" == auto ]]; then [[ "$SIZE" == big ]] && LR=5e-4 || LR=7e-4; fi
    if [[ "$MAX_UPDATE" == auto ]]; then [[ "$SIZE" == big ]] && MAX_UPDATE=300000 || MAX_UPDATE=100000; fi
    if [[ "$AVG" == auto ]]; then [[ "$SIZE" == big ]] && AVG=20 || AVG=5; fi
    if (( NGPUS > 0 )); then
        DEVICE_FLAGS=()
        if [[ "$FP16" == 1 ]]; then DEVICE_FLAGS+=(--fp16); fi
    else
        DEVICE_FLAGS=(--cpu)
        export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
    fi
    if [[ -n "$CONTROL_TREES" && "$TASK" != translation_struct ]]; then
        die "CONTROL_TREES=$CONTROL_TREES: $ARCH reads no trees, so control trees change nothing"
    fi
    say "ARCH=$ARCH ${ARCH_ARGS:+(ARCH_ARGS: $ARCH_ARGS) }-> --task $TASK, $SIZE size, $NGPUS GPU(s); run $RUN"
    if [[ -n "$PARAMS_LIKE" ]]; then check_parameter_match; fi
}

# total_parameters FLAGS...: fairseq-posattn-param-count's total for the
# binarized data's dictionary and the recipe's embedding sharing
total_parameters() {
    local dict="$BIN/dict.$SRC.txt" share=(--share-all-embeddings) vocab
    need_file "$dict" "binarize first (stage 4): the parameters are counted with its dictionary"
    [[ "$JOINT_VOCAB" == 1 ]] || share=(--share-decoder-input-output-embed)
    # the dictionary file holds every symbol but fairseq's 4 special ones
    vocab=(--vocab $(( $(wc -l <"$dict") + 4 )))
    if [[ "$JOINT_VOCAB" != 1 ]]; then vocab+=(--target-vocab $(( $(wc -l <"$BIN/dict.$TGT.txt") + 4 ))); fi
    fairseq-posattn-param-count "${vocab[@]}" "${share[@]}" "$@" 2>/dev/null | awk '$1 == "total" {gsub(",", "", $2); print $2}'
}

# check_parameter_match: die unless this model's parameter count is within
# PARAMS_TOLERANCE of the one of PARAMS_LIKE (an arch and its ARCH_ARGS, with
# the same MODEL_ARGS), both counts printed
check_parameter_match() {
    local like model_flags mine theirs
    read -r -a like <<<"$PARAMS_LIKE"
    read -r -a model_flags <<<"$MODEL_ARGS"
    mine="$(total_parameters --arch "$ARCH" "${ARCH_FLAGS[@]}")"
    theirs="$(total_parameters --arch "${like[0]}" "${model_flags[@]}" "${like[@]:1}")"
    [[ -n "$mine" && -n "$theirs" ]] || die "fairseq-posattn-param-count failed for $ARCH or PARAMS_LIKE='$PARAMS_LIKE'"
    if awk -v a="$mine" -v b="$theirs" -v tol="$PARAMS_TOLERANCE" 'BEGIN { d = (a - b) / b; exit !(d <= tol && -d <= tol) }'; then
        say "parameters: $mine for $ARCH ${ARCH_ARGS}, $theirs for $PARAMS_LIKE (within $PARAMS_TOLERANCE)"
    else
        die "the model has $mine parameters but PARAMS_LIKE='$PARAMS_LIKE' has $theirs: more than $PARAMS_TOLERANCE apart (fairseq-posattn-param-count, MODEL_ARGS='$MODEL_ARGS' ARCH_ARGS='$ARCH_ARGS'); change the flags until the counts match"
    fi
}

# ---- 5. trees ---------------------------------------------------------------
set_parser_flags() {  # PARSE_FLAGS=(fairseq-posattn-parse flags for set $1), PARSER_FLAGS=(the parser's)
    case "$PARSER" in
        stanza)
            PARSER_FLAGS=(--parser stanza --parser-lang "$SRC")
            if [[ -n "$STANZA_DIR" ]]; then PARSER_FLAGS+=(--stanza-dir "$STANZA_DIR"); fi ;;
        spacy) PARSER_FLAGS=(--parser spacy --parser-model "${PARSER_MODEL:-en_core_web_sm}") ;;
        udpipe)
            PARSER_FLAGS=(--parser udpipe --parser-lang "$SRC")
            if [[ -n "$PARSER_MODEL" ]]; then PARSER_FLAGS+=(--parser-model "$PARSER_MODEL"); fi ;;
        conllu)
            [[ -n "$CONLLU_DIR" ]] || die "PARSER=conllu needs CONLLU_DIR=<dir with SET.$SRC.conllu files>"
            need_file "$CONLLU_DIR/$1.$SRC.conllu" "PARSER=conllu reads the parse of set $1 from CONLLU_DIR"
            PARSER_FLAGS=(--parser conllu --conllu "$CONLLU_DIR/$1.$SRC.conllu") ;;
        *) die "PARSER must be stanza, spacy, udpipe or conllu, not '$PARSER'" ;;
    esac
    PARSE_FLAGS=("${PARSER_FLAGS[@]}" --workers "$PARSE_WORKERS")
    if [[ "$PARSER" == stanza && "$STANZA_DOWNLOAD" == 1 ]]; then PARSE_FLAGS+=(--download); fi
    if [[ -n "$PARSE_SHARD" ]]; then PARSE_FLAGS+=(--shard "$PARSE_SHARD"); fi
}

add_trees() {
    local kind="$PARSER" control_flags=()
    if [[ -n "$CONTROL_TREES" ]]; then
        kind="$CONTROL_TREES control trees (seed $CONTROL_TREES_SEED) over the $PARSER parses"
        control_flags=(--control-trees "$CONTROL_TREES" --control-trees-seed "$CONTROL_TREES_SEED")
    fi
    if [[ "$(cat "$DATA_BIN/.trees" 2>/dev/null)" == "$kind" ]]; then
        say "reusing the $kind in $DATA_BIN"
        return
    fi
    need_file "$BIN/.done" "binarize first (stage 4)"
    if [[ "$DATA_BIN" != "$BIN" ]]; then  # the binarized text, linked; trees of its own
        mkdir -p "$DATA_BIN"
        local file
        for file in "$BIN"/*; do
            case "$file" in *.trees.* | *.log) continue ;; esac
            ln -sfn "$file" "$DATA_BIN/$(basename "$file")"
        done
    fi
    mkdir -p "$TREES"
    local set
    for set in $(all_sets); do
        if [[ ! -f "$TREES/$set.$SRC.conllu" ]]; then
            set_parser_flags "$set"
            say "parsing $TOK/$set.$SRC ($PARSER${PARSE_SHARD:+, shard $PARSE_SHARD}, $PARSE_WORKERS worker(s))"
            fairseq-posattn-parse --input "$TOK/$set.$SRC" --output "$TREES/$set.$SRC.conllu" \
                "${PARSE_FLAGS[@]}" || die "parsing $set with PARSER=$PARSER failed (see above).
    PARSER=stanza needs stanza's $SRC models: STANZA_DIR=<model directory> (or STANZA_DOWNLOAD=1 where
    there is internet access); offline parsers: PARSER=spacy (English), PARSER=udpipe (Chinese),
    PARSER=conllu CONLLU_DIR=<your parses>"
            if [[ ! -f "$TREES/$set.$SRC.conllu" ]]; then
                say "shard $PARSE_SHARD of $set is parsed; run again without PARSE_SHARD once every shard has finished (it merges them)"
                exit 0
            fi
        fi
        ln -sfn "$TREES/$set.$SRC.conllu" "$SUB/$set.$SRC.conllu"
    done
    say "fairseq-posattn-preprocess --trees-only ${control_flags[*]} -> $DATA_BIN (log: $DATA_BIN/trees.log)"
    run_logged "$DATA_BIN/trees.log" fairseq-posattn-preprocess --trees-only --source-lang "$SRC" \
        --target-lang "$TGT" "${PREFIX_FLAGS[@]}" --destdir "$DATA_BIN" --subword-scheme "$SCHEME" \
        --workers "$WORKERS" "${control_flags[@]}"
    echo "$kind" >"$DATA_BIN/.trees"
}

# ---- 6. train ---------------------------------------------------------------
# check_settings: the run's settings (commit, seed, data, the training
# command) recorded in the run's directory, or refused when it holds other ones
check_settings() {
    check_run_settings "$CKPT" "$(printf '%s\n' "commit=$(code_version)" "seed=$SEED" \
        "data=$DATA_BIN${TREES_KIND:+ ($TREES_KIND)}" \
        "command=$(printf '%q ' "${TRAIN_COMMAND[@]}")")" "threads=$THREADS"
}

train_model() {
    need_file "$BIN/.done" "binarize first (stage 4)"
    TREES_KIND=""
    if [[ "$TASK" == translation_struct ]]; then
        [[ -f "$DATA_BIN/.trees" ]] || die "$ARCH reads dependency trees but $DATA_BIN has none: run stage 5"
        TREES_KIND="$(cat "$DATA_BIN/.trees")"
    fi
    local per_update=$(( MAX_TOKENS * (NGPUS > 0 ? NGPUS : 1) * NNODES ))
    if [[ "$UPDATE_FREQ" == auto ]]; then
        UPDATE_FREQ=$(( (BATCH_TOKENS + per_update / 2) / per_update ))
        (( UPDATE_FREQ >= 1 )) || UPDATE_FREQ=1
    fi
    local share=(--share-all-embeddings)
    [[ "$JOINT_VOCAB" == 1 ]] || share=(--share-decoder-input-output-embed)
    # the last AVG checkpoints are averaged: every SAVE_INTERVAL updates (keep
    # the latest epoch checkpoint too: fairseq writes it instead of the update
    # checkpoint when an epoch ends on one), or every epoch with SAVE_INTERVAL=0
    local keep=$(( AVG > 1 ? AVG : 1 )) save_flags
    if (( SAVE_INTERVAL > 0 )); then
        save_flags=(--save-interval-updates "$SAVE_INTERVAL" --keep-interval-updates "$keep" --keep-last-epochs 1)
    else
        save_flags=(--keep-last-epochs "$keep")
    fi
    local budget_flags=(--max-update "$MAX_UPDATE")
    if [[ -n "$MAX_EPOCH" ]]; then budget_flags+=(--max-epoch "$MAX_EPOCH"); fi
    if [[ -n "$TIME_LIMIT_HOURS" ]]; then budget_flags+=(--stop-time-hours "$TIME_LIMIT_HOURS"); fi
    # one process per GPU: fairseq-train spawns them on one machine; with
    # NNODES > 1, torchrun starts them on each machine (prepare the data once
    # with TO_STAGE=5, then run FROM_STAGE=6 TO_STAGE=6 on every machine)
    local launch=(fairseq-train) dist=()
    if (( NNODES > 1 )); then
        launch=(torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NGPUS"
                --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "$(command -v fairseq-train)")
    fi
    if (( NGPUS > 0 )); then dist=(--distributed-world-size "$(( NGPUS * NNODES ))"); fi
    TRAIN_COMMAND=(
        "${launch[@]}" "$DATA_BIN" --user-dir "$USER_DIR" "${TASK_FLAGS[@]}" --arch "$ARCH" "${ARCH_FLAGS[@]}"
        --source-lang "$SRC" --target-lang "$TGT" "${share[@]}"
        --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 --clip-norm 0.0
        --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-7
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1
        --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" "${budget_flags[@]}"
        --save-dir "$CKPT" "${save_flags[@]}" --skip-invalid-size-inputs-valid-test --seed "$SEED"
        --log-format json --log-interval "$LOG_INTERVAL" --no-progress-bar
        "${dist[@]}" "${DEVICE_FLAGS[@]}" "${EXTRA_TRAIN_FLAGS[@]}"
    )
    mkdir -p "$CKPT"
    check_settings
    if done_before "$CKPT/.done" "$CKPT (trained with the same settings; delete it to train again)"; then
        return
    fi
    say "fairseq-train --arch $ARCH, seed $SEED: $MAX_TOKENS tokens x $(( per_update / MAX_TOKENS )) device(s) x update-freq $UPDATE_FREQ = $(( per_update * UPDATE_FREQ )) tokens per update (target BATCH_TOKENS=$BATCH_TOKENS), lr $LR, ${budget_flags[*]} (log: $CKPT/train.log)"
    mark_run_start "$CKPT" "$RECIPE" >>"$CKPT/train.log"
    "${TRAIN_COMMAND[@]}" 2>&1 | tee -a "$CKPT/train.log"
    touch "$CKPT/.done"
}

# write_model_dir: beside the checkpoints, what translating raw text with them
# needs (docs/recipes.md): the dictionaries, the source's subword model and the
# settings of the text's tokenization, subwords and parser
write_model_dir() {
    local group=joint flags
    [[ "$JOINT_VOCAB" == 1 ]] || group="$SRC"
    flags=(--dir "$CKPT" --dictionaries "$BIN/dict.$SRC.txt" "$BIN/dict.$TGT.txt"
           --source-lang "$SRC" --target-lang "$TGT" --bpe "$REMOVE_BPE")
    if [[ "$SUBWORD" == bpe ]]; then flags+=(--subword-model "$SUB/codes.$group")
    else flags+=(--subword-model "$SUB/spm.$group.model"); fi
    if [[ "$SRC" == "$SEGMENT_LANG" ]]; then
        say "$CKPT reads $SRC text segmented into words as $TOK/*.$SRC is (fairseq-posattn-corpus segment --segmenter $SEGMENTER): segment raw text first"
    else
        flags+=(--tokenizer moses_normalized)
        if [[ "$AGGRESSIVE_DASHES" == 1 ]]; then flags+=(--aggressive-dashes); fi
    fi
    if [[ "$TASK" == translation_struct && "$PARSER" == conllu ]]; then
        say "PARSER=conllu: $CKPT parses raw text only with the --parser you give"
    elif [[ "$TASK" == translation_struct ]]; then
        set_parser_flags train
        flags+=("${PARSER_FLAGS[@]}")
    fi
    corpus model-dir "${flags[@]}"
}

# ---- 7. evaluate ------------------------------------------------------------
choose_checkpoint() {  # MODEL_FILE=the checkpoint to decode (averaged if CHECKPOINT=average)
    case "$CHECKPOINT" in
        best|last) MODEL_FILE="$CKPT/checkpoint_$CHECKPOINT.pt" ;;
        average)
            MODEL_FILE="$CKPT/checkpoint_avg$AVG.pt"
            if (( AVG <= 1 )); then
                MODEL_FILE="$CKPT/checkpoint_last.pt"
            elif [[ ! "$MODEL_FILE" -nt "$CKPT/checkpoint_last.pt" ]]; then
                say "averaging the last $AVG checkpoints -> $MODEL_FILE"
                fairseq-posattn-average-checkpoints --inputs "$CKPT" \
                    --num-checkpoints "$AVG" --output "$MODEL_FILE" >&2
            fi ;;
        *) die "CHECKPOINT must be average, best or last, not '$CHECKPOINT'" ;;
    esac
}

evaluate_model() {
    need_file "$CKPT/checkpoint_last.pt" "train first (stage 6)"
    local set split gen bleu_flags=() lc=()
    choose_checkpoint
    mkdir -p "$RESULTS"
    if [[ "$LOWERCASE_BLEU" == 1 ]]; then bleu_flags+=(--lowercase) lc=(-lc); fi
    if [[ "$COMPOUND_SPLIT" == 1 ]]; then bleu_flags+=(--compound-split); fi
    for set in $EVAL_SETS; do
        split="$(split_of "$set")"
        gen="$RESULTS/$set.generate.txt"
        if [[ ! "$gen" -nt "$MODEL_FILE" ]]; then
            say "fairseq-generate $set ($split; beam $BEAM, lenpen $LENPEN) with $(basename "$MODEL_FILE")"
            fairseq-generate "$DATA_BIN" --user-dir "$USER_DIR" "${TASK_FLAGS[@]}" \
                --source-lang "$SRC" --target-lang "$TGT" --gen-subset "$split" \
                --path "$MODEL_FILE" --beam "$BEAM" --lenpen "$LENPEN" --remove-bpe "$REMOVE_BPE" \
                --max-tokens "$GEN_MAX_TOKENS" "${DEVICE_FLAGS[@]}" \
                >"$gen.tmp" 2>"$RESULTS/$set.generate.log" \
                || { tail -n 20 "$RESULTS/$set.generate.log" >&2; die "fairseq-generate failed on $set"; }
            mv "$gen.tmp" "$gen"
        fi
        set_references "$set"
        scoring score --generate-output "$gen" --references "${REFS[@]}" --lang "$TGT" \
            --name "$set" --hypotheses-out "$RESULTS/$set.hyp" \
            --json-out "$RESULTS/$set.bleu.json" "${bleu_flags[@]}" | tee "$RESULTS/$set.bleu.txt"
        if [[ -n "$SACREBLEU_TESTSET" && "$set" == "$SACREBLEU_SET" ]]; then
            say "sacreBLEU with the official test set (sacrebleu -t $SACREBLEU_TESTSET -l $SRC-$TGT):"
            timeout 300 sacrebleu -t "$SACREBLEU_TESTSET" -l "$SRC-$TGT" -i "$RESULTS/$set.hyp" \
                -m bleu --format text "${lc[@]}" \
                || say "sacrebleu could not get $SACREBLEU_TESTSET (offline?); the score above, against $RAW/$set.$TGT, is on the same segments"
        fi
    done
    say "$RUN, $(basename "$MODEL_FILE"): BLEU per test set"
    scoring summary --results-dir "$RESULTS" --sets "${TEST_ARRAY[@]}" | tee "$RESULTS/summary.txt"
    say "$RUN: $(fairseq-posattn-train-log --log "$CKPT/train.log" \
        --settings "$CKPT/settings.txt" --out "$RESULTS/train.json")"
    if [[ -n "$EXPORT_DIR" ]]; then
        mkdir -p "$EXPORT_DIR"
        for set in $EVAL_SETS; do cp "$RESULTS/$set.hyp" "$EXPORT_DIR/$RUN.$set.hyp"; done
        cp "$RESULTS/train.json" "$EXPORT_DIR/$RUN.train.json"
        say "copied the hypotheses and the training summary of $RUN to $EXPORT_DIR"
    fi
}

# ---- 8. significance --------------------------------------------------------
compare_systems() {
    if [[ -z "$COMPARE_TO" ]]; then
        say "COMPARE_TO not set: no significance test (COMPARE_TO=<baseline NAME>)"
        return
    fi
    local set base lc=()
    if [[ "$LOWERCASE_BLEU" == 1 ]]; then lc=(-lc); fi
    for set in "${TEST_ARRAY[@]}"; do
        base="$WORK/results/$SUBWORD_TAG/$COMPARE_TO.seed$SEED/$set.hyp"
        need_file "$base" "train and evaluate the baseline first (NAME=$COMPARE_TO SEED=$SEED, stages 6-7)"
        need_file "$RESULTS/$set.hyp" "evaluate $NAME first (stage 7)"
        set_references "$set"
        say "$set: paired bootstrap resampling (sacrebleu --paired-bs), baseline $COMPARE_TO vs $NAME, seed $SEED"
        # systems named by their result directories
        (cd "$WORK/results/$SUBWORD_TAG" && sacrebleu "${REFS[@]}" -i "$COMPARE_TO.seed$SEED/$set.hyp" \
            "$RUN/$set.hyp" -m bleu --paired-bs "${lc[@]}" --format text 2>&1) \
            | tee "$RESULTS/$set.vs-$COMPARE_TO.txt"
    done
}

# ---- the common stages --------------------------------------------------------
run_common_stages() {
    if stage 2 "tokenize and clean"; then tokenize_and_clean; fi
    if stage 3 "subwords ($SUBWORD)"; then split_subwords; fi
    if stage 4 "binarize"; then binarize; fi
    if (( TO_STAGE >= 5 && FROM_STAGE <= 8 )) || [[ "$CHECK_ONLY" == 1 ]]; then plan_arch; fi
    if [[ "$CHECK_ONLY" == 1 ]]; then say "CHECK_ONLY=1: the data and the model's settings are checked; nothing trained"; return; fi
    if stage 5 "dependency trees of the source"; then
        if [[ "$TASK" == translation_struct ]]; then add_trees; else say "$ARCH reads no trees: nothing to parse"; fi
    fi
    if stage 6 "train"; then train_model; write_model_dir; fi
    if stage 7 "evaluate"; then evaluate_model; fi
    if stage 8 "significance"; then compare_systems; fi
    say "done (work dir: $WORK)"
}
