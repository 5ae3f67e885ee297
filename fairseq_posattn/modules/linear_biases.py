"""Linear distance biases on the attention logits, without parameters.

* ALiBi (Press, Smith & Lewis 2022, Sec. 3): ``-m_h |i - j|`` on the logits
  of head ``h``, symmetric as an encoder needs (the paper's decoder sees only
  ``j <= i``); the slopes ``m_h`` by :func:`alibi_slopes`.
* The dependency-distance bias (this project's; DASA, Chi et al. 2026, adds a
  normalised dependency-distance matrix, the closest published idea):
  ``-m_h dist(i, j)`` with ``dist`` the number of arcs between the two
  tokens' words in the dependency tree (pieces of one word: 0;
  :func:`~fairseq_posattn.structure.tree.piece_tree_distances`), ALiBi's slopes.

One class serves both: the distance is read from the
:class:`~.attention_context.AttentionContext` by name (``"sequential"``: ``j - i``,
``"tree_distance"``: the batch's tree distances).
"""

import math
from typing import Dict, List

import torch
from torch import Tensor, nn

from .attention_context import AttentionContext

DISTANCES = ("sequential", "tree_distance")


def alibi_slopes(num_heads: int) -> List[float]:
    """Press et al. (2022), Sec. 3: for ``H`` a power of two, the geometric
    sequence ``m_h = 2^(-8h/H)``, ``h = 1..H``; otherwise the slopes of the
    largest power of two ``n < H`` followed by the first ``H - n`` of every
    other slope of ``2n`` heads (``2^(-8h/2n)`` for odd ``h``), the rule of
    the authors' code (ofirpress/attention_with_linear_biases)."""
    if num_heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got {num_heads}")
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * h / power) for h in range(1, power + 1)]
    if power == num_heads:
        return slopes
    return slopes + alibi_slopes(2 * power)[0::2][:num_heads - power]


class LinearDistanceBias(nn.Module):
    """The score term ``-m_h |distance(i, j)|``, ``[B or 1, H, T, T]`` in float32."""

    reads_query = False  # and no parameter: no gradient reaches it (kernel_choice.gradient_through_scores)

    def __init__(self, num_heads: int, distance: str = "sequential"):
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
        self.distance = distance
        self.slope_values = alibi_slopes(num_heads)
        self._slopes: Dict[torch.device, Tensor] = {}  # not a buffer: --fp16 would round it

    def slopes(self, device: torch.device) -> Tensor:
        """``m_h`` as a float32 ``[H, 1, 1]`` tensor on ``device``."""
        if device not in self._slopes:
            self._slopes[device] = torch.tensor(self.slope_values, device=device).view(-1, 1, 1)
        return self._slopes[device]

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext) -> Tensor:
        distance = context.relative_positions(self.distance).abs().unsqueeze(1)  # [B or 1, 1, T, T]
        return self.slopes(distance.device) * -distance.to(torch.float32)
