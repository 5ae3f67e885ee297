"""Rotary position embeddings (Su et al. 2021, RoFormer, Sec. 3.4, Eq. 34).

The query and the key of position ``m`` are rotated pairwise by the angles
``m theta_i``, ``theta_i = base^(-2(i-1)/d_h)``, ``i = 1..d_h/2`` (Eq. 15), so
that ``q_m . k_n`` depends on the positions only through ``m - n`` (Eq. 16);
values are not rotated.  The pairs are the two halves of a head, dimension
``i`` with ``i + d_h/2`` (GPT-NeoX's layout), not the adjacent dimensions
``2i, 2i+1`` of Eq. 34: the two compute the same function up to a fixed
permutation of the projections' output units, and halves need no strided
copies.  Positions are the columns: the encoder right-pads, so column ``m``
is token position ``m`` (:mod:`.attention_context`).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor, nn


class RotaryPositions(nn.Module):
    """Rotates ``[B, H, T, d_h]`` queries and keys by their positions (Eq. 34).

    Args:
        head_dim: ``d_h``, even.
        base: the ``10000`` of ``theta_i`` (Eq. 15).
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"--rotary-positions rotates pairs of dimensions, but a head has {head_dim} "
                             f"(--encoder-embed-dim / --encoder-attention-heads): choose an even head dimension")
        if base <= 1:
            raise ValueError(f"the rotary base must be above 1, got {base}")
        self.head_dim = head_dim
        self.base = base
        self._cached: Optional[Tuple[tuple, Tensor, Tensor]] = None  # (length, device, dtype), cos, sin

    def cos_sin(self, length: int, device: torch.device, dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
        """``cos(m theta)`` and ``sin(m theta)``, ``[T, d_h]`` (each angle twice, once per half), computed in
        float32 (float64 for float64 inputs) and kept for the last length, device and dtype (every layer of a
        forward pass asks for the same)."""
        key = (length, device, dtype)
        if self._cached is None or self._cached[0] != key:
            precision = torch.promote_types(dtype, torch.float32)
            exponents = torch.arange(0, self.head_dim, 2, device=device, dtype=precision) / self.head_dim
            theta = self.base ** -exponents  # theta_i = base^(-2(i-1)/d_h)
            angles = torch.outer(torch.arange(length, device=device, dtype=precision), theta).repeat(1, 2)
            self._cached = (key, angles.cos().to(dtype), angles.sin().to(dtype))
        return self._cached[1], self._cached[2]

    def forward(self, query: Tensor, key: Tensor) -> Tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(query.size(-2), query.device, query.dtype)
        return rotate(query, cos, sin), rotate(key, cos, sin)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` rotated pairwise (halves paired): ``(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)``."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin
