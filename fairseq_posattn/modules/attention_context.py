"""What every attention term may need besides the hidden states.

The encoder builds one :class:`AttentionContext` per forward pass and hands it
to every layer.  Inside the encoder the batch is *right-padded* (see
:func:`right_padding_order`): column ``j`` of a sentence is its true token
position ``j``, so position tables (Dufter's P, R, conv1d channels) are plain
slices and never shifted by fairseq's left padding.
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor


def right_padding_order(padding_mask: Optional[Tensor]) -> Optional[Tensor]:
    """Column order that moves every sentence's tokens to the left end.

    Returns a ``[B, T]`` index for ``gather`` along the time axis, or ``None``
    when no pad column precedes a real token (no padding, or right padding).
    The order is stable, so tokens keep their order and pads their relative
    order.
    """
    if padding_mask is None:
        return None
    pads = padding_mask.to(torch.int8)
    if not bool((pads[:, 1:] < pads[:, :-1]).any()):
        return None
    return torch.sort(pads, dim=1, stable=True).indices


def gather_time(x: Tensor, order: Tensor, time_dim: int) -> Tensor:
    """Reorder ``x`` along ``time_dim`` by a per-sentence ``order`` of shape [B, T].

    ``x``'s batch axis is 0, or 1 when ``time_dim`` is 0 (fairseq's T x B x C).
    """
    shape = [1] * x.dim()
    if time_dim == 0:
        shape[0], shape[1] = order.size(1), order.size(0)
        index = order.t().reshape(shape)
    else:
        shape[0], shape[time_dim] = order.shape
        index = order.reshape(shape)
    return x.gather(time_dim, index.expand_as(x))


class AttentionContext:
    """Where the tokens of a batch are, for the attention terms.

    Args:
        length: T, the (right-padded) sequence length.
        device: where derived position tensors are built.
        relative_positions: named ``[B or 1, T, T]`` integer tensors (any
            integer type: the batches carry the smallest) of key-minus-query
            positions; ``"sequential"`` is derived on demand.
        token_positions: named ``[B, T]`` per-token positions (e.g. PASCAL's
            ``"parents"``), in the right-padded layout.
    """

    def __init__(self, length: int, device: torch.device, relative_positions: Optional[Dict[str, Tensor]] = None,
                 token_positions: Optional[Dict[str, Tensor]] = None):
        self.length = length
        self.device = device
        self._relative_positions = dict(relative_positions or {})
        self._token_positions = dict(token_positions or {})
        self._buckets: Dict[Tuple[str, int, torch.dtype], Tensor] = {}

    def relative_positions(self, name: str) -> Tensor:
        if name not in self._relative_positions:
            if name != "sequential":
                raise KeyError(f"no '{name}' relative positions in this batch; the task must "
                               f"provide them (available: {sorted(self._relative_positions)})")
            steps = torch.arange(self.length, device=self.device)
            self._relative_positions[name] = (steps[None, :] - steps[:, None]).unsqueeze(0)  # j - i
        return self._relative_positions[name]

    def token_positions(self, name: str) -> Tensor:
        if name not in self._token_positions:
            raise KeyError(f"no '{name}' token positions in this batch; the task must provide them "
                           f"(available: {sorted(self._token_positions)})")
        return self._token_positions[name]

    def buckets(self, name: str, clip: int, dtype: torch.dtype = torch.long) -> Tensor:
        """Rows ``0..2*clip`` of a relative-position table for the named
        positions clipped to ``-clip..clip`` (int64, as ``gather`` wants; the
        Triton kernel of :mod:`..kernels.shaw_flash` reads a smaller ``dtype``);
        made once per forward pass, for every layer and term with that clip."""
        key = (name, clip, dtype)
        if key not in self._buckets:
            if dtype == torch.long:
                positions = self.relative_positions(name)
                self._buckets[key] = positions.long().clamp(-clip, clip) + clip
            else:
                self._buckets[key] = self.buckets(name, clip).to(dtype)
        return self._buckets[key]


def reachable_distance(context: "AttentionContext", name: str, clip: int) -> int:
    """Largest ``|relative position|`` a table clipped at ``clip`` must serve.

    Sequential distances never exceed ``T - 1``, so a short batch needs only
    the middle rows of a wide table; other positions may reach ``clip``.
    """
    if name == "sequential":
        return min(clip, context.length - 1)
    return clip


def check_length(length: int, max_len: int, overflow: str) -> None:
    """Refuse a sequence longer than a position table unless ``overflow="clamp"``."""
    if length > max_len and overflow != "clamp":
        raise ValueError(
            f"input of {length} tokens is longer than the position table (--interaction-max-len {max_len}); "
            f"raise --interaction-max-len, lower --max-source-positions to {max_len}, or pass "
            f"--interaction-overflow clamp"
        )


def table_rows(length: int, max_len: int, device: torch.device) -> Tensor:
    """Rows ``0..T-1`` of a ``max_len``-row table, positions past the end on the last row."""
    return torch.arange(length, device=device).clamp_(max=max_len - 1)
