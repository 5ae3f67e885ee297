"""Learning curves of several fairseq-train runs from their JSON logs.

    fairseq-posattn-plot-curves base/train.log struct/train.log \\
        --label base --label struct --out curves.png

One row per metric (validation loss, and BLEU when a run logged it), against
updates and against wall-clock time; one line per run (docs/plots.md).  A
training summary (``fairseq-posattn-train-log --out``) stands in for its log.
"""

import argparse
import itertools
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..figures import label_panel, panel_grid, plt
from ..recipes.train_log import Validation, read_log

PANEL_SIZE = (5.0, 3.5)  # inches, one (metric, x-axis) panel


def default_labels(paths: Sequence[str]) -> List[str]:
    """File names without suffix; the parent directory's name where those repeat."""
    stems = [Path(p).stem for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    parents = [Path(p).resolve().parent.name for p in paths]
    return parents if len(set(parents)) == len(parents) else [str(p) for p in paths]


def _time_unit(seconds: float):
    if seconds < 600:
        return "s", 1.0
    if seconds < 36000:
        return "min", 60.0
    return "h", 3600.0


def plot_runs(runs: Dict[str, List[Validation]], metrics: Sequence[str], out: str,
              subset: str = "valid", dpi: int = 100) -> None:
    """One row per metric, columns: against updates, against wall-clock time."""
    walls = [v.wall for points in runs.values() for v in points if v.wall is not None]
    unit, scale = _time_unit(max(walls, default=0.0))
    fig, axes = panel_grid(2 * len(metrics), 2, PANEL_SIZE)
    for ax, (metric, axis) in zip(axes, itertools.product(metrics, ("updates", "wall"))):
        divisor = scale if axis == "wall" else 1
        for label, points in runs.items():
            xy = [(getattr(v, axis) / divisor, v.metrics[metric]) for v in points
                  if metric in v.metrics and getattr(v, axis) is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", markersize=3, label=label)
        if axis == "wall" and not walls:
            ax.text(0.5, 0.5, "no wall-clock times in these logs", ha="center",
                    va="center", transform=ax.transAxes)
        ax.set_xlabel("updates" if axis == "updates" else f"wall-clock time ({unit})")
        ax.set_ylabel(f"{subset} {metric}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def main(argv=None) -> Dict[str, List[Validation]]:
    parser = argparse.ArgumentParser(prog="fairseq-posattn-plot-curves",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="fairseq-train --log-format json output files, "
                        "or training summaries (fairseq-posattn-train-log --out)")
    parser.add_argument("--label", action="append",
                        help="name of a run in the legend, once per log in order "
                             "(default: the file names)")
    parser.add_argument("--metric", action="append",
                        help="metric to draw (without the subset prefix), repeatable; "
                             "default: loss, and bleu when logged")
    parser.add_argument("--subset", default="valid", help="validation subset (default: valid)")
    parser.add_argument("--out", required=True, help="output PNG")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(name)s: %(levelname)s: %(message)s")
    if args.label and len(args.label) != len(args.logs):
        parser.error(f"{len(args.label)} --label for {len(args.logs)} logs; give one per log")
    labels = args.label or default_labels(args.logs)
    runs = {}
    try:
        for label, path in zip(labels, args.logs):
            runs[label] = read_log(path, args.subset)
    except (OSError, ValueError) as exc:
        sys.exit(f"fairseq-posattn-plot-curves: error: {exc}")
    logged = {m for points in runs.values() for v in points for m in v.metrics}
    metrics = args.metric or ["loss"] + (["bleu"] if "bleu" in logged else [])
    missing = [m for m in metrics if m not in logged]
    if missing:
        sys.exit(f"fairseq-posattn-plot-curves: error: no run logged {', '.join(missing)} "
                 f"(logged: {', '.join(sorted(logged))})")
    plot_runs(runs, metrics, args.out, args.subset, args.dpi)
    print(f"{args.out}: {', '.join(metrics)} of {len(runs)} runs "
          f"({sum(map(len, runs.values()))} validations)")
    return runs


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script: :func:`main` without its return value."""
    main(argv)


if __name__ == "__main__":
    cli_main()
