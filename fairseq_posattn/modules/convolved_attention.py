"""Convolved attention (Dufter, Schmitt & Schütze 2020, Sec. 2.5, Fig. 1).

``A' = ReLU(conv(softmax(A)))``, then ``A' V``; the result is not
renormalised.  Details the paper leaves open follow the authors' code:
"same" zero padding, a ReLU after the convolution, Glorot-uniform weights and
zero biases.  Rows and columns of padded tokens are zeroed before the
convolution and padded key columns after it, so padding never leaks into real
tokens.  Both run in float32 whatever the model's precision.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention_context import AttentionContext, check_length, table_rows
from .precision import at_least_float32


def _zero_padding(probs: Tensor, key_padding_mask, rows: bool) -> Tensor:
    if key_padding_mask is None:
        return probs
    pads = key_padding_mask[:, None, None, :]
    if rows:
        pads = pads | key_padding_mask[:, None, :, None]
    return probs.masked_fill(pads, 0.0)


class ConvolvedAttention1d(nn.Module):
    """Width-3 convolution along the query axis, one per head (Fig. 1, top).

    The ``t`` key positions are the input channels and ``t`` filters the
    output channels: ``3 t^2 + t`` parameters per head.  Channels are true
    key positions (the encoder right-pads the batch).
    """

    def __init__(self, num_heads: int, max_len: int, overflow: str = "error"):
        super().__init__()
        self.max_len = max_len
        self.overflow = overflow
        # weight[h, offset, key_in, key_out]
        self.weight = nn.Parameter(torch.empty(num_heads, 3, max_len, max_len))
        self.bias = nn.Parameter(torch.zeros(num_heads, max_len))
        bound = math.sqrt(6.0 / (3 * max_len + 3 * max_len))
        nn.init.uniform_(self.weight, -bound, bound)

    def filters(self, length: int):
        """The filters ``[H, 3, T, T]`` and biases ``[H, T]`` of a ``T``-token
        batch (past the table, the last row and column stand in)."""
        check_length(length, self.max_len, self.overflow)
        if length <= self.max_len:
            return self.weight[:, :, :length, :length], self.bias[:, :length]
        rows = table_rows(length, self.max_len, self.weight.device)
        return self.weight[:, :, rows][:, :, :, rows], self.bias[:, rows]

    def forward(self, probs: Tensor, key_padding_mask, context: AttentionContext):
        length = context.length
        weight, bias = self.filters(length)
        heads = weight.size(0)
        with torch.autocast(probs.device.type, enabled=False):
            probs = _zero_padding(at_least_float32(probs), key_padding_mask, rows=True)
            batch = probs.size(0)
            if batch == 0:  # no window to unfold
                return probs
            # per head, the batch's maps one under the other, each between two
            # zero rows (query rows -1 and T): query t's window, its rows t-1,
            # t, t+1 side by side, is then 3T consecutive values, and all
            # windows are one view (backward keeps the maps once, not a
            # [B, H, T, 3T] copy) multiplying the head's kernel (not a copy of
            # it per sentence)
            stacked = F.pad(probs.transpose(0, 1), (0, 0, 1, 1))  # [H, B, T + 2, T]
            windows = stacked.reshape(heads, -1).unfold(-1, 3 * length, length)
            kernel = weight.to(probs.dtype).reshape(heads, 3 * length, length)
            out = torch.matmul(windows, kernel) + bias.to(probs.dtype)[:, None, :]
            # the windows across two sentences (the last two rows of each) dropped
            out = F.pad(out, (0, 0, 0, 2)).view(heads, batch, length + 2, length)[:, :, :length]
            out = F.relu(out.transpose(0, 1).contiguous())
        return _zero_padding(out, key_padding_mask, rows=False)


class ConvolvedAttention2d(nn.Module):
    """One 3x3 filter (+ bias) per head over the ``T x T`` map (Fig. 1, bottom): 10 parameters per head."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_heads, 1, 3, 3))
        self.bias = nn.Parameter(torch.zeros(num_heads))
        bound = math.sqrt(6.0 / (9 + 9))
        nn.init.uniform_(self.weight, -bound, bound)

    def filters(self, length: int):
        """The filters ``[H, 1, 3, 3]`` and biases ``[H]``, whatever the length."""
        return self.weight, self.bias

    def forward(self, probs: Tensor, key_padding_mask, context: AttentionContext):
        with torch.autocast(probs.device.type, enabled=False):
            probs = _zero_padding(at_least_float32(probs), key_padding_mask, rows=True)
            out = F.conv2d(
                probs,
                self.weight.to(probs.dtype),
                self.bias.to(probs.dtype),
                padding=1,
                groups=self.weight.size(0),
            )
            out = F.relu(out)
        return _zero_padding(out, key_padding_mask, rows=False)
