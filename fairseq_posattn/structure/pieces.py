"""Words from subword pieces.

Wang et al. (2019), Sec. 3.1: BPE sub-words share the structural position of
their word, so every piece must be mapped back to the word it comes from.

Schemes:

* ``"subword_nmt"``: a piece ending in ``@@`` continues into the next piece
  (``["un@@", "believ@@", "able", "."]`` -> ``["unbelievable", "."]``);
* ``"sentencepiece"``: a piece starting with ``▁`` (U+2581) begins a word; the
  first piece begins a word even without ``▁``; a bare ``▁`` begins a word
  whose text is in the pieces after it (``["▁", "1", "2"]`` -> ``["12"]``);
* ``"none"``: every piece is a word.
"""

from typing import List, Sequence, Tuple

import numpy as np

from ..errors import fail

SCHEMES = ("subword_nmt", "sentencepiece", "none")  # how subword pieces make words
SUBWORD_MODELS = SCHEMES[:2]  # the schemes that are subword models (fairseq --bpe names)
BPE_CONTINUATION = "@@"
SPM_SPACE = "\u2581"


def _segment(pieces: Sequence[str], scheme: str, where: str) -> Tuple[List[int], List[str]]:
    """(0-based word of each piece, text of each word)."""
    if scheme not in SCHEMES:
        raise ValueError("scheme must be one of %s, got %r" % (SCHEMES, scheme))
    for i, p in enumerate(pieces):
        if not isinstance(p, str) or not p:
            raise fail("piece %d is %r; pieces must be non-empty strings" % (i + 1, p),
                       "split the tokenized line on whitespace", where=where)
    word_of: List[int] = []
    words: List[str] = []
    if scheme == "none":
        return list(range(len(pieces))), list(pieces)
    if scheme == "subword_nmt":
        current: List[str] = []
        for p in pieces:
            word_of.append(len(words))
            if p.endswith(BPE_CONTINUATION):
                current.append(p[:-len(BPE_CONTINUATION)])
            else:
                current.append(p)
                words.append("".join(current))
                current = []
        if current:
            raise fail("the last piece %r ends with '@@' but no piece follows it" % pieces[-1],
                       "the line is cut inside a word, or it is not subword-nmt output "
                       "(use scheme 'sentencepiece' or 'none')", where=where)
        return word_of, words
    # sentencepiece
    for i, p in enumerate(pieces):
        begins = p.startswith(SPM_SPACE)
        body = p[1:] if begins else p
        if SPM_SPACE in body:
            raise fail("piece %d %r spans a word boundary (it holds '\u2581' after its start)"
                       % (i + 1, p),
                       "train sentencepiece with split_by_whitespace=true (its default)",
                       where=where)
        if begins or i == 0:
            if words and not words[-1]:
                raise fail("piece %d %r is a bare '\u2581' followed by no piece of its word"
                           % (i, pieces[i - 1]),
                           "a word cannot be empty; check the sentencepiece output", where=where)
            words.append(body)
        else:
            words[-1] += body
        word_of.append(len(words) - 1)
    if words and not words[-1]:
        raise fail("the last piece is a bare '\u2581' (an empty word)",
                   "a word cannot be empty; check the sentencepiece output", where=where)
    return word_of, words


def words_from_pieces(pieces: Sequence[str], scheme: str, where: str = "") -> List[str]:
    """The words that ``pieces`` spell under ``scheme`` (see the module doc).
    Raises :class:`StructureError` on pieces that spell no word sequence."""
    return _segment(pieces, scheme, where)[1]


def piece_word_map(pieces: Sequence[str], scheme: str, where: str = "") -> np.ndarray:
    """The 0-based word of each piece (int64): it starts at 0 and grows by 0
    or 1 from piece to piece, as :func:`batch_piece_structure` expects."""
    return np.asarray(_segment(pieces, scheme, where)[0], dtype=np.int64)
