"""The tree files: what ``fairseq-posattn-preprocess`` writes beside the
binarized source and ``translation_struct`` reads back.

Per split, beside fairseq's ``{split}.{src}-{tgt}.{src}.bin/.idx``, two
fairseq mmap indexed datasets ``{split}.{src}-{tgt}.{src}.NAME.{bin,idx}``:

* ``heads``: the 1-based head of every word (0 = root);
* ``piece2word``: the 0-based word of every subword piece.

:class:`TreeFileWriter` writes them (under temporary names, moved into place
only when complete); :func:`load_trees` finds, checks and loads them.
"""

import itertools
import os
import struct
from typing import Optional, Sequence

import numpy as np
import torch
from fairseq.data import ConcatDataset, indexed_dataset

from ..structure import StructureError

TREE_FILES = ("heads", "piece2word")


class TreeFileWriter:
    """Writes the tree files of one split with the prefix ``dest``
    (``{destdir}/{split}.{src}-{tgt}.{src}``)::

        with TreeFileWriter(dest) as out:
            out.add(heads, piece2word)   # per sentence, in corpus order

    Written under temporary names and moved into place when the block ends
    without an error, so a killed run leaves no half-written file that looks
    finished; on an error the temporary files are removed."""

    def __init__(self, dest: str):
        self.dest = dest
        self.partial = {name: f"{dest}.{name}.partial" for name in TREE_FILES}
        self.builders = {}

    def __enter__(self) -> "TreeFileWriter":
        self.builders = {
            name: indexed_dataset.MMapIndexedDatasetBuilder(f"{path}.bin", dtype=np.int32)
            for name, path in self.partial.items()
        }
        return self

    def add(self, heads: Sequence[int], piece2word: Sequence[int]) -> None:
        self.builders["heads"].add_item(torch.tensor(np.asarray(heads), dtype=torch.int32))
        self.builders["piece2word"].add_item(
            torch.tensor(np.asarray(piece2word), dtype=torch.int32))

    def __exit__(self, kind, error, traceback) -> None:
        for name, builder in self.builders.items():
            builder.finalize(f"{self.partial[name]}.idx")  # also closes the data file
        for name, path in self.partial.items():
            for ext in ("bin", "idx"):
                if kind is None:
                    os.replace(f"{path}.{ext}", f"{self.dest}.{name}.{ext}")
                else:
                    os.unlink(f"{path}.{ext}")


def _tree_prefix(data_path, split, src, tgt, impl) -> Optional[str]:
    """fairseq's source prefix of ``split`` (either language order), if the text exists."""
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data_path, f"{split}.{pair}.{src}")
        if indexed_dataset.dataset_exists(prefix, impl=impl):
            return prefix
    return None


# fairseq's MMapIndexedDataset.Index starts with its magic (9 bytes), version
# (8), dtype code (1) and sentence count (8)
_INDEX_MAGIC = b"MMIDIDX\x00\x00"
_INDEX_HEADER_BYTES = 26
_REWRITE = ("rerun fairseq-posattn-preprocess (with --trees-only it rewrites just the "
            "trees beside the binarized text)")


