"""Part-of-speech tagging data: tagged CoNLL-U sentences, the training
vocabulary (words, characters, tags, and each training word's tags) and a
fairseq dataset of sentence pieces of at most ``max_piece_length`` words.

Dufter et al. (2020) tag UD treebanks and report accuracy on all words, on
out-of-vocabulary words (forms not in the training data) and on ambiguous
words (forms seen in training with more than one tag); every word here
carries its class for those metrics.
"""

import glob
import os
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils

from ..structure import StructureError, read_conllu
from ..errors import fail, quoted
from .classification_data import by_frequency, symbol_dictionary


TAG_COLUMNS = ("upos", "xpos")
MAX_PIECE_LENGTH = 60  # pos_tagging's --max-piece-length without a checkpoint
PAD_TAG = -100  # target of padding: no loss, no accuracy
UNSEEN_TAG = -1  # gold tag absent from training: no loss, always an error
KNOWN, OOV, AMBIGUOUS = 0, 1, 2  # word classes
SPLIT_FILE_NAMES = {"valid": "dev"}  # fairseq's split name -> UD's


@dataclass
class TaggedSentence:
    words: List[str]
    tags: List[str]


def treebank_file(data_dir: str, split: str) -> str:
    """The one ``*{split}.conllu`` of ``data_dir`` (``valid`` reads ``*dev.conllu``)."""
    name = SPLIT_FILE_NAMES.get(split, split)
    matches = sorted(glob.glob(os.path.join(glob.escape(data_dir), f"*{name}.conllu")))
    if len(matches) != 1:
        found = "no file" if not matches else "several files (%s)" % ", ".join(
            os.path.basename(m) for m in matches)
        raise FileNotFoundError(
            f"split '{split}': {found} matching *{name}.conllu in {data_dir}; the "
            f"pos_tagging task reads a UD treebank directory with one "
            f"*train.conllu, *dev.conllu and *test.conllu"
        )
    return matches[0]


def read_tagged_sentences(path: str, column: str = "upos") -> List[TaggedSentence]:
    """Surface tokens and their UPOS or XPOS tags (multiword tokens collapsed as
    :func:`~fairseq_posattn.structure.read_conllu` does).  A sentence without
    tags, or a word tagged ``_``, is a :class:`StructureError` naming the file,
    sentence and line."""
    if column not in TAG_COLUMNS:
        raise ValueError(f"tag column must be one of {TAG_COLUMNS}, got {column!r}")
    sentences = []
    for tree in read_conllu(path):
        tags = getattr(tree, column)
        missing = [i for i, t in enumerate(tags or []) if t == "_"]
        if tags is None or missing:
            what = ("the sentence has no %s tags" % column.upper() if tags is None else
                    "word %d %s has no %s tag ('_')" % (missing[0] + 1,
                                                       quoted(tree.words[missing[0]]),
                                                       column.upper()))
            raise fail(what, "every word needs a gold tag; pass --tag-column upos|xpos "
                       "to read the other column", source=path,
                       sentence=tree.index + 1, line=tree.line)
        sentences.append(TaggedSentence(tree.words, tags))
    if not sentences:
        raise StructureError(f"{path}: no sentences", source=path)
    return sentences


