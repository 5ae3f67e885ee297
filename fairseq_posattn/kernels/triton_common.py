"""What the package's Triton kernels share: Triton itself (None where it is not
installed), their dtypes and smallest ``tl.dot`` tile, a padded key's logit,
and the attention dropout mask: Philox numbers of ``(sentence x head, query,
key)``, so that a backward regenerates the forward's mask from its seed.
"""

import os
from typing import Optional

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

__all__ = ["DTYPES", "MIN_DOT", "draw_seed", "interpreted", "padded", "triton", "unavailable"]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the kernels compute in
MIN_DOT = 16  # tl.dot wants every side of a tile at least this long


def interpreted() -> bool:
    """Triton's interpreter runs the kernels (on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


if triton is not None:
    PAD_LOGIT = tl.constexpr(torch.finfo(torch.float32).min)  # a padded key's logit, as on the explicit path

    @triton.jit
    def kept(seed, bh, rows, cols, T, dropout_p):
        """The dropout mask of a tile: Philox numbers of ``(b, h, i, j)`` against ``dropout_p``."""
        offsets = (bh * T + rows[:, None]).to(tl.int64) * T + cols[None, :]
        return tl.rand(seed, offsets) >= dropout_p


def padded(n: int) -> int:
    """``n`` rounded up to a power of two, at least :data:`MIN_DOT`."""
    return max(MIN_DOT, triton.next_power_of_2(n))


def draw_seed() -> int:
    """A Philox seed from torch's CPU generator (``torch.manual_seed`` and activation checkpointing replay it)."""
    return int(torch.randint(0, 2**31 - 1, ()))


def unavailable() -> Optional[str]:
    """Why the Triton kernels cannot run here, or None."""
    return "it needs the triton package (pip install triton)" if triton is None else None
