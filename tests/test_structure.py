"""Tree depths, relative structural positions (Wang et al. 2019, Sec. 3.1)
and subword pieces against naive references written with explicit loops;
the collater's vectorised batches against the definition in tree.py
(:func:`piece_structure`), sentence by sentence."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_posattn.structure import (
    RULES, WANG_TREE_INPUTS, StructureError, TreeInputs, batch_encoded_parent_positions, batch_encoded_structure,
    batch_encoded_tree_distances, batch_piece_structure, batch_tree_inputs, batch_trees_of_pieces, check_tree,
    decode_piece_tree, encode_piece_tree, piece_parent_positions, piece_structure, piece_tree_distances,
    piece_word_map, relative_structural_positions, segment_pieces, tree_depths, tree_distances, tree_inputs_of,
    words_from_pieces,
)
from fairseq_posattn.structure import batch as batch_module
from fairseq_posattn.structure.batch import smallest_int_type
from fairseq_posattn.structure.pieces import end_cut_word

STRUCTURE_DIR = Path(__file__).resolve().parents[1] / "fairseq_posattn" / "structure"
FAST = settings(max_examples=60, deadline=None)

# Figure 1 of the paper: "Bush held a talk with Sharon".
FIG1_WORDS = ["Bush", "held", "a", "talk", "with", "Sharon"]
FIG1_HEADS = [2, 0, 4, 2, 6, 2]


# ---------------------------------------------------------------- references

def naive_ancestors(heads, i):
    """0-based proper ancestors of 0-based word i, nearest first."""
    out, j = [], i
    while heads[j] != 0:
        j = heads[j] - 1
        out.append(j)
        assert len(out) <= len(heads), "cycle"
    return out


def naive_depths(heads):
    return [len(naive_ancestors(heads, i)) for i in range(len(heads))]


def naive_rel(heads, rule):
    """O(n^3) relative structural positions, straight from the rules."""
    n, d = len(heads), naive_depths(heads)
    out = np.zeros((n, n), dtype=np.int64)
    for q in range(n):
        for k in range(n):
            sign = (k > q) - (k < q)
            if q == k or k in naive_ancestors(heads, q) or q in naive_ancestors(heads, k):
                out[q, k] = sign * abs(d[k] - d[q]) if rule == "figure" else d[k] - d[q]
            else:
                out[q, k] = sign * (d[k] + d[q])
    return out


def naive_pieces(heads, piece_words, rule, append_eos, max_pieces):
    """Per-sentence piece-level depth and relations with loops."""
    d = naive_depths(heads)
    wrel = naive_rel(heads, rule)
    kept = list(piece_words)[: len(piece_words) if max_pieces is None else max_pieces]
    depth = [d[w] for w in kept]
    rel = [[int(wrel[wq, wk]) for wk in kept] for wq in kept]
    if append_eos:
        de = max(d, default=-1) + 1
        for q, row in enumerate(rel):
            row.append(+1 * (de + depth[q]))
        rel.append([-1 * (depth[k] + de) for k in range(len(kept))] + [0])
        depth.append(de)
    return depth, rel


# ---------------------------------------------------------------- strategies

@st.composite
def trees(draw, min_n=1, max_n=40, max_roots=3):
    """Random dependency trees (any shape: non-projective, forests)."""
    n = draw(st.integers(min_n, max_n))
    if n == 0:
        return []
    order = draw(st.permutations(range(n)))
    roots = draw(st.integers(1, min(max_roots, n)))
    heads = [0] * n
    for i in range(roots, n):
        heads[order[i]] = order[draw(st.integers(0, i - 1))] + 1
    return heads


@st.composite
def sentences(draw, min_n=0, max_n=25):
    """(heads, piece_words): a tree and 1-3 pieces per word."""
    heads = draw(trees(min_n=min_n, max_n=max_n))
    counts = draw(st.lists(st.integers(1, 3), min_size=len(heads), max_size=len(heads)))
    return np.asarray(heads, dtype=np.int64), np.repeat(np.arange(len(heads)), counts)


# ---------------------------------------------------------------- depths

def test_figure1_depths():
    assert tree_depths(FIG1_HEADS).tolist() == [1, 0, 2, 1, 2, 1]
    assert tree_depths(FIG1_HEADS).dtype == np.int64


def test_forest_roots_all_at_depth_zero():
    #   1 <- 2    3 (root) <- 4 <- 5
    assert tree_depths([0, 1, 0, 3, 4]).tolist() == [0, 1, 0, 1, 2]


def test_depths_of_a_long_chain_are_linear_time():
    n = 20000
    heads = [0] + list(range(1, n))  # word i+1 -> word i
    assert tree_depths(heads).tolist() == list(range(n))


@FAST
@given(trees())
def test_depths_match_reference(heads):
    assert tree_depths(heads).tolist() == naive_depths(heads)


@pytest.mark.parametrize("heads, words, needle", [
    ([2, 1, 0], ["a", "b", "c"], "cycle: 1 'a' -> 2 'b' -> 1 'a'"),
    ([0, 2], ["a", "b"], "cycle: 2 'b' -> 2 'b'"),
    ([0, 4, 2], None, "out of range 0..3"),
    ([-1, 0], None, "out of range"),
    ([2, 3, 1], None, "no root"),
    ([], None, "no words"),
    (["1", 0], None, "integers"),
    ([1.0, 0.0], None, "integers"),
    ([[0, 1]], None, "flat"),
])
def test_check_tree_errors(heads, words, needle):
    with pytest.raises(StructureError) as err:
        check_tree(heads, where="here.conllu, sentence 4", words=words)
    assert needle in str(err.value)
    assert str(err.value).startswith("here.conllu, sentence 4: ")


def test_tree_depths_rejects_cycles_and_bad_heads():
    for heads in ([2, 3, 1, 0], [0, 7], [3, 0, 1]):
        with pytest.raises(StructureError):
            tree_depths(heads)


def test_check_tree_accepts_forests_and_non_projective_trees():
    check_tree([0, 0, 2])
    # "A hearing is scheduled on the issue today": 'on' -> 'hearing' crosses 'is'->'scheduled'
    check_tree([2, 4, 4, 0, 2, 7, 5, 4])


# ---------------------------------------------------------------- relative positions

def test_figure1_relative_row_for_talk():
    rel = relative_structural_positions(FIG1_HEADS)
    assert rel.dtype == np.int64 and rel.shape == (6, 6)
    assert rel[3].tolist() == [-2, -1, -1, 0, 3, 2]
    # the paper's text rule d_k - d_q differs only for "a" (a dependent of "talk")
    text_rule = relative_structural_positions(FIG1_HEADS, rule="text")
    assert text_rule[3].tolist() == [-2, -1, 1, 0, 3, 2]


def test_figure1_full_matrix():
    assert relative_structural_positions(FIG1_HEADS).tolist() == [
        [0, 1, 3, 2, 3, 2],
        [-1, 0, 2, 1, 2, 1],
        [-3, -2, 0, 1, 4, 3],
        [-2, -1, -1, 0, 3, 2],
        [-3, -2, -4, -3, 0, 1],
        [-2, -1, -3, -2, -1, 0],
    ]


def test_forest_trees_relate_by_rule_two():
    # two one-word trees and a two-word tree
    rel = relative_structural_positions([0, 0, 2])
    assert rel.tolist() == [[0, 0, 1], [0, 0, 1], [-1, -1, 0]]


def test_unknown_rule():
    with pytest.raises(ValueError, match="rule"):
        relative_structural_positions([0], rule="paper")


@FAST
@given(trees(), st.sampled_from(["figure", "text"]))
def test_relative_positions_match_reference(heads, rule):
    rel = relative_structural_positions(heads, rule=rule)
    assert np.array_equal(rel, naive_rel(heads, rule))
    assert np.array_equal(rel, -rel.T) and not rel.diagonal().any()


@FAST
@given(sentences(), st.sampled_from(["figure", "text"]), st.booleans(),
       st.one_of(st.none(), st.integers(0, 45)))
def test_piece_structure_matches_reference(sentence, rule, append_eos, max_pieces):
    heads, piece_words = sentence
    depth, rel = piece_structure(heads, piece_words, rule, append_eos, max_pieces)
    assert depth.dtype == rel.dtype == np.int64
    assert (depth.tolist(), rel.tolist()) == naive_pieces(
        heads.tolist(), piece_words.tolist(), rule, append_eos, max_pieces)


# ---------------------------------------------------------------- pieces

@pytest.mark.parametrize("scheme, pieces, words, mapping", [
    ("subword_nmt", ["un@@", "believ@@", "able", "."], ["unbelievable", "."], [0, 0, 0, 1]),
    ("subword_nmt", ["a", "b@@", "c"], ["a", "bc"], [0, 1, 1]),
    ("sentencepiece", ["\u2581un", "believ", "able", "\u2581."], ["unbelievable", "."],
     [0, 0, 0, 1]),
    ("sentencepiece", ["un", "\u2581x"], ["un", "x"], [0, 1]),
    ("sentencepiece", ["\u2581", "1", "2", "\u2581a"], ["12", "a"], [0, 0, 0, 1]),
    ("none", ["a@@", "\u2581b"], ["a@@", "\u2581b"], [0, 1]),
    ("subword_nmt", [], [], []),
])
def test_pieces_to_words(scheme, pieces, words, mapping):
    assert words_from_pieces(pieces, scheme) == words
    m = piece_word_map(pieces, scheme)
    assert m.dtype == np.int64 and m.tolist() == mapping
    m, w = segment_pieces(pieces, scheme)
    assert m.dtype == np.int64 and (m.tolist(), w) == (mapping, words)


@pytest.mark.parametrize("scheme, pieces, ended", [
    ("subword_nmt", ["the", "un@@"], ["the", "un"]),
    ("subword_nmt", ["the", "un@@", "able"], ["the", "un@@", "able"]),
    ("sentencepiece", ["\u2581the", "\u2581un"], ["\u2581the", "\u2581un"]),
    ("none", ["a@@"], ["a@@"]),
    ("subword_nmt", [], []),
])
def test_a_word_cut_at_the_end_is_the_pieces_kept(scheme, pieces, ended):
    assert end_cut_word(pieces, scheme) == ended
    words_from_pieces(end_cut_word(pieces, scheme), scheme)  # spells words


@pytest.mark.parametrize("scheme, pieces, needle", [
    ("subword_nmt", ["a", "b@@"], "ends with '@@'"),
    ("subword_nmt", ["a", ""], "non-empty"),
    ("sentencepiece", ["\u2581a", "\u2581"], "bare"),
    ("sentencepiece", ["\u2581", "\u2581a"], "bare"),
    ("sentencepiece", ["\u2581a\u2581b"], "spans a word boundary"),
    ("none", ["a", None], "non-empty strings"),
])
def test_bad_pieces(scheme, pieces, needle):
    with pytest.raises(StructureError, match=needle):
        piece_word_map(pieces, scheme, where="train.en line 3")
    with pytest.raises(StructureError, match="^train.en line 3: "):
        words_from_pieces(pieces, scheme, where="train.en line 3")


def test_unknown_scheme_is_a_usage_error():
    with pytest.raises(ValueError, match="scheme") as err:
        piece_word_map(["a"], "bpe")
    assert not isinstance(err.value, StructureError)


@FAST
@given(st.lists(st.lists(st.text("abcé.-'", min_size=1, max_size=3), min_size=1, max_size=3),
                max_size=8),
       st.booleans())
def test_segmentations_map_back_to_their_words(segmented, first_marked):
    words = ["".join(parts) for parts in segmented]
    mapping = [i for i, parts in enumerate(segmented) for _ in parts]
    bpe = []
    spm = []
    for i, parts in enumerate(segmented):
        bpe += [p + "@@" for p in parts[:-1]] + [parts[-1]]
        mark = "\u2581" if i > 0 or first_marked else ""
        spm += [mark + parts[0]] + parts[1:]
    for scheme, pieces in (("subword_nmt", bpe), ("sentencepiece", spm)):
        assert words_from_pieces(pieces, scheme) == words
        assert piece_word_map(pieces, scheme).tolist() == mapping


@FAST
@given(st.lists(st.integers(1, 3), max_size=12), st.data())
def test_encoded_trees_decode_to_their_heads_and_piece_maps(pieces_per_word, data):
    n = len(pieces_per_word)
    heads = data.draw(st.lists(st.integers(0, n), min_size=n, max_size=n))
    piece_words = np.repeat(np.arange(n), pieces_per_word)
    values = encode_piece_tree(heads, piece_words)
    assert len(values) == len(piece_words)
    assert [v for v in values if v] == [h + 1 for h in heads]  # naive: a word's first piece
    decoded_heads, decoded_words = decode_piece_tree(values)
    assert decoded_heads.tolist() == heads and decoded_words.tolist() == piece_words.tolist()


@pytest.mark.parametrize("heads, piece_words", [
    ([0, 1], [0, 2]), ([0, 1], [1, 1]), ([0, 1], [0, 1, 0]), ([0, 1], [0]), ([0], []),
])
def test_encoding_refuses_piece_maps_that_miss_words(heads, piece_words):
    with pytest.raises(StructureError, match="does not cover"):
        encode_piece_tree(heads, piece_words)


def test_decoding_refuses_a_first_piece_that_starts_no_word():
    with pytest.raises(StructureError, match="starts no word"):
        decode_piece_tree(np.array([0, 1]))


# ---------------------------------------------------------------- batches

def _assert_batch_equals_definition(batch, rule, append_eos, max_pieces, left_pad=False,
                                    width=None):
    """Both batch functions against tree.py's piece_structure, sentence by
    sentence: values, the smallest integer types, and zeros around each
    sentence, laid out like fairseq's source tokens."""
    heads = [h for h, _ in batch]
    words = [w for _, w in batch]
    options = dict(rule=rule, append_eos=append_eos, max_pieces=max_pieces, left_pad=left_pad,
                   width=width)
    depth, rel, lengths = batch_piece_structure(heads, words, **options)
    # the smallest types that hold them: |rel| <= 2 W, depth <= W (W words at most)
    most_words = max(len(h) for h in heads)
    assert rel.dtype == TORCH_TYPE[smallest_int_type(2 * most_words)]
    assert depth.dtype == TORCH_TYPE[smallest_int_type(most_words)]
    assert lengths.dtype == torch.int64
    # the same from the encoded trees of the tree files
    encoded = [encode_piece_tree(h, w) for h, w in batch]
    for ours, theirs in zip((depth, rel, lengths), batch_encoded_structure(encoded, **options)):
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    L = depth.shape[1]
    assert rel.shape == (len(batch), L, L)
    assert L == max(int(lengths.max()), width or 0)
    for b, (h, w) in enumerate(batch):
        want_depth, want_rel = piece_structure(h, w, rule, append_eos, max_pieces)
        n = len(want_depth)
        assert lengths[b] == n
        real = torch.arange(L) >= L - n if left_pad else torch.arange(L) < n
        assert depth[b, real].tolist() == want_depth.tolist()
        assert rel[b][real][:, real].tolist() == want_rel.tolist()
        assert not depth[b, ~real].any() and not rel[b, ~real].any() and not rel[b, :, ~real].any()


