"""Recurrent encoder layers of the ON-LSTM + SAN hybrid (Hao et al. 2019):
:class:`RecurrentLayer` is a (bi)directional ON-LSTM (Shen et al. 2019;
:class:`ONLSTM`, whose recurrence :mod:`.onlstm_reference` defines) or LSTM over
``d``-dimensional inputs, projected back to ``d``:
``out = dropout(proj(concat(forward, backward))) + x``, zero at the pads.
There is no layer norm: the parameter counts of Hao et al.'s Table 1 leave
no room for one (docs/hybrids.md).
"""

import math
from typing import List, Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..kernels import onednn
from ..kernels.manual import RECURRENCE
from ..kernels.onlstm_packed import PackedRecurrence, direction_weight_grads
from .kernel_choice import PACKED, check, recurrent_kernel
from .onlstm_reference import onlstm_reference, reversal_index

__all__ = ["ONLSTM", "RecurrentLayer"]


class _FastONLSTM(torch.autograd.Function):
    """A fast path (:class:`..kernels.onlstm_packed.PackedRecurrence`) over
    packed inputs with its hand-written backward.  Owning the input
    projection lets the forward write the gates over it and the backward
    write the gate gradients over those: one ``[D, N, G]`` buffer for the
    layer (one ``[N, G]`` per direction on the C++ cell).  Further values the
    forward returns (a candidate's hold on its buffers) stay with the
    context and reach the backward."""

    @staticmethod
    def forward(ctx, xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
                hidden: int, chunk_size: int, save: bool, fast: PackedRecurrence) -> Tensor:
        # ``save`` comes from the caller: grad mode is always off in here
        hs, acts, cells, *held = fast.forward(xs, w_ih, bias, w_hh, batch_sizes, hidden, chunk_size, save)
        if save:
            ctx.held = held
            ctx.per_direction = isinstance(acts, list)
            ctx.save_for_backward(xs, w_ih, w_hh, hs, cells, *(acts if ctx.per_direction else [acts]))
            ctx.batch_sizes, ctx.hidden, ctx.chunk_size, ctx.fast = batch_sizes, hidden, chunk_size, fast
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs: Tensor):
        xs, w_ih, w_hh, hs, cells, *acts = ctx.saved_tensors
        acts = acts if ctx.per_direction else acts[0]
        grad_xg, grad_w_hh = ctx.fast.backward(
            grad_hs.contiguous(), w_hh, hs, acts, cells, ctx.batch_sizes, ctx.hidden, ctx.chunk_size, *ctx.held)
        # grad_xg: one [N, G] per direction (or a [D, N, G] tensor, the same per direction)
        grad_xs = grad_w_ih = grad_bias = None
        if ctx.needs_input_grad[0]:
            w_t = w_ih.transpose(1, 2)
            grad_xs = torch.stack(onednn.direction_matmuls(grad_xg, w_t, onednn.layouts(w_t, xs.size(1))))
        if ctx.needs_input_grad[1]:
            grad_w_ih = direction_weight_grads(xs, grad_xg, w_ih)
        if ctx.needs_input_grad[2]:
            grad_bias = torch.stack([g.sum(0, keepdim=True) for g in grad_xg])
        return grad_xs, grad_w_ih, grad_bias, grad_w_hh, None, None, None, None, None


