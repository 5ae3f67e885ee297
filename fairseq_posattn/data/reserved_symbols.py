"""Raw text's reserved-symbol texts read as ``<unk>``: the plugin's policy.

fairseq's dictionaries reserve the texts ``<s>``, ``<pad>`` and ``</s>`` for
symbols; typed in a text they are no words of the vocabulary, so the plugin
reads them as the unknown word and warns, naming where; it does not refuse
them (a web corpus holds ``<s>`` as a markup tag), and the line keeps its
length, so its tree still fits it.  fairseq-posattn-preprocess binarizes with
:func:`binarizing_as_unknown`; :mod:`fairseq_posattn.compat.reserved_symbols`
applies :func:`as_unknown` where fairseq itself reads raw text.
"""

import contextlib
import functools
import logging
from typing import FrozenSet, List, Sequence, Tuple

logger = logging.getLogger(__name__)

READ_AS = "read as <unk>: a reserved symbol of the dictionary is no word"


def reserved_texts(dictionary) -> FrozenSet[str]:
    """The texts of ``dictionary``'s special symbols but ``<unk>``."""
    return frozenset(dictionary.symbols[:dictionary.nspecial]) - {dictionary.unk_word}


def as_unknown(words: Sequence[str], dictionary) -> Tuple[List[str], List[str]]:
    """``words`` with every reserved symbol's text replaced by ``<unk>``, and
    the texts replaced (each once, in order)."""
    reserved = reserved_texts(dictionary)
    found = list(dict.fromkeys(w for w in words if w in reserved))
    if not found:
        return list(words), []
    return [dictionary.unk_word if w in reserved else w for w in words], found


def _tokenize_as_unknown(line: str, dictionary) -> List[str]:
    from fairseq.tokenizer import tokenize_line

    return as_unknown(tokenize_line(line), dictionary)[0]


def reserved_lines(path: str, dictionary) -> List[int]:
    """The 1-based numbers of the lines of ``path`` (read as fairseq's
    binarizer reads it) that hold a reserved symbol's text as a word."""
    reserved = reserved_texts(dictionary)
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return [n for n, line in enumerate(f, 1)
                if "<" in line and not reserved.isdisjoint(line.split())]


@contextlib.contextmanager
def binarizing_as_unknown(paths: Sequence[str]):
    """fairseq-preprocess (``fairseq_cli.preprocess.main``) run inside binarizes
    reserved symbols' texts as ``<unk>``; each of ``paths`` that holds them is
    named in a warning first."""
    from fairseq.binarizer import VocabularyDatasetBinarizer
    from fairseq.data import Dictionary
    from fairseq_cli import preprocess

    for path in paths:
        warn_lines(path, reserved_lines(path, Dictionary()), reserved_texts(Dictionary()))

    def binarizer(vocab, **kwargs):
        # a partial of a module function: --workers pickles the binarizer to its processes
        tokenize = functools.partial(_tokenize_as_unknown, dictionary=vocab)
        return VocabularyDatasetBinarizer(vocab, tokenize=tokenize, **kwargs)

    preprocess.VocabularyDatasetBinarizer = binarizer
    try:
        yield
    finally:
        preprocess.VocabularyDatasetBinarizer = VocabularyDatasetBinarizer


def warn_lines(path: str, lines: Sequence[int], texts) -> None:
    if lines:
        logger.warning("%s: %d line(s) hold a reserved symbol's text (%s) as a word (lines "
                       "%s%s): %s", path, len(lines), ", ".join(sorted(texts)),
                       ", ".join(map(str, lines[:10])), ", ..." if len(lines) > 10 else "",
                       READ_AS)
