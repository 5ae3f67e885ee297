"""Dependency trees, tree depths and relative structural positions: the one
definition of Wang et al. (2019), Sec. 3.1.  The absolute structural position
of a word is its depth in the dependency tree (Eq. 5, the root at depth 0);
the relative one of two words follows two hierarchical rules (Eq. 6).
:func:`piece_structure` carries them to one sentence's subword pieces and
EOS; :func:`piece_tree_distances` does the same for the path lengths of the
dependency-distance bias, :func:`piece_parent_positions` gives PASCAL's parent
positions (Bugliarello & Okazaki 2020, Sec. 3); :mod:`.batch` is tested to
compute the same for whole batches.
"""

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import fail, quoted

RULES = ("figure", "text")

_HINT_HEADS = "HEAD must be 0 (root) or the 1-based index of a word of the same sentence"
_HINT_CYCLE = ("every word must reach a root (HEAD 0) by following its heads; "
               "re-parse the sentence or fix its HEAD column")


@dataclass
class DependencyTree:
    """One sentence's dependency tree over its surface tokens: ``heads[i]`` is the
    1-based head of word ``i + 1`` (0 = root); ``source``, ``line`` and ``index``
    say where it was read from (``==`` ignores them)."""

    words: List[str]
    heads: List[int]
    deprels: Optional[List[str]] = None
    sent_id: Optional[str] = None
    text: Optional[str] = None
    upos: Optional[List[str]] = None
    xpos: Optional[List[str]] = None
    source: Optional[str] = field(default=None, compare=False)
    line: Optional[int] = field(default=None, compare=False)
    index: int = field(default=0, compare=False)

    def __len__(self) -> int:
        return len(self.words)


def _as_heads(heads: Sequence[int], where: str) -> np.ndarray:
    """``heads`` as a 1-d int64 array, or a StructureError."""
    try:
        arr = np.asarray(heads)
    except (TypeError, ValueError) as exc:
        raise fail("heads cannot be read as a list of integers (%s)" % exc, _HINT_HEADS,
                   where=where) from None
    if arr.ndim != 1:
        raise fail("heads must be a flat list, got an array of shape %s" % (arr.shape,),
                   _HINT_HEADS, where=where)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise fail("heads must be integers, got %s" % (list(arr[:5]),), _HINT_HEADS, where=where)
    return arr.astype(np.int64)


def _word(i: int, words: Optional[Sequence[str]]) -> str:
    """Name 0-based word ``i`` as its 1-based index (and form, when known)."""
    if words is not None and i < len(words):
        return "%d %s" % (i + 1, quoted(words[i]))
    return "%d" % (i + 1)


def analyse_heads(h: np.ndarray, words: Optional[Sequence[str]] = None
                  ) -> Tuple[Optional[np.ndarray], Optional[Tuple[int, str, str]]]:
    """``(depths, None)`` of a 1-d int64 head array, or ``(None, (word, problem, hint))``
    with the 0-based word the first problem is found at (-1: the sentence); O(n)."""
    n = len(h)
    bad = np.flatnonzero((h < 0) | (h > n))
    if bad.size:
        i = int(bad[0])
        return None, (i, "HEAD %d of word %s is out of range 0..%d" % (h[i], _word(i, words), n),
                      _HINT_HEADS)
    if n and not (h == 0).any():
        return None, (-1, "no word has HEAD 0 (the sentence has no root)",
                      "one word (or several: a forest) must have HEAD 0")
    heads = h.tolist()
    depth = [-1] * n
    visited_in = [-1] * n  # which walk last passed through a word
    for start in range(n):
        path = []
        j = start
        while depth[j] < 0 and heads[j] != 0:
            if visited_in[j] == start:
                cycle = path[path.index(j):] + [j]
                return None, (j, "the heads form a cycle: %s"
                              % " -> ".join(_word(c, words) for c in cycle), _HINT_CYCLE)
            visited_in[j] = start
            path.append(j)
            j = heads[j] - 1
        if depth[j] < 0:  # j is a root
            depth[j] = 0
        d = depth[j]
        for node in reversed(path):
            d += 1
            depth[node] = d
    return np.asarray(depth, dtype=np.int64), None


def check_tree(heads: Sequence[int], where: str = "",
               words: Optional[Sequence[str]] = None) -> None:
    """Raise :class:`StructureError` unless ``heads`` (1-based, 0 = root) is a
    non-empty dependency tree or forest; ``where`` prefixes the message and
    ``words``, when given, name the words on a cycle."""
    if len(_validated(heads, where, words)[0]) == 0:
        raise fail("the sentence has no words", "a tree needs at least one word", where=where)


