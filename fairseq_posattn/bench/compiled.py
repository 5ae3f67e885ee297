"""``torch.compile`` (inductor) against eager over one stream of fairseq-like batch shapes.

    fairseq-posattn-bench-compile                       # rows shaw, struct, bilan, conv2d, onlstm
    fairseq-posattn-bench-compile --rows struct --batches 6 --max-tokens 2048

Per row, eager and compiled: the compile cost (the first pass beyond eager's;
the graphs, graph breaks, and graphs compiled for a shape met again), the
largest difference of their inference outputs, and the median training and
inference pass over the stream.  Attention rows (``fairseq-posattn-bench``
labels) compile the encoder whole; ``onlstm`` is one ON-LSTM layer (Hao et
al. 2019, Eq. 3-9), eager on ``auto``'s path, compiled on the reference.
"""

import argparse
import logging
import statistics
import time
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from ..models.from_flags import stand_in_dictionary
from ..modules import recurrent
from .models import ROW_BY_LABEL, add_size_arguments, build_model, make_batch, make_trees
from .timing import console_script, write_json

DEFAULT_ROWS = "shaw,struct,bilan,conv2d,onlstm"


def batch_shapes(count: int, max_tokens: int, min_length: int, max_length: int, seed: int) -> List[tuple]:
    """``count`` (B, T) shapes of fairseq-like batches: T uniform, B = max_tokens // T."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, size=count)
    return [(max(1, max_tokens // int(t)), int(t)) for t in lengths]


class StreamRow:
    """A module over the stream's inputs (``inputs[i]``: positional and keyword
    arguments), ``output`` picking the tensor out of what it returns; eager, or
    compiled whole after ``before_compile(module)``."""

    def __init__(self, module, inputs, output=lambda out: out, before_compile=lambda module: None):
        self.module, self.run, self.inputs, self.output = module, module, inputs, output
        self.before_compile = before_compile

    def compile(self):
        self.before_compile(self.module)
        self.run = torch.compile(self.module)

    def step(self, i: int, train: bool) -> torch.Tensor:
        args, kwargs = self.inputs[i]
        self.module.train(train)
        out = self.output(self.run(*args, **kwargs))
        if train:
            out.float().sum().backward()
            self.module.zero_grad(set_to_none=True)
            for tensor in args:
                tensor.grad = None
        return out


def encoder_row(label: str, settings, shapes) -> StreamRow:
    """A model's encoder on left-padded batches, with the tree inputs it reads."""
    row = ROW_BY_LABEL[label]
    dictionary = stand_in_dictionary(settings.vocab)
    torch.manual_seed(settings.seed)
    encoder = build_model(row, settings, dictionary).encoder
    inputs = []
    for i, (b, t) in enumerate(shapes):
        src, lengths, _, _ = make_batch(SimpleNamespace(batch=b, length=t, seed=settings.seed + i),
                                        dictionary, torch.device("cpu"))
        inputs.append(((src, lengths), make_trees(encoder, lengths, t, settings.seed + i)))
    return StreamRow(encoder, inputs, lambda out: out["encoder_out"][0])


def onlstm_row(settings, shapes) -> StreamRow:
    """One bidirectional ON-LSTM layer on right-padded batches: eager on the path
    ``auto`` takes on this device, compiled on the reference."""
    torch.manual_seed(settings.seed)
    g = torch.Generator().manual_seed(settings.seed)
    inputs = []
    for b, t in shapes:
        lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
        lengths[0] = t
        inputs.append(((torch.randn(t, b, settings.embed_dim, generator=g, requires_grad=True), lengths), {}))

    def on_the_reference(layer):
        layer.rnn.kernel = "reference"

    return StreamRow(recurrent.RecurrentLayer(settings.embed_dim, "onlstm"), inputs, before_compile=on_the_reference)


def _pass(row, count: int) -> tuple:
    """Seconds of one training pass and one inference pass over the stream."""
    start = time.perf_counter()
    for i in range(count):
        row.step(i, train=True)
    middle = time.perf_counter()
    with torch.no_grad():
        for i in range(count):
            row.step(i, train=False)
    return middle - start, time.perf_counter() - middle


