"""Positions relative to the subject and the object of a relation, and the
position-aware attention layer that reads them.

* Zhang et al. (2017), as Bilan & Roth (2018) Sec. 2.3 restate it: token
  ``i`` of a sentence with an entity at ``[start, end]`` gets ``i - start``
  before the entity, 0 inside it, ``i - end`` after it.
* Bilan & Roth (2018) Sec. 3.2 bin them: ``bin(d) = sign(d) * ceil(log2(|d| + 1))``,
  the formula of the authors' code (the paper's worked example disagrees
  past ``|d| = 2``: docs/evaluations.md).
* The attention of Zhang et al. (2017) over encoder states ``h_i`` with a
  summary ``q`` (Bilan & Roth Eq. 3-5)::

      u_i = v^T tanh(W_h h_i + W_q q + W_s p^s_i + W_o p^o_i)
      a   = softmax(u)            z = sum_i a_i h_i
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...modules.precision import at_least_float32


def entity_distances(start: int, end: int, length: int) -> np.ndarray:
    """Zhang et al.'s relative positions of ``length`` tokens to the entity ``[start, end]``."""
    steps = np.arange(length)
    return np.where(steps < start, steps - start, np.where(steps > end, steps - end, 0))


def bin_distances(distances: Tensor) -> Tensor:
    """``sign(d) * ceil(log2(|d| + 1))`` of integer distances, exactly.

    ``frexp`` gives ``|d| = m * 2**e`` with ``0.5 <= m < 1``, so ``e`` is the
    bit length of ``|d|`` (0 for 0); exact for ``|d| < 2**24``.
    """
    exponent = torch.frexp(distances.abs().float()).exponent
    return distances.sign() * exponent.to(distances.dtype)


def distance_radius(max_length: int, binned: bool) -> int:
    """The largest ``|distance|`` (or bin) a sentence of ``max_length`` tokens has."""
    return int(max_length).bit_length() if binned else max_length


class PositionAwareAttention(nn.Module):
    """Zhang et al. (2017) attention over the encoder states (Bilan & Roth Eq. 3-5).

    ``W_h`` carries the one bias; ``v`` starts at zero, so training starts
    from uniform attention (as in Zhang et al.'s implementation).
    """

    def __init__(self, state_dim: int, query_dim: int, position_dim: int, attention_dim: int):
        super().__init__()
        self.state_proj = nn.Linear(state_dim, attention_dim)  # W_h
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W_q
        self.position_proj = nn.Linear(2 * position_dim, attention_dim, bias=False)  # [W_s W_o]
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v
        nn.init.zeros_(self.score.weight)

    def forward(self, states: Tensor, padding_mask: Tensor, query: Tensor,
                subject_positions: Tensor, object_positions: Tensor):
        """
        Args:
            states: ``[B, T, C]``; padding_mask: ``[B, T]``, True at pads;
            query: ``[B, Q]``; subject/object_positions: ``[B, T, P]`` embeddings.

        Returns ``z`` ``[B, C]`` and the attention ``a`` ``[B, T]``.
        """
        hidden = (self.state_proj(states) + self.query_proj(query).unsqueeze(1)
                  + self.position_proj(torch.cat([subject_positions, object_positions], dim=-1)))
        scores = at_least_float32(self.score(torch.tanh(hidden)).squeeze(-1))
        scores = scores.masked_fill(padding_mask, torch.finfo(scores.dtype).min)
        weights = F.softmax(scores, dim=-1).to(states.dtype)
        return torch.bmm(weights.unsqueeze(1), states).squeeze(1), weights
