"""Atomic file output: a file either appears complete or not at all.

Every file that a long job writes (parse chunks, merged parses, tokenized
text, hypotheses, scores) goes through :func:`atomic_output`, so a killed job
never leaves a half-written file that looks finished, and a rerun can trust
whatever it finds.  Text files are read line by line with
:func:`stream_lines` (or whole, :func:`read_lines`).
"""

import contextlib
import os
import tempfile
from typing import Iterator, List


def _fsync_dir(path: str) -> None:
    """Make a rename in ``path`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w"):
    """Open a temporary file beside ``path`` for writing (``mode`` "w" or "wb";
    text is UTF-8 with ``\\n`` line ends); when the block ends without an
    error, fsync it, give it the permissions a plain ``open`` would give under
    the current umask, and rename it to ``path``.  On an error the temporary
    file is removed and ``path`` is untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def stream_lines(path: str) -> Iterator[str]:
    """The lines of the UTF-8 text file ``path``, without their newlines."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n")


def read_lines(path: str) -> List[str]:
    return list(stream_lines(path))
