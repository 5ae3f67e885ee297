"""Piece-level structural positions for a whole batch at once: the values of
:func:`~fairseq_posattn.structure.tree.piece_structure` (Wang et al. 2019,
Sec. 3.1, Eq. 5-6), vectorised for the collater (ancestors by repeated parent
look-ups in one batch-wide array, then row copies from words to pieces) and
padded like fairseq's source tokens.  ``tests/test_structure.py`` checks every
sentence against the definition, so a rule changed in ``tree.py`` fails until
it is changed here too (docs/structure.md).
"""

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import fail
from .pieces import segment_pieces
from .tree import _HINT_CYCLE, _HINT_HEADS, _check_rule

_HINT_PIECES = ("pass piece_word_map() of the sentence's pieces as piece_words; those "
                "pieces must spell the tree's words")


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
    return _structure(n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos, rule,
                      append_eos, max_pieces, left_pad, width)


def batch_encoded_structure(trees: Sequence[np.ndarray], rule: str = "figure",
                            append_eos: bool = True, max_pieces: Optional[int] = None,
                            left_pad: bool = False, width: Optional[int] = None,
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`batch_piece_structure` of trees encoded by :func:`.pieces.encode_piece_tree` (the tree files')."""
    _check_options(rule, max_pieces)
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
    return _structure(n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos, rule,
                      append_eos, max_pieces, left_pad, width)


def _structure(n_words, flat_heads, word_pos, n_pieces, flat_pw, piece_pos, rule, append_eos,
               max_pieces, left_pad, width):
    """The batch's structure from checked, concatenated heads and piece maps."""
    B = len(n_words)
    # Word level, over W + 2 nodes per sentence: W is a virtual word for EOS
    # (its own root, after every word), W + 1 one for padding (zeroed).
    W = int(n_words.max()) if B else 0
    W2 = W + 2
    sent_w = np.repeat(np.arange(B), n_words)
    at_word = sent_w * W2 + word_pos
    # parents as batch-wide node ids b * W2 + node (roots, EOS and padding are their own)
    parent = np.arange(B * W2)
    parent[at_word] = sent_w * W2 + np.where(flat_heads > 0, flat_heads - 1, word_pos)
    # every word's walk to its root: (word, ancestor) for the words still
    # climbing, one array of each per step (only nodes with a parent move)
    climbing, above = at_word, at_word
    walked_by_step, ancestors_by_step = [], []
    for _ in range(W2):
        up = parent.take(above)
        moved = np.flatnonzero(up != above)
        climbing, above = climbing.take(moved), up.take(moved)
        if not len(climbing):
            break
        walked_by_step.append(climbing)
        ancestors_by_step.append(above)
    else:
        b = int(climbing[0]) // W2
        raise fail("batch sentence %d: the heads form a cycle" % b, _HINT_CYCLE)
    walked, ancestors = (np.concatenate(a) if a else np.zeros(0, dtype=np.int64)
                         for a in (walked_by_step, ancestors_by_step))
    # a word climbs as many steps as it is deep
    depth = np.bincount(walked, minlength=B * W2).reshape(B, W2)
    depth[:, W] = depth.max(1) + (n_words > 0)  # EOS; padding and the unused words are at 0

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

    # Piece level: gathers from words (EOS -> word W, padding -> W + 1).
    truncate = bool(max_pieces is not None and B and max_pieces < n_pieces.max())  # cuts a sentence
    kept = np.minimum(n_pieces, max_pieces) if truncate else n_pieces
    lengths = kept + int(append_eos)
    L = max(int(lengths.max()) if B else 0, width or 0)
    # flat index of each sentence's first position in [B, L]
    first = np.arange(B) * L + (L - lengths if left_pad else 0)
    keep = piece_pos < max_pieces if truncate else slice(None)
    word = np.full(B * L, W + 1, dtype=np.int64)
    word[np.repeat(first, n_pieces)[keep] + piece_pos[keep]] = flat_pw[keep]
    if append_eos:
        word[first + kept] = W
    word_rows = (np.arange(B)[:, None] * W2 + word.reshape(B, L)).reshape(-1)
    # the rows of the pieces' words, then their columns: as rel_words is
    # antisymmetric, [b, q, word_j] is -[b, word_j, q], so the columns are
    # the negated transpose of the rows (two row copies and a transpose are
    # faster than gathering single elements)
    rows = rel_words.reshape(B * W2, W2).take(word_rows, axis=0).reshape(B, L, W2)
    columns = np.negative(rows.transpose(0, 2, 1), out=np.empty((B, W2, L), dtype=small))
    rel = torch.from_numpy(columns.reshape(B * W2, L).take(word_rows, axis=0).reshape(B, L, L))
    depths = depth.astype(smallest_int_type(W)).reshape(-1).take(word_rows).reshape(B, L)
    return torch.from_numpy(depths), rel, torch.from_numpy(lengths)


def smallest_int_type(largest: int) -> np.dtype:
    """The smallest signed integer type that holds ``-largest..largest``."""
    for dtype in (np.int8, np.int16, np.int32):
        if largest <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def batch_trees_of_pieces(pieces: Sequence[Sequence[str]], scheme: str,
                          parse: Callable[[List[List[str]]], Sequence[Sequence[int]]],
                          rule: str = "figure", left_pad: bool = False,
                          width: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Raw pieces (without EOS) -> words (``scheme``) -> trees -> :func:`batch_piece_structure`'s
    ``depth`` and ``rel`` with EOS.  ``parse`` is called once with the word lists of
    the sentences that have words and returns each one's 1-based heads."""
    segmented = [segment_pieces(p, scheme) for p in pieces]  # (piece_words, words)
    words = [w for _, w in segmented]
    heads = [np.zeros(0, dtype=np.int64)] * len(words)
    to_parse = [b for b, w in enumerate(words) if w]
    if to_parse:
        for b, h in zip(to_parse, parse([words[b] for b in to_parse])):
            heads[b] = np.asarray(h, dtype=np.int64)
    depth, rel, _ = batch_piece_structure(heads, [m for m, _ in segmented], rule=rule,
                                          left_pad=left_pad, width=width)
    return depth, rel
