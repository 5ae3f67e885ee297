"""What the tools' figures share: matplotlib without a display, a grid of
panels and a panel's labels."""

import logging
import textwrap

# importing fairseq leaves the root logger at DEBUG, where matplotlib chatters
logging.getLogger("matplotlib").setLevel(logging.WARNING)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["label_panel", "panel_grid", "plt"]

TITLE_WIDTH = 48  # characters of a panel title's line: run names are long


def panel_grid(count: int, cols: int, panel_size, **subplots):
    """A figure of ``count`` panels in rows of ``cols``: the figure and the
    panels in reading order (the grid's unused places hidden)."""
    cols = min(cols, count)
    rows = (count + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows),
                             squeeze=False, layout="constrained", **subplots)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    for ax in flat[:count]:  # shared axes label only the bottom row, which may be hidden
        ax.tick_params(labelbottom=True)
    return fig, flat[:count]


def label_panel(ax, title: str, xlabel: str, ylabel: str, empty: str, legend_size="small"):
    """Title (wrapped to fit a panel), axis labels and grid; a legend, or ``empty``
    where nothing was drawn."""
    ax.set_title(textwrap.fill(title, TITLE_WIDTH), fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=legend_size)
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