@settings(max_examples=80, deadline=None)
@given(st.lists(sentences(), min_size=1, max_size=6), st.sampled_from(["figure", "text"]),
       st.booleans(), st.one_of(st.none(), st.integers(0, 45)), st.booleans(),
       st.one_of(st.none(), st.integers(0, 80)))
def test_batch_equals_the_definition_sentence_by_sentence(batch, rule, append_eos, max_pieces,
                                                           left_pad, width):
    """Random trees (forests, non-projective, empty), 1-3 pieces per word."""
    _assert_batch_equals_definition(batch, rule, append_eos, max_pieces, left_pad, width)


@pytest.mark.parametrize("rule", ["figure", "text"])
@pytest.mark.parametrize("max_pieces", [None, 50])
def test_batch_of_long_deep_sentences_equals_the_definition(rule, max_pieces):
    """Over 63 words (relations in int16) and a path 69 steps deep, beside a short sentence."""
    chain = np.append(np.arange(2, 71), 0)  # word w's head is word w + 1
    rng = np.random.default_rng(0)
    batch = [(chain, np.repeat(np.arange(70), rng.integers(1, 3, size=70))),
             (np.array([2, 0, 2]), np.array([0, 1, 1, 2]))]
    for left_pad in (False, True):
        _assert_batch_equals_definition(batch, rule, True, max_pieces, left_pad)


