"""``tagging_cross_entropy``: per-word cross-entropy over tags, with the
accuracies of Dufter et al. (2020, Sec. 2.6) on all, out-of-vocabulary and
ambiguous words (:mod:`fairseq_posattn.metrics`)."""

import math

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.logging import metrics

from ..metrics import COUNTS, tagging_accuracies, tagging_counts


@register_criterion("tagging_cross_entropy")
class TaggingCrossEntropyCriterion(FairseqCriterion):
    """Cross-entropy summed over the words of a batch; the sample size is the
    number of words, so updates follow the mean per word.  Words whose gold
    tag never occurs in training count as errors and add no loss."""

    def forward(self, model, sample, reduce=True):
        logits = model(**sample["net_input"])
        target = sample["target"]
        trainable = target.ge(0)
        loss = F.cross_entropy(logits[trainable].float(), target[trainable], reduction="sum")
        counts = tagging_counts(logits.argmax(dim=-1), target, sample["word_class"])
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": counts["words"],
            **counts,
        }
        return loss, counts["words"], logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        words = total("words")
        metrics.log_scalar("loss", float(total("loss")) / max(words, 1) / math.log(2),
                           words, round=3)
        for key in COUNTS:
            metrics.log_scalar_sum("_" + key, total(key))
        for name in ("accuracy", "oov_accuracy", "ambiguous_accuracy"):
            metrics.log_derived(name, lambda meters, name=name: round(
                tagging_accuracies({key: meters["_" + key].sum for key in COUNTS})[name], 2), priority=30)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
