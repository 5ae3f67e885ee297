"""Direct position interactions (Dufter, Schmitt & Schütze 2020, Sec. 2.3).

Two score terms that add a learned scalar per (head, query position, key
position) to the attention logits in place of the position-position part of
PE[add]:

* ``P``: ``A^p`` (t x t per head), absolute positions;
* ``R``: ``A^r_ij = a^r_{i-j+t}`` per head, directional relative positions
  (the authors' code builds a symmetric circulant matrix; this follows the
  paper, so ``A^r_ij`` and ``A^r_ji`` are separate parameters).

Both are initialised Glorot-normal, as in the authors' code.  Positions are
true token positions: the encoder right-pads the batch before the layers.
"""

import math

import torch
from torch import Tensor, nn

from .attention_context import AttentionContext, check_length, table_rows


class AbsolutePositionInteraction(nn.Module):
    """``A^p``: a learned ``t x t`` logit bias per head (Sec. 2.3)."""

    reads_query = False  # a score term's declaration (kernel_choice.gradient_through_scores)

    def __init__(self, num_heads: int, max_len: int, overflow: str = "error"):
        super().__init__()
        self.max_len = max_len
        self.overflow = overflow
        self.weight = nn.Parameter(torch.empty(num_heads, max_len, max_len))
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / (2 * max_len)))

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext):
        length = context.length
        check_length(length, self.max_len, self.overflow)
        if length <= self.max_len:
            return self.weight[:, :length, :length].unsqueeze(0)
        rows = table_rows(length, self.max_len, self.weight.device)
        return self.weight[:, rows][:, :, rows].unsqueeze(0)


class RelativePositionInteraction(nn.Module):
    """``A^r_ij = a^r_{i-j+t}``: one learned logit bias per head and signed distance (Sec. 2.3).

    ``a^r`` has ``2t - 1`` entries, one per distance ``i - j`` in
    ``[-(t-1), t-1]`` (the paper's ``2t``-vector has one entry that no pair
    of positions reaches).  With ``overflow="clamp"`` longer distances share
    the outermost entries.
    """

    reads_query = False

    def __init__(self, num_heads: int, max_len: int, overflow: str = "error"):
        super().__init__()
        self.max_len = max_len
        self.overflow = overflow
        self.weight = nn.Parameter(torch.empty(num_heads, 2 * max_len - 1))
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / (2 * (2 * max_len - 1))))

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext):
        check_length(context.length, self.max_len, self.overflow)
        distance = -context.relative_positions("sequential")  # i - j, [1, T, T]
        reach = self.max_len - 1
        index = distance.clamp(-reach, reach) + reach
        return self.weight[:, index[0]].unsqueeze(0)