def test_figure1_with_subwords_truncation_and_eos():
    # "Bush held a tal@@ k with Sharon": the two pieces of "talk" relate at 0
    heads, pieces = np.array(FIG1_HEADS), np.array([0, 1, 2, 3, 3, 4, 5])
    depth, rel = piece_structure(heads, pieces)
    assert depth.tolist() == [1, 0, 2, 1, 1, 2, 1, 3]  # EOS: max depth 2, + 1
    assert rel[3].tolist() == [-2, -1, -1, 0, 0, 3, 2, 4]
    assert rel[4].tolist() == [-2, -1, -1, 0, 0, 3, 2, 4]
    assert rel[7].tolist() == [-4, -3, -5, -4, -4, -5, -4, 0]
    # --truncate-source to 3 pieces: EOS keeps the full tree's depth 3
    depth, rel = piece_structure(heads, pieces, max_pieces=3)
    assert depth.tolist() == [1, 0, 2, 3]
    assert rel.tolist() == [[0, 1, 3, 4], [-1, 0, 2, 3], [-3, -2, 0, 5], [-4, -3, -5, 0]]
    for max_pieces in (None, 3):
        _assert_batch_equals_definition([(heads, pieces)], "figure", True, max_pieces)


def test_batch_right_pads_and_handles_empty_sentences():
    heads = [np.array([0]), np.array([], dtype=np.int64), np.array([2, 0, 2])]
    pieces = [np.array([0]), np.array([], dtype=np.int64), np.array([0, 1, 2, 2])]
    depth, rel, lengths = batch_piece_structure(heads, pieces)
    assert lengths.tolist() == [2, 1, 5]
    assert depth.tolist() == [[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 1, 1, 2]]
    assert rel[0].tolist() == [[0, 1, 0, 0, 0], [-1, 0, 0, 0, 0]] + [[0] * 5] * 3
    assert not rel[1].any()
    depth, rel, lengths = batch_piece_structure(heads, pieces, append_eos=False)
    assert lengths.tolist() == [1, 0, 4] and depth.shape == (3, 4)
    depth, rel, lengths = batch_piece_structure([], [])
    assert depth.shape == (0, 0) and rel.shape == (0, 0, 0) and lengths.shape == (0,)


