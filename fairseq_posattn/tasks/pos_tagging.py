"""``pos_tagging``: part-of-speech tagging of a UD treebank read straight
from CoNLL-U (Dufter et al. 2020, Sec. 2.6).

``DATA`` holds ``*train.conllu``, ``*dev.conllu`` (``valid``) and
``*test.conllu``.  The vocabularies and the training lexicon are task state,
saved in every checkpoint, so evaluation needs no training file.  Sentences
are cut into pieces of at most ``--max-piece-length`` words.
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

from ..data.tagging import (
    MAX_PIECE_LENGTH,
    TAG_COLUMNS,
    TaggedPieceDataset,
    TaggingVocabulary,
    read_tagged_sentences,
    treebank_file,
)
from .input_options import RemembersInputOptions, input_option

logger = logging.getLogger(__name__)


@dataclass
class PosTaggingConfig(FairseqDataclass):
    data: Optional[str] = field(
        default=None,
        metadata={"help": "UD treebank directory: *train.conllu, *dev.conllu, *test.conllu"},
    )
    tag_column: Optional[ChoiceEnum(list(TAG_COLUMNS))] = input_option(
        "upos", "the CoNLL-U column to predict")
    max_piece_length: Optional[int] = input_option(
        MAX_PIECE_LENGTH, "sentences are cut into pieces of at most this many words")
    min_word_count: Optional[int] = input_option(
        2, "training words seen fewer times share the <unk> embedding "
           "(their characters still count)")
    max_word_chars: Optional[int] = input_option(
        20, "characters of a word the character CNN reads (the first ones)")


@register_task("pos_tagging", dataclass=PosTaggingConfig)
class PosTaggingTask(RemembersInputOptions, FairseqTask):
    """Sequence tagging of UD treebanks; see the module doc."""

    cfg: PosTaggingConfig

    def __init__(self, cfg: PosTaggingConfig):
        super().__init__(cfg)
        self.state.add_factory("vocabulary", self._training_vocabulary)
        self._vocabulary = None  # (state it was built from, TaggingVocabulary)

    @property
    def tag_column(self) -> str:
        return str(self.cfg.tag_column)  # a fairseq choice enum, or a string

    @classmethod
    def setup_task(cls, cfg: PosTaggingConfig, **kwargs):
        if cfg.data is None:
            raise ValueError("pos_tagging needs the treebank directory (DATA)")
        return cls(cfg)

    def _training_vocabulary(self) -> dict:
        path = treebank_file(self.cfg.data, "train")
        vocabulary = TaggingVocabulary.build(
            read_tagged_sentences(path, self.tag_column), self.cfg.min_word_count
        )
        logger.info("%s: %d words with embeddings, %d characters, %d %s tags", path,
                    len(vocabulary.words) - vocabulary.words.nspecial,
                    len(vocabulary.chars) - vocabulary.chars.nspecial,
                    len(vocabulary.tags), self.tag_column.upper())
        return vocabulary.state_dict()

    @property
    def vocabulary(self) -> TaggingVocabulary:
        """The training vocabulary: from the checkpoint's task state when one
        was loaded, else built from the training split."""
        state = self.state.vocabulary
        if self._vocabulary is None or self._vocabulary[0] is not state:
            self._vocabulary = (state, TaggingVocabulary.from_state_dict(state))
        return self._vocabulary[1]

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path = treebank_file(self.cfg.data, split)
        sentences = read_tagged_sentences(path, self.tag_column)
        dataset = TaggedPieceDataset(sentences, self.vocabulary, self.cfg.max_piece_length,
                                     self.cfg.max_word_chars, shuffle=split == "train")
        logger.info("%s: %d sentences, %d pieces, %d words", path, len(sentences),
                    len(dataset), int(dataset.sizes.sum()))
        if dataset.unseen_tags:
            logger.warning("%s: %d words carry tags never seen in training; they count "
                           "as errors", path, dataset.unseen_tags)
        self.datasets[split] = dataset

    def build_model(self, cfg, from_checkpoint=False):
        if from_checkpoint and getattr(cfg, "pretrained_word_vectors", None):
            cfg.pretrained_word_vectors = None  # the checkpoint holds the trained vectors
        return super().build_model(cfg, from_checkpoint)

    def max_positions(self):
        return self.cfg.max_piece_length

    @property
    def source_dictionary(self):
        return self.vocabulary.words

    @property
    def target_dictionary(self):
        return None
