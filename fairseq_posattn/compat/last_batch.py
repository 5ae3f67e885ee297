"""Keep the last batch that fairseq-fixed 0.12.3.1 drops.

fairseq-fixed's ``fairseq.data.data_utils.batch_by_size`` discards an epoch's
final batch when its size is not a multiple of ``--required-batch-size-multiple``
(official fairseq 0.12.2 keeps it).  That batch holds the longest sentences,
so training skips them and ``fairseq-generate`` scores an incomplete test set.
:func:`install` wraps ``batch_by_size`` where it drops the batch, so that the
indices it left out come back as one last batch (every fairseq call site looks
the function up as ``data_utils.batch_by_size``).
"""

import functools

import numpy as np

from .patching import wrap_once


def _drops_last_batch(batch_by_size) -> bool:
    batches = batch_by_size(np.arange(3, dtype=np.int64), num_tokens_fn=lambda index: 1,
                            max_sentences=2, required_batch_size_multiple=2)
    return sum(len(b) for b in batches) < 3


def _keeping_last_batch(batch_by_size):
    @functools.wraps(batch_by_size)
    def wrapper(indices, *args, fixed_shapes=None, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = batch_by_size(indices, *args, fixed_shapes=fixed_shapes, **kwargs)
        kept = sum(len(b) for b in batches)
        if fixed_shapes is None and kept < len(indices):
            # batches are consecutive runs of ``indices``: the dropped one is the tail
            batches = list(batches) + [indices[kept:]]
        return batches

    return wrapper


def install() -> None:
    from fairseq.data import data_utils

    if _drops_last_batch(data_utils.batch_by_size):
        wrap_once(data_utils, "batch_by_size", _keeping_last_batch)
