"""The ON-LSTM (Shen et al. 2019) as Hao et al. (2019) use it, Eq. 3-9: the one
definition of the recurrence.  Forward only (autograd gives the backward), any
device and dtype.  The fast paths (:mod:`..kernels.onlstm_cpp`,
:mod:`..kernels.onlstm_triton`) compute the same with their own backward and
are tested against it.

Gate layout per direction (``G = 4*hidden + 2*hidden/chunk_size`` columns):
``[f, i, o, c_hat, master_f, master_i]``; master unit ``k`` covers the
neurons ``k*chunk_size .. (k+1)*chunk_size - 1``.  The matmuls run in the
input's dtype, the gates and the cell state in float32 or wider, and the
hidden state is cast back each step.
"""

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["cumax", "onlstm_cell", "onlstm_reference", "reversal_index"]


def cumax(x: Tensor, dim: int = -1) -> Tensor:
    """``cumsum(softmax(x))`` (Hao et al. Eq. 7), in float32 or wider, cast back."""
    y = torch.softmax(x.to(torch.promote_types(x.dtype, torch.float32)), dim=dim)
    return torch.cumsum(y, dim=dim).to(x.dtype)


def onlstm_cell(gates: Tensor, c_prev: Tensor, hidden: int, chunk_size: int) -> Tuple[Tensor, Tensor]:
    """One step: ``gates = W x_t + U h_{t-1} + b`` ``[B, G]`` and ``c_{t-1}``
    ``[B, hidden]`` (float32+) give ``(h_t, c_t)``."""
    n_chunk = hidden // chunk_size
    g = gates.to(c_prev.dtype)
    f, i, o, c_hat, master_f, master_i = g.split([hidden] * 4 + [n_chunk] * 2, dim=-1)
    f, i, o, c_hat = torch.sigmoid(f), torch.sigmoid(i), torch.sigmoid(o), torch.tanh(c_hat)
    mf = cumax(master_f).repeat_interleave(chunk_size, -1)      # Eq. 8: master forget gate
    mi = 1 - cumax(master_i).repeat_interleave(chunk_size, -1)  # Eq. 9: master input gate
    w = mf * mi                                                 # Eq. 3: their overlap
    f_hat = f * w + (mf - w)                                    # Eq. 4
    i_hat = i * w + (mi - w)                                    # Eq. 5
    c = f_hat * c_prev + i_hat * c_hat                          # Eq. 6
    h = o * torch.tanh(c)
    return h, c


def reversal_index(lengths: Tensor, max_len: int) -> Tensor:
    """``[T, B]`` index ``len_b - 1 - t`` for ``t < len_b``, else ``t``:
    gathering with it reverses each right-padded sentence within its own
    length and leaves the pads in place; it is its own inverse."""
    t = torch.arange(max_len, device=lengths.device).unsqueeze(1)
    lengths = lengths.to(t.dtype).unsqueeze(0)
    return torch.where(t < lengths, lengths - 1 - t, t)


def onlstm_reference(x: Tensor, lengths: Tensor, weight_ih: Tensor, weight_hh: Tensor,
                     bias: Tensor, chunk_size: int) -> Tensor:
    """The (bi)directional ON-LSTM over right-padded ``x [T, B, C]``:
    ``[T, B, D*hidden]``, zero at the pads.  ``weight_ih [D, C, G]``,
    ``weight_hh [D, hidden, G]``, ``bias [D, G]``; direction 1 reads each
    sentence backwards.  A pad comes after its sentence's tokens in both
    directions, so it never reaches them."""
    seq_len, batch, _ = x.shape
    hidden = weight_hh.size(1)
    state_dtype = torch.promote_types(x.dtype, torch.float32)
    backwards = reversal_index(lengths, seq_len).unsqueeze(-1)
    directions = []
    for d in range(weight_ih.size(0)):
        xd = x if d == 0 else x.gather(0, backwards.expand_as(x))
        projected = xd @ weight_ih[d] + bias[d]  # W x_t + b for every step at once
        h = x.new_zeros(batch, hidden)
        c = x.new_zeros(batch, hidden, dtype=state_dtype)
        states = []
        for t in range(seq_len):
            h, c = onlstm_cell(projected[t] + h @ weight_hh[d], c, hidden, chunk_size)
            h = h.to(x.dtype)
            states.append(h)
        out = torch.stack(states)
        directions.append(out if d == 0 else out.gather(0, backwards.expand_as(out)))
    pad = torch.arange(seq_len, device=x.device).unsqueeze(1) >= lengths.to(x.device).unsqueeze(0)
    return torch.cat(directions, -1).masked_fill(pad.unsqueeze(-1), 0.0)
