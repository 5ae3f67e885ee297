"""``logic_inference``: the artificial-language inference task of Bowman et al. (2015).

Each example is a pair of propositional formulas with one of seven
natural-logic relations between them; Hao et al. (2019, Sec. 3.3, Fig. 1) and
Tran et al. (2018) train on formulas with at most 6 operators and test on
1-12.  The task reads Bowman's released ``train0`` ... ``train12`` and
``test0`` ... ``test12`` (``relation<TAB>formula<TAB>formula``; the file
number is the operator count); ``valid`` is every ``--valid-every``-th
training line, ``test<k>`` one test file (docs/evaluations.md has the splits).
The dictionary is built from the training files, the same every time.
"""

import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import II

from ..data.classification_data import classification_dataset, padded_symbols, symbol_dictionary
from ..errors import location, quoted
from .classification import ClassificationTask
from .input_options import fill_defaults, input_option, input_options

# MacCartney's seven relations as Bowman et al. (2015) write them
RELATIONS = ("=", "<", ">", "^", "|", "v", "#")
MAX_OPERATORS = 12  # file 12 holds 12 or more


@dataclass
class LogicInferenceConfig(FairseqDataclass):
    data: Optional[str] = field(
        default=None,
        metadata={"help": "directory with Bowman et al.'s train0..train12 and test0..test12"},
    )
    max_train_operators: Optional[int] = input_option(
        6, "train on the files with at most this many operators (paper: 6); the dictionary "
           "is built from them")
    valid_every: int = field(
        default=20,
        metadata={"help": "every N-th line of the training files is held out as 'valid'"},
    )
    seed: int = II("common.seed")


Example = Tuple[str, List[str], List[str]]


def read_examples(path: str) -> List[Example]:
    """``(relation, premise tokens, hypothesis tokens)`` per non-blank line."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist: --task logic_inference reads Bowman et al.'s "
            f"train0..train12 and test0..test12 from the data directory"
        )
    examples = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            where = location(path, line=number)
            if len(fields) != 3:
                raise ValueError(
                    f"{where}: expected 3 tab-separated fields (relation, formula, "
                    f"formula), found {len(fields)}"
                )
            relation, premise, hypothesis = fields
            if relation not in RELATIONS:
                raise ValueError(
                    f"{where}: unknown relation {quoted(relation)}; expected one of "
                    f"{' '.join(RELATIONS)}"
                )
            if not premise.split() or not hypothesis.split():
                raise ValueError(f"{where}: empty formula")
            examples.append((relation, premise.split(), hypothesis.split()))
    return examples


@register_task("logic_inference", dataclass=LogicInferenceConfig)
class LogicInferenceTask(ClassificationTask):
    """Sentence-pair classification into the seven relations."""

    cfg: LogicInferenceConfig

    @classmethod
    def setup_task(cls, cfg: LogicInferenceConfig, **kwargs):
        if not cfg.data:
            raise ValueError("--task logic_inference needs the data directory (positional DATA)")
        fill_defaults(cfg, input_options(LogicInferenceConfig))  # read by the dictionary
        if not 0 <= cfg.max_train_operators <= MAX_OPERATORS:
            raise ValueError(
                f"--max-train-operators must be in 0..{MAX_OPERATORS}, got {cfg.max_train_operators}"
            )
        if cfg.valid_every < 2:
            raise ValueError(f"--valid-every must be at least 2, got {cfg.valid_every}")
        symbols = {token for path in cls.training_files(cfg)
                   for _, premise, hypothesis in read_examples(path) for token in premise + hypothesis}
        return cls(cfg, symbol_dictionary(sorted(symbols)), RELATIONS)

    @staticmethod
    def training_files(cfg) -> List[str]:
        return [os.path.join(cfg.data, f"train{k}") for k in range(cfg.max_train_operators + 1)]

    def split_examples(self, split: str) -> List[Example]:
        if split in ("train", "valid"):
            examples = [e for path in self.training_files(self.cfg) for e in read_examples(path)]
            every = self.cfg.valid_every
            return [e for i, e in enumerate(examples) if (i % every == every - 1) == (split == "valid")]
        if split == "test":
            return [e for k in range(MAX_OPERATORS + 1) for e in self.split_examples(f"test{k}")]
        if split.startswith("test") and split[4:].isdigit() and int(split[4:]) <= MAX_OPERATORS:
            return read_examples(os.path.join(self.cfg.data, split))
        raise ValueError(
            f"--task logic_inference has no split {split!r}: use train, valid, test or "
            f"test0 ... test{MAX_OPERATORS}"
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        examples = self.split_examples(split)
        if not examples:
            raise ValueError(f"split {split!r} of {self.cfg.data} has no examples")
        lengths = np.array([[len(p), len(h)] for _, p, h in examples])
        self.datasets[split] = classification_dataset(
            {"premise_tokens": padded_symbols(self.dictionary, (p for _, p, _ in examples)),
             "hypothesis_tokens": padded_symbols(self.dictionary, (h for _, _, h in examples))},
            self.label_targets(r for r, _, _ in examples),
            sizes=lengths.max(axis=1),
            ntokens=lengths.sum(axis=1),
            shuffle_seed=self.cfg.seed if split == "train" else None,
        )
