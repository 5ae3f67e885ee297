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
and never lets a pad position influence a real one.  The ON-LSTM runs on
packed sequences: sentences sorted longest first, step ``t`` over the
sentences longer than ``t`` only, so pads are not computed at all.  Its
backward direction reverses each sentence within its own length (source
position ``len_b - 1 - t``) in the gather that packs the input, and back in
the gather that unpacks the output.  Output pad positions are exactly 0.
The LSTM cell feeds ``nn.LSTM`` a ``PackedSequence`` (``enforce_sorted=False``).

Weight init: uniform(-1/sqrt(hidden), 1/sqrt(hidden)) for every recurrent
weight and bias, as ``nn.LSTM`` does; the projection is fairseq's Linear
init (Xavier uniform, bias 0).

Speed (ON-LSTM): one gather packs the inputs of both directions, one
batched matmul projects all of them; only the recurrence loops, in a
``torch.jit.script`` function with one ``baddbmm`` per step for both
directions (none at step 0, where ``h = 0``; recurrent weights
``[D, hidden, G]``) and the gate arithmetic in as few ATen kernels as the
equations allow (``f_hat = mf - w * (1 - f)`` as one ``addcmul``, ...).  The
backward is hand-written (``_ONLSTMFunction``, also a scripted loop): one
``baddbmm`` per step for the recurrent input plus the upstream gradient, the
weight gradients as one matmul each over all steps.  On a CPU in float32
the per-step products take oneDNN's packed weights instead of ``baddbmm``
(the recurrent weight laid out once per call, one matmul with the sum fused
per direction and step: about twice as fast at d = 512).  Memory: the forward
writes each step's activated gates over its own input projections and the
backward writes the gate gradients over those -- one ``[D, N, G]`` buffer
for the layer (a second backward through the same graph is therefore
refused by autograd's in-place check); the backward recomputes the master
gates' cumsum and ``tanh(c)`` rather than storing them.  Without grad
(``torch.no_grad``, or nothing requiring grad) nothing is kept: each step's
gates overwrite its own pre-activations, one step of cell state exists.
The matmuls bound the rest: 1.5x an LSTM's gate FLOPs plus the projection.
On a CPU in float32 the whole loop runs in C++ instead (:mod:`.onlstm_cpp`,
compiled on first use), forward and backward, each step's gate arithmetic
one pass over its rows; there the input projection's backward is one oneDNN
matmul per direction, and so is the forward's in inference, whose weight
layouts are kept while the weights do not change.
On a GPU the loop's many small kernels are bound by their launches
instead: there (CUDA, Triton installed) each step is one matmul and one
fused Triton kernel, forward and backward (:mod:`.onlstm_triton`).  All
take the same buffers and the same equations.  ``fairseq-posattn-bench-recurrent``
measures both against ``nn.LSTM``.

Half precision: the matmuls run in the model's dtype (half under autocast),
the gate arithmetic and the cell state in float32 -- in particular cumax's
softmax and cumsum -- and the hidden state is cast back each step.
"""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from fairseq_posattn.modules import onlstm_cpp, onlstm_triton
from fairseq_posattn.modules.packed_steps import (
    direction_matmuls, direction_weight_grads, gate_buffers, onednn_applies, onednn_layouts, onednn_weights,
    recurrent_matmul, recurrent_weight_grad, state_buffers, step_starts,
)

__all__ = ["KERNELS", "ONLSTM", "RecurrentLayer", "cumax", "reversal_index"]

KERNELS = ("auto", "script", "triton", "cpp")
_STEPS = {"triton": onlstm_triton, "cpp": onlstm_cpp}  # the kernels other than the scripted loop


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
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool, onednn: bool = False,
) -> Tuple[Tensor, Tensor, Tensor]:
    """The ON-LSTM layer over packed sequences, all directions at once.

    ``xs``: ``[D, N, C]`` inputs in packed order (time-major, sentences
    sorted longest first: step ``t`` is ``batch_sizes[t]`` rows after the
    rows of steps ``< t``, the first rows of step ``t - 1``'s; direction 1
    already reversed within each sentence).  ``w_ih [D, C, G]``,
    ``bias [D, 1, G]``, ``w_hh [D, hidden, G]``, gate columns laid out
    ``[f, i, o, c_hat, master_f, master_i]`` (``G = 4*hidden + 2*hidden/chunk_size``),
    all in one dtype, the one the matmuls run in; the gate arithmetic and
    the cell state run in at least float32 (so cumax's softmax and cumsum
    are float32 under half).  Pads are not computed at all.

    Returns the hidden states ``[D, N + 1, hidden]`` (dtype of ``xs``; row
    ``N`` is zero, for the pads of the caller's gather) and, with ``save``,
    the activated gates ``[D, N, G]`` (sigmoid f, i, o; tanh c_hat; the
    master gates' softmax probabilities) and the cell states ``[D, N, hidden]``
    for the backward, in the float32+ dtype; when the dtypes agree the gates
    overwrite their own pre-activations (one ``[D, N, G]`` buffer).  Without
    ``save`` (inference) nothing is kept: each step's gates overwrite that
    step's pre-activations, the gates returned are empty and the cell states
    are one step's.  With ``onednn`` (CPU, float32) the recurrent matmuls
    take oneDNN's packed weights (:func:`.packed_steps.recurrent_matmul`).
    """
    num_dir = xs.size(0)
    n_chunk = hidden // chunk_size
    acc = torch.promote_types(xs.dtype, torch.float32)
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    packed = onednn_weights(w_hh, batch_sizes) if onednn else []
    start = 0
    prev = 0  # first row of the previous step
    for t, n in enumerate(batch_sizes):
        stop = start + n
        if t == 0:  # h_{-1} = 0
            g = xg[:, start:stop].to(acc)
        else:
            g = recurrent_matmul(xg[:, start:stop], out[:, prev : prev + n], w_hh, packed).to(acc)
        a = acts[:, start:stop] if save else g  # g itself is free to overwrite
        sig = torch.sigmoid(g[:, :, : 3 * hidden], out=a[:, :, : 3 * hidden])  # f, i, o
        c_hat = torch.tanh(g[:, :, 3 * hidden : 4 * hidden], out=a[:, :, 3 * hidden : 4 * hidden])
        probs = torch.softmax(g[:, :, 4 * hidden :].view(num_dir, n, 2, n_chunk), -1)
        if save:
            a[:, :, 4 * hidden :].view(num_dir, n, 2, n_chunk).copy_(probs)
        cm = torch.cumsum(probs, dim=-1)  # cumax (Hao et al. Eq. 7)
        mf = _expand_chunks(cm[:, :, 0], chunk_size)  # Eq. 8
        mi = _expand_chunks(torch.rsub(cm[:, :, 1], 1.0), chunk_size)  # Eq. 9
        w = mf * mi  # Eq. 3
        one_minus_fi = torch.rsub(sig[:, :, : 2 * hidden], 1.0)
        f_hat = torch.addcmul(mf, w, one_minus_fi[:, :, :hidden], value=-1.0)  # Eq. 4: f*w + mf - w
        i_hat = torch.addcmul(mi, w, one_minus_fi[:, :, hidden:], value=-1.0)  # Eq. 5: i*w + mi - w
        if t == 0:
            c_prev = torch.zeros_like(c_hat)
        else:
            c_prev = cells[:, prev : prev + n] if save else cells[:, :n]
        c_new = cells[:, start:stop] if save else cells[:, :n]
        torch.addcmul(f_hat * c_prev, i_hat, c_hat, out=c_new)  # Eq. 6
        torch.mul(sig[:, :, 2 * hidden :], torch.tanh(c_new), out=out[:, start:stop])
        prev = start
        start = stop
    return out, acts, cells


def _onlstm_backward(
    grad_hs: Tensor,
    w_hh: Tensor,
    hs: Tensor,
    acts: Tensor,
    cells: Tensor,
    batch_sizes: List[int],
    hidden: int,
    chunk_size: int,
    onednn: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Gradients of :func:`_onlstm_forward` (with ``save``) w.r.t. its input projections ``[D, N, G]`` and ``w_hh``.

    Back-propagation through time (Hao et al. Eq. 3-9), one ``baddbmm`` per
    step for the recurrent input plus the upstream gradient; the weight
    gradient is one ``bmm`` over all steps after the loop.  The gate gradients overwrite ``acts`` step by step when the dtypes agree
    (so a second backward through the same graph fails autograd's in-place
    check instead of reading them).
    """
    num_dir, num_rows, _ = acts.shape
    num_gates = w_hh.size(2)
    n_chunk = hidden // chunk_size
    acc = acts.dtype
    w_t = w_hh.transpose(1, 2)  # [D, G, hidden]
    packed = onednn_weights(w_t, batch_sizes) if onednn else []
    if not onednn:
        # contiguous: the per-step bmm is ~35% faster than with the strided
        # view, and 2-D transposed copies take ATen's blocked path
        w_t = torch.empty(num_dir, num_gates, hidden, dtype=w_hh.dtype, device=w_hh.device)
        for d in range(num_dir):
            w_t[d].copy_(w_hh[d].t())
    grad_xg = acts if acts.dtype == hs.dtype else torch.empty(acts.shape, dtype=hs.dtype, device=hs.device)
    starts = step_starts(batch_sizes)
    steps = len(batch_sizes)
    n = batch_sizes[steps - 1] if steps > 0 else 0
    dc = torch.zeros(num_dir, n, hidden, dtype=acc, device=hs.device)
    dh = grad_hs[:, num_rows - n : num_rows].to(acc)
    for t in range(steps - 1, -1, -1):
        start = starts[t]
        stop = start + n
        a = acts[:, start:stop]
        sig = a[:, :, : 3 * hidden]  # f, i, o
        o = sig[:, :, 2 * hidden :]
        c_hat = a[:, :, 3 * hidden : 4 * hidden]
        probs = a[:, :, 4 * hidden :].view(num_dir, n, 2, n_chunk)
        cm = torch.cumsum(probs, dim=-1)
        mf = _expand_chunks(cm[:, :, 0], chunk_size)
        mi = _expand_chunks(torch.rsub(cm[:, :, 1], 1.0), chunk_size)
        w = mf * mi
        one_minus_sig = torch.rsub(sig, 1.0)
        sig_grad = sig * one_minus_sig  # sigmoid' of f, i, o
        nf = one_minus_sig[:, :, :hidden]
        ni = one_minus_sig[:, :, hidden : 2 * hidden]
        tc = torch.tanh(cells[:, start:stop])
        # h = o * tanh(c);  c = f_hat * c_prev + i_hat * c_hat (Eq. 6)
        dc = torch.addcmul(dc, dh * o, torch.rsub(tc * tc, 1.0))
        d_i_hat = dc * c_hat
        # f_hat = mf - w*(1-f), i_hat = mi - w*(1-i) (Eq. 4, 5), w = mf*mi (Eq. 3)
        f_hat = torch.addcmul(mf, w, nf, value=-1.0)
        i_hat = torch.addcmul(mi, w, ni, value=-1.0)
        c_prev = cells[:, starts[t - 1] : starts[t - 1] + n] if t > 0 else torch.zeros_like(dc)
        d_f_hat = dc * c_prev
        neg_dw = torch.addcmul(d_f_hat * nf, d_i_hat, ni)  # -dL/dw
        d_sig = torch.empty(num_dir, n, 3 * hidden, dtype=acc, device=hs.device)  # dL/d f, i, o
        torch.mul(d_f_hat, w, out=d_sig[:, :, :hidden])
        torch.mul(d_i_hat, w, out=d_sig[:, :, hidden : 2 * hidden])
        torch.mul(dh, tc, out=d_sig[:, :, 2 * hidden :])
        d_cm = torch.empty(num_dir, n, 2, hidden, dtype=acc, device=hs.device)  # dL/d cumax (Eq. 8, 9)
        torch.addcmul(d_f_hat, neg_dw, mi, value=-1.0, out=d_cm[:, :, 0])
        torch.addcmul(d_i_hat, neg_dw, mf, value=-1.0, out=d_cm[:, :, 1]).neg_()
        d_chat = dc * i_hat
        # every read of ``a`` is done: the gate gradients may overwrite it now
        dg = grad_xg[:, start:stop]
        torch.mul(d_sig, sig_grad, out=dg[:, :, : 3 * hidden])
        torch.addcmul(d_chat, d_chat * c_hat, c_hat, value=-1.0, out=dg[:, :, 3 * hidden : 4 * hidden])
        if chunk_size > 1:
            d_cm = d_cm.view(num_dir, n, 2, n_chunk, chunk_size).sum(-1)
        # cumax backward (Eq. 7): cumsum's (suffix sums: total - prefix + own), then softmax's
        prefix = torch.cumsum(d_cm, dim=-1)
        d_probs = torch.sub(d_cm, prefix).add_(prefix[:, :, :, n_chunk - 1 :])
        weighted = probs * d_probs
        torch.addcmul(weighted, probs, weighted.sum(-1, keepdim=True), value=-1.0,
                      out=dg[:, :, 4 * hidden :].view(num_dir, n, 2, n_chunk))
        if t > 0:
            dc = dc * f_hat
            prev, n_prev = starts[t - 1], batch_sizes[t - 1]
            dh = recurrent_matmul(grad_hs[:, prev : prev + n], dg, w_t, packed).to(acc)
            if n_prev > n:  # sentences whose last step is t - 1
                dc = torch.cat([dc, torch.zeros(num_dir, n_prev - n, hidden, dtype=acc, device=hs.device)], 1)
                dh = torch.cat([dh, grad_hs[:, prev + n : prev + n_prev].to(acc)], 1)
            n = n_prev
    return grad_xg, recurrent_weight_grad(hs, grad_xg.unbind(0), w_hh, batch_sizes)


_onlstm_forward_eager = _onlstm_forward
_onlstm_backward_eager = _onlstm_backward
try:
    _onlstm_forward = torch.jit.script(_onlstm_forward)
    _onlstm_backward = torch.jit.script(_onlstm_backward)
except Exception:  # pragma: no cover - TorchScript unavailable: same maths, Python loop
    _onlstm_forward = _onlstm_forward_eager
    _onlstm_backward = _onlstm_backward_eager


class _ONLSTMFunction(torch.autograd.Function):
    """Input projection, recurrence (``kernel``: the scripted loop, per step one fused Triton
    kernel, or the C++ loop), hand-written backward.

    Owning the input projection lets the forward write the gates over it and
    the backward write the gate gradients over those: one ``[D, N, G]``
    buffer for the whole layer (one ``[N, G]`` per direction on the C++ loop,
    whose input projection is one oneDNN matmul per direction).
    """

    @staticmethod
    def forward(ctx, xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
                hidden: int, chunk_size: int, save: bool, kernel: str = "script") -> Tensor:
        # ``save`` comes from the caller: grad mode is always off in here
        args = (xs, w_ih, bias, w_hh, batch_sizes, hidden, chunk_size, save)
        if kernel == "script":
            hs, acts, cells = _onlstm_forward(*args, onednn_applies(w_hh))
        else:
            hs, acts, cells = _STEPS[kernel].onlstm_forward(*args)
        if save:
            ctx.per_direction = isinstance(acts, list)  # the C++ loop's gates: one [N, G] per direction
            ctx.save_for_backward(xs, w_ih, w_hh, hs, cells, *(acts if ctx.per_direction else [acts]))
            ctx.batch_sizes = batch_sizes
            ctx.hidden = hidden
            ctx.chunk_size = chunk_size
            ctx.kernel = kernel
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs: Tensor):
        xs, w_ih, w_hh, hs, cells, *acts = ctx.saved_tensors
        acts = acts if ctx.per_direction else acts[0]
        args = (grad_hs.contiguous(), w_hh, hs, acts, cells, ctx.batch_sizes, ctx.hidden, ctx.chunk_size)
        if ctx.kernel == "script":
            grad_xg, grad_w_hh = _onlstm_backward(*args, onednn_applies(w_hh))
        else:
            grad_xg, grad_w_hh = _STEPS[ctx.kernel].onlstm_backward(*args)
        # grad_xg: one [N, G] per direction (or a [D, N, G] tensor, the same per direction)
        grad_xs = grad_w_ih = grad_bias = None
        if ctx.needs_input_grad[0]:  # on oneDNN's packed weights where they apply
            w_t = w_ih.transpose(1, 2)
            grad_xs = torch.stack(direction_matmuls(grad_xg, w_t, onednn_layouts(w_t, xs.size(1))
                                                    if onednn_applies(w_ih) else []))
        if ctx.needs_input_grad[1]:
            grad_w_ih = direction_weight_grads(xs, grad_xg, w_ih)
        if ctx.needs_input_grad[2]:
            grad_bias = torch.stack([g.sum(0, keepdim=True) for g in grad_xg])
        return grad_xs, grad_w_ih, grad_bias, grad_w_hh, None, None, None, None, None


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

    ``kernel`` picks the recurrence: ``"auto"`` (default) runs one fused
    Triton kernel per time step where :func:`.onlstm_triton.handles` says it
    applies (CUDA, float32/16 or bfloat16, Triton installed), the C++ loop
    where :func:`.onlstm_cpp.handles` does (CPU, float32, the cell builds)
    and the TorchScript loop everywhere else (float64, bfloat16 on the CPU);
    ``"script"`` always the loop; ``"triton"`` always the kernels (on the CPU only under Triton's
    interpreter, for tests); ``"cpp"`` always the C++ loop.  All four
    compute the same equations.

    Equations (Shen et al. 2019), per direction::

        f, i, o = sigmoid(W x + U h + b)          c_hat = tanh(W x + U h + b)
        mf = cumax(W x + U h + b)                 mi = 1 - cumax(W x + U h + b)
        w = mf * mi
        f_hat = f * w + (mf - w)                  i_hat = i * w + (mi - w)
        c_t = f_hat * c_{t-1} + i_hat * c_hat     h_t = o * tanh(c_t)
    """

    def __init__(self, input_dim: int, hidden_dim: int, bidirectional: bool = True, chunk_size: int = 1,
                 kernel: str = "auto"):
        super().__init__()
        if chunk_size < 1 or hidden_dim % chunk_size != 0:
            raise ValueError("hidden_dim (%d) must be divisible by chunk_size (%d)" % (hidden_dim, chunk_size))
        if kernel not in KERNELS:
            raise ValueError("kernel must be one of %s, got %r" % (", ".join(KERNELS), kernel))
        if kernel == "triton" and onlstm_triton.triton is None:
            raise ValueError("kernel='triton' needs the triton package (pip install triton); "
                             "kernel='auto' takes the TorchScript loop without it")
        if kernel == "cpp" and onlstm_cpp.cell() is None:
            raise ValueError("kernel='cpp' needs the C++ cell, which could not be built here (see the warning "
                             "above); kernel='auto' takes the TorchScript loop without it")
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
        """``x``: ``[T, B, C]`` right-padded; returns ``[T, B, D*hidden]``, zero at pads.

        The recurrence runs on packed sequences (sentences sorted longest
        first, step ``t`` over the sentences longer than ``t``): no pad is
        computed.  One gather builds the packed input of both directions
        (direction 1 reversed within each sentence), one gathers the output.
        """
        seq_len, bsz, dim = x.shape
        nd = self.num_directions
        lengths = lengths.to(x.device)
        sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
        steps = torch.arange(seq_len, device=x.device)
        valid = steps.unsqueeze(1) < sorted_lengths.unsqueeze(0)  # [T, B], sorted columns
        t_idx, k_idx = valid.nonzero(as_tuple=True)  # packed order
        num_rows = t_idx.numel()
        batch_sizes = [n for n in valid.sum(1).tolist() if n > 0]
        b_idx = order[k_idx]
        src_t = [t_idx] if nd == 1 else [t_idx, sorted_lengths[k_idx] - 1 - t_idx]
        in_rows = torch.cat([s * bsz + b_idx for s in src_t])  # rows of x.view(T*B, C)
        xs = x.reshape(seq_len * bsz, dim).index_select(0, in_rows).view(nd, num_rows, dim)
        # the matmul dtype: autocast's (half) when it is on, else the input's
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        bias = (self.bias_ih + self.bias_hh).unsqueeze(1)  # [D, 1, G]
        args = [t.to(dtype) for t in (xs, self.weight_ih, bias, self.weight_hh)]
        save = torch.is_grad_enabled() and any(t.requires_grad for t in args)
        kernel = self.kernel
        if kernel == "auto":
            kernel = next((name for name, steps in _STEPS.items() if steps.handles(args[0])), "script")
        with torch.autocast(device_type=device, enabled=False):
            hs = _ONLSTMFunction.apply(*args, batch_sizes, self.hidden_dim, self.chunk_size, save, kernel)
        # hs: [D, N + 1, h], row N zero.  Packed row of each [t, b], N at pads;
        # direction 1 reads it at the reversed position (pads stay in place)
        packed_row = torch.full((seq_len, bsz), num_rows, dtype=torch.long, device=x.device)
        packed_row[t_idx, b_idx] = torch.arange(num_rows, device=x.device)
        out_rows = [packed_row]
        if nd == 2:
            out_rows.append(packed_row.gather(0, reversal_index(lengths, seq_len)) + (num_rows + 1))
        out_rows = torch.stack(out_rows, -1).view(-1)  # [T, B, D] rows of hs.view(D*(N+1), h)
        return hs.reshape(nd * (num_rows + 1), -1).index_select(0, out_rows).view(seq_len, bsz, -1)


class RecurrentLayer(nn.Module):
    """One encoder layer: a (bi)directional ON-LSTM or LSTM over d-dim inputs, output projected back to d.

    ``out = dropout(proj(concat(forward, backward)))``, then ``out + x`` if
    ``residual``; no layer norm.  ``bidirectional=False`` gives a
    ``hidden_dim -> d`` projection; ``kernel`` is :class:`ONLSTM`'s.  See the module docstring for parameter
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
        kernel: str = "auto",
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
            self.rnn = ONLSTM(embed_dim, hidden_dim, bidirectional=bidirectional, chunk_size=chunk_size,
                              kernel=kernel)
        elif cell == "lstm":
            if chunk_size != 1 or kernel != "auto":
                raise ValueError("chunk_size and kernel apply to cell='onlstm' only")
            self.rnn = nn.LSTM(embed_dim, hidden_dim, bidirectional=bidirectional)
        else:
            raise ValueError("cell must be 'onlstm' or 'lstm', got %r" % (cell,))
        self.proj = nn.Linear(num_dir * hidden_dim, embed_dim)
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
