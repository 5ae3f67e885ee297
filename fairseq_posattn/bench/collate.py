"""Throughput of the ``translation_struct`` collater and of its structure step.

    fairseq-posattn-bench-collate                 # T~30 pieces, B=100, 1 thread, 7 rounds
    fairseq-posattn-bench-collate --words 50 --batch 64 --max-pieces 48
    fairseq-posattn-bench-collate --reads src_depths,src_structural_positions --reads src_parent_positions

On random projective trees of about ``--words`` words (1-3 pieces a word), one
thread: sentences per second of ``batch_piece_structure`` alone, and of
fairseq's ``LanguagePairDataset`` collater against the whole
``TreeLanguagePairDataset`` one for each ``--reads`` (the tree inputs a model
reads; default Wang et al.'s two), interleaved in ``--rounds`` rounds (the
ratios' medians and ranges over rounds, against fairseq's and against the
first ``--reads``); and the bytes per sentence of the batch's tree tensors
against int64's.
"""

import argparse
import time

import numpy as np
import torch

from ..structure import WANG_TREE_INPUTS, TreeInputs, batch_piece_structure, encode_piece_tree
from ..structure.control_trees import random_projective_heads
from .timing import console_script, per_repeat_ratios


def random_sentence(rng: np.random.Generator, n: int):
    heads = np.asarray(random_projective_heads(n, rng))
    pieces = rng.choice([1, 2, 3], size=n, p=[0.8, 0.15, 0.05])
    return heads, np.repeat(np.arange(n), pieces)


def sentences_per_second(step, batches, batch_size, seconds) -> float:
    for batch in batches[:3]:  # warm-up
        step(batch)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(batches[done % len(batches)])
        done += 1
    return done * batch_size / (time.perf_counter() - start)


def tree_inputs_named(keys: str) -> TreeInputs:
    """The tree inputs of comma-separated ``net_input`` keys (parent positions at the anchor ``mean``)."""
    every = TreeInputs(True, True, True, "mean")
    named = set(keys.split(","))
    unknown = named - set(every.keys())
    if unknown:
        raise argparse.ArgumentTypeError("%s: not one of %s" % (", ".join(sorted(unknown)), ", ".join(every.keys())))
    return TreeInputs(*(key in named for key in every.keys()[:3]),
                      "mean" if "src_parent_positions" in named else None)


def collaters(batches, reads=(WANG_TREE_INPUTS,), vocab_size=1000):
    """fairseq's dataset and ours for each of ``reads`` over the same sentences
    (random tokens), each with its batches' items."""
    from fairseq.data import LanguagePairDataset

    from ..data.tree_dataset import TreeLanguagePairDataset
    from ..models.from_flags import stand_in_dictionary

    vocab = stand_in_dictionary(vocab_size)
    heads = [h for hs, _ in batches for h in hs]
    words = [w for _, ws in batches for w in ws]
    tokens = [torch.cat([torch.randint(vocab.nspecial, len(vocab), (len(w),)),
                         torch.tensor([vocab.eos()])]) for w in words]
    sizes = np.array([len(t) for t in tokens])
    pairs = LanguagePairDataset(tokens, sizes, vocab, tokens, sizes, vocab)
    encoded = [encode_piece_tree(h, w) for h, w in zip(heads, words)]
    datasets = [("fairseq LanguagePairDataset.collater", pairs)] + [
        ("TreeLanguagePairDataset.collater " + _label(wanted),
         TreeLanguagePairDataset(pairs, encoded, wanted=lambda wanted=wanted: wanted)) for wanted in reads]
    starts = range(0, len(tokens), len(batches[0][0]))
    return {name: (dataset, [[dataset[i] for i in range(start, start + len(batches[0][0]))] for start in starts])
            for name, dataset in datasets}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="fairseq-posattn-bench-collate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", type=int, default=25, help="mean words per sentence (+-5)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--batches", type=int, default=50, help="distinct batches to cycle through")
    p.add_argument("--seconds", type=float, default=1.0, help="per collater and round")
    p.add_argument("--rounds", type=int, default=7,
                   help="rounds, each timing fairseq's collater then ours (interleaved: the "
                        "ratio of a round is measured under one machine load)")
    p.add_argument("--max-pieces", type=int, default=None)
    p.add_argument("--rule", default="figure", choices=["figure", "text"])
    p.add_argument("--reads", type=tree_inputs_named, action="append", metavar="KEYS",
                   help="comma-separated net_input keys of the tree inputs one collater gives (src_depths, "
                        "src_structural_positions, src_tree_distances, src_parent_positions); repeat it to "
                        "time several side by side (default: src_depths,src_structural_positions)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    batches = []
    for _ in range(args.batches):
        sents = [random_sentence(rng, int(rng.integers(args.words - 5, args.words + 6)))
                 for _ in range(args.batch)]
        batches.append(([h for h, _ in sents], [w for _, w in sents]))
    pieces = np.mean([len(w) for _, ws in batches for w in ws])
    rate = sentences_per_second(
        lambda b: batch_piece_structure(b[0], b[1], args.rule, True, args.max_pieces),
        batches, args.batch, args.seconds)
    print("batch_piece_structure: %.0f sentences/s (%.1f pieces/sentence, batch %d, 1 thread)"
          % (rate, pieces, args.batch))
    reads = args.reads or [WANG_TREE_INPUTS]
    datasets = collaters(batches, reads)
    rates = {name: [] for name in datasets}
    for _ in range(args.rounds):
        for name, (dataset, items) in datasets.items():
            rates[name].append(sentences_per_second(dataset.collater, items, args.batch, args.seconds))
    for name, measured in rates.items():
        print("%s: %.0f sentences/s (median of %d rounds)" % (name, np.median(measured), args.rounds))
    labels = [_label(wanted) for wanted in reads]
    fairseq_rates, *struct_rates = rates.values()
    ratios = {label: per_repeat_ratios(r, fairseq_rates, digits=None) for label, r in zip(labels, struct_rates)}
    for k, (label, (dataset, items)) in enumerate(zip(labels, list(datasets.values())[1:])):
        print("translation_struct %s / fairseq: %s" % (label, _median_and_range(ratios[label])))
        if k:  # against the first --reads, round by round
            print("translation_struct %s / %s: %s" % (label, labels[0], _median_and_range(
                per_repeat_ratios(struct_rates[k], struct_rates[0], digits=None))))
        print(structure_bytes(dataset, items))
    return {"rates": rates, "ratios": ratios[labels[0]], "ratios_by_reads": ratios}


def _label(wanted: TreeInputs) -> str:
    return "(%s)" % ", ".join(wanted.keys())


def _median_and_range(ratios) -> str:
    return "%.2f (per round %.2f-%.2f)" % (np.median(ratios), min(ratios), max(ratios))


def structure_bytes(dataset, items) -> str:
    """Bytes per sentence of the tree tensors of the collated batches, and as int64."""
    stored = as_int64 = sentences = 0
    dtypes = set()
    for batch in map(dataset.collater, items):
        for key in dataset.wanted().keys():
            tensor = batch["net_input"][key]
            stored += tensor.numel() * tensor.element_size()
            as_int64 += tensor.numel() * 8
            dtypes.add(str(tensor.dtype))
        sentences += batch["nsentences"]
    dtypes = sorted(dtypes)
    return "structure in the batch: %.0f bytes/sentence (%s); as int64: %.0f bytes/sentence" % (
        stored / sentences, ", ".join(dtypes), as_int64 / sentences)


cli_main = console_script(main)


if __name__ == "__main__":
    cli_main()
