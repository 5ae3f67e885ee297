"""The 2d convolved attention around its convolution in Triton kernels.

Dufter, Schmitt & Schütze (2020), Sec. 2.5: ``A' = ReLU(conv(softmax(A)))``
with one 3x3 filter and bias per head, masked and dropped out as the
attention layer's explicit path does it; two kernels each way, float32
inside (docs/architectures.md).  The convolution is a :class:`Convolution`
of Triton functions, so that the 1d candidate (:mod:`.candidates.convolved_1d`)
runs in the same kernels.
"""

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from .triton_common import MIN_DOT, triton

__all__ = ["Convolution", "computes_convolution", "convolved_attention", "convolved_attention_2d"]

if triton is not None:
    import triton.language as tl

    from .triton_common import PAD_LOGIT, kept

    @triton.jit
    def map_offsets(bh, rows, cols, T):
        """Where ``[bh, rows, cols]`` of a ``[BH, T, T]`` map lies, and which of it lies inside."""
        inside = (rows[:, None] >= 0) & (rows[:, None] < T) & (cols[None, :] >= 0) & (cols[None, :] < T)
        return (bh * T + rows[:, None]).to(tl.int64) * T + cols[None, :], inside

    @triton.jit
    def _pads(PADS, b, index, T, HAS_PADS: tl.constexpr):
        """True at padded tokens (and past ``T``) among ``index``."""
        outside = index >= T
        if HAS_PADS:
            return outside | (tl.load(PADS + b * T + index, mask=index < T, other=1) != 0)
        return outside

    @triton.jit
    def shifted(P, bh, rows, cols, T):
        """``P[bh, rows, cols]`` of a ``[BH, T, T]`` map, zero outside it (the "same" padding)."""
        offsets, inside = map_offsets(bh, rows, cols, T)
        return tl.load(P + offsets, mask=inside, other=0.0).to(tl.float32)

    @triton.jit
    def _softmax_forward(L, PADS, P, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``P = softmax(L)`` over the keys, padded keys masked first, then
        rows and columns of padded tokens set to zero."""
        bh = tl.program_id(1)
        b = bh // H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        pad_row = _pads(PADS, b, rows, T, HAS_PADS)
        pad_col = _pads(PADS, b, cols, T, HAS_PADS)
        offsets, valid = map_offsets(bh, rows, cols, T)
        logits = tl.load(L + offsets, mask=valid, other=float("-inf")).to(tl.float32)
        logits = tl.where(pad_col[None, :] & (cols[None, :] < T), PAD_LOGIT, logits)
        logits = tl.where(rows[:, None] < T, logits, 0.0)  # no row: finite, and stored nowhere
        e = tl.exp(logits - tl.max(logits, 1)[:, None])
        p = e / tl.sum(e, 1)[:, None]
        p = tl.where(pad_row[:, None] | pad_col[None, :], 0.0, p)
        tl.store(P + offsets, p, mask=valid)

    @triton.jit
    def _conv_forward(P, PADS, W, BIAS, OUT, seed, dropout_p, T, H, HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      PRE_ACTIVATION: tl.constexpr):
        """``OUT = dropout(ReLU(conv(P) + bias))``, padded key columns zero."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        out = tl.maximum(PRE_ACTIVATION(P, W, BIAS, bh, h, rows, cols, T, BLOCK_K), 0.0)
        out = tl.where(_pads(PADS, b, cols, T, HAS_PADS)[None, :], 0.0, out)
        if DROPOUT:
            out = tl.where(kept(seed, bh, rows, cols, T, dropout_p), out / (1.0 - dropout_p), 0.0)
        offsets, valid = map_offsets(bh, rows, cols, T)
        tl.store(OUT + offsets, out.to(OUT.dtype.element_ty), mask=valid)

    @triton.jit
    def _conv_backward_out(P, PADS, W, BIAS, G_OUT, G_Z, SLOTS, seed, dropout_p, T, H, HAS_PADS: tl.constexpr,
                           DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, PRE_ACTIVATION: tl.constexpr, FILTER_SLOTS: tl.constexpr):
        """``G_Z``: the gradient of the convolution's output (before the ReLU);
        with ``FILTER_SLOTS`` (the 3x3 filters) this program's share of the
        filter's (9) and bias's (1) gradients into its slot."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        offsets, valid = map_offsets(bh, rows, cols, T)
        g = tl.load(G_OUT + offsets, mask=valid, other=0.0).to(tl.float32)
        if DROPOUT:
            g = tl.where(kept(seed, bh, rows, cols, T, dropout_p), g / (1.0 - dropout_p), 0.0)
        z = PRE_ACTIVATION(P, W, BIAS, bh, h, rows, cols, T, BLOCK_K)
        g = tl.where(_pads(PADS, b, cols, T, HAS_PADS)[None, :] | (z <= 0.0), 0.0, g)
        tl.store(G_Z + offsets, g, mask=valid)
        if FILTER_SLOTS:
            slot = SLOTS + (bh * tl.num_programs(0) + tl.program_id(0)) * 10
            for a in tl.static_range(3):
                for c in tl.static_range(3):
                    tl.store(slot + a * 3 + c, tl.sum(g * shifted(P, bh, rows + a - 1, cols + c - 1, T)))
            tl.store(slot + 9, tl.sum(g))

    @triton.jit
    def _softmax_backward(P, PADS, W, G_Z, G_L, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TRANSPOSED: tl.constexpr):
        """``G_L``: the logits' gradient, the transposed convolution of ``G_Z``
        through the zero padding and the softmax (``p * (dp - sum_j p dp)``)."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        dp = TRANSPOSED(G_Z, W, bh, h, rows, cols, T, BLOCK_K)
        pads = _pads(PADS, b, rows, T, HAS_PADS)[:, None] | _pads(PADS, b, cols, T, HAS_PADS)[None, :]
        dp = tl.where(pads, 0.0, dp)
        p = shifted(P, bh, rows, cols, T)
        offsets, valid = map_offsets(bh, rows, cols, T)
        tl.store(G_L + offsets, p * (dp - tl.sum(p * dp, 1)[:, None]), mask=valid)

    @triton.jit
    def _convolved(P, W, bh, h, rows, cols, T, FLIP: tl.constexpr):
        """``sum_{a,b} w[a, b] P[i + a - 1, j + b - 1]`` (``FLIP``: ``P[i - a + 1, j - b + 1]``,
        the transposed convolution) over a tile."""
        acc = tl.zeros((rows.shape[0], cols.shape[0]), dtype=tl.float32)
        sign: tl.constexpr = -1 if FLIP else 1
        for a in tl.static_range(3):
            for b in tl.static_range(3):
                w = tl.load(W + h * 9 + a * 3 + b)
                acc += w * shifted(P, bh, rows + sign * (a - 1), cols + sign * (b - 1), T)
        return acc

    @triton.jit
    def _pre_activation_2d(P, W, BIAS, bh, h, rows, cols, T, BLOCK_K: tl.constexpr):
        return _convolved(P, W, bh, h, rows, cols, T, False) + tl.load(BIAS + h)

    @triton.jit
    def _transposed_2d(G, W, bh, h, rows, cols, T, BLOCK_K: tl.constexpr):
        return _convolved(G, W, bh, h, rows, cols, T, True)


class Convolution(NamedTuple):
    """Triton functions of a tile ``(map, W, [BIAS,] bh, h, rows, cols, T, BLOCK_K)``: the
    convolution plus bias, and the transposed convolution; the tiles of a length; whether
    the backward sums 3x3 filters' gradients in slots; the filters' and biases' gradients
    ``(probs, G_Z, slots, heads)``."""

    pre_activation: object
    transposed: object
    tiles: Callable[[int], dict]
    filter_slots: bool
    filter_grads: Callable[[Tensor, Tensor, Tensor, int], tuple]


class _ConvolvedAttention(torch.autograd.Function):
    """The convolved attention of a :class:`Convolution`."""

    @staticmethod
    def forward(ctx, logits, pads, weight, bias, dropout_p, seed, out_dtype, conv):
        batch, heads, length, _ = logits.shape
        ctx.conv, ctx.dtypes = conv, (logits.dtype, weight.dtype, bias.dtype)
        logits = logits.float().contiguous()
        ctx.tiles = conv.tiles(length)
        ctx.grid = (triton.cdiv(length, ctx.tiles["BLOCK_M"]), batch * heads)
        ctx.shape = dict(T=length, H=heads, HAS_PADS=pads is not None)
        ctx.dropout = dict(seed=seed, dropout_p=dropout_p, DROPOUT=dropout_p > 0)
        pads = logits.new_empty(0, dtype=torch.uint8) if pads is None else pads.contiguous().view(torch.uint8)
        weight, bias = weight.float().contiguous(), bias.float().contiguous()
        probs = torch.empty_like(logits)
        _softmax_forward[ctx.grid](logits, pads, probs, **ctx.shape, BLOCK_M=ctx.tiles["BLOCK_M"],
                                   BLOCK_N=ctx.tiles["BLOCK_N"])
        out = torch.empty(logits.shape, dtype=out_dtype, device=logits.device)
        _conv_forward[ctx.grid](probs, pads, weight, bias, out, **ctx.dropout, **ctx.shape, **ctx.tiles,
                                PRE_ACTIVATION=conv.pre_activation)
        ctx.save_for_backward(probs, pads, weight, bias)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        probs, pads, weight, bias = ctx.saved_tensors
        conv = ctx.conv
        grad_z, grad_logits = torch.empty_like(probs), torch.empty_like(probs)
        slots = torch.empty(ctx.grid[1], ctx.grid[0], 10 if conv.filter_slots else 0, dtype=torch.float32,
                            device=probs.device)
        _conv_backward_out[ctx.grid](probs, pads, weight, bias, grad_out.contiguous(), grad_z, slots, **ctx.dropout,
                                     **ctx.shape, **ctx.tiles, PRE_ACTIVATION=conv.pre_activation,
                                     FILTER_SLOTS=conv.filter_slots)
        _softmax_backward[ctx.grid](probs, pads, weight, grad_z, grad_logits, **ctx.shape, **ctx.tiles,
                                    TRANSPOSED=conv.transposed)
        grad_weight, grad_bias = conv.filter_grads(probs, grad_z, slots, ctx.shape["H"])
        logits_dtype, weight_dtype, bias_dtype = ctx.dtypes
        return (grad_logits.to(logits_dtype), None, grad_weight.to(weight_dtype), grad_bias.to(bias_dtype),
                None, None, None, None)


def convolved_attention(conv: Convolution, logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor,
                        dropout_p: float, seed: int, out_dtype: torch.dtype) -> Tensor:
    """``dropout(A')`` (Dufter et al. 2020, Sec. 2.5) with ``conv`` from the unmasked ``[B, H, T, T]``
    logits and the ``[B, T]`` padding mask (True at pads) or None, in ``out_dtype`` (the values')."""
    return _ConvolvedAttention.apply(logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype, conv)


def _filter_grads_2d(probs: Tensor, grad_z: Tensor, slots: Tensor, heads: int):
    sums = slots.view(-1, heads, slots.size(1), 10).sum((0, 2))  # per head: 9 filter taps, bias
    return sums[:, :9].view(heads, 1, 3, 3), sums[:, 9]


def _tiles_2d(length: int) -> dict:
    """Whole rows (padded to a power of two), up to 4096 values a tile."""
    width = max(MIN_DOT, triton.next_power_of_2(length))
    return dict(BLOCK_M=max(1, min(16, 4096 // width)), BLOCK_N=width, BLOCK_K=1)


def convolved_attention_2d(logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor, dropout_p: float,
                           seed: int, out_dtype: torch.dtype) -> Tensor:
    """:func:`convolved_attention` with the per-head ``[H, 1, 3, 3]`` filters and ``[H]`` biases."""
    conv = Convolution(_pre_activation_2d, _transposed_2d, _tiles_2d, True, _filter_grads_2d)
    return convolved_attention(conv, logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype)
