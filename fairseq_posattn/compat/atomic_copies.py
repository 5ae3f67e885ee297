"""Checkpoint copies that leave the previous file whole when they stop.

fairseq 0.12's ``save_checkpoint`` writes the first of a save's checkpoints
(through a temporary file and a rename) and copies it to the others
(``checkpoint_last.pt``, ``checkpoint_best.pt``, ``checkpoint.best_*.pt``,
``checkpointN.pt``, ``checkpoint_N_M.pt``) with ``PathManager.copy``, straight
over the previous file: a kill or a full disk in mid-copy leaves an empty or
partial file where the good checkpoint was.  :func:`install` wraps
``PathManager.copy``: a local copy goes to a temporary file in the target's
folder, is flushed to disk and renamed over the target with ``os.replace``
(atomic); the temporary file is removed when the copy fails.
"""

import contextlib
import functools
import os
import shutil

from .patching import wrap_once

TEMPORARY_SUFFIX = ".copying"


def copy_atomically(src_path: str, dst_path: str) -> None:
    """Copy ``src_path`` to ``dst_path``: ``dst_path`` is either what it was or the whole copy."""
    temporary = dst_path + TEMPORARY_SUFFIX
    try:
        shutil.copyfile(src_path, temporary)
        if os.path.exists(dst_path):
            shutil.copymode(dst_path, temporary)  # as copyfile over it would keep it
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, dst_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def _atomic(copy):
    @functools.wraps(copy)
    def wrapper(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        from fairseq.file_io import PathManager

        if PathManager.path_requires_pathmanager(dst_path) or (
                not overwrite and os.path.exists(dst_path)):
            return copy(src_path, dst_path, overwrite)  # remote, or fairseq's refusal
        copy_atomically(src_path, dst_path)
        return True

    return staticmethod(wrapper)


def install() -> None:
    """Make fairseq's local file copies atomic (idempotent)."""
    from fairseq.file_io import PathManager

    wrap_once(PathManager, "copy", _atomic)
