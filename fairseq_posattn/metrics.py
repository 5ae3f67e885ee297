"""The metrics of the evaluation tasks, shared by their fairseq criteria
(validation during training) and their evaluation commands (on a test set):

* PoS tagging (Dufter et al. 2020, Sec. 2.6): accuracy in percent on all words,
  on out-of-vocabulary words (forms not in the training data) and on
  ambiguous words (forms seen in training with more than one tag);
* over seeds: the mean and sample standard deviation of a score;
* relation classification: micro-averaged precision, recall and F1 without the
  negative class ``no_relation``, as TACRED's official scorer defines them
  (Zhang et al. 2017; Bilan & Roth 2018, Tables 1-3): precision is 1 when
  nothing positive is predicted, recall 0 when no gold label is positive.
"""

import statistics
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from .data.tagging import AMBIGUOUS, OOV, PAD_TAG

COUNTS = ("words", "correct", "oov", "oov_correct", "ambiguous", "ambiguous_correct")


def tagging_counts(predictions: torch.Tensor, target: torch.Tensor,
                   word_class: torch.Tensor) -> Dict[str, int]:
    """Words and correctly tagged words, overall and per class (``[B, T]`` inputs)."""
    words = target.ne(PAD_TAG)
    correct = predictions.eq(target) & words
    oov, ambiguous = word_class.eq(OOV) & words, word_class.eq(AMBIGUOUS) & words
    return {
        "words": int(words.sum()),
        "correct": int(correct.sum()),
        "oov": int(oov.sum()),
        "oov_correct": int((correct & oov).sum()),
        "ambiguous": int(ambiguous.sum()),
        "ambiguous_correct": int((correct & ambiguous).sum()),
    }


def tagging_accuracies(counts: Dict[str, float]) -> Dict[str, float]:
    """Percent accuracy on all, OOV and ambiguous words (NaN where there are none)."""
    def percent(correct, total):
        return 100.0 * counts[correct] / counts[total] if counts[total] else float("nan")

    return {
        "accuracy": percent("correct", "words"),
        "oov_accuracy": percent("oov_correct", "oov"),
        "ambiguous_accuracy": percent("ambiguous_correct", "ambiguous"),
    }


NO_RELATION = "no_relation"


def relation_counts(predicted, gold, negative) -> Tuple[int, int, int]:
    """``(correct, guessed, gold)`` counts of non-negative labels; works on
    label arrays, lists and tensors alike."""
    predicted, gold = np.asarray(predicted), np.asarray(gold)
    if predicted.shape != gold.shape:
        raise ValueError(f"{predicted.size} predictions for {gold.size} gold labels")
    positive = predicted != negative
    return (
        int((positive & (predicted == gold)).sum()),
        int(positive.sum()),
        int((gold != negative).sum()),
    )


def micro_scores(correct: int, guessed: int, gold: int) -> Tuple[float, float, float]:
    """``(precision, recall, F1)`` in [0, 1] from :func:`relation_counts`."""
    precision = correct / guessed if guessed else 1.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def mean_std(values: Sequence[float]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (n - 1) over seeds; None where undefined."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def format_mean_std(values: Sequence[float], sign: bool = False) -> str:
    """``"mean ± std"`` to two decimals (``+`` on positive means with ``sign``);
    the mean alone for one value, ``–`` for none."""
    mean, std = mean_std(values)
    if mean is None:
        return "–"
    return (f"{mean:+.2f}" if sign else f"{mean:.2f}") + ("" if std is None else f" ± {std:.2f}")
