"""Recurrent encoder layers of the ON-LSTM + SAN hybrid (Hao et al. 2019).

:class:`RecurrentLayer` is one layer of the recurrent part of the hybrid
encoder: a (bi)directional ON-LSTM (Shen et al. 2019, "Ordered Neurons") or
LSTM over ``d``-dimensional inputs whose output is projected back to ``d``.

Layer structure::

    h   = concat(forward_rnn(x), backward_rnn(x))        # [T, B, D*hidden]
    out = dropout(proj(h))                               # proj: D*hidden -> d, with bias
    out = out + x            (if residual)
    out[pad positions] = 0

There is no layer norm: the parameter counts of Hao et al. (2019), Table 1,
leave no room for one.

Parameter counts at d = 512, bidirectional, hidden 512 per direction, chunk
size 1 (tested exactly):

* LSTM layer: ``nn.LSTM`` (4h gate rows, biases ``b_ih`` and ``b_hh``) plus
  the 1024 -> 512 projection: **4,727,296**.
* ON-LSTM layer: 4h standard gate rows + 2h/chunk master-gate rows, each with
  a bias on the input projection *and* one on the recurrent projection (as
  ``nn.LSTM`` and Shen et al.'s code have), plus the projection:
  **6,828,544**.  One bias per gate unit would give 6,822,400; the totals of
  Hao et al. (2019), Table 1, rounded to 0.1M, cannot tell the two apart.
  The two biases of a gate unit are always
  added together, so they are one degree of freedom; they exist for the count
  and for parity with ``nn.LSTM``.

Padding: the layer takes RIGHT-padded ``[T, B, C]`` input plus ``lengths``
and never lets a pad position influence a real one.  The forward direction
runs over positions ``0..T-1`` (pads come after a sentence's tokens and so
after everything that matters).  The backward direction reverses each
sentence within its own length (gather index ``len_b - 1 - t`` for
``t < len_b``, pads stay in place), runs the same forward recurrence and
reverses back.  Output pad positions are exactly 0.  The LSTM cell feeds
``nn.LSTM`` a ``PackedSequence`` (``enforce_sorted=False``).

Weight init: uniform(-1/sqrt(hidden), 1/sqrt(hidden)) for every recurrent
weight and bias, as ``nn.LSTM`` does; the projection is fairseq's Linear
init (Xavier uniform, bias 0).

Speed (ON-LSTM): the input projections of all time steps and both directions
are one batched matmul before the loop; only the recurrence loops, in a
``torch.jit.script`` function that does one ``baddbmm`` per step for both
directions at once (per-direction recurrent weights ``[D, hidden, G]``).  The
backward is hand-written (``_ONLSTMFunction``, also a scripted loop): one
``bmm`` per step for the recurrent input, the recurrent weight gradient as a
single matmul over all steps after the loop, gate gradients written in place
into the gradient of the input projections.  Plain autograd through the
scripted loop was 2.1-2.2x ``nn.LSTM``'s fused oneDNN time (per-step weight
gradients, each accumulated; a zero-filled full-size gradient per indexed
slice); this is about 1.8x (d=512, T=64, B=32, CPU; 1.5x the FLOPs plus the
projection).  ``fairseq-posattn-bench-recurrent`` measures it.

Half precision: the matmuls run in the model's dtype (half under autocast),
the gate arithmetic and the cell state in float32 -- in particular cumax's
softmax and cumsum -- and the hidden state is cast back each step.
"""

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = ["ONLSTM", "RecurrentLayer", "cumax", "reversal_index"]


def cumax(x: Tensor, dim: int = -1) -> Tensor:
    """``cumsum(softmax(x))`` along ``dim``, computed in float32 (or float64), cast back."""
    y = torch.softmax(x.to(torch.promote_types(x.dtype, torch.float32)), dim=dim)
    return torch.cumsum(y, dim=dim).to(x.dtype)


