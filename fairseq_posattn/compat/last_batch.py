"""Keep the last batch that fairseq-fixed 0.12.3.1 drops.

fairseq-fixed's ``fairseq.data.data_utils.batch_by_size`` discards the final
batch of an epoch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8).  Official fairseq 0.12.2
keeps it.  The dropped batch holds the longest sentences, so training skips
them, validation loss ignores them and ``fairseq-generate`` silently scores
BLEU on an incomplete test set.

:func:`install` (called when the plugin is imported) checks whether the
installed fairseq has this behaviour and, only then, wraps ``batch_by_size``
so that the indices it left out come back as one last batch.  Every fairseq
call site looks the function up as ``data_utils.batch_by_size``.
"""

import functools

import numpy as np


def _drops_last_batch(batch_by_size) -> bool:
    batches = batch_by_size(
        np.arange(3, dtype=np.int64),
        num_tokens_fn=lambda index: 1,
        max_sentences=2,
        required_batch_size_multiple=2,
    )
    return sum(len(b) for b in batches) < 3


def install() -> None:
    """Wrap ``batch_by_size`` if (and only if) it drops the last batch. Idempotent."""
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "__keeps_last_batch__", False) or not _drops_last_batch(original):
        return

    @functools.wraps(original)
    def batch_by_size(indices, *args, fixed_shapes=None, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = original(indices, *args, fixed_shapes=fixed_shapes, **kwargs)
        kept = sum(len(b) for b in batches)
        if fixed_shapes is None and kept < len(indices):
            # batches are consecutive runs of ``indices``: the dropped one is the tail
            batches = list(batches) + [indices[kept:]]
        return batches

    batch_by_size.__keeps_last_batch__ = True
    data_utils.batch_by_size = batch_by_size
