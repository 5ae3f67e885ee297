"""Accuracy by number of logical operators (Hao et al. 2019, Fig. 1).

Evaluates ``logic_inference`` checkpoints on ``test1`` ... ``test12`` and
prints a Markdown table (a column per model, plus example-weighted means over
the operator counts seen and not seen in training); ``--plot`` draws the figure::

    fairseq-posattn-logic-report DATA --checkpoint SAN=ckpt/san.seed1/checkpoint_best.pt \\
        --checkpoint SAN=ckpt/san.seed2/checkpoint_best.pt --plot fig1.png

Checkpoints under one name are seeds of one model: its cells are their mean,
then each seed's accuracy; its line is the mean with the seeds' range shaded.
"""

import argparse
import json
import logging
import statistics
import sys
from typing import Dict, List, Sequence

from ..files import atomic_output
from .predict import load_classifier, predict

OPERATORS = range(1, 13)


def accuracy_by_operators(model, task, batch_size: int) -> Dict[int, List[int]]:
    """``{k: [correct, examples]}`` on ``test<k>`` for k = 1..12."""
    counts = {}
    for k in OPERATORS:
        predicted, gold = predict(model, task, f"test{k}", batch_size)
        counts[k] = [int((predicted == gold).sum()), len(gold)]
    return counts


def pooled_accuracy(counts: Dict[int, List[int]], operators: Sequence[int]) -> float:
    correct = sum(counts[k][0] for k in operators)
    total = sum(counts[k][1] for k in operators)
    return 100.0 * correct / total if total else float("nan")


Counts = Dict[int, List[int]]  # operators -> [correct, examples] of one checkpoint


def cell(seeds: Sequence[Counts], operators: Sequence[int]) -> str:
    """The mean over seeds, then each seed's accuracy when there are several."""
    accuracies = [pooled_accuracy(counts, operators) for counts in seeds]
    mean = f"{statistics.fmean(accuracies):.1f}"
    if len(accuracies) == 1:
        return mean
    return f"{mean} ({' / '.join(f'{a:.1f}' for a in accuracies)})"


def markdown_table(results: Dict[str, List[Counts]], train_max: int) -> str:
    names = list(results)
    first = results[names[0]][0]
    lines = [
        "| operators | examples | " + " | ".join(names) + " |",
        "|---:|---:|" + "---:|" * len(names),
    ]
    groups = [(str(k), [k]) for k in OPERATORS] + [
        (f"1-{train_max} (seen)", range(1, train_max + 1)),
        (f"{train_max + 1}-12 (unseen)", range(train_max + 1, 13))]
    for label, group in groups:
        group = [k for k in group if k in first]
        if group:
            cells = [cell(results[n], group) for n in names]
            lines.append(f"| {label} | {sum(first[k][1] for k in group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: Dict[str, List[Counts]], train_max: int, path: str) -> None:
    """Accuracy against the number of operators, one line per model (the
    mean over its seeds, their range shaded)."""
    from ..figures import label_panel, plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    xs = list(OPERATORS)
    for name, seeds in results.items():
        per_seed = [[pooled_accuracy(counts, [k]) for k in xs] for counts in seeds]
        mean = [statistics.fmean(column) for column in zip(*per_seed)]
        line, = ax.plot(xs, mean, marker="o", markersize=4,
                        label=name + (f" ({len(seeds)} seeds)" if len(seeds) > 1 else ""))
        if len(seeds) > 1:
            ax.fill_between(xs, [min(c) for c in zip(*per_seed)], [max(c) for c in zip(*per_seed)],
                            color=line.get_color(), alpha=0.15, linewidth=0)
    ax.axvline(train_max + 0.5, color="grey", linestyle=":", linewidth=1)
    ax.text(train_max + 0.6, 0.02, f"trained on <= {train_max}", transform=ax.get_xaxis_transform(),
            color="grey", fontsize=8)
    ax.set_xticks(xs)
    label_panel(ax, "", "number of logical operators", "accuracy (%)", "no model", legend_size=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def parse_checkpoint(spec: str):
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {spec!r}")
    return name, path


def one_train_max(train_max: Dict[str, int]) -> int:
    """The ``--max-train-operators`` of every run (``{checkpoint or counts file: value}``)."""
    if len(set(train_max.values())) != 1:
        raise SystemExit(
            "the runs were trained with different --max-train-operators ("
            + ", ".join(f"{path}: {k}" for path, k in train_max.items())
            + "); compare models trained on the same files"
        )
    return next(iter(train_max.values()))


def evaluate(data: str, checkpoints, batch_size: int) -> Dict[str, object]:
    """``{"train_max": k, "models": {name: [{"path": p, "counts": Counts}, ...]}}``."""
    models, train_max = {}, {}
    for name, path in checkpoints:
        model, task = load_classifier(path, data=data)
        train_max[path] = task.cfg.max_train_operators
        models.setdefault(name, []).append(
            {"path": path, "counts": accuracy_by_operators(model, task, batch_size)})
    return {"train_max": one_train_max(train_max), "models": models}


def load_counts(paths: Sequence[str]) -> Dict[str, object]:
    """The counts saved by ``--counts-out`` in ``paths``, merged in order (the
    runs of one name are its seeds)."""
    models, train_max = {}, {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        train_max[path] = saved["train_max"]
        for name, runs in saved["models"].items():
            for run in runs:  # JSON keys are strings
                run["counts"] = {int(k): v for k, v in run["counts"].items()}
            models.setdefault(name, []).extend(runs)
    return {"train_max": one_train_max(train_max), "models": models}


def cli_main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-posattn-logic-report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", help="directory with test1 ... test12")
    parser.add_argument("--checkpoint", type=parse_checkpoint, action="append",
                        metavar="NAME=PATH",
                        help="a model (repeat for each column; the same NAME for its seeds)")
    parser.add_argument("--counts", metavar="JSON", nargs="+",
                        help="instead of checkpoints: the counts that --counts-out saved "
                             "(several files: their models and seeds together)")
    parser.add_argument("--counts-out", metavar="JSON", help="save every checkpoint's counts")
    parser.add_argument("--plot", help="write the figure here (PNG)")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    if bool(args.counts) == bool(args.checkpoint and args.data):
        parser.error("give DATA with --checkpoint NAME=PATH ..., or --counts JSON")
    # importing fairseq leaves the root logger at DEBUG (matplotlib would chatter)
    logging.basicConfig(level=logging.WARNING, force=True)

    if args.counts:
        saved = load_counts(args.counts)
    else:
        saved = evaluate(args.data, args.checkpoint, args.batch_size)
    if args.counts_out:
        with atomic_output(args.counts_out) as f:
            json.dump(saved, f, indent=1)
    results = {name: [run["counts"] for run in runs] for name, runs in saved["models"].items()}
    print(markdown_table(results, saved["train_max"]))
    if args.plot:
        plot(results, saved["train_max"], args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    cli_main()
