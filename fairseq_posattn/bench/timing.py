"""What every benchmark times with: a device barrier, and the timings
against a baseline's, repeat by repeat (the spread of these ratios is the
noise of the machine)."""

from typing import List, Optional, Sequence

import torch


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU), so that a timer read after it covers that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_repeat_ratios(times: Sequence[float], reference: Sequence[float], digits: Optional[int] = 3) -> List[float]:
    """Each repeat's ratio of ``times`` to ``reference``'s run in the same repeat (rounded to ``digits``; None: unrounded)."""
    return [a / b if digits is None else round(a / b, digits) for a, b in zip(times, reference)]


def ratio_range(times: Sequence[float], reference: Sequence[float]) -> List[float]:
    """Smallest and largest of :func:`per_repeat_ratios`."""
    ratios = per_repeat_ratios(times, reference)
    return [min(ratios), max(ratios)]
