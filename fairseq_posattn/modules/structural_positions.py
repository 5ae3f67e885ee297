"""Absolute structural position embeddings (Wang et al. 2019, Sec. 3.1-3.2).

``ABSPE(abs_stru)``, Eq. 5: the sinusoid of the word's depth in the
dependency tree (root = 0, pieces share their word's depth, EOS = max depth
+ 1), the same sinusoid as fairseq's sequential one at that position.
Eq. 7 fuses it with the sequential embedding by a learned nonlinear function
``f_abs``, which the paper leaves unspecified; here
``f_abs(s, t) = tanh(W [s; t] + b)`` (output in [-1, 1] like the
sinusoids), or by parameter-free addition (the paper's footnote 1).
"""

import torch
from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding
from torch import Tensor, nn


class DepthEmbedding(nn.Module):
    """``ABSPE(depth)``: the sequential sinusoid evaluated at the depth."""

    def __init__(self, embed_dim: int, max_depth: int, padding_idx: int):
        super().__init__()
        # fairseq numbers sequential positions from padding_idx + 1; depth 0
        # takes the first position's sinusoid
        table = SinusoidalPositionalEmbedding.get_embedding(
            max_depth + padding_idx + 2, embed_dim, padding_idx
        )[padding_idx + 1 :]
        self.register_buffer("table", table, persistent=False)

    def forward(self, depths: Tensor) -> Tensor:
        """``depths``: ``[B, T]`` integers (any integer type) -> ``[B, T, C]``;
        deeper than the table clamps."""
        return self.table[depths.long().clamp(0, self.table.size(0) - 1)]


class PositionFusion(nn.Module):
    """``f_abs`` of Eq. 7: ``tanh(W [sequential; structural] + b)``."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.proj = nn.Linear(2 * embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, sequential: Tensor, structural: Tensor) -> Tensor:
        return torch.tanh(self.proj(torch.cat([sequential, structural.type_as(sequential)], -1)))
