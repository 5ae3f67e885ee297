"""In-memory classification examples as fairseq datasets.

A task reads its text files, turns every example into integer tensors and
hands them here; the result is fairseq's ``NestedDictionaryDataset`` with the
usual ``id`` / ``net_input`` / ``target`` / ``nsentences`` / ``ntokens``
sample layout (the one fairseq's ``sentence_prediction`` criterion reads).
"""

from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import (
    Dictionary,
    FairseqDataset,
    IdDataset,
    ListDataset,
    NestedDictionaryDataset,
    NumSamplesDataset,
    RawLabelDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
)


def symbol_dictionary(symbols: Iterable[str]) -> Dictionary:
    """A fairseq dictionary of ``symbols``, in their order after the special symbols."""
    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    return dictionary


def by_frequency(counts: Counter, min_count: int = 1) -> List[str]:
    """The symbols counted at least ``min_count`` times, the most frequent first
    (ties in alphabetical order)."""
    return [s for s, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            if n >= min_count]


class TokenCountDataset(FairseqDataset):
    """Per-example token counts; a batch collates to their sum (``ntokens``)."""

    def __init__(self, counts: np.ndarray):
        super().__init__()
        self.counts = counts

    def __getitem__(self, index):
        return int(self.counts[index])

    def __len__(self):
        return len(self.counts)

    def collater(self, samples):
        return sum(samples)


def padded(tensors: Sequence[torch.Tensor], pad: int) -> RightPadDataset:
    """Variable-length integer tensors, right-padded with ``pad`` in a batch."""
    sizes = np.array([len(t) for t in tensors], dtype=np.int64)
    return RightPadDataset(ListDataset(list(tensors), sizes), pad)


def padded_symbols(dictionary: Dictionary, sequences: Iterable[Sequence[str]]) -> RightPadDataset:
    """Symbol sequences as ``dictionary`` indices, right-padded with its pad in a batch."""
    return padded([torch.tensor([dictionary.index(s) for s in symbols], dtype=torch.long)
                   for symbols in sequences], dictionary.pad())


def classification_dataset(
    net_input: Dict[str, FairseqDataset],
    targets: Sequence[int],
    sizes: np.ndarray,
    ntokens: np.ndarray,
    shuffle_seed: Optional[int] = None,
) -> FairseqDataset:
    """One example per target (class index), with the model's keyword inputs
    ``net_input`` (one dataset each).  Examples are ordered by ``sizes`` (the
    length fairseq filters on and batches by), equal sizes at random with
    ``shuffle_seed`` (training) or in file order; ``ntokens``: tokens per example."""
    dataset = NestedDictionaryDataset(
        {
            "id": IdDataset(),
            "net_input": net_input,
            "target": RawLabelDataset(list(targets)),
            "nsentences": NumSamplesDataset(),
            "ntokens": TokenCountDataset(ntokens),
        },
        sizes=[sizes],
    )
    if shuffle_seed is None:
        tie_break = np.arange(len(sizes))
    else:
        with data_utils.numpy_seed(shuffle_seed):
            tie_break = np.random.permutation(len(sizes))
    # np.lexsort: the last key is the primary one
    return SortDataset(dataset, sort_order=[tie_break, sizes])