def test_batch_accepts_lists_and_tensors():
    a = batch_piece_structure([[2, 0, 4, 2, 6, 2]], [list(range(6))])
    b = batch_piece_structure([torch.tensor(FIG1_HEADS)], [torch.arange(6)])
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("heads, pieces, needle", [
    ([[2, 0]], [[0, 1, 1, 3]], "do not map onto its 2 words"),  # skips a word
    ([[2, 0]], [[0]], "do not map onto its 2 words"),           # last word has no piece
    ([[2, 0]], [[1, 1]], "do not map onto"),                     # does not start at 0
    ([[2, 0]], [[0, 1, 0]], "do not map onto"),                  # goes back
    ([[0], [2, 0, 2]], [[0], [0, 1]], "batch sentence 1"),
    ([[0], [3, 0]], [[0], [0, 1]], "batch sentence 1: a HEAD is out of range 0..2"),
    ([[0], [2, 1, 0]], [[0], [0, 1, 2]], "batch sentence 1: the heads form a cycle"),
    ([[0, 2]], [[0, 1]], "batch sentence 0: word 2 is its own head"),  # looks like a root
    ([[]], [[0]], "do not map onto its 0 words"),
])
def test_batch_rejects_inconsistent_input(heads, pieces, needle):
    with pytest.raises(StructureError, match=needle):
        batch_piece_structure([np.asarray(h, dtype=np.int64) for h in heads],
                              [np.asarray(p, dtype=np.int64) for p in pieces])


