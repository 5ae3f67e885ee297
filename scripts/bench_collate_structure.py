"""Throughput of the collater's structure step, ``batch_piece_structure``.

    python scripts/bench_collate_structure.py                 # T~30 pieces, B=100, 1 thread
    python scripts/bench_collate_structure.py --words 50 --batch 64 --max-pieces 48

Random dependency trees (random recursive trees, a few forests) of about
``--words`` words, 1-3 pieces per word (1.25 on average), EOS appended, as
the ``translation_struct`` collater calls it.  Prints sentences per second on
one thread (``torch.set_num_threads(1)``).
"""

import argparse
import time

import numpy as np
import torch

from fairseq_posattn.structure import batch_piece_structure


def random_sentence(rng: np.random.Generator, n: int):
    order = rng.permutation(n)
    heads = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        if rng.random() > 0.02:  # else: a second root (forest)
            heads[order[i]] = order[rng.integers(i)] + 1
    pieces = rng.choice([1, 2, 3], size=n, p=[0.8, 0.15, 0.05])
    return heads, np.repeat(np.arange(n), pieces)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", type=int, default=25, help="mean words per sentence (+-5)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--batches", type=int, default=50, help="distinct batches to cycle through")
    p.add_argument("--seconds", type=float, default=3.0)
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
    for heads, words in batches[:3]:  # warm-up
        batch_piece_structure(heads, words, args.rule, True, args.max_pieces)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        heads, words = batches[done % len(batches)]
        batch_piece_structure(heads, words, args.rule, True, args.max_pieces)
        done += 1
    elapsed = time.perf_counter() - start
    print("batch_piece_structure: %.0f sentences/s (%.1f pieces/sentence, batch %d, "
          "1 thread, %.2f ms/batch)" % (done * args.batch / elapsed, pieces, args.batch,
                                        1000 * elapsed / done))


if __name__ == "__main__":
    main()
