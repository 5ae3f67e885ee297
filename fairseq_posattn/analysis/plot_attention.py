"""Encoder self-attention maps of one sentence, per head of one layer, under
the sentence's dependency arcs.

    fairseq-posattn-plot-attention --path checkpoints/checkpoint_best.pt \\
        --input bpe/test.en --line 7 --conllu bpe/test.en.conllu --out attention.png

Each head's map has the queries as rows and the keys as columns, in the
sentence's order (its pieces, then EOS); above it, the arcs of the tree over
the words, from each head word to its dependent (docs/plots.md).
"""

import argparse
import math
from typing import Optional, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Arc  # noqa: E402

from fairseq_posattn.analysis.attention_maps import sentence_attention  # noqa: E402
from fairseq_posattn.files import read_lines  # noqa: E402
from fairseq_posattn.analysis.source import (  # noqa: E402
    CheckpointEncoder,
    add_source_args,
    run_command,
)

MAX_COLUMNS = 4  # heads per row
ARC_SHARE = 0.4  # height of the arc panel, relative to a map


def figure_size(heads: int, tokens: int, with_tree: bool):
    """Inches (width, height) of the figure: square maps that grow with the
    sentence, arcs above each, room for labels and the colour bar."""
    cell = max(2.5, 0.22 * tokens)
    columns = min(heads, MAX_COLUMNS)
    rows = math.ceil(heads / columns)
    arc = ARC_SHARE * cell if with_tree else 0.0
    return columns * cell + 1.2, rows * (cell + arc + 0.8) + 0.4


def draw_arcs(ax, tree, piece_words: np.ndarray) -> None:
    """The dependency arcs over the words, at the centres of their pieces."""
    centres = np.array([np.flatnonzero(piece_words == w).mean() for w in range(len(tree.words))])
    spans = [abs(centres[i] - centres[h - 1]) for i, h in enumerate(tree.heads) if h > 0]
    longest = max(spans, default=1.0)
    for i, head in enumerate(tree.heads):
        relation = tree.deprels[i] if tree.deprels else ""
        if head == 0:
            ax.annotate("", (centres[i], 0.0), (centres[i], 1.05),
                        arrowprops=dict(arrowstyle="-|>", lw=0.8, color="black"))
            ax.text(centres[i], 1.08, relation or "root", ha="center", va="bottom", fontsize=6)
            continue
        start, end = sorted((centres[i], centres[head - 1]))
        height = 0.25 + 0.7 * (end - start) / longest
        ax.add_patch(Arc(((start + end) / 2, 0.0), end - start, 2 * height,
                         theta1=0, theta2=180, lw=0.8, color="tab:blue"))
        ax.plot(centres[i], 0.02, marker="v", markersize=3, color="tab:blue")
        if relation:
            ax.text((start + end) / 2, height, relation, ha="center", va="bottom", fontsize=5)
    for w, word in enumerate(tree.words):
        ax.text(centres[w], -0.08, word, ha="center", va="top", fontsize=6, rotation=60)
    ax.set_ylim(-0.6, 1.3)
    ax.axis("off")


def plot_layer(maps: np.ndarray, labels, tree, piece_words, title: str, out: str,
               dpi: int = 100) -> None:
    """``maps`` ``[heads, n, n]`` of one layer; ``labels`` the n tokens."""
    heads, n, _ = maps.shape
    columns = min(heads, MAX_COLUMNS)
    rows = math.ceil(heads / columns)
    fig = plt.figure(figsize=figure_size(heads, n, tree is not None), layout="constrained")
    ratios = [ARC_SHARE, 1.0] * rows if tree is not None else [1.0] * rows
    grid = fig.add_gridspec(len(ratios), columns, height_ratios=ratios)
    per_row = 2 if tree is not None else 1
    vmax = float(maps.max())
    image, map_axes = None, []
    for h in range(heads):
        row, col = divmod(h, columns)
        ax = fig.add_subplot(grid[row * per_row + per_row - 1, col])
        image = ax.imshow(maps[h], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto",
                          interpolation="nearest")
        ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
        ax.set_yticks(range(n), labels if col == 0 else [], fontsize=6)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_title(f"head {h + 1}", fontsize=8)
        map_axes.append(ax)
        if tree is not None:
            arcs = fig.add_subplot(grid[row * per_row, col], sharex=ax)
            draw_arcs(arcs, tree, piece_words)
    fig.colorbar(image, ax=map_axes, shrink=0.6, label="attention probability")
    fig.suptitle(title, fontsize=9)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def get_argparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-posattn-plot-attention",
                                     description=__doc__.split("\n\n")[0])
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--sentence", help="the source sentence (pieces, or words with --bpe)")
    text.add_argument("--input", help="a file of source sentences, one per line (with --line)")
    parser.add_argument("--line", type=int, default=1, help="1-based line of --input (default 1)")
    parser.add_argument("--layer", type=int, default=1,
                        help="1-based self-attention layer of the encoder (default 1)")
    parser.add_argument("--out", required=True, help="output PNG")
    parser.add_argument("--dpi", type=int, default=100)
    add_source_args(parser)
    return parser


def main(argv=None) -> np.ndarray:
    """Draw the figure; returns the drawn maps ``[heads, n, n]``."""
    return run_command(get_argparser(), plot, argv)


def plot(args) -> np.ndarray:
    lines, source = (read_lines(args.input), args.input) if args.input else ([args.sentence], "--sentence")
    if not 1 <= args.line <= len(lines):
        raise ValueError(f"--line {args.line}: {source} has {len(lines)} lines")
    runner = CheckpointEncoder(args)
    sentences = runner.sentences(lines, source)
    if args.conllu:  # its trees are those of every line
        runner.add_trees(sentences)
    sentence = sentences[args.line - 1]
    if args.parser or (runner.tree_inputs and sentence.tree is None):
        runner.add_trees([sentence])
    maps = sentence_attention(runner, sentence).numpy()
    if not 1 <= args.layer <= len(maps):
        raise ValueError(f"--layer {args.layer}: the encoder has {len(maps)} self-attention layers")
    labels = sentence.pieces + [runner.dictionary.eos_word]
    title = (f"{Path(args.path).parent.name}/{Path(args.path).name}: encoder layer {args.layer} "
             f"self-attention (rows: queries, columns: keys)")
    plot_layer(maps[args.layer - 1], labels, sentence.tree, sentence.piece_words, title,
               args.out, args.dpi)
    print(f"{args.out}: layer {args.layer}, {maps.shape[1]} heads, {len(labels)} tokens")
    return maps[args.layer - 1]


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script: :func:`main` without its return value."""
    main(argv)


if __name__ == "__main__":
    cli_main()