TORCH_TYPE = {np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16,
              np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def test_smallest_int_type():
    assert [smallest_int_type(n) for n in (0, 127, 128, 32767, 32768, 2**31)] == [
        np.int8, np.int8, np.int16, np.int16, np.int32, np.int64]


@pytest.mark.parametrize("trees, needle", [
    ([[1], [0, 2]], "batch sentence 1: its first piece starts no word"),
    ([[1], [3, 0, 9]], "batch sentence 1: a HEAD is out of range 0..2"),
    ([[2, 1]], "batch sentence 0: word 1 is its own head"),
])
def test_encoded_batch_rejects_corrupt_trees(trees, needle):
    with pytest.raises(StructureError, match=needle):
        batch_encoded_structure([np.asarray(t, dtype=np.int64) for t in trees])


def test_batch_usage_errors():
    with pytest.raises(ValueError, match="rule"):
        batch_piece_structure([[0]], [[0]], rule="x")
    with pytest.raises(ValueError, match="integer"):
        batch_piece_structure([np.array([0.5])], [[0]])
    with pytest.raises(ValueError, match="2 head arrays but 1"):
        batch_piece_structure([[0], [0]], [[0]])


# ---------------------------------------------------------------- hostile input

def is_tree_with_pieces(heads, pieces):
    """The reference's idea of valid input: heads in range without cycles, and
    pieces that start at word 0, step by 0 or 1 and end at the last word."""
    n = len(heads)
    if any(h < 0 or h > n for h in heads):
        return False
    for i in range(n):
        j = i
        for _ in range(n + 1):
            if heads[j] == 0:
                break
            j = heads[j] - 1
        else:
            return False
    if n == 0:
        return len(pieces) == 0
    steps = [b - a for a, b in zip(pieces, pieces[1:])]
    return len(pieces) > 0 and pieces[0] == 0 and pieces[-1] == n - 1 and set(steps) <= {0, 1}


@st.composite
def hostile_sentences(draw):
    """Valid sentences, valid ones with one value changed, and arbitrary integers."""
    kind = draw(st.sampled_from(["valid", "one-changed", "arbitrary"]))
    if kind == "arbitrary":
        n = draw(st.integers(0, 8))
        heads = draw(st.lists(st.integers(-2, n + 2), min_size=n, max_size=n))
        pieces = draw(st.lists(st.integers(-1, n + 1), max_size=12))
        return np.asarray(heads, dtype=np.int64), np.asarray(pieces, dtype=np.int64)
    heads, pieces = draw(sentences(max_n=8))
    heads, pieces = heads.copy(), pieces.copy()
    if kind == "one-changed":
        target = heads if (draw(st.booleans()) or not len(pieces)) and len(heads) else pieces
        if len(target):
            target[draw(st.integers(0, len(target) - 1))] = draw(st.integers(-2, 10))
    return heads, pieces


@settings(max_examples=300, deadline=None)
@given(st.lists(hostile_sentences(), min_size=1, max_size=4), st.sampled_from(["figure", "text"]))
def test_hostile_batches_give_the_reference_or_structure_error(batch, rule):
    """Whatever integers a corrupt tree file holds: the batch equals the
    per-sentence reference, or StructureError names the bad sentence;
    never an IndexError, KeyError or a silently wrong structure."""
    valid = [is_tree_with_pieces(h.tolist(), p.tolist()) for h, p in batch]
    if all(valid):
        _assert_batch_equals_definition(batch, rule, True, None)
        return
    with pytest.raises(StructureError, match=r"batch sentence \d+") as err:
        batch_piece_structure([h for h, _ in batch], [p for _, p in batch], rule)
    named = int(re.search(r"batch sentence (\d+)", str(err.value)).group(1))
    assert not valid[named]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2, 9), max_size=8))
def test_hostile_heads_give_the_reference_or_structure_error(heads):
    if heads and is_tree_with_pieces(heads, list(range(len(heads)))):
        assert tree_depths(heads).tolist() == naive_depths(heads)
        assert relative_structural_positions(heads).tolist() == naive_rel(heads, "figure").tolist()
        check_tree(heads)
        return
    for builder in (tree_depths, relative_structural_positions, check_tree):
        if heads or builder is check_tree:  # no words: an empty result, or "no words"
            with pytest.raises(StructureError):
                builder(heads)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("a@\u2581", max_size=4), max_size=6),
       st.sampled_from(["subword_nmt", "sentencepiece", "none"]))
def test_hostile_pieces_give_words_or_structure_error(pieces, scheme):
    try:
        words = words_from_pieces(pieces, scheme)
        mapping = piece_word_map(pieces, scheme).tolist()
    except StructureError:
        return
    assert all(words) and len(mapping) == len(pieces)
    assert mapping == sorted(mapping) and (not mapping or mapping[-1] == len(words) - 1)
    if scheme == "subword_nmt":  # the pieces spell the words, markers removed
        assert "".join(words) == "".join(p[:-2] if p.endswith("@@") else p for p in pieces)


# ---------------------------------------------------------------- purity

