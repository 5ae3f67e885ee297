"""Timings against a baseline's, repeat by repeat: the spread of these
ratios is the noise of the machine."""

from typing import List, Sequence


def per_repeat_ratios(times: Sequence[float], reference: Sequence[float]) -> List[float]:
    """Each repeat's ratio of ``times`` to ``reference``'s run in the same repeat (3 decimals)."""
    return [round(a / b, 3) for a, b in zip(times, reference)]


def ratio_range(times: Sequence[float], reference: Sequence[float]) -> List[float]:
    """Smallest and largest of :func:`per_repeat_ratios`."""
    ratios = per_repeat_ratios(times, reference)
    return [min(ratios), max(ratios)]
