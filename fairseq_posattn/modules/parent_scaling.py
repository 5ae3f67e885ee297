"""PASCAL, parent-scaled self-attention (Bugliarello & Okazaki 2020, Sec. 3).

In the chosen heads, the scaled content logits ``S = q k^T / sqrt(d_h)`` of
query token ``i`` are multiplied, before the softmax, by the normal density
``N(j; p_i, sigma^2) = exp(-(j - p_i)^2 / (2 sigma^2)) / sqrt(2 pi sigma^2)``
over key positions ``j`` centred on ``p_i``, the position of token ``i``'s
dependency parent (:func:`~fairseq_posattn.structure.tree.piece_parent_positions`).
The authors' code (e-bug/pascal, ``MultiheadPascal``) scales the logits after
the ``1/sqrt(d_h)`` factor, uses this normalised density, and masks padding
afterwards; their WMT16 En->De setting scales 5 of the 8 heads of the first
encoder layer (the code scales the tail of its batch-times-heads axis, the
last heads when a batch holds one sentence; ``--pascal-heads N`` scales the
last N heads of every sentence).  It is a logit-scaling term of the layer
(:mod:`.attention`): a product cannot go into the additive mask of PyTorch's
fused attention, so a layer with this term computes its logits explicitly,
for the explicit path or the 2d convolution's Triton kernels.
"""

import math
from typing import Dict, Sequence

import torch
from torch import Tensor, nn

from .attention_context import AttentionContext


class ParentScaledLogits(nn.Module):
    """A logit-scaling term: ``(logits [B, H, T, T], context) -> logits`` with the
    chosen ``heads`` (0-based) scaled by ``N(j; p_i, sigma^2)``, the others unchanged;
    ``p_i`` are the context's ``"parents"`` token positions ``[B, T]``."""

    def __init__(self, num_heads: int, heads: Sequence[int], sigma: float = 1.0):
        super().__init__()
        heads = sorted(set(heads))
        if not heads or heads[0] < 0 or heads[-1] >= num_heads:
            raise ValueError(f"PASCAL's heads must be among the layer's {num_heads} heads (0-based), got {heads}")
        if not sigma > 0:
            raise ValueError(f"PASCAL's sigma must be positive, got {sigma}")
        self.num_heads = num_heads
        self.heads = heads
        self.sigma = sigma
        self._chosen: Dict[torch.device, Tensor] = {}

    def chosen(self, device: torch.device) -> Tensor:
        """``[1, H, 1, 1]`` bool: the scaled heads."""
        if device not in self._chosen:
            chosen = torch.zeros(self.num_heads, dtype=torch.bool, device=device)
            chosen[self.heads] = True
            self._chosen[device] = chosen.view(1, -1, 1, 1)
        return self._chosen[device]

    def density(self, parents: Tensor, length: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """``N(j; p_i, sigma^2)``, ``[B, 1, T, T]`` in ``dtype``."""
        keys = torch.arange(length, device=parents.device, dtype=dtype)
        offset = keys - parents.to(dtype).unsqueeze(-1)  # j - p_i, [B, T, T]
        variance = self.sigma**2
        return (torch.exp(-offset.square() / (2 * variance)) / math.sqrt(2 * math.pi * variance)).unsqueeze(1)

    def forward(self, logits: Tensor, context: AttentionContext) -> Tensor:
        scaled = logits * self.density(context.token_positions("parents"), logits.size(-1),
                                       torch.promote_types(logits.dtype, torch.float32))
        return torch.where(self.chosen(logits.device), scaled.to(logits.dtype), logits)