def test_structure_imports_neither_fairseq_nor_the_rest_of_the_plugin():
    """The tree logic imports the package's error helper and nothing else of
    the plugin; the error helper imports nothing of the plugin or fairseq."""
    errors = STRUCTURE_DIR.parent / "errors.py"
    for path in [*STRUCTURE_DIR.glob("*.py"), errors]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 1 or (node.level == 1 and path == errors):
                    assert node.module == "errors" and path != errors, (path, node.module)
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("fairseq", "fairseq_posattn"), (path, name)



# ---------------------------------------------------------------- pieces -> batch

def test_batch_trees_of_pieces_is_parse_then_encode_then_batch():
    pieces = [["the", "ca@@", "t", "sle@@", "eps"], [], ["hello"]]
    trees = {("the", "cat", "sleeps"): [2, 3, 0], ("hello",): [0]}
    calls = []

    def parse(words):
        calls.append(words)
        return [trees[tuple(w)] for w in words]

    every = TreeInputs(depths=True, structural_positions=True, tree_distances=True, parent_anchor="mean")
    inputs = batch_trees_of_pieces(pieces, "subword_nmt", parse, every, left_pad=True, width=7)
    assert calls == [[["the", "cat", "sleeps"], ["hello"]]]  # once, empty sentence left out
    heads = [np.array([2, 3, 0]), np.zeros(0, dtype=np.int64), np.array([0])]
    piece_words = [piece_word_map(p, "subword_nmt") for p in pieces]
    want_depth, want_rel, _ = batch_piece_structure(heads, piece_words, left_pad=True, width=7)
    encoded = [encode_piece_tree(h, w) for h, w in zip(heads, piece_words)]
    want = {"src_depths": want_depth, "src_structural_positions": want_rel,
            "src_tree_distances": batch_encoded_tree_distances(encoded, left_pad=True, width=7)[0],
            "src_parent_positions": batch_encoded_parent_positions(encoded, left_pad=True, width=7)[0]}
    assert inputs.keys() == want.keys() and all(torch.equal(inputs[k], want[k]) for k in want)
    assert want_depth.shape == (3, 7) and want_depth[1].tolist() == [0] * 7  # EOS alone at depth 0
    only = batch_trees_of_pieces(pieces, "subword_nmt", parse, TreeInputs(tree_distances=True), left_pad=True,
                                 width=7)
    assert list(only) == ["src_tree_distances"]
    assert torch.equal(only["src_tree_distances"], want["src_tree_distances"])


# ---------------------------------------------------------------- what an encoder reads, batched

WANTED = st.builds(TreeInputs, st.booleans(), st.booleans(), st.booleans(),
                   st.sampled_from([None, "mean", "root"]))


@settings(max_examples=80, deadline=None)
@given(st.lists(sentences(), min_size=1, max_size=6), WANTED, st.sampled_from(RULES),
       st.one_of(st.none(), st.integers(0, 45)), st.booleans(), st.one_of(st.none(), st.integers(0, 80)))
def test_batch_tree_inputs_are_the_definitions_of_exactly_what_is_wanted(batch, wanted, rule, max_pieces, left_pad,
                                                                        width):
    """Every input wanted and no other: sentence by sentence tree.py's
    definition with EOS under the sentence's tokens, zeros around them, in
    the type of the input's own batch function."""
    encoded = [encode_piece_tree(h, w) for h, w in batch]
    layout = dict(max_pieces=max_pieces, left_pad=left_pad, width=width)
    inputs = batch_tree_inputs(encoded, wanted, rule, **layout)
    assert tuple(inputs) == wanted.keys()
    depth, rel, lengths = batch_encoded_structure(encoded, rule, **layout)
    types = {"src_depths": depth.dtype, "src_structural_positions": rel.dtype,
             "src_tree_distances": batch_encoded_tree_distances(encoded, **layout)[0].dtype,
             "src_parent_positions": torch.float32}
    L = depth.shape[1]
    for b, (h, w) in enumerate(batch):
        n = int(lengths[b])
        real = torch.arange(L) >= L - n if left_pad else torch.arange(L) < n
        want_depth, want_rel = piece_structure(h, w, rule, True, max_pieces)
        definition = {"src_depths": want_depth, "src_structural_positions": want_rel,
                      "src_tree_distances": piece_tree_distances(h, w, True, max_pieces),
                      "src_parent_positions": piece_parent_positions(h, w, wanted.parent_anchor or "mean", True,
                                                                     max_pieces)}
        for key, tensor in inputs.items():
            assert tensor.dtype == types[key] and tensor.shape == (len(batch),) + (L,) * definition[key].ndim
            cells = tensor[b][real][:, real] if tensor.dim() == 3 else tensor[b, real]
            assert cells.tolist() == definition[key].tolist(), key
            assert not tensor[b, ~real].any() and (tensor.dim() == 2 or not tensor[b, :, ~real].any())