def tree_depths(heads: Sequence[int]) -> np.ndarray:
    """Absolute structural positions (Wang et al. 2019, Eq. 5): the number of
    arcs from each word to its root, int64; every root of a forest has depth
    0.  O(n).  Raises :class:`StructureError` on a cycle or bad head."""
    return _validated(heads)[1]


def _validated(heads: Sequence[int], where: str = "", words: Optional[Sequence[str]] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
    """(``heads`` as int64, their depths), or a StructureError naming the problem."""
    h = _as_heads(heads, where)
    depths, problem = analyse_heads(h, words)
    if problem is not None:
        raise fail(problem[1], problem[2], where=where)
    return h, depths


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError("rule must be one of %s, got %r" % (RULES, rule))


def _ancestors_or_self(h: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``[n, n]`` bool of checked heads ``h``: ``[q, a]`` is True where word ``a`` is ``q`` or above it."""
    words = np.arange(len(h))
    parent = np.where(h == 0, words, h - 1)  # a root is its own parent
    ancestor_or_self = np.eye(len(h), dtype=bool)
    above = words
    for _ in range(depth.max(initial=0)):  # climb one arc per step
        above = parent[above]
        ancestor_or_self[words, above] = True
    return ancestor_or_self


def relative_structural_positions(heads: Sequence[int], rule: str = "figure") -> np.ndarray:
    """Relative structural positions (Wang et al. 2019, Sec. 3.1, Eq. 6),
    unclipped: ``out[q, k]`` is key word ``k`` seen from query word ``q``
    (int64, ``[n, n]``), with ``d`` the tree depths:

    * q and k on one path to the root (one is an ancestor of the other, or
      q == k): ``sign(k - q) * |d_k - d_q|`` for ``rule="figure"`` (what the
      paper's Figure 1 computes; default) or ``d_k - d_q`` for
      ``rule="text"`` (the paper's rule 1 as written);
    * otherwise (other branches, or other trees of a forest):
      ``sign(k - q) * (d_k + d_q)``.
    """
    _check_rule(rule)
    h, depth = _validated(heads)  # Eq. 5: d_i, the depth of word i
    words = np.arange(len(h))
    ancestor_or_self = _ancestors_or_self(h, depth)
    one_path = ancestor_or_self | ancestor_or_self.T  # Eq. 6: the condition of rule 1
    sign = np.sign(words[None, :] - words[:, None])  # sign(k - q)
    d_q, d_k = depth[:, None], depth[None, :]
    rule_1 = sign * np.abs(d_k - d_q) if rule == "figure" else d_k - d_q  # Eq. 6, rule 1
    rule_2 = sign * (d_k + d_q)  # Eq. 6, rule 2
    return np.where(one_path, rule_1, rule_2)


def piece_structure(heads: Sequence[int], piece_words: Sequence[int], rule: str = "figure",
                    append_eos: bool = True, max_pieces: Optional[int] = None,
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """One sentence's depths ``[P]`` and relative structural positions ``[P, P]``
    (int64, unclipped) over its pieces (``piece_words``: :func:`.pieces.piece_word_map`),
    as the encoder sees them: sub-words take their word's positions (Sec. 3.1);
    ``max_pieces`` keeps the first pieces with their full-tree values
    (``--truncate-source``); ``append_eos`` adds an EOS below the whole tree
    (depth: the maximum + 1, its own root, related to every piece by rule 2).
    """
    depth = tree_depths(heads)  # Eq. 5
    relative = relative_structural_positions(heads, rule)  # Eq. 6
    kept = np.asarray(piece_words, dtype=np.int64)[:max_pieces]  # --truncate-source
    piece_depth = depth[kept]  # Sec. 3.1: a sub-word takes its word's depth
    piece_relative = relative[np.ix_(kept, kept)]  # ... and its word's relations
    if not append_eos:
        return piece_depth, piece_relative
    eos_depth = depth.max(initial=-1) + 1  # below the deepest word; 0 without words
    n = len(kept) + 1
    with_eos = np.zeros((n, n), dtype=np.int64)
    with_eos[:-1, :-1] = piece_relative
    with_eos[:-1, -1] = piece_depth + eos_depth  # Eq. 6, rule 2, EOS after the piece
    with_eos[-1, :-1] = -(piece_depth + eos_depth)  # Eq. 6, rule 2, the piece before EOS
    return np.append(piece_depth, eos_depth), with_eos


def tree_distances(heads: Sequence[int]) -> np.ndarray:
    """Dependency distances ``[n, n]`` (int64): the number of arcs on the path
    between two words.  Every root hangs from one virtual root (CoNLL-U's
    HEAD 0), so the words of two trees of a forest are ``d_q + d_k + 2``
    apart (``d``: :func:`tree_depths`).  With ``c`` the number of words
    above-or-equal to both, the distance is ``d_q + d_k + 2 - 2 c``.
    """
    h, depth = _validated(heads)
    above = _ancestors_or_self(h, depth).astype(np.int64)
    return depth[:, None] + depth[None, :] + 2 - 2 * (above @ above.T)


def piece_tree_distances(heads: Sequence[int], piece_words: Sequence[int], append_eos: bool = True,
                         max_pieces: Optional[int] = None) -> np.ndarray:
    """One sentence's :func:`tree_distances` ``[P, P]`` over its pieces, laid
    out as :func:`piece_structure`'s: pieces take their word's distances (the
    pieces of one word are 0 apart); EOS hangs from the virtual root like a
    root, ``d + 2`` from a piece at depth ``d``."""
    depth = tree_depths(heads)
    kept = np.asarray(piece_words, dtype=np.int64)[:max_pieces]  # --truncate-source
    distance = tree_distances(heads)[np.ix_(kept, kept)]
    if not append_eos:
        return distance
    to_eos = depth[kept] + 2
    return np.block([[distance, to_eos[:, None]], [to_eos[None, :], np.zeros((1, 1), np.int64)]])


PARENT_ANCHORS = ("mean", "root")


def piece_parent_positions(heads: Sequence[int], piece_words: Sequence[int], anchor: str = "mean",
                           append_eos: bool = True, max_pieces: Optional[int] = None) -> np.ndarray:
    """PASCAL's parent position ``p_i`` of every piece (Bugliarello & Okazaki
    2020, Sec. 3; float64 ``[P]``, 0-based piece positions): the pieces of a
    word take the word's parent (a root is its own parent), placed at the
    middle of that word's pieces (``anchor="mean"``, the mean of their
    positions) or at its first piece (``"root"``).  Positions are the full
    sentence's, also of pieces that ``max_pieces`` cuts off; EOS is its own
    parent (in the authors' code, tokens without a tag point at EOS's
    column)."""
    if anchor not in PARENT_ANCHORS:
        raise ValueError("anchor must be one of %s, got %r" % (PARENT_ANCHORS, anchor))
    h, _ = _validated(heads)
    piece_words = np.asarray(piece_words, dtype=np.int64)
    words = np.arange(len(h))
    first = np.searchsorted(piece_words, words, side="left")
    if anchor == "mean":  # a word's pieces are consecutive: their mean is halfway
        at = (first + np.searchsorted(piece_words, words, side="right") - 1) / 2
    else:
        at = first.astype(np.float64)
    parent = np.where(h == 0, words, h - 1)
    positions = at[parent][piece_words[:max_pieces]]
    return np.append(positions, len(positions)) if append_eos else positions


def collapse_multiword_tokens(n_tokens: int, token_of_word: Sequence[int], word_heads: Sequence[int],
                              word_labels: Optional[Sequence] = None):
    """Map a word-level tree (multiword tokens expanded: ``don't`` -> ``do
    n't``, ``zum`` -> ``zu dem``) back onto the surface tokens.

    ``token_of_word[w]``: the 0-based surface token of 0-based word ``w``
    (non-decreasing); ``word_heads``: 1-based (0 = root).  A token takes the
    head (mapped to the token holding it) and label (a DEPREL, or a tuple of
    columns) of its member closest to the root (the first on ties), whose head
    lies outside the token.  Returns ``(heads, labels)`` over tokens; a cycle
    or a bad head is a ``StructureError``.
    """
    if len(word_heads) != len(token_of_word):
        raise ValueError("token_of_word and word_heads differ in length")
    if sorted(set(token_of_word)) != list(range(n_tokens)):
        raise ValueError("every token needs at least one word, in order")
    depths = tree_depths(word_heads)
    members: List[Optional[int]] = [None] * n_tokens
    for w, t in enumerate(token_of_word):
        if members[t] is None or depths[w] < depths[members[t]]:
            members[t] = w
    heads = [0 if word_heads[w] == 0 else token_of_word[word_heads[w] - 1] + 1 for w in members]
    return heads, (None if word_labels is None else [word_labels[w] for w in members])
