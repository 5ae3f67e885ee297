"""Text and trees aligned: the word starts that the subword markers of the
binarized source imply agree with the word starts of its trees.

A tree file marks, per piece, whether it starts a word (a non-zero value,
:func:`~fairseq_posattn.structure.pieces.encode_piece_tree`); the binarized
source holds piece ids, whose dictionary entries carry the markers of
``--subword-scheme`` (``@@`` continues a word, ``▁`` starts one, ``none``:
every piece is a word; a sentence's first piece always starts one).
:class:`WordStarts` reads each entry's marker once and compares blocks of
sentences with numpy.  ``<unk>`` hides the marker of the piece it replaced,
so what that marker decides is not checked.
"""

import numpy as np

from ..errors import StructureError
from ..structure.pieces import BPE_CONTINUATION, SCHEMES, SPM_SPACE


class WordStarts:
    """The markers of the entries of ``dictionary`` (a fairseq
    :class:`~fairseq.data.Dictionary`) under ``scheme``."""

    def __init__(self, dictionary, scheme: str):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.dictionary = dictionary
        self.scheme = scheme
        marker = {"subword_nmt": lambda s: s.endswith(BPE_CONTINUATION),
                  "sentencepiece": lambda s: s.startswith(SPM_SPACE),
                  "none": lambda s: False}[scheme]
        self.marked = np.fromiter(map(marker, dictionary.symbols), dtype=bool,
                                  count=len(dictionary.symbols))
        self.hidden = np.zeros(len(self.marked), dtype=bool)
        self.hidden[dictionary.unk()] = True

    def _starts(self, pieces: np.ndarray, firsts: np.ndarray):
        """(word starts by the markers, whether the markers decide them) of
        concatenated sentences whose first pieces are at ``firsts``."""
        starts = np.ones(len(pieces), dtype=bool)
        known = np.ones(len(pieces), dtype=bool)
        if self.scheme == "subword_nmt":  # a piece's marker speaks of the next piece
            starts[1:] = ~self.marked[pieces[:-1]]
            known[1:] = ~self.hidden[pieces[:-1]]
        elif self.scheme == "sentencepiece":
            starts = self.marked[pieces]
            known = ~self.hidden[pieces]
        starts[firsts] = known[firsts] = True
        return starts, known

    def refuse_misaligned(self, source: np.ndarray, values: np.ndarray, sizes: np.ndarray,
                          where, first: int = 0) -> None:
        """StructureError if the tree of a sentence groups its pieces into
        other words than its markers do.  ``source``: the binarized source of
        consecutive sentences (each followed by EOS) and ``values`` their tree
        values, each concatenated; ``sizes``: their piece counts (without EOS);
        ``where(i)`` names sentence ``i`` (counted from ``first``)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        ends = np.cumsum(sizes + 1)
        source = np.asarray(source)
        outside = np.flatnonzero((source < 0) | (source >= len(self.marked)))
        if len(outside):
            i = int(np.searchsorted(ends, outside[0], side="right"))
            raise StructureError(
                f"{where(first + i)}: token id {source[outside[0]]} is outside the dictionary "
                f"of {len(self.marked)} entries ({len(outside)} such tokens in this block): the "
                f"binarized text is damaged or was binarized with another dictionary; rerun "
                f"fairseq-posattn-preprocess")
        pieces = np.delete(source, ends - 1)  # the EOS of each sentence
        firsts = (ends - sizes - 1 - np.arange(len(sizes)))[sizes > 0]
        starts, known = self._starts(pieces, firsts)
        trees = np.asarray(values) != 0
        bad = np.flatnonzero(known & (starts != trees))
        if not len(bad):
            return
        sentence_of = np.searchsorted(np.cumsum(sizes), bad, side="right")
        i = int(sentence_of[0])
        span = slice(int(ends[i] - sizes[i] - 1 - i), int(ends[i] - 1 - i))
        marked = np.where(known[span], starts[span], trees[span])
        raise StructureError(
            f"{where(first + i)}: the subword markers ({self.scheme}) group its pieces into "
            f"the words {self._words(pieces[span], marked)} but its tree groups them into "
            f"{self._words(pieces[span], trees[span])} "
            f"({len(np.unique(sentence_of))} sentences in this block disagree). Either the "
            f"trees belong to other sentences (trees swapped, or the text segmented anew "
            f"after it was binarized): rerun fairseq-posattn-preprocess with the parse of "
            f"this very text; or the pieces are not {self.scheme} pieces: pass the "
            f"--subword-scheme that made them")

    def _words(self, pieces: np.ndarray, starts: np.ndarray) -> str:
        """``[un@@ believ@@ able] [.]``: the pieces grouped into words."""
        words = []
        for piece, start in zip(pieces.tolist(), starts.tolist()):
            if start or not words:
                words.append([])
            words[-1].append(self.dictionary[piece])
        return " ".join("[" + " ".join(word) + "]" for word in words)