class TaggingVocabulary:
    """What the training split defines: word and character dictionaries,
    the tag inventory and the lexicon (training form -> its tags).

    Only words seen at least ``min_word_count`` times get an embedding of
    their own; the rarer ones train ``<unk>``, which unknown test words use
    (their characters still reach the character CNN).
    """

    def __init__(self, words: Sequence[str], chars: Sequence[str], tags: Sequence[str],
                 lexicon: Dict[str, Sequence[str]]):
        self.words = symbol_dictionary(words)
        self.chars = symbol_dictionary(chars)
        self.tags = list(tags)
        self._tag_index = {t: i for i, t in enumerate(self.tags)}
        self.lexicon = {form: sorted(set(t)) for form, t in lexicon.items()}

    @classmethod
    def build(cls, sentences: Sequence[TaggedSentence], min_word_count: int = 1):
        words, chars, tags = Counter(), Counter(), Counter()
        lexicon: Dict[str, set] = {}
        for sentence in sentences:
            words.update(sentence.words)
            tags.update(sentence.tags)
            for word, tag in zip(sentence.words, sentence.tags):
                chars.update(word)
                lexicon.setdefault(word, set()).add(tag)
        return cls(by_frequency(words, min_word_count), by_frequency(chars), by_frequency(tags),
                   lexicon)

    def state_dict(self) -> dict:
        """Plain lists and dicts: checkpoints hold them, and
        ``torch.load(weights_only=True)`` reads them."""
        specials = self.words.nspecial
        return {
            "words": self.words.symbols[specials:],
            "chars": self.chars.symbols[self.chars.nspecial:],
            "tags": list(self.tags),
            "lexicon": {form: list(tags) for form, tags in self.lexicon.items()},
        }

    @classmethod
    def from_state_dict(cls, state: dict):
        return cls(state["words"], state["chars"], state["tags"], state["lexicon"])

    def word_class(self, form: str) -> int:
        tags = self.lexicon.get(form)
        if tags is None:
            return OOV
        return AMBIGUOUS if len(tags) > 1 else KNOWN

    def tag_index(self, tag: str) -> int:
        return self._tag_index.get(tag, UNSEEN_TAG)

    @staticmethod
    def _encode(dictionary: Dictionary, symbol: str) -> int:
        index = dictionary.index(symbol)
        return dictionary.unk() if index < dictionary.nspecial else index  # a form like "<pad>"

    def encode_words(self, words: Sequence[str]) -> np.ndarray:
        return np.array([self._encode(self.words, w) for w in words], dtype=np.int64)

    def encode_chars(self, words: Sequence[str], max_chars: int) -> np.ndarray:
        """``[n, width]`` character ids (the first ``max_chars`` of each word), padded."""
        width = min(max_chars, max(len(w) for w in words))
        out = np.full((len(words), width), self.chars.pad(), dtype=np.int64)
        for i, word in enumerate(words):
            ids = [self._encode(self.chars, c) for c in word[:max_chars]]
            out[i, : len(ids)] = ids
        return out


class TaggedPieceDataset(FairseqDataset):
    """Sentences cut into pieces of at most ``max_piece_length`` words.

    A batch holds ``net_input`` = ``src_tokens`` ``[B, T]`` (word ids, right
    padded), ``src_lengths`` ``[B]`` and ``src_chars`` ``[B, T, C]``;
    ``target`` ``[B, T]`` (tag ids, :data:`PAD_TAG` at padding,
    :data:`UNSEEN_TAG` for tags absent from training) and ``word_class``
    ``[B, T]`` (:data:`KNOWN`, :data:`OOV`, :data:`AMBIGUOUS`).
    ``pieces[i]`` is ``(sentence index, first word)`` of item ``i``.
    """

    def __init__(self, sentences: Sequence[TaggedSentence], vocabulary: TaggingVocabulary,
                 max_piece_length: int, max_word_chars: int, shuffle: bool = True):
        if max_piece_length < 1 or max_word_chars < 1:
            raise ValueError("max_piece_length and max_word_chars must be at least 1")
        self.vocabulary = vocabulary
        self.shuffle = shuffle
        self.pieces, self._items = [], []
        for index, sentence in enumerate(sentences):
            for start in range(0, len(sentence.words), max_piece_length):
                end = start + max_piece_length
                words, tags = sentence.words[start:end], sentence.tags[start:end]
                self.pieces.append((index, start))
                self._items.append((
                    vocabulary.encode_words(words),
                    vocabulary.encode_chars(words, max_word_chars),
                    np.array([vocabulary.tag_index(t) for t in tags], dtype=np.int64),
                    np.array([vocabulary.word_class(w) for w in words], dtype=np.int64),
                ))
        self.sizes = np.array([len(item[0]) for item in self._items], dtype=np.int64)
        self.unseen_tags = sum(int((item[2] == UNSEEN_TAG).sum()) for item in self._items)

    def __getitem__(self, index):
        words, chars, tags, classes = self._items[index]
        return {"id": index, "words": words, "chars": chars, "tags": tags, "classes": classes}

    def __len__(self):
        return len(self._items)

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        """By length (random among equal lengths when shuffling)."""
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]

    def collater(self, samples):
        if not samples:
            return {}
        def padded(key, pad):
            return data_utils.collate_tokens([torch.from_numpy(s[key]) for s in samples], pad)

        length = max(len(s["words"]) for s in samples)
        width = max(s["chars"].shape[1] for s in samples)
        src_chars = torch.full((len(samples), length, width), self.vocabulary.chars.pad(),
                               dtype=torch.long)
        for row, s in enumerate(samples):
            n, c = s["chars"].shape
            src_chars[row, :n, :c] = torch.from_numpy(s["chars"])
        lengths = torch.tensor([len(s["words"]) for s in samples], dtype=torch.long)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "ntokens": int(lengths.sum()),
            "net_input": {"src_tokens": padded("words", self.vocabulary.words.pad()),
                          "src_lengths": lengths, "src_chars": src_chars},
            "target": padded("tags", PAD_TAG),
            "word_class": padded("classes", KNOWN),
        }
