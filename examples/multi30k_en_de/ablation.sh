#!/usr/bin/env bash
# The Multi30k ablation over seeds (docs/results.md): what sequential
# relative positions, dependency structure and the ON-LSTM each add.
#
#   bash examples/multi30k_en_de/ablation.sh C:1 B:1     # jobs ROW:SEED, one after another
#   bash examples/multi30k_en_de/ablation.sh --check H:1 # check the jobs; train nothing
#
# Rows (Wang et al. 2019, Table 1 rows 7 and 9; Hao et al. 2019):
#   A  transformer                                 the stock baseline
#   B  transformer_posattn --relative-positions    sequential absolute + relative positions
#   C  transformer_struct                          B + structural absolute + relative positions
#   D  transformer --encoder-layers 6              a self-attention encoder as deep as E
#   E  onlstm_san_transformer                      3 ON-LSTM + 3 SAN layers, short-cut
#   F  transformer --encoder-layers 6 --encoder-normalize-before
#                                                  D with pre-norm layers (D's post-norm
#                                                  6-layer encoder learns slowly at this budget)
#   G  onlstm_san_transformer --encoder-recurrent-cell lstm
#                                                  E with plain LSTM layers: no ordered neurons
#   H  F with --encoder-ffn-embed-dim 1920         F as large as E (parameters within 2%,
#                                                  checked before training), depth unchanged
#   W  transformer_struct, CONTROL_TREES=random-projective   C on wrong trees of the right shape
#   R  transformer_rope                            rotary positions (Su et al. 2021), no embeddings
#   L  transformer_alibi                           ALiBi (Press et al. 2022), no embeddings
#   T  transformer_t5bias                          T5's relative bias (Raffel et al. 2020), no embeddings
#   P  transformer_pascal                          PE[add] + PASCAL (Bugliarello & Okazaki 2020)
#   Q  transformer_depdist                         ALiBi + the dependency-distance bias, no embeddings
#   PW, QW                                         P and Q on W's wrong trees
#   X2 (any row X above)                           X with twice the budget, --max-update 2000
#
# Every job is examples/multi30k_en_de/run.sh with the recipe's own settings and
# SEED, THREADS=1 (one thread per run; run two scripts side by side on two
# cores) and EXPORT_DIR=docs/results/multi30k of this checkout, unless set.
# Every job is checked before the first one runs: its row, and for H the
# parameter count against E's (fairseq-posattn-param-count with the data's
# dictionary, which is prepared first).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export THREADS="${THREADS:-1}"
export EXPORT_DIR="${EXPORT_DIR:-$(cd "$HERE/../.." && pwd)/docs/results/multi30k}"
ROWS="A B C D E F G H W R L T P Q PW QW, and X2 for any of them"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
check_only=0
if [[ "${1:-}" == --check ]]; then check_only=1; shift; fi
(( $# > 0 )) || usage
# settings_of ROW: the run.sh variables of a row (exit 2 for an unknown row)
settings_of() {
    case "$1" in
        A) settings=(ARCH=transformer ARCH_ARGS=) ;;
        B) settings=(ARCH=transformer_posattn "ARCH_ARGS=--relative-positions") ;;
        C) settings=(ARCH=transformer_struct ARCH_ARGS=) ;;
        D) settings=(ARCH=transformer "ARCH_ARGS=--encoder-layers 6") ;;
        E) settings=(ARCH=onlstm_san_transformer ARCH_ARGS=) ;;
        F) settings=(ARCH=transformer "ARCH_ARGS=--encoder-layers 6 --encoder-normalize-before") ;;
        G) settings=(ARCH=onlstm_san_transformer "ARCH_ARGS=--encoder-recurrent-cell lstm") ;;
        H) settings=(ARCH=transformer
                     "ARCH_ARGS=--encoder-layers 6 --encoder-normalize-before --encoder-ffn-embed-dim 1920"
                     PARAMS_LIKE=onlstm_san_transformer) ;;
        W) settings=(ARCH=transformer_struct ARCH_ARGS= CONTROL_TREES=random-projective) ;;
        R) settings=(ARCH=transformer_rope ARCH_ARGS=) ;;
        L) settings=(ARCH=transformer_alibi ARCH_ARGS=) ;;
        T) settings=(ARCH=transformer_t5bias ARCH_ARGS=) ;;
        P) settings=(ARCH=transformer_pascal ARCH_ARGS=) ;;
        Q) settings=(ARCH=transformer_depdist ARCH_ARGS=) ;;
        PW|QW) settings_of "${1%W}"
               settings+=(CONTROL_TREES=random-projective) ;;
        [A-Z]*2) settings_of "${1%2}" || return 2
                settings+=(MAX_UPDATE=2000 NAME_SUFFIX=_max_update_2000) ;;
        *) return 2 ;;
    esac
}
for job in "$@"; do
    row="${job%%:*}" seed="${job#*:}"
    [[ "$seed" =~ ^[0-9]+$ && "$job" == *:* ]] || { echo "ablation.sh: job '$job' is not ROW:SEED" >&2; exit 2; }
    settings_of "$row" || { echo "ablation.sh: unknown row '$row' in job '$job' (rows: $ROWS; job: ROW:SEED)" >&2; exit 2; }
done
run_job() {  # run_job JOB [VARIABLE=VALUE...]: run.sh with the job's settings
    local job="$1" row="${1%%:*}" seed="${1#*:}"
    shift
    settings_of "$row"
    env NAME= NAME_SUFFIX= CONTROL_TREES= PARAMS_LIKE= "${settings[@]}" SEED="$seed" "$@" bash "$HERE/run.sh"
}
for job in "$@"; do  # the parameter-matched rows, before anything trains
    settings_of "${job%%:*}"
    if [[ " ${settings[*]} " == *" PARAMS_LIKE="* || "$check_only" == 1 ]]; then
        echo "[ablation] checking $job" >&2
        run_job "$job" CHECK_ONLY=1
    fi
done
(( check_only == 0 )) || exit 0
for job in "$@"; do
    settings_of "${job%%:*}"
    echo "[ablation] row ${job%%:*}, seed ${job#*:}: ${settings[*]}" >&2
    run_job "$job"
done
