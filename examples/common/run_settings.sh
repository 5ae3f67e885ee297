# The record of a run, shared by the recipes (sourced; the caller defines REPO
# and die): which code trained it, and with which settings.

# code_version: the commit of REPO, with +modified when the work tree differs from it
code_version() {
    local commit
    commit="$(git -C "$REPO" rev-parse HEAD 2>/dev/null)" || { echo unknown; return; }
    git -C "$REPO" diff --quiet HEAD -- 2>/dev/null || commit+="+modified"
    echo "$commit"
}

# check_run_settings DIR SETTINGS [RECORDED_ONLY]: record SETTINGS (KEY=VALUE
# lines) in DIR/settings.txt, or, when that file exists, refuse settings that
# differ from the recorded ones, naming DIR. RECORDED_ONLY lines (threads=...)
# are written but not compared, and neither are the started= lines a run adds.
# A DIR with checkpoints but no record is refused too.
check_run_settings() {
    local dir="$1" current="$2" recorded_only="${3:-}" file="$1/settings.txt" recorded
    if [[ -f "$file" ]]; then
        recorded="$(grep -v -E '^(threads|started)=' "$file")"
        if [[ "$recorded" != "$current" ]]; then
            die "$dir already holds a run with other settings; refusing to mix them.
    $( { diff <(echo "$recorded") <(echo "$current") | grep "^[<>]" | sed "s/^</    recorded:/; s/^>/    now:     /"; } || true)
    Give this run another name, seed or WORK, or delete $dir to train it again."
        fi
    elif compgen -G "$dir/checkpoint*.pt" >/dev/null; then
        die "$dir holds checkpoints of a run whose settings were not recorded; refusing to
    mix them with this one. Give this run another name, seed or WORK, or delete $dir."
    else
        mkdir -p "$dir"
        printf '%s\n' "$current" ${recorded_only:+"$recorded_only"} >"$file"
    fi
}

# mark_run_start DIR RECIPE: add the start time to DIR/settings.txt and print the
# line that marks a fairseq-train start in the training log (the log's wall time
# is summed from these marks: fairseq_posattn/recipes/train_log.py)
mark_run_start() {
    local started
    started="$(date '+%Y-%m-%d %H:%M:%S')"
    echo "started=$started" >>"$1/settings.txt"
    echo "[$2] fairseq-train started $started (commit $(code_version), ${THREADS:-?} thread(s))"
}
