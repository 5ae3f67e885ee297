"""``relation_classification`` criterion: cross-entropy, plus TACRED's micro
precision, recall and F1 without the negative label (``precision``,
``recall``, ``f1`` in the logs, in percent; ``--best-checkpoint-metric f1
--maximize-best-checkpoint-metric`` selects checkpoints by F1)."""

from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.sentence_prediction import SentencePredictionCriterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from ..metrics import micro_scores, relation_counts

COUNTS = ("relation_correct", "relation_guessed", "relation_gold")
SCORES = ("precision", "recall", "f1")


@dataclass
class RelationClassificationCriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="sentence_classification_head",
                                          metadata={"help": "name of the classification head to use"})


@register_criterion("relation_classification", dataclass=RelationClassificationCriterionConfig)
class RelationClassificationCriterion(FairseqCriterion):
    def __init__(self, cfg: RelationClassificationCriterionConfig, task):
        super().__init__(task)
        self.classification_head_name = cfg.classification_head_name
        self.negative_class = task.negative_class()

    def forward(self, model, sample, reduce=True):
        logits, _ = model(**sample["net_input"], features_only=True,
                          classification_head_name=self.classification_head_name)
        targets = model.get_targets(sample, [logits]).view(-1)
        loss = F.cross_entropy(logits.float(), targets, reduction="sum")
        predicted = logits.argmax(dim=-1)
        counts = relation_counts(predicted.cpu(), targets.cpu(), self.negative_class)
        sample_size = targets.numel()
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample_size,
            "sample_size": sample_size,
            "ncorrect": (predicted == targets).sum(),
            **dict(zip(COUNTS, counts)),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        SentencePredictionCriterion.reduce_metrics(logging_outputs)  # loss, accuracy
        for key in COUNTS:
            metrics.log_scalar_sum(key, sum(log.get(key, 0) for log in logging_outputs))
        for index, key in enumerate(SCORES):
            metrics.log_derived(key, lambda meters, index=index: round(
                100 * micro_scores(*(meters[c].sum for c in COUNTS))[index], 2))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
