"""One writer per --destdir: fairseq-posattn-preprocess locks the folder, a
second run is refused naming the holder, a killed run's lock is taken over,
and a run that fails or is killed, at any point, leaves --destdir as it was."""

import errno
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import time

import pytest
from fairseq.data import indexed_dataset

from fairseq_posattn.data import checksums, destination, preprocess, tree_files
from fairseq_posattn.structure import StructureError

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
                                              f"a binarized corpus already; add --trees-only to "
                                              f"write just the trees beside it"):
        preprocess.cli_main(argv(toy_raw, dest))
    same_files(dest, toy_struct_bin)
    assert sorted(os.listdir(dest)) == readable(dest)


def linked_copy(raw, to):
    """A folder of links to the files of the corpus ``raw``."""
    to.mkdir()
    for path in raw.iterdir():
        os.symlink(path, to / path.name)
    return to


def replace_file(path, text):
    path.unlink()
    path.write_text(text)


def head_999(raw):
    """The first word of the valid split's first tree gets HEAD 999."""
    lines = (raw / "valid.en.conllu").read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("1\t"))
    fields = lines[first].split("\t")
    lines[first] = "\t".join(fields[:6] + ["999"] + fields[7:])
    replace_file(raw / "valid.en.conllu", "\n".join(lines))
    return "valid.en.conllu"


def trees_of_another_split(raw):
    """The test split's CoNLL-U is the valid split's (as many sentences, other words)."""
    replace_file(raw / "test.en.conllu", (raw / "valid.en.conllu").read_text())
    return "test.en.conllu"


