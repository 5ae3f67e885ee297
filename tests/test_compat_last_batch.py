"""fairseq-fixed drops the last batch of an epoch; the plugin gives it back."""

import numpy as np
from fairseq.data import data_utils
from hypothesis import given, settings
from hypothesis import strategies as st

import fairseq_posattn  # noqa: F401  (installs the fix)
from fairseq_posattn.compat.last_batch import _drops_last_batch


def test_the_installed_function_keeps_every_index():
    assert not _drops_last_batch(data_utils.batch_by_size)
    original = getattr(data_utils.batch_by_size, "__wrapped__", None)
    if original is not None:  # fairseq-fixed: the wrapper is there because the original drops
        assert _drops_last_batch(original)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=60),
    max_tokens=st.integers(50, 400),
    max_sentences=st.one_of(st.none(), st.integers(1, 20)),
    multiple=st.sampled_from([1, 2, 8]),
    use_vec=st.booleans(),
)
def test_batches_cover_the_indices_in_order(lengths, max_tokens, max_sentences, multiple, use_vec):
    order = np.argsort(lengths, kind="stable").astype(np.int64)
    batches = data_utils.batch_by_size(
        order,
        num_tokens_fn=lambda i: lengths[i],
        num_tokens_vec=np.array(lengths, dtype=np.int64)[order] if use_vec else None,
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        required_batch_size_multiple=multiple,
    )
    assert np.concatenate([np.asarray(b) for b in batches]).tolist() == order.tolist()
    for batch in batches:
        if max_sentences is not None:
            assert len(batch) <= max_sentences
        if len(batch) > 1:
            assert len(batch) * max(lengths[i] for i in batch) <= max_tokens


def test_generator_input_is_accepted():
    batches = data_utils.batch_by_size(
        iter(range(5)), num_tokens_fn=lambda i: 1, max_sentences=2, required_batch_size_multiple=2
    )
    assert [list(b) for b in batches] == [[0, 1], [2, 3], [4]]
