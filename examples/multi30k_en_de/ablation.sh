#!/usr/bin/env bash
# The Multi30k ablation over seeds (docs/results.md): what sequential
# relative positions, dependency structure and the ON-LSTM each add.
#
#   bash examples/multi30k_en_de/ablation.sh C:1 B:1     # jobs ROW:SEED, one after another
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
#   W  transformer_struct, CONTROL_TREES=random-projective   C on wrong trees of the right shape
#
# Every job is examples/multi30k_en_de/run.sh with the recipe's own settings and
# SEED, THREADS=1 (one thread per run; run two scripts side by side on two
# cores) and EXPORT_DIR=docs/results/multi30k of this checkout, unless set.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export THREADS="${THREADS:-1}"
export EXPORT_DIR="${EXPORT_DIR:-$(cd "$HERE/../.." && pwd)/docs/results/multi30k}"
(( $# > 0 )) || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
# settings_of ROW: the run.sh variables of a row (exit 2 for an unknown row)
settings_of() {
    case "$1" in
        A) settings=(ARCH=transformer ARCH_ARGS=) ;;
        B) settings=(ARCH=transformer_posattn "ARCH_ARGS=--relative-positions") ;;
        C) settings=(ARCH=transformer_struct ARCH_ARGS=) ;;
        D) settings=(ARCH=transformer "ARCH_ARGS=--encoder-layers 6") ;;
        E) settings=(ARCH=onlstm_san_transformer ARCH_ARGS=) ;;
        F) settings=(ARCH=transformer "ARCH_ARGS=--encoder-layers 6 --encoder-normalize-before") ;;
        W) settings=(ARCH=transformer_struct ARCH_ARGS= CONTROL_TREES=random-projective) ;;
        *) return 2 ;;
    esac
}
for job in "$@"; do  # every job is checked before the first one runs
    row="${job%%:*}" seed="${job#*:}"
    [[ "$seed" =~ ^[0-9]+$ && "$job" == *:* ]] || { echo "ablation.sh: job '$job' is not ROW:SEED" >&2; exit 2; }
    settings_of "$row" || { echo "ablation.sh: unknown row '$row' in job '$job' (rows: A B C D E F W; job: ROW:SEED)" >&2; exit 2; }
done
for job in "$@"; do
    row="${job%%:*}" seed="${job#*:}"
    settings_of "$row"
    echo "[ablation] row $row, seed $seed: ${settings[*]}" >&2
    env NAME= CONTROL_TREES= "${settings[@]}" SEED="$seed" bash "$HERE/run.sh"
done