def snapshot(folder):
    """Every file of ``folder`` (hidden ones too) and its bytes."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("damage", [head_999, trees_of_another_split])
def test_a_bad_tree_in_a_later_split_leaves_nothing_and_the_same_command_then_works(
        toy_raw, toy_struct_bin, tmp_path, damage):
    raw = linked_copy(toy_raw, tmp_path / "raw")
    name = damage(raw)
    dest = tmp_path / "bin"
    with pytest.raises(StructureError, match=name):
        preprocess.cli_main(argv(raw, dest))
    assert os.listdir(dest) == []  # no text of any split, no trees, no lock
    (raw / name).unlink()
    os.symlink(toy_raw / name, raw / name)  # fixed
    preprocess.cli_main(argv(raw, dest))
    same_files(dest, toy_struct_bin)


def other_pair(toy_raw, tmp_path):
    """The toy corpus as English-French too (the German text under the name fr)."""
    raw = linked_copy(toy_raw, tmp_path / "raw")
    for split in ("train", "valid", "test"):
        os.symlink(toy_raw / f"{split}.de", raw / f"{split}.fr")
    return raw


def test_a_destdir_holding_another_pair_keeps_it_through_a_failed_run_then_gains_the_new_one(
        toy_raw, toy_struct_bin, tmp_path):
    """Language pairs preprocessed one after the other into one --destdir (the
    later ones with the first one's dictionary)."""
    raw = other_pair(toy_raw, tmp_path)
    dest = tmp_path / "bin"
    shutil.copytree(toy_struct_bin, dest)
    before = snapshot(dest)
    command = argv(raw, dest)
    command[command.index("de")] = "fr"
    command += ["--srcdict", str(dest / "dict.en.txt")]
    head_999(raw)
    with pytest.raises(StructureError, match="valid.en.conllu"):
        preprocess.cli_main(command)
    assert snapshot(dest) == before
    (raw / "valid.en.conllu").unlink()
    os.symlink(toy_raw / "valid.en.conllu", raw / "valid.en.conllu")
    preprocess.cli_main(command)
    after = snapshot(dest)
    grown = ("preprocess.log", checksums.MANIFEST)
    assert all(after[name] == content for name, content in before.items() if name not in grown)
    assert after["preprocess.log"].startswith(before["preprocess.log"])
    recorded = checksums.read_manifest(str(dest))
    assert recorded.items() >= checksums.read_manifest(str(toy_struct_bin)).items()
    for split in ("train", "valid", "test"):
        for name in (f"{split}.en-fr.en.bin", f"{split}.en-fr.fr.idx", f"{split}.en-fr.en.trees.bin"):
            assert recorded[name] == checksums.sha256(str(dest / name))
    assert after["valid.en-fr.en.trees.bin"] == before["valid.en-de.en.trees.bin"]


def dying_at_first_move_into(dest, action, *args):
    """In a forked child: ``action(*args)``, SIGKILLed when a first file has
    moved into ``dest`` (by ``os.replace``)."""
    replace = os.replace

    def replace_then_die(source, target):
        replace(source, target)
        if os.path.dirname(target) == str(dest):
            os.kill(os.getpid(), signal.SIGKILL)

    os.replace = replace_then_die
    action(*args)


def take_lock(dest):
    with destination.destination_lock(str(dest)):
        pass


def killed_at_first_move(dest, action, *args):
    """``action(*args)`` in a forked child, SIGKILLed when a first file has moved into ``dest``."""
    dead = FORK.Process(target=dying_at_first_move_into, args=(dest, action, *args))
    dead.start()
    dead.join(120)
    assert dead.exitcode == -signal.SIGKILL


def test_a_run_killed_while_its_files_move_into_place_is_undone_by_the_next(
        toy_raw, toy_struct_bin, tmp_path, caplog):
    """--trees-only rewrites the trees of a finished data-bin (here with control
    trees) and is killed half-way through moving them in; so is the next run,
    half-way through undoing that."""
    dest = tmp_path / "bin"
    shutil.copytree(toy_struct_bin, dest)
    command = argv(toy_raw, dest) + ["--trees-only", "--control-trees", "left-neighbour"]
    killed_at_first_move(dest, preprocess.cli_main, command)
    moved = [name for name in readable(toy_struct_bin)
             if (dest / name).read_bytes() != (toy_struct_bin / name).read_bytes()]
    assert len(moved) == 1 and moved[0].endswith(".trees.bin")  # one tree file of three splits new
    killed_at_first_move(dest, take_lock, dest)  # the next run dies as it puts back the first file
    with caplog.at_level(logging.WARNING, logger="fairseq_posattn.preprocess"):
        take_lock(dest)  # what the next run does first
    assert "that process is gone" in caplog.text
    assert sorted(os.listdir(dest)) == readable(dest)
    same_files(dest, toy_struct_bin)
    preprocess.cli_main(command)  # the same command, uninterrupted
    assert (dest / moved[0]).read_bytes() != (toy_struct_bin / moved[0]).read_bytes()
    assert checksums.read_manifest(str(dest))[moved[0]] == checksums.sha256(str(dest / moved[0]))


def failing_on(prefix):
    """``add`` of a writer, failing with a full disk when the writer's file is ``prefix``."""

    def write(add):
        def add_or_fail(self, *args):
            if os.path.basename(getattr(self, "dest", None) or self._data_file.name).startswith(prefix):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return add(self, *args)
        return add_or_fail
    return write


@pytest.mark.parametrize("writer, method, prefix", [
    (indexed_dataset.MMapIndexedDatasetBuilder, "add_item", "valid.en-de.de"),  # fairseq's text
    (tree_files.TreeFileWriter, "add_encoded", "valid.en-de.en"),  # the trees
])
def test_a_full_disk_is_one_line_naming_the_file_and_the_space_needed(
        toy_raw, toy_struct_bin, tmp_path, monkeypatch, writer, method, prefix):
    monkeypatch.setattr(writer, method, failing_on(prefix)(getattr(writer, method)))
    dest = tmp_path / "bin"
    with pytest.raises(SystemExit) as stop:
        preprocess.cli_main(argv(toy_raw, dest))
    message = str(stop.value.code)
    assert "\n" not in message
    staging = dest / destination.STAGING
    assert message.startswith(f"fairseq-posattn-preprocess: error: {staging / prefix}"), message
    needed = sum((toy_struct_bin / name).stat().st_size for name in readable(toy_struct_bin)
                 if name.endswith((".bin", ".idx")))
    estimate = int(message.split("needs about ")[1].split(" bytes")[0].replace(",", ""))
    assert needed <= estimate < 1.1 * needed
    assert f"bytes in {dest}, which has " in message and "free space or pass another --destdir" \
        in message
    assert os.listdir(dest) == []


def test_trees_only_adds_the_trees_and_the_checksums_of_the_text_it_read(
        toy_raw, toy_data_bin, toy_struct_bin, tmp_path):
    """fairseq-preprocess's output, which has no checksums, completed with --trees-only."""
    dest = tmp_path / "bin"
    shutil.copytree(toy_data_bin, dest)
    preprocess.cli_main(argv(toy_raw, dest) + ["--trees-only"])
    same_files(dest, toy_struct_bin)  # the manifest too: the same files, the same checksums


def test_trees_only_refuses_text_that_differs_from_its_checksum(toy_raw, toy_struct_bin, tmp_path):
    dest = tmp_path / "bin"
    shutil.copytree(toy_struct_bin, dest)
    source = dest / "valid.en-de.en.bin"
    content = bytearray(source.read_bytes())
    content[5] ^= 1
    source.write_bytes(bytes(content))
    before = snapshot(dest)
    with pytest.raises(StructureError, match=f"{source}: its SHA-256 differs"):
        preprocess.cli_main(argv(toy_raw, dest) + ["--trees-only"])
    assert snapshot(dest) == before


def test_trees_only_into_links_to_another_data_bin_leaves_that_one_as_it_is(
        toy_raw, toy_struct_bin, tmp_path):
    """The recipes' data-bins of control trees: links to the binarized text
    (and the manifest) of another data-bin, trees of their own; a run killed
    while its files move in is undone, links included."""
    shared = tmp_path / "bin"
    shutil.copytree(toy_struct_bin, shared)
    dest = tmp_path / "bin.left-neighbour-trees"
    dest.mkdir()
    for path in shared.iterdir():
        if ".trees." not in path.name and not path.name.endswith(".log"):
            os.symlink(path, dest / path.name)
    before, links = snapshot(shared), sorted(os.listdir(dest))
    command = argv(toy_raw, dest) + ["--trees-only", "--control-trees", "left-neighbour"]
    killed_at_first_move(dest, preprocess.cli_main, command)
    take_lock(dest)
    assert sorted(os.listdir(dest)) == links and all((dest / name).is_symlink() for name in links)
    preprocess.cli_main(command)
    assert snapshot(shared) == before
    assert not (dest / checksums.MANIFEST).is_symlink()
    assert all((dest / name).is_symlink() for name in links if name != checksums.MANIFEST)
    for name, digest in checksums.read_manifest(str(dest)).items():
        assert checksums.sha256(str(dest / name)) == digest, name
