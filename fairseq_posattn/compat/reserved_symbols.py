"""Read the texts of fairseq's reserved symbols in raw input as ``<unk>``.

fairseq 0.12's ``Dictionary.encode_line`` (and fairseq-fixed 0.12.3.1's) gives
the words ``<s>``, ``<pad>`` and ``</s>`` typed in a text the symbols' ids: a
typed ``<pad>`` is masked out as padding, a ``</s>`` ends the sentence inside
it, and a score depends on the sentences batched with it.  These texts are no
words of the vocabulary, so the plugin reads them as the unknown word and
warns, naming where; it does not refuse them (a web corpus holds ``<s>`` as a
markup tag), and the line keeps its length, so its tree still fits it.
:func:`install` does this for the hub (``GeneratorHubInterface.binarize``) and
``--dataset-impl raw`` (``IndexedRawTextDataset.read_data``);
fairseq-interactive (:mod:`.interactive_lines`) and fairseq-posattn-preprocess
(:func:`binarizing_as_unknown`) use :func:`as_unknown`.  Plain
fairseq-preprocess writes the symbols' ids, without a warning.
"""

import contextlib
import functools
import logging
from typing import FrozenSet, List, Sequence, Tuple

import torch

from ..errors import quoted
from .patching import wrap_once

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
        _warn_lines(path, reserved_lines(path, Dictionary()), reserved_texts(Dictionary()))

    def binarizer(vocab, **kwargs):
        # a partial of a module function: --workers pickles the binarizer to its processes
        tokenize = functools.partial(_tokenize_as_unknown, dictionary=vocab)
        return VocabularyDatasetBinarizer(vocab, tokenize=tokenize, **kwargs)

    preprocess.VocabularyDatasetBinarizer = binarizer
    try:
        yield
    finally:
        preprocess.VocabularyDatasetBinarizer = VocabularyDatasetBinarizer


def _warn_lines(path: str, lines: Sequence[int], texts) -> None:
    if lines:
        logger.warning("%s: %d line(s) hold a reserved symbol's text (%s) as a word (lines "
                       "%s%s): %s", path, len(lines), ", ".join(sorted(texts)),
                       ", ".join(map(str, lines[:10])), ", ..." if len(lines) > 10 else "",
                       READ_AS)


def _hub_binarize(binarize):
    @functools.wraps(binarize)
    def wrapper(self, sentence: str):
        from fairseq.tokenizer import tokenize_line

        words, found = as_unknown(tokenize_line(sentence), self.src_dict)
        if found:
            logger.warning("hub input %s: %s %s", quoted(sentence), ", ".join(found), READ_AS)
            sentence = " ".join(words)
        return binarize(self, sentence)

    return wrapper


def _raw_text_read_data(read_data):
    @functools.wraps(read_data)
    def wrapper(self, path, dictionary):
        read_data(self, path, dictionary)
        texts = reserved_texts(dictionary)
        reserved = torch.tensor([dictionary.index(text) for text in texts])
        lines = []
        for n, tokens in enumerate(self.tokens_list, 1):
            words = tokens[:-1] if self.append_eos else tokens  # a view: replaced in place
            typed = torch.isin(words, reserved.to(words.dtype))
            if typed.any():
                words[typed] = dictionary.unk()
                lines.append(n)
        _warn_lines(path, lines, texts)

    return wrapper


def encodes_reserved_texts() -> bool:
    """True if ``Dictionary.encode_line`` gives ``<pad>`` typed as a word the padding id."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    return dictionary.encode_line("<pad>", add_if_not_exist=False)[0] == dictionary.pad()


def install() -> None:
    """Wrap the hub's ``binarize`` and the raw text dataset's ``read_data``
    where fairseq reads reserved symbols' texts as their ids (idempotent)."""
    from fairseq.data.indexed_dataset import IndexedRawTextDataset
    from fairseq.hub_utils import GeneratorHubInterface

    if encodes_reserved_texts():
        wrap_once(GeneratorHubInterface, "binarize", _hub_binarize)
        wrap_once(IndexedRawTextDataset, "read_data", _raw_text_read_data)
