"""Mean +- standard deviation over seeds of the test accuracies that
examples/pos_tagging/run.sh wrote: an overview of the accuracy on all words
(treebanks by variants), then one Markdown table per treebank::

    fairseq-posattn-pos-table examples/pos_tagging/work [--figure curves.png]

It reads ``WORK/<treebank>/<variant>/seed<N>/test.json`` and, where the recipe
wrote it, ``train.json`` beside it (docs/evaluations.md); Dufter et al.'s
(2020) Table 2d values stand beside ours.  ``--figure`` draws the development
accuracy per epoch against updates, as in the paper's Figure 2.
"""

import argparse
import json
import sys
from pathlib import Path

from ..metrics import format_mean_std

# the row order of Dufter et al. (2020), Table 2
VARIANT_ORDER = ["san", "pe_con", "pe_add", "p", "r", "pr", "temp", "conv1d", "conv2d"]
LABELS = {"san": "SAN", "pe_con": "SAN+PE[con]", "pe_add": "SAN+PE[add]", "p": "SAN+P",
          "r": "SAN+R", "pr": "SAN+P+R", "temp": "SAN+PE[add]+Temp",
          "conv1d": "SAN+PE[add]+Conv", "conv2d": "SAN+PE[add]+Conv2d"}
# Dufter et al. (2020), Table 2d: test accuracy on all words, mean over 3 seeds (UD v2.2)
PAPER_TABLE_2D = {
    "UD_Afrikaans-AfriBooms": {"pe_add": 92.11, "pr": 92.02, "temp": 92.06,
                               "conv1d": 94.50, "conv2d": 94.75},
    "UD_Hungarian-Szeged": {"pe_add": 87.38, "pr": 88.90, "temp": 88.76,
                            "conv1d": 89.47, "conv2d": 89.97},
    "UD_English-LinES": {"pe_add": 89.38, "pr": 89.53, "temp": 88.69,
                         "conv1d": 93.34, "conv2d": 93.56},
    "UD_Vietnamese-VTB": {"pe_add": 84.42, "pr": 84.77, "temp": 84.78,
                          "conv1d": 86.29, "conv2d": 86.52},
}
METRICS = ("accuracy", "oov_accuracy", "ambiguous_accuracy")  # the columns all, OOV, ambiguous


def load_runs(directory: Path):
    """``{variant: [test.json]}`` and ``{variant: [train.json]}`` of a treebank's directory."""
    results, trainings = {}, {}
    for path in sorted(directory.glob("*/seed*/test.json")):
        variant = path.parent.parent.name
        results.setdefault(variant, []).append(json.loads(path.read_text()))
        summary = path.with_name("train.json")
        if summary.is_file():
            trainings.setdefault(variant, []).append(json.loads(summary.read_text()))
    return results, trainings


def variant_rank(variant: str) -> int:
    """The variant's place in the paper's row order (unknown variants last)."""
    return VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)


def ordered(variants):
    return sorted(variants, key=lambda v: (variant_rank(v), v))


def overview_table(runs) -> str:
    """Accuracy on all words, treebanks by variants: ours (mean over seeds) and
    Dufter et al.'s Table 2d value in parentheses where the paper has one.
    ``runs``: ``{treebank directory: load_runs(directory)}``."""
    variants = ordered({v for results, _ in runs.values() for v in results})
    lines = ["| treebank | " + " | ".join(LABELS.get(v, v) for v in variants) + " |",
             "|---|" + "---:|" * len(variants)]
    for directory, (results, _) in runs.items():
        treebank = directory.name
        paper = PAPER_TABLE_2D.get(treebank, {})
        cells = []
        for variant in variants:
            values = [run["accuracy"] for run in results.get(variant, [])]
            cell = f"{sum(values) / len(values):.2f}" if values else "–"
            cells.append(cell + (f" ({paper[variant]:.2f})" if variant in paper else ""))
        lines.append(f"| {treebank.removeprefix('UD_')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def treebank_table(directory: Path, results, trainings) -> str:
    """The table of one treebank from its ``load_runs``."""
    variants = ordered(results)
    paper = PAPER_TABLE_2D.get(directory.name, {})
    first = next(iter(results.values()))[0]
    lines = [f"#### {directory.name} (test: {first['words']} words, {first['oov']} OOV, "
             f"{first['ambiguous']} ambiguous)", "",
             "| model | seeds | all | Dufter et al. | OOV | ambiguous | epochs |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for variant in variants:
        runs = results[variant]
        all_words, *others = [format_mean_std([run[key] for run in runs]) for key in METRICS]
        reference = f"{paper[variant]:.2f}" if variant in paper else ""
        epochs = ", ".join(str(t["epochs"]) for t in trainings.get(variant, []))
        lines.append(f"| {LABELS.get(variant, variant)} | {len(runs)} | {all_words} | "
                     f"{reference} | " + " | ".join(others) + f" | {epochs} |")
    commits = sorted({t["settings"]["commit"][:7]
                      for runs in trainings.values() for t in runs if "commit" in t["settings"]})
    if commits:
        lines += ["", f"Trained at commit {', '.join(commits)} (train.json)."]
    return "\n".join(lines)


def plot_curves(runs, out: str) -> None:
    """Development accuracy against updates: a panel per treebank, a colour per
    variant, a line per seed.  ``runs`` as for :func:`overview_table`."""
    from ..figures import label_panel, panel_grid, plt

    fig, axes = panel_grid(len(runs), 2, (5.5, 4.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (directory, (_, trainings)) in zip(axes, runs.items()):
        for variant in ordered(trainings):
            n = variant_rank(variant)
            for seed, summary in enumerate(trainings[variant]):
                points = [(v["updates"], v["accuracy"]) for v in summary["validations"]
                          if "accuracy" in v]
                if points:
                    ax.plot(*zip(*points), color=colours[n % len(colours)], linewidth=1,
                            alpha=0.8, label=LABELS.get(variant, variant) if seed == 0 else None)
        label_panel(ax, directory.name.removeprefix("UD_"), "updates", "dev accuracy (%)",
                    "no train.json", "x-small")
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-posattn-pos-table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="the WORK directory of run.sh")
    parser.add_argument("--figure", help="draw the development accuracy per epoch here (PNG)")
    args = parser.parse_args(argv)
    treebanks = sorted({p.parents[2] for p in args.work.glob("*/*/seed*/test.json")})
    if not treebanks:
        sys.exit(f"fairseq-posattn-pos-table: error: no */*/seed*/test.json under {args.work}")
    runs = {treebank: load_runs(treebank) for treebank in treebanks}
    print("\n\n".join([overview_table(runs)] + [treebank_table(t, *runs[t]) for t in treebanks]))
    if args.figure:
        plot_curves(runs, args.figure)


if __name__ == "__main__":
    main()
