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

from ..errors import fail, quoted

SCHEMES = ("subword_nmt", "sentencepiece", "none")  # how subword pieces make words
SUBWORD_MODELS = SCHEMES[:2]  # the schemes that are subword models (fairseq --bpe names)
BPE_CONTINUATION = "@@"
SPM_SPACE = "\u2581"


def segment_pieces(pieces: Sequence[str], scheme: str, where: str = ""
                   ) -> Tuple[np.ndarray, List[str]]:
    """(:func:`piece_word_map`, :func:`words_from_pieces`) of ``pieces``, segmented once."""
    if scheme not in SCHEMES:
        raise ValueError("scheme must be one of %s, got %r" % (SCHEMES, scheme))
    for i, p in enumerate(pieces):
        if not isinstance(p, str) or not p:
            raise fail("piece %d is %s; pieces must be non-empty strings" % (i + 1, quoted(p)),
                       "split the tokenized line on whitespace", where=where)
    word_of: List[int] = []
    words: List[str] = []
    if scheme == "none":
        return np.arange(len(pieces), dtype=np.int64), list(pieces)
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
            raise fail("the last piece %s ends with '@@' but no piece follows it"
                       % quoted(pieces[-1]),
                       "the line is cut inside a word, or it is not subword-nmt output "
                       "(use scheme 'sentencepiece' or 'none')", where=where)
    else:  # sentencepiece
        for i, p in enumerate(pieces):
            begins = p.startswith(SPM_SPACE)
            body = p[1:] if begins else p
            if SPM_SPACE in body:
                raise fail("piece %d %s spans a word boundary (it holds '\u2581' after its start)"
                           % (i + 1, quoted(p)),
                           "train sentencepiece with split_by_whitespace=true (its default)",
                           where=where)
            if begins or i == 0:
                if words and not words[-1]:
                    raise fail("piece %d %s is a bare '\u2581' followed by no piece of its word"
                               % (i, quoted(pieces[i - 1])),
                               "a word cannot be empty; check the sentencepiece output", where=where)
                words.append(body)
            else:
                words[-1] += body
            word_of.append(len(words) - 1)
        if words and not words[-1]:
            raise fail("the last piece is a bare '\u2581' (an empty word)",
                       "a word cannot be empty; check the sentencepiece output", where=where)
    return np.asarray(word_of, dtype=np.int64), words


def words_from_pieces(pieces: Sequence[str], scheme: str, where: str = "") -> List[str]:
    """The words that ``pieces`` spell under ``scheme`` (see the module doc), or a StructureError."""
    return segment_pieces(pieces, scheme, where)[1]


def end_cut_word(pieces: Sequence[str], scheme: str) -> List[str]:
    """``pieces`` of a sentence cut short (``--truncate-source``): under
    ``subword_nmt``, a last piece that continued into a cut-off one ends its
    word (``["the", "un@@"]`` -> ``["the", "un"]``)."""
    if scheme == "subword_nmt" and pieces and pieces[-1].endswith(BPE_CONTINUATION):
        return [*pieces[:-1], pieces[-1][:-len(BPE_CONTINUATION)]]
    return list(pieces)


def piece_word_map(pieces: Sequence[str], scheme: str, where: str = "") -> np.ndarray:
    """The 0-based word of each piece (int64): it starts at 0 and grows by 0
    or 1 from piece to piece, as :func:`batch_piece_structure` expects."""
    return segment_pieces(pieces, scheme, where)[0]


def encode_piece_tree(heads: Sequence[int], piece_words: Sequence[int]) -> np.ndarray:
    """A sentence's tree over its pieces as one value per piece (int64): at
    the first piece of word w, ``heads[w] + 1`` (heads are 1-based, 0 = root,
    so the value is at least 1); at every other piece, 0.  ``piece_words``
    must start at 0 and grow by 0 or 1 to the last word (as
    :func:`piece_word_map` gives it).  :func:`decode_piece_tree` inverts it."""
    heads = np.asarray(heads, dtype=np.int64)
    piece_words = np.asarray(piece_words, dtype=np.int64)
    steps = np.diff(piece_words, prepend=-1)
    starts = steps == 1
    if (((steps != 0) & ~starts).any() or (len(steps) and steps[0] != 1)
            or starts.sum() != len(heads)):
        raise fail("the piece map %s does not cover the %d words of the tree in order"
                   % (piece_words.tolist()[:20], len(heads)),
                   "map every piece to its word: 0, 0, 1, 2, 2, ...")
    values = np.zeros(len(piece_words), dtype=np.int64)
    values[starts] = heads + 1
    return values


def decode_piece_tree(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(heads, piece_words) of :func:`encode_piece_tree`'s ``values`` (int64);
    a sentence whose first piece starts no word raises :class:`StructureError`."""
    values = np.asarray(values, dtype=np.int64)
    starts = values != 0
    if len(values) and not starts[0]:
        raise fail("the first piece starts no word", "the tree data is corrupt")
    return values[starts] - 1, np.cumsum(starts) - 1
