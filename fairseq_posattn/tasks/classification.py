"""Base of the plugin's classification tasks (not registered itself)."""

from typing import Iterable, List

from fairseq.data import Dictionary
from fairseq.tasks import FairseqTask

from ..data.classification_data import symbol_dictionary
from .input_options import RemembersInputOptions


class ClassificationTask(RemembersInputOptions, FairseqTask):
    """A token dictionary and a label dictionary of ``labels``.

    Targets are label indices minus the dictionary's special symbols (as in
    fairseq's ``sentence_prediction`` task), so class ``c`` is
    ``label_dictionary[c + nspecial]``.
    """

    def __init__(self, cfg, dictionary: Dictionary, labels: Iterable[str]):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.label_dictionary = symbol_dictionary(labels)

    def label_targets(self, labels: Iterable[str]) -> List[int]:
        offset = self.label_dictionary.nspecial
        return [self.label_dictionary.index(label) - offset for label in labels]

    def label_name(self, target: int) -> str:
        return self.label_dictionary[target + self.label_dictionary.nspecial]

    def num_classes(self) -> int:
        return len(self.label_dictionary) - self.label_dictionary.nspecial

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.label_dictionary
