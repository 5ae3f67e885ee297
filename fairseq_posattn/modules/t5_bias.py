"""T5's relative attention bias (Raffel et al. 2020, Sec. 2.1).

A learned scalar per head and bucket of the relative position ``j - i`` is
added to the logits.  The buckets are bidirectional as in T5's reference
definition (mesh-tensorflow's ``_relative_position_bucket``): half of them
per direction, the first half of those exact distances, the rest
logarithmically wider up to ``max_distance``, beyond which the last bucket
of the direction holds.  T5 shares one table between all layers: pass one
:class:`T5RelativeBias` to every layer (PyTorch's ``parameters()`` yields it
once, so the optimiser and the parameter count see it once; fairseq's
state dict holds it under every layer's name, all equal, and loads it so).
Here the bias is added to logits already scaled by ``1/sqrt(d_h)`` (T5 folds
that scale into its initialisation).
"""

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from .attention_context import AttentionContext


def relative_position_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bidirectional bucket (int64) of each ``relative_position`` (key minus query).

    With ``h = num_buckets // 2`` buckets per direction, keys after the query take buckets
    ``h ..``, the others (the query itself too) ``0 ..``; within a direction, a distance
    ``n < e = h // 2`` is bucket ``n`` and a larger one
    ``e + floor(log(n / e) / log(max_distance / e) * (h - e))``, at most ``h - 1``, computed
    in float32 as the reference does.
    """
    check_buckets(num_buckets, max_distance)
    half = num_buckets // 2
    max_exact = half // 2
    after = (relative_position > 0).long() * half
    n = relative_position.abs().long()
    log_ratio = torch.log(n.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (half - max_exact)).long()).clamp(max=half - 1)
    return after + torch.where(n < max_exact, n, large)


def check_buckets(num_buckets: int, max_distance: int) -> None:
    """Refuse bucket settings T5's definition cannot serve."""
    if num_buckets < 4 or num_buckets % 2:
        raise ValueError(f"--t5-bias-buckets must be even and at least 4 (one exact and one logarithmic "
                         f"bucket per direction), got {num_buckets}")
    if max_distance <= num_buckets // 4:
        raise ValueError(f"--t5-bias-max-distance ({max_distance}) must exceed the exact distances, "
                         f"--t5-bias-buckets // 4 = {num_buckets // 4}")


class T5RelativeBias(nn.Module):
    """The score term ``b_h[bucket(j - i)]`` (Sec. 2.1), ``[1, H, T, T]``, from a learned
    ``[num_buckets, H]`` table initialised ``N(0, embed_dim^-1)`` (as Hugging Face's T5)."""

    reads_query = False  # a score term's declaration (kernel_choice.gradient_through_scores)

    def __init__(self, embed_dim: int, num_heads: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        check_buckets(num_buckets, max_distance)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads))
        nn.init.normal_(self.weight, std=embed_dim**-0.5)
        self._buckets: Optional[Tuple[tuple, Tensor]] = None  # every layer of a forward pass asks for the same

    def buckets(self, context: AttentionContext) -> Tensor:
        """``[T, T]`` buckets of the sequential positions, kept for the last length and device."""
        key = (context.length, context.device)
        if self._buckets is None or self._buckets[0] != key:
            relative = context.relative_positions("sequential")[0]  # j - i
            self._buckets = (key, relative_position_bucket(relative, self.num_buckets, self.max_distance))
        return self._buckets[1]

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext) -> Tensor:
        return self.weight[self.buckets(context)].permute(2, 0, 1).unsqueeze(0)
