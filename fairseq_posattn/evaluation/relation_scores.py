"""Score relation predictions: micro precision, recall and F1 without
``no_relation`` (:mod:`~fairseq_posattn.metrics`).

    fairseq-posattn-relation-score --gold test.json --predictions pred.txt
    fairseq-posattn-relation-score --checkpoint ckpt/checkpoint_best.pt \\
        --data DIR --split test --write-predictions pred.txt

Labels are one per line, or the ``relation`` fields of a TACRED-format JSON.
"""

import argparse
import json
import logging

from ..files import read_lines
from ..metrics import NO_RELATION, micro_scores, relation_counts


def read_labels(path: str):
    """Labels of a one-per-line file, or the ``relation`` fields of a TACRED JSON."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            examples = json.load(f)
        for number, example in enumerate(examples, 1):
            if not isinstance(example, dict) or "relation" not in example:
                raise ValueError(f"{path}, example {number}: no 'relation' field")
        return [example["relation"] for example in examples]
    return read_lines(path)


def checkpoint_labels(args):
    """``(gold, predicted)`` label names of ``--split``, predicted by ``--checkpoint``."""
    from .predict import load_classifier, predict

    model, task = load_classifier(args.checkpoint, data=args.data)
    predicted, gold = predict(model, task, args.split, args.batch_size)
    names = [task.label_name(c) for c in predicted]
    if args.write_predictions:
        with open(args.write_predictions, "w", encoding="utf-8") as f:
            f.writelines(name + "\n" for name in names)
    return [task.label_name(c) for c in gold], names, task.cfg.negative_label


def cli_main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-posattn-relation-score",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", help="gold labels: one per line, or a TACRED-format .json")
    parser.add_argument("--predictions", help="predicted labels, one per line, in the gold order")
    parser.add_argument("--negative-label", default=NO_RELATION)
    parser.add_argument("--checkpoint", help="predict with this relation_classification model")
    parser.add_argument("--data", help="with --checkpoint: data directory (default: the training one)")
    parser.add_argument("--split", default="test", help="with --checkpoint: split to score")
    parser.add_argument("--write-predictions", help="with --checkpoint: write the predicted labels")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, force=True)

    if args.checkpoint:
        gold, predicted, negative = checkpoint_labels(args)
    elif args.gold and args.predictions:
        gold, predicted = read_labels(args.gold), read_labels(args.predictions)
        negative = args.negative_label
        if len(gold) != len(predicted):
            raise SystemExit(
                f"{args.predictions} has {len(predicted)} labels but {args.gold} has {len(gold)}"
            )
    else:
        parser.error("give --gold and --predictions, or --checkpoint")
    correct, guessed, gold_count = relation_counts(predicted, gold, negative)
    precision, recall, f1 = micro_scores(correct, guessed, gold_count)
    print(f"examples {len(gold)} | correct {correct} | predicted positive {guessed} | "
          f"gold positive {gold_count}")
    print(f"precision {100 * precision:.2f} | recall {100 * recall:.2f} | f1 {100 * f1:.2f}")


if __name__ == "__main__":
    cli_main()
