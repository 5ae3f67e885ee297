"""scripts/gpu_check.sh without a GPU: a stand-in interpreter shows which
commands the steps run, that each is logged in commands.txt, and that the
deadline skips what it leaves no time for."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a shell script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
STAND_IN = """#!/usr/bin/env bash
if [[ "$1" == "-" ]]; then cat > /dev/null; echo "stand-in GPU | commit test"; exit 0; fi
echo "ran: $*"
[[ "$*" == *--json* ]] && touch "${@: -1}"
sleep "${STAND_IN_SLEEP:-0}"
"""


def gpu_check(tmp_path, steps, **env):
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), str(out), steps], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": str(python), **env})
    return done, out


def test_the_steps_run_their_commands_and_log_each(tmp_path):
    done, out = gpu_check(tmp_path, "wmt recurrent")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "gpu.txt").read_text() == "stand-in GPU | commit test\n"
    log = (out / "commands.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in log] == [
        "bench_wmt_fp16.txt", "bench_wmt_bf16.txt", "bench_recurrent_fp16.txt", "bench_recurrent_bf16.txt",
        "verdict.txt"]
    assert all(", exit 0: " in line for line in log)
    wmt = (out / "bench_wmt_bf16.txt").read_text()
    assert "--device cuda --config wmt --bf16 --no-decode --repeats 7 --rows posattn-off,P," in wmt
    assert "--fp16 --unidirectional --batch 128" in (out / "bench_recurrent_fp16.txt").read_text()
    assert (out / "verdict.txt").read_text() == f"ran: -m fairseq_posattn.bench.verdict {out}\n"


def test_the_deadline_skips_a_command_it_leaves_no_time_and_the_exit_status_says_so(tmp_path):
    done, out = gpu_check(tmp_path, "wmt", DEADLINE="31", STAND_IN_SLEEP="2", REPEATS="3")
    assert done.returncode == 1
    first, second = (out / "commands.txt").read_text().splitlines()[:2]
    assert first.startswith("bench_wmt_fp16.txt: from 0s") and "--repeats 3" in first
    assert second.startswith("bench_wmt_bf16.txt: skipped, ") and "left of DEADLINE=31s" in second


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    done, out = gpu_check(tmp_path, "wmt bench")
    assert done.returncode == 2 and "unknown step 'bench'" in done.stderr
    assert not (out / "gpu.txt").exists()
