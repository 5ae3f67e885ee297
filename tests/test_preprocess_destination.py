"""One writer per --destdir: fairseq-posattn-preprocess locks the folder, a
second run is refused naming the holder, a killed run's lock is taken over,
and no run that fails or is killed leaves text for --task translation."""

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import time

import pytest

from fairseq_posattn.data import destination, preprocess

FORK = multiprocessing.get_context("fork")  # a child without new imports: cheap


def argv(raw, dest, test="test"):
    return ["--source-lang", "en", "--target-lang", "de", "--trainpref", str(raw / "train"),
            "--validpref", str(raw / "valid"), "--testpref", str(raw / test),
            "--destdir", str(dest), "--joined-dictionary", "--workers", "1"]


def readable(dest):
    """The files of ``dest`` that fairseq's tasks could read (not hidden)."""
    return sorted(name for name in os.listdir(dest) if not name.startswith("."))


def binarize_then(raw, dest, after_source):
    """In a forked child: fairseq-posattn-preprocess, calling ``after_source``
    once the source side is binarized (the target side is not yet)."""
    from fairseq_cli import preprocess as fairseq_preprocess

    make_all = fairseq_preprocess._make_all

    def make_all_then(lang, vocab, args):
        make_all(lang, vocab, args)
        if lang == "en":
            after_source()

    fairseq_preprocess._make_all = make_all_then
    preprocess.cli_main(argv(raw, dest))


def paused(raw, dest, pause, go):
    binarize_then(raw, dest, lambda: (pause.set(), go.wait(120)))


def killed(raw, dest):
    binarize_then(raw, dest, lambda: os.kill(os.getpid(), signal.SIGKILL))


def same_files(dest, reference):
    assert readable(dest) == readable(reference)
    for name in readable(reference):
        if name != "preprocess.log":
            assert (dest / name).read_bytes() == (reference / name).read_bytes(), name


def test_a_second_run_is_refused_naming_the_lock_and_its_holder(toy_raw, toy_struct_bin,
                                                                tmp_path):
    dest = tmp_path / "bin"
    pause, go = FORK.Event(), FORK.Event()
    first = FORK.Process(target=paused, args=(toy_raw, dest, pause, go))
    first.start()
    try:
        assert pause.wait(120), "the first run did not get to binarize"
        assert readable(dest) == []  # half of the text is binarized, under a hidden name
        before = sorted(os.listdir(dest))
        with pytest.raises(destination.DestinationLocked) as err:
            preprocess.cli_main(argv(toy_raw, dest))
        lock = dest / destination.LOCK
        assert (f"{dest} is being written by another fairseq-posattn-preprocess: the lock {lock} "
                f"is held by pid {first.pid} on host {socket.gethostname()}, started "
                in str(err.value)), str(err.value)
        assert "another --destdir" in str(err.value)
        assert sorted(os.listdir(dest)) == before  # the refused run wrote nothing
    finally:
        go.set()
        first.join(120)
    assert first.exitcode == 0
    assert not (dest / destination.LOCK).exists()
    same_files(dest, toy_struct_bin)


def test_a_killed_run_leaves_nothing_to_train_on_and_its_lock_is_taken_over(
        toy_raw, toy_struct_bin, tmp_path, caplog):
    dest = tmp_path / "bin"
    dead = FORK.Process(target=killed, args=(toy_raw, dest))
    dead.start()
    dead.join(120)
    assert dead.exitcode == -signal.SIGKILL
    assert readable(dest) == []  # no text of either side, no dictionary
    assert (dest / destination.STAGING / "train.en-de.en.bin").exists()
    with caplog.at_level(logging.WARNING, logger="fairseq_posattn.preprocess"):
        preprocess.cli_main(argv(toy_raw, dest))
    assert f"taking over the lock {dest / destination.LOCK} left by pid {dead.pid} on host " \
        in caplog.text
    assert "that process is gone" in caplog.text
    assert sorted(os.listdir(dest)) == readable(dest)  # no lock, no staging folder
    same_files(dest, toy_struct_bin)


def test_a_failed_run_leaves_no_text(toy_raw, tmp_path):
    """fairseq stops at a missing target file after binarizing the source side."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("train.en", "train.de", "valid.en", "valid.de", "test.en"):
        os.symlink(toy_raw / name, raw / name)
    dest = tmp_path / "bin"
    with pytest.raises(FileNotFoundError, match="test.de"):
        preprocess.cli_main(argv(raw, dest))
    assert os.listdir(dest) == []


def lock_fork_and_die(destdir, forked):
    """In a forked child: take the lock, fork a worker that sleeps, die by SIGKILL."""
    with destination.destination_lock(destdir):
        worker = os.fork()
        if worker == 0:
            time.sleep(120)
            os._exit(0)
        forked.send(worker)
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_forked_by_a_killed_run_does_not_keep_its_lock(tmp_path):
    """The lock ends with the process that took it, not with the processes
    it forked (--workers), which may outlive it."""
    told, forked = FORK.Pipe(duplex=False)
    dead = FORK.Process(target=lock_fork_and_die, args=(str(tmp_path), forked))
    dead.start()
    assert told.poll(120), "the child did not fork"
    worker = told.recv()
    try:
        dead.join()  # waitpid: a timeout would wait for the pipe the worker keeps open
        assert dead.exitcode == -signal.SIGKILL
        os.kill(worker, 0)  # the worker lives on
        with destination.destination_lock(str(tmp_path)):
            pass
    finally:
        os.kill(worker, signal.SIGKILL)


def test_the_lock_file_records_its_holder_while_held(tmp_path):
    with destination.destination_lock(str(tmp_path)):
        with pytest.raises(destination.DestinationLocked, match=f"held by pid {os.getpid()} "):
            with destination.destination_lock(str(tmp_path)):
                pass
    assert os.listdir(tmp_path) == []


def test_a_finished_destination_is_not_binarized_over(toy_raw, toy_struct_bin, tmp_path):
    """As fairseq-preprocess: a dictionary it would build is never replaced."""
    dest = tmp_path / "bin"
    shutil.copytree(toy_struct_bin, dest)
    with pytest.raises(FileExistsError, match=f"{dest / 'dict.en.txt'} exists: --destdir holds "
                                              f"a binarized corpus already"):
        preprocess.cli_main(argv(toy_raw, dest))
    same_files(dest, toy_struct_bin)
    assert sorted(os.listdir(dest)) == readable(dest)
