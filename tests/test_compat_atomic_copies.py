"""Checkpoint copies (fairseq_posattn.compat.atomic_copies): fairseq-train
copies its first checkpoint of a save over checkpoint_last.pt, _best.pt and
the others; a full disk or a SIGKILL in mid-copy left a partial file where the
previous checkpoint was.  Every copy now goes through a temporary file and a
rename; the interruptions are made in the middle of the copy, after half of
the checkpoint was written."""

import errno
import os
import shutil
import signal
import textwrap
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

import fairseq_posattn  # noqa: F401  (installs the repairs)
from conftest import run_cli_in_process, run_python, tiny_training
from fairseq_posattn.compat.atomic_copies import TEMPORARY_SUFFIX
from fairseq_posattn.compat.checkpoint_integrity import verify_checkpoint

# writes the first half of the checkpoint to whatever file the copy writes, then ...
HALF_A_COPY = """
def half_a_copy(src, dst, *args, **kwargs):
    data = open(src, "rb").read()
    with open(dst, "wb") as f:
        f.write(data[:len(data) // 2])
    {then}
"""


def interrupted_copies(then: str, only: str = ""):
    """``shutil.copyfile`` (how fairseq and the repair copy) that stops halfway
    through a copy whose target contains ``only``."""
    namespace = {"errno": errno, "os": os, "signal": signal}
    exec(textwrap.dedent(HALF_A_COPY.format(then=then)), namespace)
    copyfile = shutil.copyfile

    def copy(src, dst, *args, **kwargs):
        if only in os.path.basename(dst):
            return namespace["half_a_copy"](src, dst)
        return copyfile(src, dst, *args, **kwargs)

    return copy


def saved(path: Path, seed: int) -> dict:
    state = {"model": {"w": torch.randn(4096, generator=torch.Generator().manual_seed(seed))}}
    torch.save(state, str(path))
    return state


def assert_intact(path: Path, state: dict) -> None:
    verify_checkpoint(str(path))  # every member's CRC-32
    assert torch.equal(torch.load(str(path), weights_only=True)["model"]["w"], state["model"]["w"])


FULL_DISK = "raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)"


def test_a_full_disk_in_mid_copy_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    previous = saved(tmp_path / "checkpoint_last.pt", seed=1)
    saved(tmp_path / "checkpoint_2_40.pt", seed=2)
    monkeypatch.setattr(shutil, "copyfile", interrupted_copies(FULL_DISK))
    with pytest.raises(OSError, match="No space left on device"):
        PathManager.copy(str(tmp_path / "checkpoint_2_40.pt"), str(tmp_path / "checkpoint_last.pt"),
                         overwrite=True)
    assert_intact(tmp_path / "checkpoint_last.pt", previous)  # fairseq: half of the new one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_2_40.pt",
                                                           "checkpoint_last.pt"]


def test_a_sigkill_in_mid_copy_keeps_the_previous_checkpoint(tmp_path):
    previous = saved(tmp_path / "checkpoint_best.pt", seed=1)
    new = saved(tmp_path / "checkpoint3.pt", seed=3)
    code = HALF_A_COPY.format(then="os.kill(os.getpid(), signal.SIGKILL)") + textwrap.dedent("""
        import os, shutil, signal, sys
        import fairseq_posattn
        from fairseq.file_io import PathManager
        shutil.copyfile = half_a_copy
        PathManager.copy(sys.argv[1], sys.argv[2], overwrite=True)
    """)
    proc = run_python(code, tmp_path / "checkpoint3.pt", tmp_path / "checkpoint_best.pt",
                      check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert_intact(tmp_path / "checkpoint_best.pt", previous)  # fairseq: half of the new one
    # the next copy replaces the partial temporary file
    PathManager.copy(str(tmp_path / "checkpoint3.pt"), str(tmp_path / "checkpoint_best.pt"),
                     overwrite=True)
    assert_intact(tmp_path / "checkpoint_best.pt", new)
    assert not list(tmp_path.glob("*" + TEMPORARY_SUFFIX))


@pytest.mark.slow
def test_fairseq_train_copies_every_checkpoint_atomically(toy_data_bin, tmp_path, monkeypatch):
    save_dir = tmp_path / "checkpoints"
    keep = ["--save-interval-updates", "2", "--keep-best-checkpoints", "2"]
    targets, copyfile = [], shutil.copyfile

    def recorded(src, dst, *args, **kwargs):
        targets.append(os.path.basename(dst))
        return copyfile(src, dst, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(shutil, "copyfile", recorded)
        run_cli_in_process("fairseq-train", *tiny_training(toy_data_bin, save_dir, extra=keep))
    names = {p.name for p in save_dir.iterdir()}
    copied = {name[:-len(TEMPORARY_SUFFIX)] for name in targets}
    # last, best and best_* are copies (the epoch's and the update's checkpoints are
    # always the first of a save, which fairseq writes to a .tmp file and renames)
    assert {"checkpoint_last.pt", "checkpoint_best.pt"} <= copied
    assert any(name.startswith("checkpoint.best_loss_") for name in copied)
    assert {"checkpoint1.pt", "checkpoint_1_2.pt"} <= names - copied
    assert all(name.endswith(TEMPORARY_SUFFIX) for name in targets), targets  # fairseq: none
    assert not any(name.endswith(TEMPORARY_SUFFIX) for name in names)

    # resuming, the disk fills up while checkpoint_last.pt is copied
    last = save_dir / "checkpoint_last.pt"
    before = last.read_bytes()
    monkeypatch.setattr(shutil, "copyfile", interrupted_copies(FULL_DISK, only="checkpoint_last"))
    with pytest.raises(OSError, match="No space left on device"):
        run_cli_in_process("fairseq-train", *tiny_training(toy_data_bin, save_dir, extra=keep,
                                                           max_update=6))
    assert last.read_bytes() == before  # fairseq: half of the new checkpoint
    state = checkpoint_utils.load_checkpoint_to_cpu(str(last))  # verified, loads
    assert state["optimizer_history"][-1]["num_updates"] == 4
    assert not list(save_dir.glob("*" + TEMPORARY_SUFFIX))
