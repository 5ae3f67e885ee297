"""Source sentences with their dependency trees, batched for the encoder.

The collater decodes the tree files' values
(:mod:`fairseq_posattn.data.tree_files`) into the piece-level tree inputs that
the encoder reads (:class:`~fairseq_posattn.structure.TreeInputs`: Wang et al.
2019's depths ``[B, T]`` and relative structural positions ``[B, T, T]``, the
dependency distances ``[B, T, T]``, PASCAL's parent positions ``[B, T]``), and
only those, laid out exactly like ``src_tokens``: same sentence order, same
padding side, the appended EOS, and ``--truncate-source`` applied.
"""

from typing import Callable, Optional, Sequence

import numpy as np
from fairseq.data import BaseWrapperDataset

from ..structure import WANG_TREE_INPUTS, StructureError, TreeInputs, batch_tree_inputs
from .tree_files import refuse_mismatch


class TreeLanguagePairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose source sentences have
    trees: ``trees[i]`` is sentence i's tree over its pieces as
    :func:`~fairseq_posattn.structure.pieces.encode_piece_tree` encodes it;
    ``rule``: :data:`~fairseq_posattn.structure.RULES`; ``name``: the split;
    ``wanted``: the inputs to collate, asked at every batch (the task knows
    them once its models are built, which may be after the split is loaded);
    None: :data:`~fairseq_posattn.structure.WANG_TREE_INPUTS`."""

    def __init__(self, dataset, trees: Sequence, rule: str = "figure", name: str = "",
                 wanted: Optional[Callable[[], TreeInputs]] = None):
        super().__init__(dataset)
        self.trees = trees
        self.rule = rule
        self.name = name
        self.wanted = wanted

    def __getitem__(self, index):
        item = self.dataset[index]
        item["tree"] = np.asarray(self.trees[index])
        return item

    def collater(self, samples, pad_to_length=None):
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if len(samples) == 0 or "net_input" not in batch:
            return batch
        net_input = batch["net_input"]
        by_id = {sample["id"]: sample["tree"] for sample in samples}
        ids = batch["id"].tolist()
        trees = [by_id[i] for i in ids]
        kept = (net_input["src_lengths"] - 1).numpy()  # the source ends with EOS
        # --truncate-source keeps the same prefix length of every long sentence
        max_pieces = int(kept.max())
        available = np.fromiter(map(len, trees), dtype=np.int64, count=len(trees))
        refuse_mismatch(
            kept != np.minimum(available, max_pieces),
            lambda b, count: f"split '{self.name}', sentence {ids[b]}: {kept[b]} source tokens "
            f"before EOS but {available[b]} pieces in its tree data; the tree data does not "
            f"belong to this text, rerun fairseq-posattn-preprocess")
        try:
            net_input.update(batch_tree_inputs(
                trees,
                WANG_TREE_INPUTS if self.wanted is None else self.wanted(),
                rule=self.rule,
                append_eos=True,
                max_pieces=max_pieces,
                left_pad=self.dataset.left_pad_source,
                width=net_input["src_tokens"].size(1),
            ))
        except StructureError as err:  # it names the batch position only
            raise StructureError(
                f"split '{self.name}', a batch of sentences {ids} (batch sentence b is "
                f"the b-th, from 0): {err}; the tree data is corrupt: rerun "
                f"fairseq-posattn-preprocess"
            ) from None
        return batch
