"""fairseq's data-loading threads are stopped before the interpreter exits, so a
run that ends while one is inside torch exits 0, not 134 ("terminate called
without an active exception"); the plugin's entry points exit cleanly under load."""

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import COMMON_ARGS, USER_DIR, run_cli, run_python, train_tiny
from test_hydra import CONFIGS, TINY_TRANSLATION, hydra_overrides

# Registered before anything else, so it runs after every other exit handler
# (the plugin's among them): which Python threads are still alive then.
THREADS_AT_EXIT = """
import atexit, sys, threading

def threads_at_exit():
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print("threads at exit: %s" % left, file=sys.stderr, flush=True)

atexit.register(threads_at_exit)
"""

# A run that stops in mid-epoch: its buffered iterator's thread is collating
# the next batches, inside torch, when the script ends.
STOPS_WHILE_COLLATING = THREADS_AT_EXIT + """
import torch
import fairseq_posattn  # noqa: F401  (installs the repairs)
from fairseq.data.iterators import BufferedIterator


class Batches:
    def __len__(self):
        return 1000

    def __iter__(self):
        x = torch.ones(400, 400)
        while True:
            for _ in range(20):
                x = torch.mm(x, x).clamp_(max=1.0)
            yield x


next(BufferedIterator(2, Batches()))
"""


def assert_clean_exit(proc: subprocess.CompletedProcess) -> None:
    assert "terminate called" not in proc.stderr, proc.stderr[-2000:]
    assert "threads at exit: []" in proc.stderr, proc.stderr[-2000:]


def test_a_run_that_stops_while_a_batch_is_collated_exits_cleanly():
    assert_clean_exit(run_python(STOPS_WHILE_COLLATING))


@pytest.mark.slow
def test_entry_points_exit_cleanly_under_load(toy_raw, toy_data_bin, toy_struct_bin, tmp_path):
    """Two at a time, so that each run waits for cores the other holds:
    fairseq-train and fairseq-hydra-train stop after 3 of an epoch's 15
    batches (of 4 sentences), while their data-loading threads wait to queue
    the batches past fairseq's buffer of 10, then fairseq-generate and
    fairseq-interactive decode the trained model."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(THREADS_AT_EXIT)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))}
    save = tmp_path / "train"
    settings = {**TINY_TRANSLATION, "task.data": toy_struct_bin, "common.user_dir": USER_DIR,
                "common.cpu": "true", "dataset.batch_size": 4, "optimization.max_update": 3,
                "optimization.max_epoch": 0, "checkpoint.no_epoch_checkpoints": "true",
                "checkpoint.save_dir": tmp_path / "hydra"}
    trained = [toy_data_bin, "--user-dir", USER_DIR, "--path", save / "checkpoint_last.pt",
               "--beam", "2", "--max-len-b", "10"]
    lines = (toy_raw / "test.en").read_text().splitlines()[:3]
    with ThreadPoolExecutor(2) as pool:
        training = [
            pool.submit(train_tiny, toy_data_bin, save, arch="onlstm_san_transformer",
                        max_update=3, extra=["--batch-size", "4"], env=env),
            pool.submit(run_cli, "fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name",
                        "structure", *hydra_overrides("structure", settings), cwd=tmp_path, env=env),
        ]
        runs = [run.result() for run in training]
        decoding = [
            pool.submit(run_cli, "fairseq-generate", *trained, "--gen-subset", "test",
                        "--batch-size", "4", *COMMON_ARGS, env=env),
            pool.submit(run_cli, "fairseq-interactive", *trained, "--source-lang", "en",
                        "--target-lang", "de", "--cpu", input="\n".join(lines) + "\n", env=env),
        ]
        runs += [run.result() for run in decoding]
    for proc in runs:
        assert_clean_exit(proc)
    assert all("done training" in proc.stdout + proc.stderr for proc in runs[:2])
    hypotheses = [len(re.findall(r"^H-\d+\t", proc.stdout, re.M)) for proc in runs[2:]]
    assert hypotheses == [10, 3]
