"""The checksums of a data-bin: what ``fairseq-posattn-preprocess`` wrote,
verified when ``translation_struct`` loads a split.

:data:`MANIFEST` (``SHA256SUMS`` in ``--destdir``) holds one line
``<sha256 hex>  <file name>`` per file the command wrote (fairseq's text files
and dictionaries, the tree files), the format of ``sha256sum``, so that
``sha256sum -c SHA256SUMS`` checks it without Python.  SHA-256 is a standard
hash with CPU instructions of its own: here 1.7 times as fast as BLAKE2b and
half as fast as CRC-32, which no standard tool checks from a list
(docs/reliability.md, "Damaged data").  A data-bin written before 0.4.0
has no manifest: it loads with one warning that it is unverified (``--trees-only``
records the checksums of the text it reads beside the trees).
"""

import functools
import hashlib
import logging
import os
import re
from typing import Dict, Iterable

from ..errors import StructureError

logger = logging.getLogger(__name__)

MANIFEST = "SHA256SUMS"
_WARNED = set()  # folders already warned about in this process


def sha256(path: str) -> str:
    """The SHA-256 of the file ``path``, in hex (read in blocks of 1 MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: str) -> Dict[str, str]:
    """``{file name: sha256}`` of ``folder``'s manifest; empty if it has none."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.exists(path):
        return {}
    sums = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            digest, _, name = line.rstrip("\n").partition("  ")
            if len(digest) != 64 or not name:
                raise StructureError(f"{path}, line {number}: not a line '<sha256>  <file name>' "
                                     f"of sha256sum; the manifest is damaged: rerun "
                                     f"fairseq-posattn-preprocess", source=path, line=number)
            sums[name] = digest
    return sums


def write_manifest(folder: str, sums: Dict[str, str]) -> None:
    """Write ``folder``'s manifest: ``{file name: sha256}``."""
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as f:
        f.writelines(f"{sums[name]}  {name}\n" for name in sorted(sums))


def verify(folder: str, names: Iterable[str], warn_unverified: bool = True) -> None:
    """StructureError unless each file ``names`` of ``folder`` has the checksum
    its manifest records; files it does not record are loaded with a warning,
    and so is a folder without a manifest (once) if ``warn_unverified``."""
    sums = read_manifest(folder)
    if not sums:
        if warn_unverified and folder not in _WARNED:
            _WARNED.add(folder)
            logger.warning(f"{folder} has no {MANIFEST} (fairseq-preprocess and fairseq_posattn "
                           f"before 0.4.0 write none), so a damaged file in it goes unnoticed. "
                           f"Record the checksums of its files now ('cd {folder} && sha256sum "
                           f"*.bin *.idx dict.*.txt > {MANIFEST}'), or let fairseq-posattn-preprocess "
                           f"--trees-only record them as it rewrites the trees")
        return
    unrecorded = []
    for name in names:
        if name not in sums:
            unrecorded.append(name)
        elif sha256(os.path.join(folder, name)) != sums[name]:
            path = os.path.join(folder, name)
            raise StructureError(
                f"{path}: its SHA-256 differs from the one that fairseq-posattn-preprocess "
                f"recorded in {os.path.join(folder, MANIFEST)} when it wrote the file: the file "
                f"was damaged or changed since. Restore it from a copy, or rerun "
                f"fairseq-posattn-preprocess into a new --destdir (--trees-only rewrites a tree "
                f"file in place)", source=path)
    if unrecorded:
        logger.warning(f"{os.path.join(folder, MANIFEST)} records no checksum of "
                       f"{', '.join(unrecorded)}: loaded unverified (add their lines with "
                       f"'sha256sum FILE... >> {MANIFEST}' in {folder})")


def verify_split(data_path: str, split: str, src: str, tgt: str, combine: bool) -> None:
    """:func:`verify` the files of ``split`` of the pair ``src``-``tgt`` in
    ``data_path`` (with ``combine``, those of its shards ``split1``, ... too)."""
    pair = "|".join(re.escape(f"{a}-{b}") for a, b in ((src, tgt), (tgt, src)))
    name = re.compile(rf"{re.escape(split)}{'[0-9]*' if combine else ''}\.({pair})\.")
    verify(data_path, sorted(filter(name.match, os.listdir(data_path))))
