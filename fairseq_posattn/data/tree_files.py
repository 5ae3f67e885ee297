"""The tree file: what ``fairseq-posattn-preprocess`` writes beside the
binarized source and ``translation_struct`` reads back.

Per split, one fairseq mmap indexed dataset
``{split}.{src}-{tgt}.{src}.trees.{bin,idx}``: per sentence one value per
subword piece (:func:`~fairseq_posattn.structure.pieces.encode_piece_tree`),
in the smallest unsigned type that holds the longest source sentence.
:class:`TreeFileWriter` writes it (for :mod:`fairseq_posattn.data.preprocess`) and
:func:`load_trees` checks and loads it, both in constant memory, for the
collater of :mod:`fairseq_posattn.data.tree_dataset`, which decodes it into
each batch.
"""

import itertools
import os
import struct
from typing import Iterator, Optional, Tuple

import numpy as np
from fairseq.data import ConcatDataset, data_utils, indexed_dataset

from ..structure import StructureError
from .alignment import WordStarts

TREES = "trees"
PARTIAL = f"{TREES}.partial"  # the tree files' names while they are written
OLD_TREE_FILES = ("heads", "piece2word")  # two int32 files, before version 0.2
BLOCK = 1 << 16  # sentences per step of the blockwise index work

# fairseq's MMapIndexedDataset.Index: magic (9 bytes), version (8), dtype code
# (1), sentence count (8), then the sizes (int32) and byte offsets (int64)
_INDEX_MAGIC = b"MMIDIDX\x00\x00"
_INDEX_HEADER_BYTES = 26
_REWRITE = ("rerun fairseq-posattn-preprocess (with --trees-only it rewrites just the "
            "trees beside the binarized text)")


def tree_dtype(longest_source: int) -> np.dtype:
    """The smallest unsigned type of the values of a corpus whose longest
    binarized source sentence has ``longest_source`` tokens (EOS included):
    a value is at most words + 1 <= pieces + 1 = that length."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if longest_source <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise StructureError(f"a source sentence of {longest_source} tokens is too long for "
                         f"a tree file")


def blocks(n: int) -> Iterator[Tuple[int, int]]:
    """``(start, end)`` of consecutive blocks of :data:`BLOCK` sentences
    covering ``range(n)``."""
    for start in range(0, n, BLOCK):
        yield start, min(n, start + BLOCK)


class TreeFileWriter:
    """Writes the tree file of one split with the prefix ``dest``
    (``{destdir}/{split}.{src}-{tgt}.{src}``) in a ``with`` block, sentences in
    corpus order (:meth:`add_encoded`).  The data go straight to disk and the
    sizes to a side file, from which the index is written at the end, block by
    block.  The files are moved into place only when the block ends without an
    error; on an error they are removed."""

    def __init__(self, dest: str, dtype: np.dtype):
        self.dest = dest
        self.dtype = np.dtype(dtype)
        self.partial = f"{dest}.{PARTIAL}"
        self.count = 0

    def __enter__(self) -> "TreeFileWriter":
        self.data = open(f"{self.partial}.bin", "wb")
        self.sizes = open(f"{self.partial}.sizes", "wb")
        return self

    def add_encoded(self, values: np.ndarray, sizes: np.ndarray) -> None:
        """Sentences whose concatenated values are ``values`` and whose piece
        counts are ``sizes``."""
        if values.size and values.max() > np.iinfo(self.dtype).max:
            raise StructureError(f"{self.dest}: a tree value {values.max()} does not fit "
                                 f"{self.dtype}")
        self.data.write(values.astype(self.dtype).tobytes())
        self.sizes.write(np.asarray(sizes, dtype="<i4").tobytes())
        self.count += len(sizes)

    def _write_index(self, path: str) -> None:
        code = indexed_dataset._dtype_header_code(self.dtype.type)
        sizes = np.memmap(f"{self.partial}.sizes", dtype="<i4", mode="r") if self.count else []
        with open(path, "wb") as index:
            index.write(_INDEX_MAGIC + struct.pack("<QBQ", 1, code, self.count))  # version 1
            for start, end in blocks(self.count):
                index.write(np.asarray(sizes[start:end]).tobytes())
            offset = 0
            for start, end in blocks(self.count):
                ends = offset + np.cumsum(sizes[start:end], dtype=np.int64) * self.dtype.itemsize
                index.write((ends - sizes[start:end] * self.dtype.itemsize).astype("<i8").tobytes())
                offset = int(ends[-1])
        del sizes

    def __exit__(self, kind, error, traceback) -> None:
        self.data.close()
        self.sizes.close()
        try:
            if kind is None:
                self._write_index(f"{self.partial}.idx")
                for ext in ("bin", "idx"):
                    os.replace(f"{self.partial}.{ext}", f"{self.dest}.{TREES}.{ext}")
        finally:
            for ext in ("bin", "idx", "sizes"):
                if os.path.exists(f"{self.partial}.{ext}"):
                    os.unlink(f"{self.partial}.{ext}")


def _tree_prefix(data_path, split, src, tgt, impl) -> Optional[str]:
    """fairseq's source prefix of ``split`` (either language order), if the text exists."""
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data_path, f"{split}.{pair}.{src}")
        if indexed_dataset.dataset_exists(prefix, impl=impl):
            return prefix
    return None