def _recorded(monkeypatch):
    """The internal steps batch_tree_inputs takes, in order (``_structure`` with its ``relative``)."""
    steps = []
    for name in ("_decoded", "_structure", "_tree_distances", "_parent_positions"):
        def step(*args, _name=name, _original=getattr(batch_module, name), **kwargs):
            steps.append((_name, kwargs["relative"]) if _name == "_structure" else _name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(batch_module, name, step)
    return steps


@pytest.mark.parametrize("wanted, steps", [
    (TreeInputs(), []),
    (TreeInputs(parent_anchor="root"), ["_decoded", "_parent_positions"]),
    (TreeInputs(tree_distances=True), ["_decoded", "_tree_distances"]),
    (TreeInputs(depths=True), ["_decoded", ("_structure", False)]),
    (WANG_TREE_INPUTS, ["_decoded", ("_structure", True)]),
    (TreeInputs(True, True, True, "mean"),
     ["_decoded", ("_structure", True), "_tree_distances", "_parent_positions"]),
])
def test_batch_tree_inputs_decode_once_and_compute_only_what_is_wanted(monkeypatch, wanted, steps):
    """No [B, L, L] tensor for an encoder that reads none, nothing at all for one that reads no trees."""
    taken = _recorded(monkeypatch)
    batch_tree_inputs([encode_piece_tree([2, 0], [0, 1, 1])], wanted)
    assert taken == steps


def test_tree_inputs_of_an_ensemble_and_of_encoders_without_them():
    class Reads:
        reads_trees = True

    parents = TreeInputs(parent_anchor="mean")
    assert parents | WANG_TREE_INPUTS == TreeInputs(True, True, False, "mean")
    assert TreeInputs(tree_distances=True) | TreeInputs() == TreeInputs(tree_distances=True)
    with pytest.raises(ValueError, match="two anchors .mean and root"):
        parents | TreeInputs(parent_anchor="root")
    with pytest.raises(ValueError, match="anchor must be one of"):
        TreeInputs(parent_anchor="middle")
    with_inputs = Reads()
    with_inputs.tree_inputs = parents
    assert tree_inputs_of(with_inputs) == parents
    assert tree_inputs_of(Reads()) == WANG_TREE_INPUTS  # a tree-reading encoder of a plugin before 0.4
    assert tree_inputs_of(object()) == TreeInputs() and not tree_inputs_of(None)  # fairseq's encoders


# ---------------------------------------------------------------- dependency distances, PASCAL's parents

def naive_tree_distances(heads):
    """Breadth-first search from every word over the undirected arcs, the roots
    joined by a virtual root (node n)."""
    n = len(heads)
    neighbours = [[] for _ in range(n + 1)]
    for i, h in enumerate(heads):
        parent = h - 1 if h else n
        neighbours[i].append(parent)
        neighbours[parent].append(i)
    out = np.zeros((n, n), dtype=np.int64)
    for start in range(n):
        seen, frontier, steps = {start}, [start], 0
        while frontier:
            for node in frontier:
                if node < n:
                    out[start, node] = steps
            frontier = [m for node in frontier for m in neighbours[node] if m not in seen]
            seen.update(frontier)
            steps += 1
    return out


def naive_parent_positions(heads, piece_words, anchor, append_eos, max_pieces):
    """Bugliarello & Okazaki (2020), Sec. 3, with loops: the parent word's pieces' mean or first."""
    out = []
    for w in list(piece_words)[:max_pieces]:
        parent = heads[w] - 1 if heads[w] else w
        pieces = [p for p, pw in enumerate(piece_words) if pw == parent]
        out.append(sum(pieces) / len(pieces) if anchor == "mean" else pieces[0])
    return out + [len(out)] if append_eos else out


def test_figure1_tree_distances():
    assert tree_distances(FIG1_HEADS).tolist() == [
        [0, 1, 3, 2, 3, 2],  # Bush: held 1, a 3 (Bush-held-talk-a), talk 2, with 3, Sharon 2
        [1, 0, 2, 1, 2, 1],
        [3, 2, 0, 1, 4, 3],
        [2, 1, 1, 0, 3, 2],
        [3, 2, 4, 3, 0, 1],
        [2, 1, 3, 2, 1, 0],
    ]


def test_figure1_piece_distances_and_parents_with_subwords_truncation_and_eos():
    # "Bush held a tal@@ k with Sharon": the pieces of "talk" are 0 apart; EOS hangs from the virtual root
    heads, pieces = FIG1_HEADS, np.array([0, 1, 2, 3, 3, 4, 5])
    distance = piece_tree_distances(heads, pieces)
    assert distance[3].tolist() == [2, 1, 1, 0, 0, 3, 2, 3]
    assert distance[7].tolist() == [3, 2, 4, 3, 3, 4, 3, 0]
    assert piece_tree_distances(heads, pieces, max_pieces=2).tolist() == [[0, 1, 3], [1, 0, 2], [3, 2, 0]]
    # parents: held (piece 1) for Bush, talk, Sharon and held itself; talk (pieces 3-4) for a; Sharon for with
    assert piece_parent_positions(heads, pieces).tolist() == [1, 1, 3.5, 1, 1, 6, 1, 7]
    assert piece_parent_positions(heads, pieces, "root").tolist() == [1, 1, 3, 1, 1, 6, 1, 7]
    # cut after "a": a keeps the position of talk's pieces; EOS is at position 3
    assert piece_parent_positions(heads, pieces, max_pieces=3).tolist() == [1, 1, 3.5, 3]


def test_forest_trees_are_joined_by_a_virtual_root():
    assert tree_distances([0, 0, 2]).tolist() == [[0, 2, 3], [2, 0, 1], [3, 1, 0]]
    assert piece_parent_positions([0, 0, 2], [0, 1, 2], append_eos=False).tolist() == [0, 1, 1]


@FAST
@given(trees())
def test_tree_distances_match_breadth_first_search(heads):
    distance = tree_distances(heads)
    assert np.array_equal(distance, naive_tree_distances(heads))


@FAST
@given(sentences(), st.booleans(), st.one_of(st.none(), st.integers(0, 45)), st.sampled_from(["mean", "root"]))
def test_piece_distances_and_parents_match_reference(sentence, append_eos, max_pieces, anchor):
    heads, piece_words = sentence
    if not len(heads):
        return
    kept = list(piece_words)[:max_pieces]
    words = naive_tree_distances(list(heads))
    depths = naive_depths(list(heads))
    want = [[words[q, k] for k in kept] + ([depths[q] + 2] if append_eos else []) for q in kept]
    if append_eos:
        want.append([depths[k] + 2 for k in kept] + [0])
    assert piece_tree_distances(heads, piece_words, append_eos, max_pieces).tolist() == want
    assert piece_parent_positions(heads, piece_words, anchor, append_eos, max_pieces).tolist() == \
        naive_parent_positions(list(heads), list(piece_words), anchor, append_eos, max_pieces)


@settings(max_examples=60, deadline=None)
@given(st.lists(sentences(), min_size=1, max_size=6), st.booleans(), st.one_of(st.none(), st.integers(0, 45)),
       st.booleans(), st.one_of(st.none(), st.integers(0, 80)), st.sampled_from(["mean", "root"]))
def test_batched_distances_and_parents_equal_the_definition(batch, append_eos, max_pieces, left_pad, width,
                                                            anchor):
    """Laid out exactly as the structural positions: same cells, lengths, padding side and zeros."""
    encoded = [encode_piece_tree(h, w) for h, w in batch]
    options = dict(append_eos=append_eos, max_pieces=max_pieces, left_pad=left_pad, width=width)
    depth, _, lengths = batch_encoded_structure(encoded, **options)
    distance, distance_lengths = batch_encoded_tree_distances(encoded, **options)
    parents, parent_lengths = batch_encoded_parent_positions(encoded, anchor, **options)
    L = depth.shape[1]
    assert distance.shape == (len(batch), L, L) and parents.shape == (len(batch), L)
    assert torch.equal(distance_lengths, lengths) and torch.equal(parent_lengths, lengths)
    assert distance.dtype == TORCH_TYPE[smallest_int_type(2 * max(len(h) for h, _ in batch) + 2)]
    assert parents.dtype == torch.float32
    for b, (h, w) in enumerate(batch):
        n = int(lengths[b])
        real = torch.arange(L) >= L - n if left_pad else torch.arange(L) < n
        if len(h):
            assert distance[b][real][:, real].tolist() == piece_tree_distances(h, w, append_eos, max_pieces).tolist()
            assert parents[b, real].tolist() == piece_parent_positions(h, w, anchor, append_eos, max_pieces).tolist()
        else:  # EOS alone (or nothing)
            assert not distance[b].any() and parents[b, real].tolist() == [0.0] * n
        assert not distance[b, ~real].any() and not distance[b, :, ~real].any() and not parents[b, ~real].any()


def test_batched_distances_and_parents_refuse_corrupt_trees():
    for bad, needle in (([np.array([1, 3])], "cycle"), ([np.array([0, 1])], "starts no word"),
                        ([np.array([5])], "out of range")):
        for batched in (batch_encoded_tree_distances, batch_encoded_parent_positions):
            with pytest.raises(StructureError, match=needle):
                batched(bad)
    with pytest.raises(ValueError, match="anchor"):
        batch_encoded_parent_positions([np.array([1])], anchor="middle")


def test_batched_distances_of_a_long_deep_sentence_equal_the_definition():
    """70 words on one path (distances in int16, 70 levels) beside a short sentence, both padding sides."""
    chain = np.append(np.arange(2, 71), 0)  # word w's head is word w + 1
    pieces = np.repeat(np.arange(70), np.random.default_rng(0).integers(1, 3, size=70))
    encoded = [encode_piece_tree(chain, pieces), encode_piece_tree([2, 0, 2], [0, 1, 1, 2])]
    for left_pad in (False, True):
        distance, lengths = batch_encoded_tree_distances(encoded, left_pad=left_pad)
        assert distance.dtype == torch.int16
        n = int(lengths[0])
        assert distance[0].tolist() == piece_tree_distances(chain, pieces).tolist()
        short = distance[1, -5:, -5:] if left_pad else distance[1, :5, :5]
        assert short.tolist() == piece_tree_distances([2, 0, 2], [0, 1, 1, 2]).tolist() and n == len(pieces) + 1
