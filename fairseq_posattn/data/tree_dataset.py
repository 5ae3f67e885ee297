"""Source sentences with their dependency trees, batched for the encoder.

On disk the structure is O(T) per sentence (fairseq indexed datasets beside
the binarized text, see :mod:`fairseq_posattn.data.tree_files`): the head of
every word and the word of every subword piece.  The collater derives the
piece-level depths ``[B, T]`` and relative structural positions ``[B, T, T]``
(Wang et al. 2019, Sec. 3.1) for the batch, laid out exactly like
``src_tokens``: same sentence order, same padding side, the appended EOS, and
``--truncate-source`` applied.
"""

from typing import Sequence

import numpy as np
from fairseq.data import BaseWrapperDataset

from ..structure import StructureError, batch_piece_structure


class TreeLanguagePairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose source sentences have trees.

    Args:
        dataset: the language pair dataset (its source ends with EOS).
        heads: per sentence, the 1-based head of each word (0 = root).
        piece_words: per sentence, the 0-based word of each subword piece.
        rule: ``"figure"`` or ``"text"`` (see :func:`relative_structural_positions`).
        name: the split, for error messages.
    """

    def __init__(self, dataset, heads: Sequence, piece_words: Sequence, rule: str = "figure",
                 name: str = ""):
        super().__init__(dataset)
        self.heads = heads
        self.piece_words = piece_words
        self.rule = rule
        self.name = name

    def __getitem__(self, index):
        item = self.dataset[index]
        heads = np.asarray(self.heads[index], dtype=np.int64)
        piece_words = np.asarray(self.piece_words[index], dtype=np.int64)
        if len(piece_words) and (piece_words.max() >= len(heads) or piece_words.min() < 0):
            raise StructureError(
                f"split '{self.name}', sentence {index}: a piece points to word "
                f"{int(piece_words.max())} of a tree with {len(heads)} words; the tree "
                f"data is corrupt, rerun fairseq-posattn-preprocess"
            )
        item["heads"], item["piece_words"] = heads, piece_words
        return item

    def collater(self, samples, pad_to_length=None):
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if len(samples) == 0 or "net_input" not in batch:
            return batch
        net_input = batch["net_input"]
        by_id = {sample["id"]: sample for sample in samples}
        ids = batch["id"].tolist()
        kept = (net_input["src_lengths"] - 1).tolist()  # the source ends with EOS
        # --truncate-source keeps the same prefix length of every long sentence
        max_pieces = max(kept)
        for sentence, pieces in zip(ids, kept):
            available = len(by_id[sentence]["piece_words"])
            if pieces != min(available, max_pieces):
                raise StructureError(
                    f"split '{self.name}', sentence {sentence}: {pieces} source tokens "
                    f"before EOS but {available} pieces in its tree data; the tree data "
                    f"does not belong to this text, rerun fairseq-posattn-preprocess"
                )
        try:
            depths, relative, _ = batch_piece_structure(
                [by_id[i]["heads"] for i in ids],
                [by_id[i]["piece_words"] for i in ids],
                rule=self.rule,
                append_eos=True,
                max_pieces=max_pieces,
                left_pad=self.dataset.left_pad_source,
                width=net_input["src_tokens"].size(1),
            )
        except StructureError as err:  # it names the batch position only
            raise StructureError(
                f"split '{self.name}', a batch of sentences {ids} (batch sentence b is "
                f"the b-th, from 0): {err}; the tree data is corrupt: rerun "
                f"fairseq-posattn-preprocess"
            ) from None
        net_input["src_depths"] = depths
        net_input["src_structural_positions"] = relative
        return batch
