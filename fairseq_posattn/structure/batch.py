"""Piece-level structural positions for a whole batch at once: the values of
:func:`~fairseq_posattn.structure.tree.piece_structure` (Wang et al. 2019,
Sec. 3.1, Eq. 5-6), vectorised for the collater (ancestors by repeated parent
look-ups in one batch-wide array, then row copies from words to pieces) and
padded like fairseq's source tokens; likewise the dependency distances and
PASCAL's parent positions (Bugliarello & Okazaki 2020, Sec. 3) of
:func:`~fairseq_posattn.structure.tree.piece_tree_distances` and
:func:`~fairseq_posattn.structure.tree.piece_parent_positions`.
:func:`batch_tree_inputs` computes those of them that an encoder reads
(:class:`TreeInputs`), for every route that makes batches.
``tests/test_structure.py`` checks every
sentence against the definition, so a rule changed in ``tree.py`` fails until
it is changed here too (docs/structure.md).
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import fail
from .pieces import encode_piece_tree, segment_pieces
from .tree import _HINT_CYCLE, _HINT_HEADS, PARENT_ANCHORS, _check_rule

_HINT_PIECES = ("pass piece_word_map() of the sentence's pieces as piece_words; those "
                "pieces must spell the tree's words")


def _check_anchor(anchor: str) -> None:
    if anchor not in PARENT_ANCHORS:
        raise ValueError("anchor must be one of %s, got %r" % (PARENT_ANCHORS, anchor))


@dataclass(frozen=True)
class TreeInputs:
    """Which tree inputs an encoder reads, each a key of ``net_input`` laid
    out like ``src_tokens``: ``src_depths`` ``[B, T]`` (Wang et al. 2019,
    Eq. 5), ``src_structural_positions`` ``[B, T, T]`` (Eq. 6),
    ``src_tree_distances`` ``[B, T, T]`` (arcs between the pieces' words) and
    ``src_parent_positions`` ``[B, T]`` (PASCAL's ``p_i``, Bugliarello &
    Okazaki 2020, Sec. 3, at ``parent_anchor``: one of :data:`PARENT_ANCHORS`)."""
    depths: bool = False
    structural_positions: bool = False
    tree_distances: bool = False
    parent_anchor: Optional[str] = None

    def __post_init__(self):
        if self.parent_anchor is not None:
            _check_anchor(self.parent_anchor)

    def keys(self) -> Tuple[str, ...]:
        """The ``net_input`` keys of the inputs read."""
        return tuple(key for key, read in (
            ("src_depths", self.depths), ("src_structural_positions", self.structural_positions),
            ("src_tree_distances", self.tree_distances), ("src_parent_positions", self.parent_anchor is not None),
        ) if read)

    def __bool__(self) -> bool:
        return bool(self.keys())

    def __or__(self, other: "TreeInputs") -> "TreeInputs":
        """The inputs of both (an ensemble's); a batch holds the parent positions of one anchor only."""
        anchors = {self.parent_anchor, other.parent_anchor} - {None}
        if len(anchors) > 1:
            raise ValueError("one batch cannot hold the parent positions of two anchors (%s)"
                             % " and ".join(sorted(anchors)))
        return TreeInputs(self.depths or other.depths, self.structural_positions or other.structural_positions,
                          self.tree_distances or other.tree_distances, self.parent_anchor or other.parent_anchor)


# Wang et al. 2019's two inputs: what a tree-reading encoder without ``tree_inputs`` reads
WANG_TREE_INPUTS = TreeInputs(depths=True, structural_positions=True)


def tree_inputs_of(encoder) -> TreeInputs:
    """The tree inputs ``encoder`` reads: its ``tree_inputs``; without them (an
    encoder of another plugin or of fairseq), :data:`WANG_TREE_INPUTS` if its
    ``reads_trees``, else none."""
    inputs = getattr(encoder, "tree_inputs", None)
    if inputs is not None:
        return inputs
    return WANG_TREE_INPUTS if getattr(encoder, "reads_trees", False) else TreeInputs()


def _check_options(rule: str, max_pieces: Optional[int]) -> None:
    _check_rule(rule)
    if max_pieces is not None and max_pieces < 0:
        raise ValueError("max_pieces must be >= 0, got %d" % max_pieces)


def _ragged(arrays: Sequence[np.ndarray], what: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths, int64 concatenation, position of every element within its array)."""
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays) if len(arrays) else np.zeros(0, dtype=np.int64)
    if flat.ndim != 1 or len(flat) != lengths.sum():
        raise ValueError("%s must be 1-d arrays" % what)
    if flat.dtype.kind not in "iu":
        # empty lists concatenate as float64; anything else is a caller's bug
        if any(len(a) and np.asarray(a).dtype.kind not in "iu" for a in arrays):
            raise ValueError("%s must be integer arrays, got %s" % (what, flat.dtype))
    flat = flat.astype(np.int64, copy=False)
    starts = np.cumsum(lengths) - lengths
    return lengths, flat, np.arange(len(flat)) - np.repeat(starts, lengths)


def _sentence_of(lengths, flat_index) -> int:
    """The sentence of an element of a ragged batch's concatenation."""
    return int(np.searchsorted(np.cumsum(lengths), flat_index, side="right"))


def _check_heads(n_words, flat_heads, word_pos) -> None:
    """Fail on heads out of range and words that are their own head (the walk
    to the root below would take them for roots)."""
    bad = np.flatnonzero((flat_heads < 0) | (flat_heads > np.repeat(n_words, n_words)))
    if bad.size:
        b = _sentence_of(n_words, bad[0])
        raise fail("batch sentence %d: a HEAD is out of range 0..%d" % (b, n_words[b]), _HINT_HEADS)
    own = np.flatnonzero(flat_heads == word_pos + 1)
    if own.size:
        b = _sentence_of(n_words, own[0])
        raise fail("batch sentence %d: word %d is its own head (a cycle)" % (b, word_pos[own[0]] + 1), _HINT_CYCLE)


def _check_pieces(n_words, n_pieces, flat_pw, piece_pos) -> None:
    """Fail on piece maps that do not cover the words in order."""
    sent_p = np.repeat(np.arange(len(n_pieces)), n_pieces)
    step = np.diff(flat_pw, prepend=-1)
    first = piece_pos == 0
    ok = np.where(first, flat_pw == 0, (step == 0) | (step == 1))
    last = np.cumsum(n_pieces)[n_pieces > 0] - 1
    ends_ok = np.ones(len(n_words), dtype=bool)
    ends_ok[n_pieces > 0] = flat_pw[last] == n_words[n_pieces > 0] - 1
    ends_ok[n_pieces == 0] = n_words[n_pieces == 0] == 0
    bad_sent = np.union1d(sent_p[~ok], np.flatnonzero(~ends_ok))
    if bad_sent.size:
        b = int(bad_sent[0])
        raise fail("batch sentence %d: its %d pieces do not map onto its %d words in order "
                   "(every word needs at least one piece)" % (b, n_pieces[b], n_words[b]),
                   _HINT_PIECES)


def batch_piece_structure(heads: Sequence[np.ndarray], piece_words: Sequence[np.ndarray],
                          rule: str = "figure", append_eos: bool = True,
                          max_pieces: Optional[int] = None, left_pad: bool = False,
                          width: Optional[int] = None,
                          ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`~fairseq_posattn.structure.tree.piece_structure` of each sentence's
    ``heads[b]`` and ``piece_words[b]`` (both checked), padded into one batch:
    ``depth [B, L]`` and ``rel [B, L, L]`` (unclipped) in the smallest signed
    integer type that holds them (:func:`smallest_int_type`), and int64
    ``lengths [B]``; padding is 0.  L is the longest sentence, or ``width`` if
    larger; ``left_pad``: fairseq's left-padded source layout.
    """
    _check_options(rule, max_pieces)
    if len(heads) != len(piece_words):
        raise ValueError("%d head arrays but %d piece_words arrays"
                         % (len(heads), len(piece_words)))
    n_words, flat_heads, word_pos = _ragged(heads, "heads")
    n_pieces, flat_pw, piece_pos = _ragged(piece_words, "piece_words")
    _check_heads(n_words, flat_heads, word_pos)
    _check_pieces(n_words, n_pieces, flat_pw, piece_pos)
    return _structure((n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos),
                      _walk(n_words, flat_heads, word_pos), rule, append_eos, max_pieces, left_pad, width)


def batch_encoded_structure(trees: Sequence[np.ndarray], rule: str = "figure",
                            append_eos: bool = True, max_pieces: Optional[int] = None,
                            left_pad: bool = False, width: Optional[int] = None,
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`batch_piece_structure` of trees encoded by :func:`.pieces.encode_piece_tree` (the tree files')."""
    _check_options(rule, max_pieces)
    return _structure(*_read(trees), rule, append_eos, max_pieces, left_pad, width)


def batch_encoded_tree_distances(trees: Sequence[np.ndarray], append_eos: bool = True,
                                 max_pieces: Optional[int] = None, left_pad: bool = False,
                                 width: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`~fairseq_posattn.structure.tree.piece_tree_distances` of each of
    the encoded ``trees`` (:func:`.pieces.encode_piece_tree`), padded like
    :func:`batch_encoded_structure`'s ``rel``: ``distance [B, L, L]`` in the
    smallest signed integer type that holds it, padding 0, and int64 ``lengths [B]``."""
    _check_options("figure", max_pieces)
    return _tree_distances(*_read(trees), append_eos, max_pieces, left_pad, width)


def batch_encoded_parent_positions(trees: Sequence[np.ndarray], anchor: str = "mean", append_eos: bool = True,
                                   max_pieces: Optional[int] = None, left_pad: bool = False,
                                   width: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`~fairseq_posattn.structure.tree.piece_parent_positions` of each
    of the encoded ``trees``, padded like :func:`batch_encoded_structure`'s
    ``depth``: float32 ``parents [B, L]`` (positions within the sentence, not
    columns: left padding shifts the cells, not the values), padding 0, and
    int64 ``lengths [B]``."""
    _check_options("figure", max_pieces)
    _check_anchor(anchor)
    decoded, _ = _read(trees)  # the walk refuses cycles
    return _parent_positions(decoded, anchor, append_eos, max_pieces, left_pad, width)


def batch_tree_inputs(trees: Sequence[np.ndarray], wanted: TreeInputs, rule: str = "figure",
                      append_eos: bool = True, max_pieces: Optional[int] = None, left_pad: bool = False,
                      width: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """The ``net_input`` tensors that ``wanted`` names (exactly ``wanted.keys()``)
    of the encoded ``trees`` (:func:`.pieces.encode_piece_tree`), each laid out
    as :func:`batch_encoded_structure`, :func:`batch_encoded_tree_distances` or
    :func:`batch_encoded_parent_positions` lays it out.  The trees are decoded
    and checked once, and only what is wanted is computed (no ``[B, L, L]``
    tensor for an encoder that reads none); nothing is wanted, nothing is read."""
    _check_options(rule, max_pieces)
    if not wanted:
        return {}
    decoded, walk = _read(trees)
    layout = (append_eos, max_pieces, left_pad, width)
    out = {}
    if wanted.depths or wanted.structural_positions:
        out["src_depths"], out["src_structural_positions"], _ = _structure(
            decoded, walk, rule, *layout, relative=wanted.structural_positions)
    if wanted.tree_distances:
        out["src_tree_distances"], _ = _tree_distances(decoded, walk, *layout)
    if wanted.parent_anchor is not None:
        out["src_parent_positions"], _ = _parent_positions(decoded, wanted.parent_anchor, *layout)
    return {key: out[key] for key in wanted.keys()}


def _read(trees: Sequence[np.ndarray]):
    """(:func:`_decoded`, :func:`_walk`) of encoded trees: checked, cycles refused."""
    decoded = _decoded(trees)
    return decoded, _walk(*decoded[:3])


def _tree_distances(decoded, walk, append_eos, max_pieces, left_pad, width):
    """:func:`batch_encoded_tree_distances` of decoded trees and their walk."""
    _, _, _, n_pieces, flat_pw, piece_pos = decoded
    B, W, walked_by_step, ancestors_by_step = walk
    W2 = W + 2
    walked, ancestors = (np.concatenate(a) if a else np.zeros(0, dtype=np.int64)
                         for a in (walked_by_step, ancestors_by_step))
    depth = np.bincount(walked, minlength=B * W2)
    small = smallest_int_type(2 * W + 2)
    # [b * W2 + a, k]: twice whether node a is k or above k (EOS, padding and unused nodes: themselves only)
    twice_under = np.zeros((B * W2, W2), dtype=small)
    twice_under[np.arange(B * W2), np.tile(np.arange(W2), B)] = 2
    twice_under[ancestors, walked % W2] = 2
    # rows from the top down (tree.tree_distances): a root is d_k + 2 arcs from word k, through the
    # virtual root, but 2 fewer from the words under it; a word is one arc further than its parent from
    # every word, but one closer to the words under it (O(W^2) per sentence, no product of matrices)
    words = (np.repeat(depth.reshape(B, W2), W2, axis=0) + 2).astype(small) - twice_under
    parent = np.arange(B * W2)
    if walked_by_step:
        parent[walked_by_step[0]] = ancestors_by_step[0]
    by_depth = np.argsort(depth, kind="stable")
    level_ends = np.cumsum(np.bincount(depth))
    for level in range(1, len(level_ends)):
        nodes = by_depth[level_ends[level - 1]:level_ends[level]]
        words[nodes] = words[parent[nodes]] + 1 - twice_under[nodes]
    words = words.reshape(B, W2, W2)
    words[:, W + 1, :] = 0
    words[:, :, W + 1] = 0
    L, lengths, word_rows = _word_rows(W, n_pieces, flat_pw, piece_pos, max_pieces, append_eos,
                                       left_pad, width)
    # rows of the pieces' words, then (the matrix being symmetric) their columns as rows
    rows = words.reshape(B * W2, W2).take(word_rows, axis=0).reshape(B, L, W2)
    columns = np.ascontiguousarray(rows.transpose(0, 2, 1)).reshape(B * W2, L)
    return torch.from_numpy(columns.take(word_rows, axis=0).reshape(B, L, L)), torch.from_numpy(lengths)


def _parent_positions(decoded, anchor, append_eos, max_pieces, left_pad, width):
    """:func:`batch_encoded_parent_positions` of decoded trees (walked: no cycle)."""
    n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos = decoded
    words_before = np.cumsum(n_words) - n_words
    word_of_piece = flat_pw + np.repeat(words_before, n_pieces)  # batch-wide word ids
    first = np.zeros(len(flat_heads), dtype=np.int64)
    starts = np.diff(word_of_piece, prepend=-1) != 0
    first[word_of_piece[starts]] = piece_pos[starts]
    if anchor == "mean":  # halfway between a word's first and last pieces
        at = first + (np.bincount(word_of_piece, minlength=len(first)) - 1) / 2
    else:
        at = first.astype(np.float64)
    parent = np.repeat(words_before, n_words) + np.where(flat_heads > 0, flat_heads - 1, word_pos)
    L, lengths, keep, piece_cells, kept, eos_cells = _layout(n_pieces, piece_pos, max_pieces, append_eos,
                                                             left_pad, width)
    parents = np.zeros(len(n_words) * L, dtype=np.float32)
    parents[piece_cells] = at[parent[word_of_piece]][keep]
    if append_eos:
        parents[eos_cells] = kept
    return torch.from_numpy(parents.reshape(len(n_words), L)), torch.from_numpy(lengths)


def _decoded(trees: Sequence[np.ndarray]):
    """(n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos) of encoded trees, heads checked."""
    n_pieces, flat, piece_pos = _ragged(trees, "trees")
    begins = flat != 0
    begun = np.concatenate(([0], np.cumsum(begins)))  # words begun before each piece
    ends = np.cumsum(n_pieces)
    words_before = begun[ends - n_pieces]
    n_words = begun[ends] - words_before
    flat_pw = begun[1:] - 1 - np.repeat(words_before, n_pieces)
    if len(flat_pw) and flat_pw.min() < 0:  # a sentence's pieces before its first word
        b = _sentence_of(n_pieces, np.argmax(flat_pw < 0))
        raise fail("batch sentence %d: its first piece starts no word" % b,
                   "the tree data is corrupt")
    flat_heads = flat[begins] - 1
    word_pos = np.arange(len(flat_heads)) - np.repeat(words_before, n_words)
    _check_heads(n_words, flat_heads, word_pos)
    return n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos


def _walk(n_words, flat_heads, word_pos):
    """(B, W, walked_by_step, ancestors_by_step): every word's walk to its root
    over W + 2 nodes per sentence (W the most words; node W is a virtual word
    for EOS, its own root after every word, W + 1 one for padding), as
    batch-wide node ids ``b * (W + 2) + node``; step ``s`` lists the words
    still climbing and the ancestor ``s`` arcs above each."""
    B = len(n_words)
    W = int(n_words.max()) if B else 0
    W2 = W + 2
    sent_w = np.repeat(np.arange(B), n_words)
    at_word = sent_w * W2 + word_pos
    # parents as batch-wide node ids (roots, EOS and padding are their own)
    parent = np.arange(B * W2)
    parent[at_word] = sent_w * W2 + np.where(flat_heads > 0, flat_heads - 1, word_pos)
    climbing, above = at_word, at_word
    walked_by_step, ancestors_by_step = [], []
    for _ in range(W2):
        up = parent.take(above)
        moved = np.flatnonzero(up != above)  # only nodes with a parent move
        climbing, above = climbing.take(moved), up.take(moved)
        if not len(climbing):
            break
        walked_by_step.append(climbing)
        ancestors_by_step.append(above)
    else:
        b = int(climbing[0]) // W2
        raise fail("batch sentence %d: the heads form a cycle" % b, _HINT_CYCLE)
    return B, W, walked_by_step, ancestors_by_step


def _layout(n_pieces, piece_pos, max_pieces, append_eos, left_pad, width):
    """Where the pieces and EOS go in the padded ``[B, L]`` batch: (L, lengths,
    the kept pieces (a mask or slice of the concatenation), their flat cells,
    the number kept and the flat cells of EOS)."""
    B = len(n_pieces)
    truncate = bool(max_pieces is not None and B and max_pieces < n_pieces.max())  # cuts a sentence
    kept = np.minimum(n_pieces, max_pieces) if truncate else n_pieces
    lengths = kept + int(append_eos)
    L = max(int(lengths.max()) if B else 0, width or 0)
    # flat index of each sentence's first position in [B, L]
    first = np.arange(B) * L + (L - lengths if left_pad else 0)
    keep = piece_pos < max_pieces if truncate else slice(None)
    return L, lengths, keep, np.repeat(first, n_pieces)[keep] + piece_pos[keep], kept, first + kept


def _word_rows(W, n_pieces, flat_pw, piece_pos, max_pieces, append_eos, left_pad, width):
    """(L, lengths, the word node ``b * (W + 2) + w`` of every cell of the ``[B, L]`` batch, flat)."""
    B = len(n_pieces)
    L, lengths, keep, piece_cells, _, eos_cells = _layout(n_pieces, piece_pos, max_pieces, append_eos,
                                                          left_pad, width)
    word = np.full(B * L, W + 1, dtype=np.int64)
    word[piece_cells] = flat_pw[keep]
    if append_eos:
        word[eos_cells] = W
    return L, lengths, (np.arange(B)[:, None] * (W + 2) + word.reshape(B, L)).reshape(-1)


def _structure(decoded, walk, rule, append_eos, max_pieces, left_pad, width, relative=True):
    """The batch's depths, relative structural positions (None unless ``relative``)
    and lengths from checked, concatenated heads and piece maps and their walk."""
    n_words, _, _, n_pieces, flat_pw, piece_pos = decoded
    B, W, walked_by_step, ancestors_by_step = walk
    W2 = W + 2
    walked, ancestors = (np.concatenate(a) if a else np.zeros(0, dtype=np.int64)
                         for a in (walked_by_step, ancestors_by_step))
    # a word climbs as many steps as it is deep
    depth = np.bincount(walked, minlength=B * W2).reshape(B, W2)
    depth[:, W] = depth.max(1) + (n_words > 0)  # EOS; padding and the unused words are at 0
    # Piece level: gathers from words (EOS -> word W, padding -> W + 1).
    L, lengths, word_rows = _word_rows(W, n_pieces, flat_pw, piece_pos, max_pieces, append_eos,
                                       left_pad, width)
    depths = depth.astype(smallest_int_type(W)).reshape(-1).take(word_rows).reshape(B, L)
    if not relative:
        return torch.from_numpy(depths), None, torch.from_numpy(lengths)

    # Eq. 6 between words, in the output's type (|rel| <= d_k + d_q <= 2 W:
    # EOS is at most W deep); the sign is that of the word indices, which
    # pieces share.  First every pair as if on different paths,
    # sign(k - q) (d_k + d_q), then the pairs on one path, |d_k - d_q| steps
    # apart, from the walk.  Both rules make rel_words antisymmetric.
    small = smallest_int_type(2 * W)
    small_depth = depth.astype(small)
    # [b, q * W2 + k]: d_q + d_k from two contiguous copies (a broadcast sum is slower)
    rel_words = (np.repeat(small_depth, W2, axis=1) + np.tile(small_depth, W2)).reshape(B, W2, W2)
    nodes = np.arange(W2)
    rel_words *= np.sign(nodes[None, :] - nodes[:, None]).astype(small)
    steps = np.repeat(np.arange(1, len(walked_by_step) + 1, dtype=small),
                      [len(a) for a in walked_by_step])
    first_node = np.repeat(np.arange(0, B * W2, W2), W2).take(walked)  # b * W2
    flat_rel = rel_words.reshape(-1)
    to_ancestor = walked * W2 + ancestors - first_node  # [b, q, k]: k an ancestor of q
    from_ancestor = ancestors * W2 + walked - first_node  # [b, k, q]
    if rule == "figure":  # sign(k - q) |d_k - d_q|
        steps = np.where(ancestors > walked, steps, -steps)
        flat_rel[to_ancestor] = steps
        flat_rel[from_ancestor] = -steps
    else:  # d_k - d_q
        flat_rel[to_ancestor] = -steps
        flat_rel[from_ancestor] = steps
    rel_words[:, W + 1, :] = 0
    rel_words[:, :, W + 1] = 0

    # the rows of the pieces' words, then their columns: as rel_words is
    # antisymmetric, [b, q, word_j] is -[b, word_j, q], so the columns are
    # the negated transpose of the rows (two row copies and a transpose are
    # faster than gathering single elements)
    rows = rel_words.reshape(B * W2, W2).take(word_rows, axis=0).reshape(B, L, W2)
    columns = np.negative(rows.transpose(0, 2, 1), out=np.empty((B, W2, L), dtype=small))
    rel = torch.from_numpy(columns.reshape(B * W2, L).take(word_rows, axis=0).reshape(B, L, L))
    return torch.from_numpy(depths), rel, torch.from_numpy(lengths)


def smallest_int_type(largest: int) -> np.dtype:
    """The smallest signed integer type that holds ``-largest..largest``."""
    for dtype in (np.int8, np.int16, np.int32):
        if largest <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def batch_trees_of_pieces(pieces: Sequence[Sequence[str]], scheme: str,
                          parse: Callable[[List[List[str]]], Sequence[Sequence[int]]], wanted: TreeInputs,
                          rule: str = "figure", left_pad: bool = False,
                          width: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """Raw pieces (without EOS) -> words (``scheme``) -> trees -> the tree
    files' encoding -> :func:`batch_tree_inputs` with EOS, the collater's path.
    ``parse`` is called once with the word lists of the sentences that have
    words and returns each one's 1-based heads."""
    segmented = [segment_pieces(p, scheme) for p in pieces]  # (piece_words, words)
    words = [w for _, w in segmented]
    heads = [np.zeros(0, dtype=np.int64)] * len(words)
    to_parse = [b for b, w in enumerate(words) if w]
    if to_parse:
        for b, h in zip(to_parse, parse([words[b] for b in to_parse])):
            heads[b] = np.asarray(h, dtype=np.int64)
    encoded = [encode_piece_tree(h, piece_words) for h, (piece_words, _) in zip(heads, segmented)]
    return batch_tree_inputs(encoded, wanted, rule=rule, left_pad=left_pad, width=width)
