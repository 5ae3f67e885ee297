"""Throughput of the ``translation_struct`` collater and of its structure step.

    fairseq-posattn-bench-collate                 # T~30 pieces, B=100, 1 thread, 7 rounds
    fairseq-posattn-bench-collate --words 50 --batch 64 --max-pieces 48

On random projective trees of about ``--words`` words (1-3 pieces a word), one
thread: sentences per second of ``batch_piece_structure`` alone, and of
fairseq's ``LanguagePairDataset`` collater against the whole
``TreeLanguagePairDataset`` one, interleaved in ``--rounds`` rounds (the
ratio's median and range over rounds); and the bytes per sentence of the
batch's structure tensors against int64's.
"""

import argparse
import time

import numpy as np
import torch

from ..structure import batch_piece_structure, encode_piece_tree
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


def collaters(batches, vocab_size=1000):
    """fairseq's dataset and ours over the same sentences (random tokens), each with its batches' items."""
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
    trees = TreeLanguagePairDataset(pairs, [encode_piece_tree(h, w) for h, w in zip(heads, words)])
    starts = range(0, len(tokens), len(batches[0][0]))
    return {name: (dataset, [[dataset[i] for i in range(start, start + len(batches[0][0]))] for start in starts])
            for name, dataset in (("fairseq LanguagePairDataset.collater", pairs),
                                  ("TreeLanguagePairDataset.collater", trees))}


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
    datasets = collaters(batches)
    rates = {name: [] for name in datasets}
    for _ in range(args.rounds):
        for name, (dataset, items) in datasets.items():
            rates[name].append(sentences_per_second(dataset.collater, items, args.batch, args.seconds))
    for name, measured in rates.items():
        print("%s: %.0f sentences/s (median of %d rounds)" % (name, np.median(measured), args.rounds))
    fairseq_rates, struct_rates = rates.values()
    ratios = per_repeat_ratios(struct_rates, fairseq_rates, digits=None)
    print("translation_struct / fairseq: %.2f (per round %.2f-%.2f)"
          % (np.median(ratios), min(ratios), max(ratios)))
    dataset, items = datasets["TreeLanguagePairDataset.collater"]
    print(structure_bytes(dataset, items))
    return {"rates": rates, "ratios": ratios}


def structure_bytes(dataset, items) -> str:
    """Bytes per sentence of the structure tensors of the collated batches, and as int64."""
    stored = as_int64 = sentences = 0
    dtypes = set()
    for batch in map(dataset.collater, items):
        for key in ("src_depths", "src_structural_positions"):
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
