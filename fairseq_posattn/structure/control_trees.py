"""Deliberately wrong dependency trees of the right shape, for control runs:
well-formed trees (one root, no cycle, projective) that depend only on the
sentence length, so that training on them separates the gain of structural
positions (Wang et al. 2019) from syntax from that of any tree-shaped signal.
"""

from typing import Callable, Dict, List

import numpy as np

from ..errors import fail


def left_neighbour_heads(n: int, rng: np.random.Generator = None) -> List[int]:
    """Heads (1-based, 0 = root) of the chain in which word i+1 hangs from word i:
    depth equals position, so the tree adds nothing that word order does not give."""
    _check_length(n)
    return list(range(n))


def random_projective_heads(n: int, rng: np.random.Generator) -> List[int]:
    """Heads (1-based, 0 = root) of a random projective tree over ``n`` words,
    drawn top-down: a span's head is drawn uniformly from the span, and the
    words on each side of it are cut at random gaps (probability 1/2 each)
    into sub-spans that become its subtrees, so a head may have several
    dependents on either side, as in real parses."""
    _check_length(n)
    uniform = _uniforms(rng, 2 * n)
    heads = [0] * n
    # spans [lo, hi) of 0-based words whose subtree hangs from `parent` (1-based; 0 = root)
    todo = [(0, n, 0)]
    while todo:
        lo, hi, parent = todo.pop()
        head = lo + int(uniform() * (hi - lo))
        heads[head] = parent
        for side_lo, side_hi in ((lo, head), (head + 1, hi)):
            start = side_lo
            for gap in range(side_lo + 1, side_hi):
                if uniform() < 0.5:
                    todo.append((start, gap, head + 1))
                    start = gap
            if start < side_hi:
                todo.append((start, side_hi, head + 1))
    return heads


def _uniforms(rng: np.random.Generator, block: int) -> Callable[[], float]:
    """Uniform draws from [0, 1), taken from ``rng`` ``block`` at a time (one
    numpy call per block instead of one per draw)."""
    pool: List[float] = []

    def draw() -> float:
        if not pool:
            pool.extend(reversed(rng.random(block).tolist()))
        return pool.pop()

    return draw


CONTROL_TREES: Dict[str, Callable[[int, np.random.Generator], List[int]]] = {
    "left-neighbour": left_neighbour_heads,
    "random-projective": random_projective_heads,
}


def _check_length(n: int) -> None:
    if n < 1:
        raise fail("the sentence has no words", "a tree needs at least one word")
