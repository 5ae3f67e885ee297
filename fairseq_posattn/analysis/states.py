"""``fairseq-posattn-dump-states``: sentence vectors of a trained encoder's parts,
for probing classifiers (Hao et al. 2019, Table 3: ``H_O``, ``H_S`` and
"Final"; Wang et al. 2019, Table 3: the encoder output).

    fairseq-posattn-dump-states sentences.txt --path checkpoints/checkpoint_best.pt --out states.npz

The ``.npz`` holds ``recurrent``, ``san``, ``final`` (after the short-cut sum of
Hao et al.'s Eq. 10) and ``num_pieces``, row i = line i (docs/evaluations.md).
Each vector is the mean over the sentence's pieces: never the pads, and the
appended EOS only with ``--include-eos``.
"""

import argparse
from typing import Dict, Sequence

import numpy as np
from torch import Tensor
from tqdm import tqdm

from ..errors import at_least_one
from ..files import read_lines
from .source import CheckpointEncoder, SourceSentence, add_source_args, run_command

PARTS = ("recurrent", "san", "final")
# the encoder's stacks (PositionAwareEncoder._stack_order) -> their part
PART_OF_STACK = {"recurrent": "recurrent", "attention": "san"}


def encoder_parts(encoder, encoder_out: dict) -> Dict[str, Tensor]:
    """``[T, B, C]`` states of each part of the encoder (module doc), from an
    output computed with ``return_all_hiddens=True``."""
    stacks = encoder._stack_order() if hasattr(encoder, "_stack_order") else ["attention"]
    sizes = {"recurrent": len(getattr(encoder, "recurrent_layers", ())),
             "attention": len(encoder.layers)}
    states = encoder_out["encoder_states"]  # the embedding, then every layer's output
    if len(states) != 1 + sum(sizes[s] for s in stacks):
        raise ValueError(
            f"the encoder returned {len(states)} states for {sum(sizes.values())} layers; "
            f"run it with return_all_hiddens=True and without layer drop"
        )
    parts, end = {}, 0
    for stack in stacks:
        end += sizes[stack]
        parts[PART_OF_STACK[stack]] = states[end]
    parts["final"] = encoder_out["encoder_out"][0]
    return parts


def mean_pool(states: Tensor, tokens: Tensor, pad: int, eos: int, include_eos: bool) -> Tensor:
    """Mean of ``states`` ``[T, B, C]`` over the positions of ``tokens`` ``[B, T]``
    that are neither pads nor (unless ``include_eos``) EOS."""
    keep = tokens.ne(pad)
    if not include_eos:
        keep &= tokens.ne(eos)
    weights = keep.t().unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(0) / weights.sum(0)


def sentence_vectors(runner: CheckpointEncoder, sentences: Sequence[SourceSentence],
                     batch_size: int = 64, include_eos: bool = False) -> Dict[str, np.ndarray]:
    """The arrays of the output file (module doc), row i = ``sentences[i]``.
    Batches hold sentences of similar length (less padding, same results)."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i].tokens))
    pad, eos = runner.dictionary.pad(), runner.dictionary.eos()
    vectors: Dict[str, np.ndarray] = {}
    for start in tqdm(range(0, len(order), batch_size), desc="batches", disable=None):
        rows = order[start:start + batch_size]
        out = runner.run([sentences[i] for i in rows])
        tokens = out["src_tokens"][0]
        for name, states in encoder_parts(runner.encoder, out).items():
            pooled = mean_pool(states.float(), tokens, pad, eos, include_eos)
            if name not in vectors:
                vectors[name] = np.zeros((len(sentences), pooled.size(-1)), dtype=np.float32)
            vectors[name][rows] = pooled.cpu().numpy()
    vectors["num_pieces"] = np.array([len(s.pieces) for s in sentences], dtype=np.int64)
    return vectors


def add_dump_args(parser) -> None:
    parser.add_argument("--batch-size", type=at_least_one, default=64, help="sentences per batch")
    parser.add_argument("--include-eos", action="store_true",
                        help="count the appended EOS in the mean (default: pieces only)")


def get_argparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-posattn-dump-states",
        description="Mean-pooled sentence vectors of a trained encoder's recurrent part, "
                    "self-attention part and output, for probing classifiers.",
    )
    parser.add_argument("input", help="source sentences, one per line")
    parser.add_argument("--out", required=True, help="output .npz file")
    add_dump_args(parser)
    add_source_args(parser)
    return parser


def main(args) -> Dict[str, np.ndarray]:
    runner = CheckpointEncoder(args)
    sentences = runner.prepare(read_lines(args.input), args.input)
    vectors = sentence_vectors(runner, sentences, args.batch_size, args.include_eos)
    np.savez(args.out, **vectors)
    shapes = ", ".join(f"{name} {list(v.shape)}" for name, v in vectors.items())
    print(f"{len(sentences)} sentences -> {args.out}: {shapes}")
    return vectors


def cli_main(argv=None) -> None:
    run_command(get_argparser(), main, argv)


if __name__ == "__main__":
    cli_main()
