"""``fairseq-posattn-probe``: probing classifiers on sentence vectors
(Conneau et al. 2018, the protocol of Hao et al. 2019 and Wang et al. 2019,
Table 3).

    fairseq-posattn-probe tree_depth.txt --states states.npz

The probing file has SentEval's format, ``split<TAB>label<TAB>sentence`` per
line.  For every representation: features standardised on ``tr``, one
classifier per setting of a small grid trained on ``tr``, the best on ``va``
kept and its ``te`` accuracy reported beside the majority baseline
(docs/evaluations.md).
"""

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Dict, List

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..errors import quoted
from .source import CheckpointEncoder, add_source_args, run_command
from .states import PARTS, add_dump_args, sentence_vectors

SPLITS = ("tr", "va", "te")

# the grids searched on va: inverse L2 strength; hidden units x L2 strength
GRIDS = {
    "logreg": [{"C": c} for c in (0.01, 0.1, 1.0, 10.0)],
    "mlp": [{"hidden_layer_sizes": (h,), "alpha": a} for h in (50, 100, 200) for a in (1e-4, 1e-2)],
}


@dataclass
class ProbingTask:
    """The examples of a SentEval probing file, in file order."""

    splits: np.ndarray  # "tr" / "va" / "te" of each line
    labels: np.ndarray
    sentences: List[str]


def read_probing_file(path: str) -> ProbingTask:
    splits, labels, sentences = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 3 or not fields[2].strip():
                raise ValueError(
                    f"{path}, line {number}: expected split<TAB>label<TAB>sentence "
                    f"(SentEval probing format), got {quoted(line.rstrip())}"
                )
            if fields[0] not in SPLITS:
                raise ValueError(
                    f"{path}, line {number}: split {quoted(fields[0])} is not one of "
                    f"{', '.join(SPLITS)}"
                )
            splits.append(fields[0])
            labels.append(fields[1])
            sentences.append(fields[2])
    task = ProbingTask(np.array(splits), np.array(labels), sentences)
    for split in SPLITS:
        if not (task.splits == split).any():
            raise ValueError(
                f"{path}: no example of split '{split}'; the probe needs tr, va and te"
            )
    return task


def classifier(kind: str, setting: dict, seed: int):
    if kind == "logreg":
        model = LogisticRegression(max_iter=2000, random_state=seed, **setting)
    else:
        model = MLPClassifier(max_iter=500, random_state=seed, **setting)
    return make_pipeline(StandardScaler(), model)


def probe(vectors: np.ndarray, task: ProbingTask, kind: str = "logreg", seed: int = 1) -> dict:
    """Grid search on va; the selected setting with its va and te accuracy."""
    data = {s: (vectors[task.splits == s], task.labels[task.splits == s]) for s in SPLITS}
    best = None
    for setting in GRIDS[kind]:
        model = classifier(kind, setting, seed).fit(*data["tr"])
        va = model.score(*data["va"])
        if best is None or va > best[1]:
            best = (setting, va, model)
    setting, va, model = best
    return {"setting": setting, "va": va, "te": model.score(*data["te"])}


def majority_baseline(task: ProbingTask) -> float:
    """te accuracy of always answering the most frequent tr label."""
    values, counts = np.unique(task.labels[task.splits == "tr"], return_counts=True)
    return float(np.mean(task.labels[task.splits == "te"] == values[np.argmax(counts)]))


def load_vectors(args, task: ProbingTask) -> Dict[str, np.ndarray]:
    if args.states:
        with np.load(args.states) as stored:
            vectors = {name: stored[name] for name in PARTS if name in stored}
        if not vectors:
            raise ValueError(f"{args.states} holds none of {', '.join(PARTS)}; "
                             f"write it with fairseq-posattn-dump-states")
        rows = {len(v) for v in vectors.values()}
        if rows != {len(task.sentences)}:
            raise ValueError(
                f"{args.states} has {rows.pop()} rows but {args.task_file} has "
                f"{len(task.sentences)} examples; dump the states of this file's sentences"
            )
        return vectors
    runner = CheckpointEncoder(args)
    sentences = runner.prepare(task.sentences, args.task_file)
    vectors = sentence_vectors(runner, sentences, args.batch_size, args.include_eos)
    if args.save_states:
        np.savez(args.save_states, **vectors)
    return {name: vectors[name] for name in PARTS if name in vectors}


def get_argparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-posattn-probe",
        description="Train probing classifiers (SentEval format) on the sentence vectors "
                    "of a trained encoder; print test accuracy per representation.",
    )
    parser.add_argument("task_file", help="probing file: split<TAB>label<TAB>sentence per line")
    parser.add_argument("--states", help="vectors of the file's sentences "
                        "(fairseq-posattn-dump-states output); or give --path")
    parser.add_argument("--classifier", choices=sorted(GRIDS), default="logreg",
                        help="logistic regression (C in 0.01..10) or one-hidden-layer MLP "
                             "(50/100/200 units, alpha 1e-4/1e-2); default: %(default)s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--save-states", help="with --path: keep the computed vectors (.npz)")
    add_dump_args(parser)
    add_source_args(parser, path_required=False)
    return parser


def main(args) -> dict:
    if bool(args.states) == bool(args.path):
        raise ValueError(
            "give the sentence vectors as --states FILE or a model as --path CHECKPOINT"
        )
    if args.states and (args.include_eos or args.save_states):
        raise ValueError("--include-eos and --save-states go with --path: the vectors of "
                         "--states are pooled already")
    task = read_probing_file(args.task_file)
    vectors = load_vectors(args, task)
    results = {"task": args.task_file, "classifier": args.classifier,
               "counts": {s: int((task.splits == s).sum()) for s in SPLITS},
               "majority_te": majority_baseline(task), "representations": {}}
    print(f"{args.task_file}: " + ", ".join(f"{s} {n}" for s, n in results["counts"].items())
          + f"; {len(np.unique(task.labels))} labels; majority baseline te "
          f"{100 * results['majority_te']:.2f}")
    print(f"{'representation':<16}{'dim':>6}{'va':>8}{'te':>8}  setting ({args.classifier})")
    for name, matrix in vectors.items():
        result = probe(matrix, task, args.classifier, args.seed)
        results["representations"][name] = result
        print(f"{name:<16}{matrix.shape[1]:>6}{100 * result['va']:>8.2f}"
              f"{100 * result['te']:>8.2f}  {result['setting']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    sys.stdout.flush()
    return results


def cli_main(argv=None) -> None:
    run_command(get_argparser(), main, argv)


if __name__ == "__main__":
    cli_main()