class ONLSTM(nn.Module):
    """(Bi)directional single-layer ON-LSTM over right-padded ``[T, B, C]`` input.

    Parameters (``D`` directions, ``G = 4*hidden + 2*hidden/chunk_size`` gate
    units each, laid out as :mod:`.onlstm_reference` says): ``weight_ih [D, C, G]``,
    ``weight_hh [D, hidden, G]`` (input-major: ``gates = x @ weight_ih[d] +
    h @ weight_hh[d] + bias_ih[d] + bias_hh[d]``), ``bias_ih [D, G]``,
    ``bias_hh [D, G]``, all uniform(-1/sqrt(hidden), 1/sqrt(hidden)) as in
    ``nn.LSTM``.  Direction 0 is forward, 1 backward.  ``kernel`` is an
    option of ``--encoder-recurrent-kernel`` (:data:`..kernels.manual.OPTIONS`),
    the kernel chosen per input by :func:`.kernel_choice.recurrent_kernel`.
    """

    def __init__(self, input_dim: int, hidden_dim: int, bidirectional: bool = True, chunk_size: int = 1,
                 kernel: str = "auto"):
        super().__init__()
        if chunk_size < 1 or hidden_dim % chunk_size != 0:
            raise ValueError("hidden_dim (%d) must be divisible by chunk_size (%d)" % (hidden_dim, chunk_size))
        check(RECURRENCE, kernel)
        self.kernel = kernel
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.chunk_size = chunk_size
        self.num_directions = 2 if bidirectional else 1
        self.num_gates = 4 * hidden_dim + 2 * (hidden_dim // chunk_size)
        d, g = self.num_directions, self.num_gates
        self.weight_ih = nn.Parameter(torch.empty(d, input_dim, g))
        self.weight_hh = nn.Parameter(torch.empty(d, hidden_dim, g))
        self.bias_ih = nn.Parameter(torch.empty(d, g))
        self.bias_hh = nn.Parameter(torch.empty(d, g))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_dim)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return "%d, %d, bidirectional=%s, chunk_size=%d, kernel=%s" % (
            self.input_dim, self.hidden_dim, self.num_directions == 2, self.chunk_size, self.kernel,
        )

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """``x``: ``[T, B, C]`` right-padded; returns ``[T, B, D*hidden]``, zero at pads."""
        device = x.device.type
        # the matmul dtype: autocast's (half) when it is on, else the input's
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        kernel = recurrent_kernel(self.kernel, x.device, dtype)
        bias = self.bias_ih + self.bias_hh
        with torch.autocast(device_type=device, enabled=False):
            args = [t.to(dtype) for t in (x, self.weight_ih, self.weight_hh, bias)]
            if kernel == "onlstm_reference":
                return onlstm_reference(args[0], lengths.to(x.device), args[1], args[2], args[3], self.chunk_size)
            return self._packed(PACKED[kernel], *args, lengths.to(x.device))

    def _packed(self, fast: PackedRecurrence, x: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor,
                lengths: Tensor) -> Tensor:
        """A fast path on its packed layout.  One gather builds the packed
        input of both directions (direction 1 reversed within each sentence),
        one gathers the output."""
        seq_len, bsz, dim = x.shape
        nd = self.num_directions
        reverse = reversal_index(lengths, seq_len) if nd == 2 else None
        in_rows, batch_sizes, packed_row = fast.layout(lengths, reverse, seq_len, bsz)
        num_rows = sum(batch_sizes)
        xs = x.reshape(seq_len * bsz, dim).index_select(0, in_rows).view(nd, num_rows, dim)
        save = torch.is_grad_enabled() and any(t.requires_grad for t in (xs, w_ih, w_hh, bias))
        hs = _FastONLSTM.apply(xs, w_ih, bias.unsqueeze(1), w_hh, batch_sizes, self.hidden_dim, self.chunk_size,
                               save, fast)
        # hs: [D, N + 1, h], row N zero.  Direction 1 reads each [t, b] at the
        # reversed position (pads stay in place)
        out_rows = [packed_row]
        if nd == 2:
            out_rows.append(packed_row.gather(0, reverse) + (num_rows + 1))
        out_rows = torch.stack(out_rows, -1).view(-1)  # [T, B, D] rows of hs.view(D*(N+1), h)
        return hs.reshape(nd * (num_rows + 1), -1).index_select(0, out_rows).view(seq_len, bsz, -1)


class RecurrentLayer(nn.Module):
    """One encoder layer: a (bi)directional ON-LSTM or LSTM over d-dim inputs, output projected back to d.

    ``out = dropout(proj(concat(forward, backward)))``, then ``out + x`` if
    ``residual``; no layer norm.  ``bidirectional=False`` gives a
    ``hidden_dim -> d`` projection; ``kernel`` is :class:`ONLSTM`'s.  The
    input is right-padded with ``lengths``; no pad reaches a token.  Weight
    init: ``nn.LSTM``'s for the recurrence, fairseq's Linear (Xavier uniform,
    bias 0) for the projection.
    """

    def __init__(self, embed_dim: int, cell: str = "onlstm", hidden_dim: Optional[int] = None,
                 bidirectional: bool = True, chunk_size: int = 1, dropout: float = 0.0, residual: bool = True,
                 kernel: str = "auto"):
        super().__init__()
        hidden_dim = embed_dim if hidden_dim is None else hidden_dim  # per direction
        self.embed_dim = embed_dim
        self.cell = cell
        self.hidden_dim = hidden_dim
        self.bidirectional = bidirectional
        self.residual = residual
        if cell == "onlstm":
            self.rnn = ONLSTM(embed_dim, hidden_dim, bidirectional=bidirectional, chunk_size=chunk_size,
                              kernel=kernel)
        elif cell == "lstm":
            if chunk_size != 1 or kernel != "auto":
                raise ValueError("--encoder-onlstm-chunk-size and --encoder-recurrent-kernel apply to "
                                 "--encoder-recurrent-cell onlstm; the LSTM runs torch's nn.LSTM")
            self.rnn = nn.LSTM(embed_dim, hidden_dim, bidirectional=bidirectional)
        else:
            raise ValueError("cell must be 'onlstm' or 'lstm', got %r" % (cell,))
        self.proj = nn.Linear((2 if bidirectional else 1) * hidden_dim, embed_dim)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.constant_(self.proj.bias, 0.0)
        self.dropout = nn.Dropout(dropout)

    def weight_matrices(self) -> List[str]:
        """Names of the layer's weight matrices, each with its input features
        on axis 1: the cell's input and recurrent weights (ON-LSTM ``[D, in, G]``,
        ``nn.LSTM`` ``[4h, in]`` per direction) and the projection ``[d, D*h]``."""
        return [name for name, _ in self.named_parameters()
                if name.startswith("rnn.weight") or name == "proj.weight"]

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """``x``: ``[T, B, C]`` right-padded (sentence b's tokens at positions
        ``0 .. lengths[b] - 1``); returns ``[T, B, C]``, zero at the pads."""
        seq_len = x.size(0)
        if self.cell == "lstm":
            sequences = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
            h, _ = self.rnn(sequences)
            h, _ = pad_packed_sequence(h, total_length=seq_len)
        else:
            h = self.rnn(x, lengths)
        out = self.dropout(self.proj(h))
        if self.residual:
            out = out + x
        pad = torch.arange(seq_len, device=x.device).unsqueeze(1) >= lengths.to(x.device).unsqueeze(0)  # [T, B]
        return out.masked_fill(pad.unsqueeze(-1), 0.0)
