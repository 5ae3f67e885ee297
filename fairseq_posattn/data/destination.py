"""One writer per ``--destdir``: the lock that ``fairseq-posattn-preprocess``
holds while it writes, and the staging folder its output goes through.

:func:`destination_lock` takes ``fcntl.flock`` on ``{destdir}/`` :data:`LOCK`
and writes its holder into it.  The kernel drops the lock when the holder
ends, however it ends: a second run while the holder lives is refused naming
it; a lock file left by a killed run is taken over with a warning, and that
run's unfinished output is removed.  :func:`staged` moves the whole output
into ``--destdir`` only when it has finished, each file by a rename (the
staging folder is inside ``--destdir``, so on its filesystem); a run killed
while the files move is undone by the next (:func:`roll_back`).
"""

import contextlib
import fcntl
import glob
import json
import logging
import os
import shutil
import socket
import sys
import time

from .checksums import MANIFEST
from ..errors import UserError
from .tree_files import PARTIAL

logger = logging.getLogger("fairseq_posattn.preprocess")

LOCK = ".fairseq-posattn-preprocess.lock"
STAGING = ".fairseq-posattn-preprocess.partial"
MOVING = ".moving"  # in the staging folder: the names of its files, while they move into place
REPLACED = ".replaced"  # in the staging folder: links to the files they replace
_HELD = set()  # file descriptors of the locks this process holds


def _drop_in_child() -> None:
    """In a forked child: close the inherited lock descriptors, so that the
    lock ends with the process that took it."""
    for fd in _HELD:
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_in_child)


class DestinationLocked(UserError, RuntimeError):
    """Another run writes into the same ``--destdir``."""


def _holder(fd: int) -> str:
    """The holder recorded in an open lock file, in words."""
    text = os.pread(fd, 1 << 16, 0).decode("utf-8", errors="replace")
    try:
        who = json.loads(text)
        return (f"pid {who['pid']} on host {who['host']}, started {who['started']} "
                f"({who['command']})")
    except (ValueError, KeyError, TypeError):
        return f"an unknown process (the lock file holds {text!r})" if text else ""


def _open_locked(path: str):
    """``(fd, None)`` with the lock on ``path`` taken, or ``(None, holder)``
    when another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd) or "a process that has not yet written its name"
            os.close(fd)
            return None, holder
        try:  # the holder before us may have removed the file as it let go
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd, None
        except FileNotFoundError:
            pass
        os.close(fd)


@contextlib.contextmanager
def destination_lock(destdir: str):
    """Hold the lock of ``destdir`` (created if missing) for the block; the
    lock file is removed at the end."""
    os.makedirs(destdir, exist_ok=True)
    path = os.path.join(destdir, LOCK)
    fd, holder = _open_locked(path)
    if fd is None:
        raise DestinationLocked(
            f"{destdir} is being written by another fairseq-posattn-preprocess: the lock "
            f"{path} is held by {holder}. Wait for it to finish, or write to another "
            f"--destdir (two runs into one folder would mix their files)")
    _HELD.add(fd)
    try:
        left = _holder(fd)
        if left:
            logger.warning(f"taking over the lock {path} left by {left}: that process is gone "
                           f"without finishing; removing its unfinished output")
            roll_back(destdir)
            shutil.rmtree(os.path.join(destdir, STAGING), ignore_errors=True)
            for partial in glob.glob(os.path.join(glob.escape(destdir), f"*.{PARTIAL}.*")):
                os.unlink(partial)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _HELD.discard(fd)
        os.close(fd)


@contextlib.contextmanager
def staged(destdir: str):
    """A fresh folder inside ``destdir`` for the block to write into; when the
    block ends without an error its files move into ``destdir`` (each a
    rename; the log is appended to the one there), and the folder is removed
    either way.  A run killed while the files move is undone by the next run
    (:func:`roll_back`).  Use it under :func:`destination_lock`."""
    staging = os.path.join(destdir, STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        yield staging
        _move_in(staging, destdir)
    except BaseException:
        roll_back(destdir)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_in(staging: str, destdir: str) -> None:
    """Move the files of ``staging`` into ``destdir``, the manifest last and the
    dictionaries just before it: first each file they replace is linked into
    :data:`REPLACED` and the list of the files into :data:`MOVING`, so that
    :func:`roll_back` can put ``destdir`` back as it was."""
    names = sorted(os.listdir(staging), key=lambda name: (name == MANIFEST, name.startswith("dict.")))
    replaced = [name for name in names if os.path.exists(os.path.join(destdir, name))]
    os.mkdir(os.path.join(staging, REPLACED))
    for name in replaced:
        target = os.path.join(destdir, name)
        os.link(target, os.path.join(staging, REPLACED, name), follow_symlinks=False)  # a link stays one
        if name.endswith(".log"):  # the new log goes after the old one
            with open(os.path.join(staging, name), "rb") as log:
                new = log.read()
            shutil.copyfile(target, os.path.join(staging, name))
            with open(os.path.join(staging, name), "ab") as log:
                log.write(new)
    with open(os.path.join(staging, f"{MOVING}.new"), "w", encoding="utf-8") as plan:
        json.dump({"files": names, "replaced": replaced}, plan)
    os.replace(os.path.join(staging, f"{MOVING}.new"), os.path.join(staging, MOVING))
    for name in names:
        os.replace(os.path.join(staging, name), os.path.join(destdir, name))


def roll_back(destdir: str) -> None:
    """Undo the move of a staging folder's files into ``destdir`` that was
    cut short: put back the files they replaced and remove the others."""
    staging = os.path.join(destdir, STAGING)
    try:
        with open(os.path.join(staging, MOVING), encoding="utf-8") as f:
            plan = json.load(f)
    except FileNotFoundError:
        return  # nothing had moved yet
    for name in plan["files"]:  # each step can be done again: a roll back may be cut short too
        if name in plan["replaced"]:
            with contextlib.suppress(FileNotFoundError):
                os.replace(os.path.join(staging, REPLACED, name), os.path.join(destdir, name))
        elif not os.path.exists(os.path.join(staging, name)):  # it had moved in
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(destdir, name))
    os.unlink(os.path.join(staging, MOVING))