def reversal_index(lengths: Tensor, max_len: int) -> Tensor:
    """``[T, B]`` long index: ``len_b - 1 - t`` for ``t < len_b``, else ``t``.

    Gathering ``x[idx[t, b], b]`` reverses each right-padded sentence within its
    own length and leaves the pads where they are; the map is its own inverse.
    """
    t = torch.arange(max_len, device=lengths.device).unsqueeze(1)  # [T, 1]
    lengths = lengths.to(t.dtype).unsqueeze(0)  # [1, B]
    return torch.where(t < lengths, lengths - 1 - t, t)


def _expand_chunks(m: Tensor, chunk_size: int) -> Tensor:
    """``[..., n_chunk]`` -> ``[..., n_chunk * chunk_size]``, each master unit over its chunk."""
    if chunk_size == 1:
        return m
    return m.unsqueeze(-1).expand(m.shape + (chunk_size,)).flatten(-2)


def _onlstm_forward(
    xg: Tensor, w_hh: Tensor, hidden: int, chunk_size: int, save: bool
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The ON-LSTM recurrence over all time steps, all directions at once.

    ``xg``: ``[D, T, B, G]`` input projections plus biases, gate columns laid
    out ``[f, i, o, c_hat, master_f, master_i]`` (``G = 4*hidden + 2*hidden/chunk_size``);
    ``w_hh``: ``[D, hidden, G]`` recurrent weights, dtype of ``xg``.
    The matmuls run in that dtype, the gate arithmetic and the cell state in
    at least float32 (so cumax's softmax and cumsum are float32 under half).

    Returns the hidden states ``[D, T, B, hidden]`` (dtype of ``xg``) and
    what the backward needs, ``[T, D, B, ...]`` in the float32+ dtype:
    sigmoid gates (f, i, o), c_hat, master-gate softmax probabilities
    ``[.., 2, n_chunk]`` and cell states (when not ``save``, buffers of one
    step, reused).
    """
    num_dir, seq_len, bsz, _ = xg.shape
    n_chunk = hidden // chunk_size
    acc = torch.promote_types(xg.dtype, torch.float32)
    n_saved = seq_len if save else 1
    out = torch.empty(num_dir, seq_len, bsz, hidden, dtype=xg.dtype, device=xg.device)
    sigs = torch.empty(n_saved, num_dir, bsz, 3 * hidden, dtype=acc, device=xg.device)
    c_hats = torch.empty(n_saved, num_dir, bsz, hidden, dtype=acc, device=xg.device)
    probs = torch.empty(n_saved, num_dir, bsz, 2, n_chunk, dtype=acc, device=xg.device)
    cells = torch.empty(n_saved, num_dir, bsz, hidden, dtype=acc, device=xg.device)
    h = torch.zeros(num_dir, bsz, hidden, dtype=xg.dtype, device=xg.device)
    c = torch.zeros(num_dir, bsz, hidden, dtype=acc, device=xg.device)
    for t in range(seq_len):
        k = t if save else 0
        g = torch.baddbmm(xg[:, t], h, w_hh).to(acc)
        sig = torch.sigmoid(g[:, :, : 3 * hidden], out=sigs[k])
        c_hat = torch.tanh(g[:, :, 3 * hidden : 4 * hidden], out=c_hats[k])
        p = torch.softmax(g[:, :, 4 * hidden :].reshape(num_dir, bsz, 2, n_chunk), dim=-1)
        probs[k] = p
        cm = torch.cumsum(p, dim=-1)
        mf = _expand_chunks(cm[:, :, 0], chunk_size)
        mi = _expand_chunks(1.0 - cm[:, :, 1], chunk_size)
        w = mf * mi
        f_hat = torch.addcmul(mf - w, sig[:, :, :hidden], w)
        i_hat = torch.addcmul(mi - w, sig[:, :, hidden : 2 * hidden], w)
        c = torch.addcmul(f_hat * c, i_hat, c_hat, out=cells[k])
        h = torch.mul(sig[:, :, 2 * hidden :], torch.tanh(c), out=out[:, t])
    return out, sigs, c_hats, probs, cells


def _onlstm_backward(
    grad_hs: Tensor,
    w_hh: Tensor,
    hs: Tensor,
    sigs: Tensor,
    c_hats: Tensor,
    probs: Tensor,
    cells: Tensor,
    hidden: int,
    chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """Gradients of :func:`_onlstm_forward` w.r.t. ``xg`` and ``w_hh``.

    Back-propagation through time, one ``bmm`` per step for the recurrent
    input; the weight gradient is one ``bmm`` over all steps after the loop.
    """
    num_dir, seq_len, bsz, _ = hs.shape
    n_chunk = hidden // chunk_size
    acc = sigs.dtype
    w_t = w_hh.transpose(1, 2).contiguous()  # [D, G, hidden]: ~35% faster per-step bmm than the strided view
    grad_xg = torch.empty(num_dir, seq_len, bsz, w_hh.size(2), dtype=hs.dtype, device=hs.device)
    zeros = torch.zeros(num_dir, bsz, hidden, dtype=acc, device=hs.device)
    dh_rec = zeros
    dc = zeros
    for t in range(seq_len - 1, -1, -1):
        sig = sigs[t]
        f = sig[:, :, :hidden]
        i = sig[:, :, hidden : 2 * hidden]
        o = sig[:, :, 2 * hidden :]
        c_hat = c_hats[t]
        p = probs[t]
        c_prev = cells[t - 1] if t > 0 else zeros
        cm = torch.cumsum(p, dim=-1)
        mf = _expand_chunks(cm[:, :, 0], chunk_size)
        mi = _expand_chunks(1.0 - cm[:, :, 1], chunk_size)
        w = mf * mi
        tc = torch.tanh(cells[t])
        dg = grad_xg[:, t]  # [D, B, G], written in place gate by gate
        sd = sig * (1.0 - sig)

        dh = grad_hs[:, t].to(acc) + dh_rec
        dc = torch.addcmul(dc, dh, o * (1.0 - tc * tc))
        torch.mul(dh * tc, sd[:, :, 2 * hidden :], out=dg[:, :, 2 * hidden : 3 * hidden])  # o
        df_hat = dc * c_prev
        di_hat = dc * c_hat
        torch.mul(df_hat * w, sd[:, :, :hidden], out=dg[:, :, :hidden])  # f
        torch.mul(di_hat * w, sd[:, :, hidden : 2 * hidden], out=dg[:, :, hidden : 2 * hidden])  # i
        i_hat = torch.addcmul(mi - w, i, w)
        torch.mul(dc * i_hat, 1.0 - c_hat * c_hat, out=dg[:, :, 3 * hidden : 4 * hidden])  # c_hat
        # f_hat = f*w + mf - w, i_hat = i*w + mi - w, w = mf*mi
        dw = df_hat * (f - 1.0) + di_hat * (i - 1.0)
        dmf = torch.addcmul(df_hat, dw, mi)
        dmi = torch.addcmul(di_hat, dw, mf)
        dcm = torch.stack([dmf, -dmi], dim=2)  # [D, B, 2, hidden]; cm_i enters as 1 - cm_i
        if chunk_size > 1:
            dcm = dcm.view(num_dir, bsz, 2, n_chunk, chunk_size).sum(-1)
        # cumsum backward (suffix sums), then softmax backward
        dp = dcm.sum(-1, keepdim=True) - torch.cumsum(dcm, dim=-1) + dcm
        dp = dp - (dp * p).sum(-1, keepdim=True)
        torch.mul(p, dp, out=dg[:, :, 4 * hidden :].view(num_dir, bsz, 2, n_chunk))  # master gates
        dc = dc * torch.addcmul(mf - w, f, w)  # dc * f_hat
        dh_rec = torch.bmm(dg, w_t).to(acc)
    # dW = sum_t h_{t-1}^T dg_t  (h_{-1} = 0): one matmul over all steps
    h_prev = hs[:, : seq_len - 1].reshape(num_dir, (seq_len - 1) * bsz, hidden)
    dg_all = grad_xg[:, 1:].reshape(num_dir, (seq_len - 1) * bsz, w_hh.size(2))
    grad_w = torch.bmm(h_prev.transpose(1, 2), dg_all)
    return grad_xg, grad_w


_onlstm_forward_eager = _onlstm_forward
_onlstm_backward_eager = _onlstm_backward
try:
    _onlstm_forward = torch.jit.script(_onlstm_forward)
    _onlstm_backward = torch.jit.script(_onlstm_backward)
except Exception:  # pragma: no cover - TorchScript unavailable: same maths, Python loop
    _onlstm_forward = _onlstm_forward_eager
    _onlstm_backward = _onlstm_backward_eager


class _ONLSTMFunction(torch.autograd.Function):
    """Autograd wrapper: scripted forward loop, scripted hand-written backward loop."""

    @staticmethod
    def forward(ctx, xg: Tensor, w_hh: Tensor, hidden: int, chunk_size: int, save: bool) -> Tensor:
        # ``save`` comes from the caller: grad mode is always off in here
        hs, sigs, c_hats, probs, cells = _onlstm_forward(xg, w_hh, hidden, chunk_size, save)
        if save:
            ctx.save_for_backward(w_hh, hs, sigs, c_hats, probs, cells)
        ctx.hidden = hidden
        ctx.chunk_size = chunk_size
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs: Tensor):
        w_hh, hs, sigs, c_hats, probs, cells = ctx.saved_tensors
        grad_xg, grad_w = _onlstm_backward(
            grad_hs.contiguous(), w_hh, hs, sigs, c_hats, probs, cells, ctx.hidden, ctx.chunk_size
        )
        return grad_xg, grad_w, None, None, None


class ONLSTM(nn.Module):
    """(Bi)directional single-layer ON-LSTM over right-padded ``[T, B, C]`` input.

    Parameters (``D`` = number of directions, ``G = 4*hidden + 2*hidden/chunk_size``
    gate units per direction): ``weight_ih [D, C, G]``, ``weight_hh [D, hidden, G]``
    (input-major, ``gates = x @ weight_ih[d] + h @ weight_hh[d] + bias_ih[d] + bias_hh[d]``:
    the layout the matmuls want, no transpose in the forward), ``bias_ih [D, G]``,
    ``bias_hh [D, G]``.  Direction 0 is forward, 1 backward.  Gate units, in
    order: forget ``f``, input ``i``, output ``o``, cell candidate ``c_hat``
    (``hidden`` each), master forget, master input (``hidden/chunk_size`` each;
    master unit ``k`` covers neurons ``k*chunk_size .. (k+1)*chunk_size-1``).
    All initialised uniform(-1/sqrt(hidden), 1/sqrt(hidden)) as in ``nn.LSTM``.

    Equations (Shen et al. 2019), per direction::

        f, i, o = sigmoid(W x + U h + b)          c_hat = tanh(W x + U h + b)
        mf = cumax(W x + U h + b)                 mi = 1 - cumax(W x + U h + b)
        w = mf * mi
        f_hat = f * w + (mf - w)                  i_hat = i * w + (mi - w)
        c_t = f_hat * c_{t-1} + i_hat * c_hat     h_t = o * tanh(c_t)
    """

    def __init__(self, input_dim: int, hidden_dim: int, bidirectional: bool = True, chunk_size: int = 1):
        super().__init__()
        if chunk_size < 1 or hidden_dim % chunk_size != 0:
            raise ValueError("hidden_dim (%d) must be divisible by chunk_size (%d)" % (hidden_dim, chunk_size))
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
        return "%d, %d, bidirectional=%s, chunk_size=%d" % (
            self.input_dim, self.hidden_dim, self.num_directions == 2, self.chunk_size,
        )

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """``x``: ``[T, B, C]`` right-padded; returns ``[T, B, D*hidden]``.

        Values at pad positions are unspecified (the caller masks them).
        """
        seq_len, bsz, _ = x.shape
        nd = self.num_directions
        if nd == 2:
            # source time step of [t, b, direction]: t itself, then the
            # per-sentence reversal (an involution: it also un-reverses)
            t_ar = torch.arange(seq_len, device=x.device).unsqueeze(1).expand(seq_len, bsz)
            src_t = torch.stack([t_ar, reversal_index(lengths.to(x.device), seq_len)], dim=-1)  # [T, B, 2]
            col = torch.arange(bsz, device=x.device).unsqueeze(-1)  # [B, 1]
            # rows of x.view(T*B, C) in [direction, t, b] order
            in_rows = (src_t * bsz + col).permute(2, 0, 1).reshape(-1)
            xs = x.reshape(seq_len * bsz, -1).index_select(0, in_rows).view(nd, seq_len * bsz, -1)
        else:
            xs = x.reshape(1, seq_len * bsz, -1)
        bias = (self.bias_ih + self.bias_hh).unsqueeze(1)  # [D, 1, G]
        # all time steps, both directions: one batched matmul
        xg = torch.baddbmm(bias, xs, self.weight_ih).view(nd, seq_len, bsz, -1)
        w_hh = self.weight_hh.to(xg.dtype)  # the matmul dtype (half under autocast)
        save = torch.is_grad_enabled() and (xg.requires_grad or w_hh.requires_grad)
        with torch.autocast(device_type=x.device.type, enabled=False):
            hs = _ONLSTMFunction.apply(xg, w_hh, self.hidden_dim, self.chunk_size, save)  # [D, T, B, h]
        if nd == 2:
            # rows of hs.view(D*T*B, h) in [t, b, direction] order: the layout
            # change to [T, B, D*h] and the un-reversal in one gather
            out_rows = (torch.arange(nd, device=x.device) * seq_len + src_t) * bsz + col
            return hs.reshape(nd * seq_len * bsz, -1).index_select(0, out_rows.reshape(-1)).view(seq_len, bsz, -1)
        return hs.reshape(seq_len, bsz, -1)


class RecurrentLayer(nn.Module):
    """One encoder layer: a (bi)directional ON-LSTM or LSTM over d-dim inputs, output projected back to d.

    ``out = dropout(proj(concat(forward, backward)))``, then ``out + x`` if
    ``residual``; no layer norm.  ``bidirectional=False`` gives a
    ``hidden_dim -> d`` projection.  See the module docstring for parameter
    counts, padding and speed.
    """

    def __init__(
        self,
        embed_dim: int,
        cell: str = "onlstm",
        hidden_dim: Optional[int] = None,  # default = embed_dim (per direction)
        bidirectional: bool = True,
        chunk_size: int = 1,
        dropout: float = 0.0,
        residual: bool = True,
    ):
        super().__init__()
        hidden_dim = embed_dim if hidden_dim is None else hidden_dim
        self.embed_dim = embed_dim
        self.cell = cell
        self.hidden_dim = hidden_dim
        self.bidirectional = bidirectional
        self.residual = residual
        num_dir = 2 if bidirectional else 1
        if cell == "onlstm":
            self.rnn = ONLSTM(embed_dim, hidden_dim, bidirectional=bidirectional, chunk_size=chunk_size)
        elif cell == "lstm":
            if chunk_size != 1:
                raise ValueError("chunk_size applies to cell='onlstm' only")
            self.rnn = nn.LSTM(embed_dim, hidden_dim, bidirectional=bidirectional)
        else:
            raise ValueError("cell must be 'onlstm' or 'lstm', got %r" % (cell,))
        self.proj = nn.Linear(num_dir * hidden_dim, embed_dim)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.constant_(self.proj.bias, 0.0)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """x: [T, B, C] RIGHT-padded (sentence b's tokens at positions 0..lengths[b]-1);
        returns [T, B, C] with pad positions = 0."""
        seq_len = x.size(0)
        if self.cell == "lstm":
            packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
            h, _ = self.rnn(packed)
            h, _ = pad_packed_sequence(h, total_length=seq_len)
        else:
            h = self.rnn(x, lengths)
        out = self.dropout(self.proj(h))
        if self.residual:
            out = out + x
        pad = torch.arange(seq_len, device=x.device).unsqueeze(1) >= lengths.to(x.device).unsqueeze(0)  # [T, B]
        return out.masked_fill(pad.unsqueeze(-1), 0.0)
