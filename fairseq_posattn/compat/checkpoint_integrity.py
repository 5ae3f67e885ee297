"""Refuse a damaged checkpoint before torch unpickles it.

``torch.save`` writes a zip archive with a CRC-32 per member, but
``torch.load`` (torch 2.13) does not check them: a checkpoint damaged inside a
tensor loads without a word, and a truncated or empty one fails without
naming the file.  :func:`verify_checkpoint` reads the archive's directory with
``zipfile``, checks that every entry is one torch reads as written, finds each
member's bytes where torch's own reader (``torch._C.PyTorchFileReader``) finds
them and compares their CRC-32 (in threads, over a memory map) with the
directory's; it raises :class:`~fairseq_posattn.errors.DamagedCheckpointError`
naming the file and what is wrong.  Torch's legacy (non-zip) format and
archives saved after ``set_crc32_options(False)`` carry no checksums: they
load with a warning naming the file.

:func:`install` wraps fairseq's ``checkpoint_utils.load_checkpoint_to_cpu``
(fairseq-generate, -interactive, the hub, ``load_model_ensemble*``, resuming
fairseq-train), where ``torch.load`` takes a damaged tensor, so that a local
file is verified first; ``fairseq-posattn-average-checkpoints`` calls
:func:`verify_checkpoint` itself.
"""

import functools
import io
import logging
import mmap
import os
import pickle
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor

from ..errors import DamagedCheckpointError
from .patching import wrap_once

logger = logging.getLogger(__name__)

_HINT = "Restore the file from a copy or load another checkpoint"
_ZIP_START = b"PK\x03\x04"
_THREADS = min(8, os.cpu_count() or 1)
_DOS_DIRECTORY = 0x10  # of a directory entry's external attributes
# what zipfile and torch's reader raise on a damaged archive: bad CRC or header
# (BadZipFile), data ending early (EOFError), a damaged compression method
# (zlib.error, NotImplementedError), encryption flag or torch's reader
# (RuntimeError), offset or a name that is not UTF-8 (ValueError)
_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError,
               ValueError)


def _legacy_headers():
    """How torch's legacy format begins: its magic number, pickled by any protocol."""
    from torch.serialization import MAGIC_NUMBER

    return tuple(pickle.dumps(MAGIC_NUMBER, protocol=p)
                 for p in range(2, pickle.HIGHEST_PROTOCOL + 1))


def _member_kind(name: str) -> str:
    """What a member of torch's archive holds, e.g. ``"a tensor's storage"``."""
    if name.endswith("/data.pkl"):
        return "the pickled state"
    if "/data/" in name:
        return "a tensor's storage"
    return "a torch record"


def _damaged(path: str, problem: str) -> DamagedCheckpointError:
    return DamagedCheckpointError("%s: %s. %s" % (path, problem, _HINT), path)


def _damaged_member(path: str, member: zipfile.ZipInfo, problem: str) -> DamagedCheckpointError:
    return _damaged(path, "the checkpoint is damaged in member %s (%s, %d bytes): %s"
                    % (member.filename, _member_kind(member.filename), member.file_size, problem))


def _locate(path: str, archive: zipfile.ZipFile, reader, member: zipfile.ZipInfo) -> int:
    """Where torch's ``reader`` finds the bytes of ``member``, unless its entry
    (torch writes every member stored, as a file) or local header is damaged."""
    if member.compress_type != zipfile.ZIP_STORED or member.compress_size != member.file_size:
        problem = "its directory entry is damaged (not stored as torch stores members)"
    elif member.is_dir() or member.external_attr & _DOS_DIRECTORY:
        problem = "its directory entry is damaged (marked as a folder)"
    else:
        try:
            archive.open(member).close()  # its local header matches the entry
            return reader.get_record_offset(member.filename.split("/", 1)[1])
        except _ZIP_ERRORS as exc:
            problem = str(exc).split(". ")[0]
    raise _damaged_member(path, member, problem)


def _verify_members(path: str, archive: zipfile.ZipFile, data: memoryview) -> None:
    """Every member, where torch's reader finds it, against the directory's CRC-32
    (the CRC-32s in threads: zlib lets go of the GIL)."""
    import torch

    members = archive.infolist()
    if not any(m.filename.endswith("/data.pkl") for m in members):
        raise _damaged(path, "not a torch checkpoint (a zip archive without data.pkl)")
    if all(m.CRC == 0 for m in members):
        logger.warning("%s was saved without checksums (torch.serialization."
                       "set_crc32_options(False)): it is loaded unverified", path)
        return
    try:
        reader = torch._C.PyTorchFileReader(path)
    except _ZIP_ERRORS as exc:  # torch's reader refuses the directory
        raise _damaged(path, "the checkpoint is damaged: %s" % str(exc).split(". ")[0]) from None
    starts = [_locate(path, archive, reader, member) for member in members]
    with ThreadPoolExecutor(_THREADS) as pool:
        crcs = list(pool.map(lambda member, start: zlib.crc32(data[start:start + member.file_size]),
                             members, starts))
    for member, crc in zip(members, crcs):
        if crc != member.CRC:
            raise _damaged_member(path, member, "its CRC-32 does not match")


def verify_checkpoint(path: str) -> None:
    """Check every member of the torch checkpoint ``path`` against its CRC-32;
    raise :class:`DamagedCheckpointError` naming the file and what is wrong."""
    size = os.path.getsize(path)
    if size == 0:
        raise _damaged(path, "the checkpoint is empty (0 bytes)")
    with open(path, "rb") as f:
        head = f.read(32)
        if head.startswith(_legacy_headers()):
            logger.warning("%s is in torch's legacy format, which has no checksums: it is "
                           "loaded unverified (torch.save it again to get them)", path)
            return
        try:
            archive = zipfile.ZipFile(f)
        except _ZIP_ERRORS as exc:
            if not head.startswith(_ZIP_START):
                raise _damaged(path, "not a torch checkpoint (neither torch's zip format nor "
                               "its legacy format)") from None
            raise _damaged(path, "the checkpoint is truncated or its zip directory is damaged "
                           "(%d bytes; %s)" % (size, exc)) from None
        with archive, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = memoryview(mapped)
            try:
                _verify_members(path, archive, data)
            finally:
                data.release()


def torch_skips_checksums() -> bool:
    """True if ``torch.load`` loads a tensor whose stored bytes were changed."""
    import torch

    buffer = io.BytesIO()
    torch.save(torch.full((64,), 7, dtype=torch.uint8), buffer)
    data = bytearray(buffer.getvalue())
    data[data.find(bytes([7]) * 64)] = 8
    try:
        torch.load(io.BytesIO(bytes(data)))
    except RuntimeError:
        return False
    return True


def _verifying(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        if os.path.isfile(path):
            verify_checkpoint(path)
        return load_checkpoint_to_cpu(path, *args, **kwargs)

    return wrapper


def install() -> None:
    """Verify every checkpoint fairseq loads, where torch does not (idempotent)."""
    from fairseq import checkpoint_utils

    if torch_skips_checksums():
        wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _verifying)