def _corrupt(what: str) -> StructureError:
    return StructureError(f"{what}; the tree file is truncated, corrupt or from two "
                          f"different runs: {_REWRITE}")


def load_tree_file(path: str):
    """The tree file ``path.bin`` + ``path.idx`` (a fairseq mmap indexed
    dataset), or None if it is missing; checked block by block first (the
    index's header, length and offsets, the data file's length, every
    sentence's first piece starting a word), so that a truncated, extended or
    half-written file is a :class:`StructureError` naming it, never an
    IndexError or a shifted tree later on."""
    bin_path = indexed_dataset.data_file_path(path)
    idx_path = indexed_dataset.index_file_path(path)
    if not (os.path.exists(bin_path) and os.path.exists(idx_path)):
        return None
    with open(idx_path, "rb") as f:
        header = f.read(_INDEX_HEADER_BYTES)
    if (len(header) < _INDEX_HEADER_BYTES or not header.startswith(_INDEX_MAGIC)
            or struct.unpack("<Q", header[9:17]) != (1,)):
        raise _corrupt(f"{idx_path} does not start with the header of a fairseq mmap index")
    dtype = indexed_dataset._code_to_dtype.get(header[17])
    if dtype is None or not np.issubdtype(dtype, np.unsignedinteger):
        raise _corrupt(f"{idx_path} declares values of type code {header[17]}, not an "
                       f"unsigned integer type")
    itemsize = np.dtype(dtype).itemsize
    (n,) = struct.unpack("<Q", header[-8:])
    if os.path.getsize(idx_path) != _INDEX_HEADER_BYTES + 12 * n:
        raise _corrupt(f"{idx_path} is {os.path.getsize(idx_path)} bytes long, not the "
                       f"{_INDEX_HEADER_BYTES + 12 * n} of an index of {n} sentences")
    sizes = np.memmap(idx_path, dtype="<i4", mode="r", offset=_INDEX_HEADER_BYTES, shape=(n,))
    offsets = np.memmap(idx_path, dtype="<i8", mode="r", offset=_INDEX_HEADER_BYTES + 4 * n,
                        shape=(n,))
    total = 0
    for start, end in blocks(n):
        block = sizes[start:end].astype(np.int64)
        ends = total + np.cumsum(block)
        if (block < 0).any() or not np.array_equal(offsets[start:end], (ends - block) * itemsize):
            raise _corrupt(f"{idx_path}: the sentence sizes and byte offsets disagree")
        total = int(ends[-1])
    if os.path.getsize(bin_path) != total * itemsize:
        raise _corrupt(f"{bin_path} holds {os.path.getsize(bin_path)} bytes but its index "
                       f"{idx_path} describes {n} sentences of {total * itemsize}")
    if total:
        data = np.memmap(bin_path, dtype=dtype, mode="r")
        for start, end in blocks(n):
            nonempty = start + np.flatnonzero(sizes[start:end] > 0)
            bad = nonempty[data[offsets[nonempty] // itemsize] == 0]
            if len(bad):
                raise _corrupt(f"{bin_path}, sentence {bad[0]}: its first piece starts no "
                               f"word ({len(bad)} such sentences in this block)")
        del data
    del sizes, offsets
    return indexed_dataset.MMapIndexedDataset(path)


def refuse_mismatch(mismatch: np.ndarray, describe, first: int = 0) -> None:
    """StructureError ``describe(i, count)`` naming the first sentence ``i``
    (counted from ``first``) of the ``count`` where ``mismatch`` is True."""
    bad = np.flatnonzero(mismatch)
    if len(bad):
        raise StructureError(describe(first + int(bad[0]), len(bad)))


def block_values(dataset, start: int, end: int) -> np.ndarray:
    """The values of sentences ``start`` to ``end - 1`` of a fairseq indexed
    dataset, concatenated (one vectorised gather in the mmap format)."""
    if not isinstance(dataset, indexed_dataset.MMapIndexedDataset):  # fairseq's older formats
        return np.concatenate([np.asarray(dataset[i]) for i in range(start, end)])
    index = dataset._index
    sizes = index.sizes[start:end].astype(np.int64)
    firsts = index._pointers[start:end] // np.dtype(index.dtype).itemsize
    data = np.frombuffer(dataset._bin_buffer, dtype=index.dtype)
    return data[np.repeat(firsts - (np.cumsum(sizes) - sizes), sizes) + np.arange(sizes.sum())]


def refuse_unaligned(split: str, source, trees, words: WordStarts, prefix: str) -> None:
    """StructureError unless the tree file ``trees`` has a tree for every
    sentence of the binarized source ``source`` (``prefix``) of ``split``, over as many
    pieces, grouping them into the words that ``words`` reads from their
    markers.  Checked block by block: memory does not grow with the corpus."""
    if len(trees) != len(source):
        raise StructureError(f"split '{split}': {len(source)} source sentences but {len(trees)} "
                             f"trees; rerun fairseq-posattn-preprocess")
    for start, end in blocks(len(trees)):
        pieces = np.asarray(trees.sizes[start:end], dtype=np.int64)
        refuse_mismatch(
            pieces + 1 != source.sizes[start:end],  # EOS
            lambda i, count: f"split '{split}', sentence {i}: the binarized source has "
            f"{int(source.sizes[i]) - 1} tokens before EOS but its tree has "
            f"{int(trees.sizes[i])} pieces ({count} sentences in this block differ); "
            f"the trees do not belong to this text, rerun fairseq-posattn-preprocess",
            first=start)
        words.refuse_misaligned(block_values(source, start, end), block_values(trees, start, end),
                                pieces, lambda i: f"{prefix}.bin, sentence {i} (split '{split}')",
                                first=start)


def load_trees(data_path, split, src, tgt, impl, combine, upsample_primary, words: WordStarts):
    """The tree dataset of ``split``, each shard (``train1``, ...) checked
    against its binarized source (:func:`refuse_unaligned`) and concatenated
    as fairseq concatenates the text."""
    parts = []
    for k in itertools.count():
        shard = split + (str(k) if k > 0 else "")
        prefix = _tree_prefix(data_path, shard, src, tgt, impl)
        if prefix is None:
            break
        dataset = load_tree_file(f"{prefix}.{TREES}")
        if dataset is None:
            if os.path.exists(indexed_dataset.index_file_path(f"{prefix}.{OLD_TREE_FILES[0]}")):
                raise StructureError(
                    f"{prefix}.{{{','.join(OLD_TREE_FILES)}}} are tree files of "
                    f"fairseq_posattn before 0.2; this version reads one compact file "
                    f"{prefix}.{TREES}.{{bin,idx}}: rewrite it with fairseq-posattn-preprocess "
                    f"--trees-only and the options of the first run (the binarized text is "
                    f"kept), then delete the old files")
            raise FileNotFoundError(
                f"{prefix}.{TREES}.{{bin,idx}} is missing: --task translation_struct needs "
                f"the trees that fairseq-posattn-preprocess writes beside the binarized source"
            )
        refuse_unaligned(shard, data_utils.load_indexed_dataset(prefix, words.dictionary, impl),
                         dataset, words, prefix)
        parts.append(dataset)
        if not combine:
            break
    if not parts:
        raise FileNotFoundError(f"no binarized source for split '{split}' in {data_path}")
    ratios = [upsample_primary] + [1] * (len(parts) - 1)
    return parts[0] if len(parts) == 1 else ConcatDataset(parts, ratios)
