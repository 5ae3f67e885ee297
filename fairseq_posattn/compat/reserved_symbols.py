"""Read the texts of fairseq's reserved symbols in raw input as ``<unk>``.

fairseq 0.12's ``Dictionary.encode_line`` (and fairseq-fixed 0.12.3.1's) gives
the words ``<s>``, ``<pad>`` and ``</s>`` typed in a text the symbols' ids: a
typed ``<pad>`` is masked out as padding, a ``</s>`` ends the sentence inside
it, and a score depends on the sentences batched with it.  :func:`install`
applies the plugin's policy (:mod:`fairseq_posattn.data.reserved_symbols`:
read as the unknown word, with a warning naming where) to the hub
(``GeneratorHubInterface.binarize``) and ``--dataset-impl raw``
(``IndexedRawTextDataset.read_data``); fairseq-interactive
(:mod:`.interactive_lines`) and fairseq-posattn-preprocess apply it too.
Plain fairseq-preprocess writes the symbols' ids, without a warning.
"""

import functools
import logging

import torch

from ..data.reserved_symbols import READ_AS, as_unknown, reserved_texts, warn_lines
from ..errors import quoted
from .patching import wrap_once

logger = logging.getLogger(__name__)


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
        warn_lines(path, lines, texts)

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
