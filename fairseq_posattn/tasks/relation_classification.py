"""``relation_classification``: TACRED-style relation classification
(Zhang et al. 2017; Bilan & Roth 2018).

The data directory holds ``train.json``, ``dev.json`` (or ``valid.json``) and
``test.json`` in TACRED's JSON format, read as they are.  Input per token: the
word (subject and object masked as ``SUBJ-<type>`` / ``OBJ-<type>`` unless
``--no-entity-masking``), its POS and NER tags and its distances to the
subject and the object
(:func:`~fairseq_posattn.models.relation.entity_positions.entity_distances`).
Dictionaries come from ``train.json``.  Train with ``--criterion
relation_classification`` (micro P/R/F1 without the negative label, as
TACRED's scorer); docs/evaluations.md is the manual.
"""

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import II

from ..data.classification_data import (by_frequency, classification_dataset, padded,
                                        padded_symbols, symbol_dictionary)
from ..errors import quoted
from ..metrics import NO_RELATION
from ..models.relation.entity_positions import entity_distances
from .classification import ClassificationTask
from .input_options import fill_defaults, input_option, input_options

FIELDS = ("token", "subj_start", "subj_end", "obj_start", "obj_end", "subj_type", "obj_type",
          "stanford_pos", "stanford_ner", "relation")


@dataclass
class RelationClassificationConfig(FairseqDataclass):
    data: Optional[str] = field(
        default=None, metadata={"help": "directory with train.json, dev.json, test.json (TACRED format)"}
    )
    negative_label: Optional[str] = input_option(
        NO_RELATION, "the label that is no relation (left out of precision and recall)")
    min_word_count: Optional[int] = input_option(
        2, "words seen fewer times in train.json map to the unknown word")
    lowercase: Optional[bool] = input_option(False, "lowercase the words")
    no_entity_masking: Optional[bool] = input_option(
        False, "keep the subject and object words instead of SUBJ-<type>/OBJ-<type>")
    seed: int = II("common.seed")


def read_tacred(path: str) -> List[Dict]:
    """The examples of a TACRED-format file, checked field by field."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist (TACRED-format JSON expected)")
    with open(path, encoding="utf-8") as f:
        try:
            examples = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(examples, list):
        raise ValueError(f"{path}: expected a JSON list of examples")
    for number, example in enumerate(examples, 1):
        _check_example(example, f"{path}, example {number}")
    return examples


def _check_example(example, where: str) -> None:
    if not isinstance(example, dict):
        raise ValueError(f"{where}: expected an object")
    if "id" in example:
        where += f" (id {example['id']})"
    missing = [name for name in FIELDS if name not in example]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    tokens = example["token"]
    if not isinstance(tokens, list) or not tokens:
        raise ValueError(f"{where}: 'token' must be a non-empty list")
    for name in ("stanford_pos", "stanford_ner"):
        if len(example[name]) != len(tokens):
            raise ValueError(
                f"{where}: {len(example[name])} '{name}' tags for {len(tokens)} tokens"
            )
    for entity in ("subj", "obj"):
        start, end = example[f"{entity}_start"], example[f"{entity}_end"]
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(tokens)):
            raise ValueError(
                f"{where}: {entity}_start {start} / {entity}_end {end} is not a span of "
                f"the {len(tokens)} tokens (0-based, end inclusive)"
            )


@register_task("relation_classification", dataclass=RelationClassificationConfig)
class RelationClassificationTask(ClassificationTask):
    """One relation label per (sentence, subject, object)."""

    cfg: RelationClassificationConfig

    def __init__(self, cfg, dictionary, labels, tag_dictionaries: Dict[str, Dictionary]):
        super().__init__(cfg, dictionary, labels)
        self.tag_dictionaries = tag_dictionaries

    @classmethod
    def setup_task(cls, cfg: RelationClassificationConfig, **kwargs):
        if not cfg.data:
            raise ValueError("--task relation_classification needs the data directory (positional DATA)")
        fill_defaults(cfg, input_options(RelationClassificationConfig))  # read by the dictionaries
        train = read_tacred(os.path.join(cfg.data, "train.json"))
        words = Counter(w for example in train for w in cls.words(cfg, example))
        dictionary = symbol_dictionary(w for w in by_frequency(words) if words[w] >= cfg.min_word_count
                                       or w.startswith(("SUBJ-", "OBJ-")))
        tags = {name: symbol_dictionary(sorted({t for example in train for t in example[name]}))
                for name in ("stanford_pos", "stanford_ner")}
        labels = sorted({example["relation"] for example in train} - {cfg.negative_label})
        return cls(cfg, dictionary, [cfg.negative_label] + labels, tags)

    @staticmethod
    def words(cfg, example) -> List[str]:
        """The input words: lowercased (``--lowercase``), entities masked."""
        tokens = [t.lower() for t in example["token"]] if cfg.lowercase else list(example["token"])
        if not cfg.no_entity_masking:
            for entity, mark in (("subj", "SUBJ"), ("obj", "OBJ")):
                start, end = example[f"{entity}_start"], example[f"{entity}_end"]
                tokens[start:end + 1] = [f"{mark}-{example[f'{entity}_type']}"] * (end - start + 1)
        return tokens

    def split_path(self, split: str) -> str:
        candidates = [f"{split}.json"] + (["dev.json"] if split == "valid" else [])
        for name in candidates:
            path = os.path.join(self.cfg.data, name)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(
            f"no {' or '.join(candidates)} in {self.cfg.data} for split {split!r}"
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path = self.split_path(split)
        examples = read_tacred(path)
        unknown = [i for i, e in enumerate(examples, 1)
                   if e["relation"] not in self.label_dictionary.indices]
        if unknown:
            raise ValueError(
                f"{path}, example {unknown[0]}: relation {quoted(examples[unknown[0] - 1]['relation'])} "
                f"does not occur in train.json ({len(unknown)} such examples)"
            )

        def distances(example, entity):
            start, end = example[f"{entity}_start"], example[f"{entity}_end"]
            return torch.from_numpy(entity_distances(start, end, len(example["token"])))

        def tags(name):
            return padded_symbols(self.tag_dictionaries[name], (e[name] for e in examples))

        inputs = {
            "src_tokens": padded_symbols(self.dictionary, (self.words(self.cfg, e) for e in examples)),
            "pos_tags": tags("stanford_pos"),
            "ner_tags": tags("stanford_ner"),
            "subject_distances": padded([distances(e, "subj") for e in examples], 0),
            "object_distances": padded([distances(e, "obj") for e in examples], 0),
        }
        lengths = np.array([len(e["token"]) for e in examples], dtype=np.int64)
        self.datasets[split] = classification_dataset(
            inputs,
            self.label_targets(e["relation"] for e in examples),
            sizes=lengths,
            ntokens=lengths,
            shuffle_seed=self.cfg.seed if split == "train" else None,
        )

    def negative_class(self) -> int:
        return self.label_targets([self.cfg.negative_label])[0]