def _dynamo_counts() -> Dict[str, int]:
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def measure(label: str, settings, shapes) -> dict:
    """Eager and compiled figures of one row over the stream ``shapes``."""
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    result = {"row": label}
    outputs = {}
    for mode in ("eager", "compiled"):
        row = onlstm_row(settings, shapes) if label == "onlstm" else encoder_row(label, settings, shapes)
        if mode == "compiled":
            row.compile()
        first = _pass(row, len(shapes))
        with torch.no_grad():
            outputs[mode] = row.step(0, train=False).float()
        after_first = _dynamo_counts()
        passes = [_pass(row, len(shapes)) for _ in range(settings.repeats)]
        result[mode] = {"first_pass_s": sum(first), "train_s": statistics.median(p[0] for p in passes),
                        "infer_s": statistics.median(p[1] for p in passes)}
        if mode == "compiled":
            result[mode].update(after_first, graphs_after_first_pass=_dynamo_counts()["graphs"] - after_first["graphs"])
    eager, compiled = result["eager"], result["compiled"]
    result.update(max_abs_diff=(outputs["compiled"] - outputs["eager"]).abs().max().item(),
                  compile_s=compiled["first_pass_s"] - eager["first_pass_s"],
                  train_ratio=compiled["train_s"] / eager["train_s"], infer_ratio=compiled["infer_s"] / eager["infer_s"])
    return result


def get_parser():
    p = argparse.ArgumentParser(prog="fairseq-posattn-bench-compile", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated: onlstm and fairseq-posattn-bench row labels")
    p.add_argument("--batches", type=int, default=6, help="batch shapes in the stream")
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--min-length", type=int, default=16)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the stream after the first")
    add_size_arguments(p)
    p.add_argument("--json", default="", help="also write the results here")
    return p


def format_table(results: List[dict]) -> str:
    header = (f"{'row':<8} {'compile s':>9} {'graphs':>6} {'breaks':>6} {'again':>5} {'train ms':>9} "
              f"{'compiled':>9} {'ratio':>6} {'infer ms':>9} {'compiled':>9} {'ratio':>6} {'max diff':>8}")
    lines = [header, "-" * len(header)]
    for r in results:
        e, c = r["eager"], r["compiled"]
        lines.append(
            f"{r['row']:<8} {r['compile_s']:9.1f} {c['graphs']:6d} {c['graph_breaks']:6d} "
            f"{c['graphs_after_first_pass']:5d} {1e3 * e['train_s']:9.1f} {1e3 * c['train_s']:9.1f} "
            f"{r['train_ratio']:6.2f} {1e3 * e['infer_s']:9.1f} {1e3 * c['infer_s']:9.1f} {r['infer_ratio']:6.2f} {r['max_abs_diff']:8.1e}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    settings = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, force=True)  # inductor's file locks log at DEBUG
    labels = settings.rows.split(",")
    unknown = [x for x in labels if x != "onlstm" and x not in ROW_BY_LABEL]
    if unknown:
        raise SystemExit(f"unknown --rows {unknown}; choose onlstm or from {list(ROW_BY_LABEL)}")
    torch.set_num_threads(settings.threads)
    shapes = batch_shapes(settings.batches, settings.max_tokens, settings.min_length,
                          settings.max_length, settings.seed)
    results = [measure(label, settings, shapes) for label in labels]
    print(f"d={settings.embed_dim} layers={settings.layers} threads={torch.get_num_threads()} "
          f"torch={torch.__version__}; stream of {len(shapes)} batches (B x T): "
          + " ".join(f"{b}x{t}" for b, t in shapes)
          + f"; times summed over the stream, median of {settings.repeats} passes")
    print(format_table(results))
    if settings.json:
        write_json(settings.json, {"shapes": shapes, "settings": vars(settings), "torch": torch.__version__,
                                   "rows": results})
    return results


cli_main = console_script(main)


if __name__ == "__main__":
    cli_main()
