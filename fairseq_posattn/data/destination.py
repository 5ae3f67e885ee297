"""One writer per ``--destdir``: the lock that ``fairseq-posattn-preprocess``
holds while it writes, and the staging folder its text output goes through.

:func:`destination_lock` takes ``fcntl.flock`` on ``{destdir}/`` :data:`LOCK`
and writes its holder into it.  The kernel drops the lock when the holder
ends, however it ends: a second run while the holder lives is refused naming
it; a lock file left by a killed run is taken over with a warning, and that
run's unfinished output is removed.  :func:`staged` moves fairseq's output
into ``--destdir`` only when it has finished (the dictionaries last).
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

from ..errors import UserError
from .tree_files import PARTIAL

logger = logging.getLogger("fairseq_posattn.preprocess")

LOCK = ".fairseq-posattn-preprocess.lock"
STAGING = ".fairseq-posattn-preprocess.partial"
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
    block ends without an error its files move into ``destdir`` (the
    dictionaries last; a log is appended to the one there), and the folder is
    removed either way.  Use it under :func:`destination_lock`."""
    staging = os.path.join(destdir, STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        yield staging
        for name in sorted(os.listdir(staging), key=lambda name: name.startswith("dict.")):
            target = os.path.join(destdir, name)
            if name.endswith(".log") and os.path.exists(target):
                with open(os.path.join(staging, name), "rb") as log, open(target, "ab") as old:
                    shutil.copyfileobj(log, old)
            else:
                os.replace(os.path.join(staging, name), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
