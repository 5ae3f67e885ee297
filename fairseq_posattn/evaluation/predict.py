"""Class predictions of a trained classifier checkpoint, in the data's order."""

from typing import Optional, Tuple

import numpy as np
import torch
from fairseq import checkpoint_utils, utils


def load_classifier(path: str, data: Optional[str] = None):
    """The model (eval mode, on GPU when there is one) and task of a checkpoint;
    ``data`` replaces the data directory it was trained on."""
    overrides = {"data": data} if data else None
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
    model = models[0].eval()
    if torch.cuda.is_available():
        model.cuda()
    return model, task


def batches(model, task, split: str, batch_size: int):
    """The dataset of ``split`` and its batches (not shuffled) on the model's
    device; an example too long for the model is an error."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    iterator = task.get_batch_iterator(
        dataset, max_sentences=batch_size, max_positions=model.max_positions(),
        ignore_invalid_inputs=False,
    ).next_epoch_itr(shuffle=False)
    use_cuda = next(model.parameters()).is_cuda
    return dataset, (utils.move_to_cuda(sample) if use_cuda else sample for sample in iterator)


@torch.no_grad()
def predict(model, task, split: str, batch_size: int = 256) -> Tuple[np.ndarray, np.ndarray]:
    """``(predicted classes, gold classes)`` of every example of ``split``,
    indexed like the split's file(s)."""
    dataset, samples = batches(model, task, split, batch_size)
    predicted = np.full(len(dataset), -1, dtype=np.int64)
    gold = np.full(len(dataset), -1, dtype=np.int64)
    for sample in samples:
        logits, _ = model(**sample["net_input"])
        ids = sample["id"].cpu().numpy()
        predicted[ids] = logits.argmax(dim=-1).cpu().numpy()
        gold[ids] = sample["target"].cpu().numpy()
    return predicted, gold