def load_tree_file(path: str):
    """One tree file written by fairseq-posattn-preprocess (a fairseq mmap
    indexed dataset ``path.bin`` + ``path.idx``), or None if it is missing.

    Checked as a whole before any batch is made: the index must be readable,
    as long as its sentence count says, its byte offsets those of its sizes,
    and the data file exactly as long as the sizes say.  So any change to an
    index, and a truncated, extended or half-written data file (an
    interrupted run, a copy cut short, files of two runs), is a
    :class:`StructureError` naming the file, never an IndexError or a
    silently shifted tree later on.  Values inside a data file of the right
    length are checked when batches are made (heads in range, no cycles,
    piece maps onto the words): a change that still spells a valid tree
    cannot be told from the real one.
    """
    bin_path = indexed_dataset.data_file_path(path)
    idx_path = indexed_dataset.index_file_path(path)
    if not (os.path.exists(bin_path) and os.path.exists(idx_path)):
        return None

    def corrupt(what):
        return StructureError(f"{what}; the tree files are truncated, corrupt or from two "
                              f"different runs: {_REWRITE}")

    # the index is its header, the sizes (int32) and the byte offsets (int64)
    with open(idx_path, "rb") as f:
        header = f.read(_INDEX_HEADER_BYTES)
    if (len(header) < _INDEX_HEADER_BYTES or not header.startswith(_INDEX_MAGIC)
            or struct.unpack("<Q", header[9:17]) != (1,)):
        raise corrupt(f"{idx_path} does not start with the header of a fairseq mmap index")
    (n,) = struct.unpack("<Q", header[-8:])
    if os.path.getsize(idx_path) != _INDEX_HEADER_BYTES + 12 * n:
        raise corrupt(f"{idx_path} is {os.path.getsize(idx_path)} bytes long, not the "
                      f"{_INDEX_HEADER_BYTES + 12 * n} of an index of {n} sentences")
    try:
        index = indexed_dataset.MMapIndexedDataset.Index(idx_path)
        sizes = np.array(index.sizes, dtype=np.int64)
        itemsize = np.dtype(index.dtype).itemsize
        del index
    except KeyError as err:  # dtype code
        raise corrupt(f"{idx_path} is not a readable index ({type(err).__name__}: {err})") from None
    offsets = np.fromfile(idx_path, dtype="<i8", count=n, offset=_INDEX_HEADER_BYTES + 4 * n)
    if (sizes < 0).any() or not np.array_equal(offsets, (np.cumsum(sizes) - sizes) * itemsize):
        raise corrupt(f"{idx_path}: the sentence sizes and byte offsets disagree")
    if os.path.getsize(bin_path) != int(sizes.sum()) * itemsize:
        raise corrupt(f"{bin_path} holds {os.path.getsize(bin_path)} bytes but its index "
                      f"{idx_path} describes {n} sentences of {int(sizes.sum()) * itemsize}")
    return indexed_dataset.MMapIndexedDataset(path)


def check_words_match(prefix: str, heads, piece_words) -> None:
    """Every sentence's piece map ends at the last word of its tree (the
    files of one run belong together); vectorised over the whole split."""
    if len(heads) != len(piece_words):
        raise StructureError(
            f"{prefix}.heads has {len(heads)} trees but {prefix}.piece2word has "
            f"{len(piece_words)} piece maps; {_REWRITE}"
        )
    pieces = np.asarray(piece_words.sizes, dtype=np.int64)
    words = np.asarray(heads.sizes, dtype=np.int64)
    last_word = np.full(len(pieces), -1, dtype=np.int64)
    if pieces.sum():  # the data file is exactly the concatenated maps (load_tree_file)
        index = indexed_dataset.MMapIndexedDataset.Index(
            indexed_dataset.index_file_path(f"{prefix}.piece2word"))
        data = np.memmap(indexed_dataset.data_file_path(f"{prefix}.piece2word"),
                         dtype=index.dtype, mode="r")
        del index
        last_word[pieces > 0] = data[np.cumsum(pieces)[pieces > 0] - 1]
    refuse_mismatch(
        last_word + 1 != words,
        lambda i, count: f"{prefix}, sentence {i}: its tree has {words[i]} words but its "
        f"{pieces[i]} pieces map onto {last_word[i] + 1} ({count} sentences differ); .heads "
        f"and .piece2word do not belong together: {_REWRITE}",
    )


def refuse_mismatch(mismatch: np.ndarray, describe) -> None:
    """StructureError ``describe(i, count)`` naming the first sentence ``i``
    of the ``count`` where ``mismatch`` is True."""
    bad = np.flatnonzero(mismatch)
    if len(bad):
        raise StructureError(describe(int(bad[0]), len(bad)))


def load_trees(data_path, split, src, tgt, impl, combine, upsample_primary):
    """The heads and piece->word datasets of ``split``; shards (``train1``, ...)
    are concatenated as fairseq concatenates the text."""
    parts = {name: [] for name in TREE_FILES}
    for k in itertools.count():
        prefix = _tree_prefix(data_path, split + (str(k) if k > 0 else ""), src, tgt, impl)
        if prefix is None:
            break
        for name in TREE_FILES:
            dataset = load_tree_file(f"{prefix}.{name}")
            if dataset is None:
                raise FileNotFoundError(
                    f"{prefix}.{name}.{{bin,idx}} is missing: --task translation_struct "
                    f"needs the trees that fairseq-posattn-preprocess writes beside "
                    f"the binarized source"
                )
            parts[name].append(dataset)
        check_words_match(prefix, parts["heads"][-1], parts["piece2word"][-1])
        if not combine:
            break
    if not parts["heads"]:
        raise FileNotFoundError(f"no binarized source for split '{split}' in {data_path}")
    ratios = [upsample_primary] + [1] * (len(parts["heads"]) - 1)
    return [p[0] if len(p) == 1 else ConcatDataset(p, ratios) for p in parts.values()]
