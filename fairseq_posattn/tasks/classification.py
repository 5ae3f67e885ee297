"""Base of the plugin's classification tasks (not registered itself)."""

from typing import Iterable, List

from fairseq.data import Dictionary
from fairseq.tasks import FairseqTask

from .input_options import RemembersInputOptions


class ClassificationTask(RemembersInputOptions, FairseqTask):
    """A token dictionary and a label dictionary.

    Targets are label indices minus the dictionary's special symbols (as in
    fairseq's ``sentence_prediction`` task), so class ``c`` is
    ``label_dictionary[c + nspecial]``.
    """

    def __init__(self, cfg, dictionary: Dictionary, label_dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        self._label_dictionary = label_dictionary

    @staticmethod
    def build_label_dictionary(labels: Iterable[str]) -> Dictionary:
        dictionary = Dictionary()
        for label in labels:
            dictionary.add_symbol(label)
        return dictionary

    def label_targets(self, labels: Iterable[str]) -> List[int]:
        offset = self._label_dictionary.nspecial
        return [self._label_dictionary.index(label) - offset for label in labels]

    def label_name(self, target: int) -> str:
        return self._label_dictionary[target + self._label_dictionary.nspecial]

    def num_classes(self) -> int:
        return len(self._label_dictionary) - self._label_dictionary.nspecial

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self._label_dictionary

    @property
    def label_dictionary(self):
        return self._label_dictionary
