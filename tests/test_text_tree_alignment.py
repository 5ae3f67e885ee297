"""Text and trees aligned: the word starts of the subword markers of the
binarized source against the word starts of the trees, per scheme, with
``<unk>`` hiding a marker; and the blockwise reading of fairseq's formats."""

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, data_utils, indexed_dataset

from fairseq_posattn.data.alignment import WordStarts
from fairseq_posattn.data.tree_files import block_values
from fairseq_posattn.structure import StructureError, encode_piece_tree, piece_word_map

SENTENCES = {  # per scheme: sentences of pieces, the last two of as many pieces
    "subword_nmt": [["un@@", "believ@@", "able", "."], ["a"], ["the", "do@@", "g"],
                    ["do@@", "g", "ran"]],
    "sentencepiece": [["▁un", "believ", "able", "▁."], ["a"], ["▁the", "▁do", "g"],
                      ["▁do", "g", "▁ran"]],
    "none": [["un", "believable", "."], ["a"], ["the", "dog", "."], ["dog", "ran", "."]],
}


def block(scheme, sentences, trees_of=None):
    """(dictionary, binarized source, tree values, piece counts) of
    ``sentences``, each with the tree of the pieces of ``trees_of[i]``
    (by default its own), every word's head the root."""
    dictionary = Dictionary()
    for pieces in sentences:
        for piece in pieces:
            dictionary.add_symbol(piece)
    source = np.concatenate([[dictionary.index(p) for p in pieces] + [dictionary.eos()]
                             for pieces in sentences])
    values = []
    for pieces in trees_of or sentences:
        words = piece_word_map(pieces, scheme)
        values.append(encode_piece_tree(np.zeros(words[-1] + 1, dtype=np.int64), words))
    return dictionary, source, np.concatenate(values), np.array([len(p) for p in sentences])


@pytest.mark.parametrize("scheme", sorted(SENTENCES))
def test_trees_of_their_own_sentences_pass_swapped_ones_are_named(scheme):
    sentences = SENTENCES[scheme]
    dictionary, source, values, sizes = block(scheme, sentences)
    words = WordStarts(dictionary, scheme)
    words.refuse_misaligned(source, values, sizes, where=lambda i: f"sentence {i}")
    swapped = sentences[:2] + sentences[:1:-1]  # trees of the last two traded
    _, _, values, _ = block(scheme, sentences, trees_of=swapped)
    if scheme == "none":  # every piece is a word: any tree of as many pieces fits
        words.refuse_misaligned(source, values, sizes, where=lambda i: f"sentence {i}")
        return
    with pytest.raises(StructureError) as err:
        words.refuse_misaligned(source, values, sizes, where=lambda i: f"split 'x', sentence {i}",
                                first=100)
    dog = {"subword_nmt": "[the] [do@@ g]", "sentencepiece": "[▁the] [▁do g]"}[scheme]
    wrong = {"subword_nmt": "[the do@@] [g]", "sentencepiece": "[▁the ▁do] [g]"}[scheme]
    assert (f"split 'x', sentence 102: the subword markers ({scheme}) group its pieces into the "
            f"words {dog} but its tree groups them into {wrong} (2 sentences in this block "
            f"disagree)") in str(err.value)


@pytest.mark.parametrize("scheme, sentence, hidden", [
    # <unk> stands for a piece whose marker is lost: what it decided is not checked ...
    ("subword_nmt", ["a@@", "b@@", "c"], 1),  # ... the word start of the next piece
    ("sentencepiece", ["▁a", "b", "▁c"], 2),  # ... its own word start
])
def test_an_unknown_piece_hides_its_marker_only(scheme, sentence, hidden):
    dictionary, source, values, sizes = block(scheme, [sentence])
    source[hidden] = dictionary.unk()
    words = WordStarts(dictionary, scheme)
    for start in (0, 1):  # either word start after the hidden marker is taken
        changed = values.copy()
        changed[2] = start
        words.refuse_misaligned(source, changed, sizes, where=str)
    changed[1] = 1 - (values[1] != 0)  # a decided word start still counts
    with pytest.raises(StructureError, match=r"^0: the subword markers"):
        words.refuse_misaligned(source, changed, sizes, where=str)


@pytest.mark.parametrize("impl", ["mmap", "lazy"])
def test_block_values_read_every_format_of_fairseq(tmp_path, impl):
    sentences = [[5, 6, 7], [], [8], [9, 10]]
    prefix = str(tmp_path / "data")
    builder = indexed_dataset.make_builder(indexed_dataset.data_file_path(prefix), impl,
                                           vocab_size=100)
    for sentence in sentences:
        builder.add_item(torch.IntTensor(sentence))
    builder.finalize(indexed_dataset.index_file_path(prefix))
    dataset = data_utils.load_indexed_dataset(prefix, None, impl)  # as the task loads it
    assert block_values(dataset, 1, 4).tolist() == [8, 9, 10]
    assert block_values(dataset, 0, 2).tolist() == [5, 6, 7]
