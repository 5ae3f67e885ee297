"""Tag a treebank split with a ``posattn_tagger`` checkpoint and print the
accuracies of Dufter et al. (2020): all words, OOV words (forms not in the
training data) and ambiguous words (forms with several tags in training)::

    fairseq-posattn-pos-score --path ckpt/checkpoint_best.pt \\
        --split test [--data TREEBANK_DIR] [--output tags.txt] [--json result.json]

The vocabulary and lexicon are the training ones, stored in the checkpoint.
``--output`` writes the predicted tags, one sentence per line.
"""

import argparse
import json
import logging
from typing import Dict, List, Tuple

import torch

from ..metrics import COUNTS, tagging_accuracies, tagging_counts
from .predict import batches, load_classifier


@torch.no_grad()
def tag_split(model, task, split: str, batch_size: int = 64
              ) -> Tuple[Dict[str, int], List[List[str]]]:
    """Word counts (see :func:`tagging_counts`) and the predicted tags of every
    sentence of ``split``, in file order."""
    dataset, samples = batches(model, task, split, batch_size)
    counts = dict.fromkeys(COUNTS, 0)
    pieces = {}
    for sample in samples:
        predicted = model(**sample["net_input"]).argmax(dim=-1)
        for key, value in tagging_counts(predicted, sample["target"], sample["word_class"]).items():
            counts[key] += value
        lengths = sample["net_input"]["src_lengths"].tolist()
        for item, row, length in zip(sample["id"].tolist(), predicted.tolist(), lengths):
            pieces[dataset.pieces[item]] = [task.vocabulary.tags[t] for t in row[:length]]
    sentences: List[List[str]] = [[] for _ in range(1 + max(s for s, _ in pieces))]
    for sentence, start in sorted(pieces):
        sentences[sentence].extend(pieces[(sentence, start)])
    return counts, sentences


def cli_main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-posattn-pos-score",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", required=True, help="posattn_tagger checkpoint")
    parser.add_argument("--split", default="test", help="train, valid (the dev file) or test")
    parser.add_argument("--data", help="treebank directory (default: the training one)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", help="write the predicted tags here, a sentence per line")
    parser.add_argument("--json", help="write the counts and accuracies here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, force=True)

    model, task = load_classifier(args.path, data=args.data)
    counts, sentences = tag_split(model, task, args.split, args.batch_size)
    accuracies = tagging_accuracies(counts)
    print(f"{args.split}: accuracy {accuracies['accuracy']:.2f} ({counts['words']} words) | "
          f"oov_accuracy {accuracies['oov_accuracy']:.2f} ({counts['oov']} words) | "
          f"ambiguous_accuracy {accuracies['ambiguous_accuracy']:.2f} "
          f"({counts['ambiguous']} words)")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.writelines(" ".join(tags) + "\n" for tags in sentences)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"checkpoint": args.path, "split": args.split, **counts, **accuracies},
                      f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    cli_main()
