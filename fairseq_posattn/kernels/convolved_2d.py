"""The 2d convolved attention around its convolution in Triton kernels.

Dufter, Schmitt & Schütze (2020), Sec. 2.5: ``A' = ReLU(conv(softmax(A)))``
with one 3x3 filter and bias per head, computed as
:class:`..modules.convolved_attention.ConvolvedAttention2d` and the attention
layer's explicit path compute it: padded keys at float32's most negative
logit before the softmax, rows and columns of padded tokens zeroed before the
convolution ("same" zero padding), padded key columns zeroed after the ReLU,
then the attention dropout.

Two kernels run the forward (the softmax with its masks; the convolution,
ReLU, mask and dropout, writing the map in the values' dtype for ``A' V``)
and two the backward (the gradient of the convolution's output, with each
program's share of the filter's and bias's gradients in its own slot,
summed afterwards; the transposed convolution and the softmax's backward).
Together they replace some fifteen PyTorch kernels over ``[B, H, T, T]``
maps.  The padded probabilities are kept for the backward (float32); the
dropout mask is regenerated from its Philox seed (:mod:`.triton_common`).
Everything is float32 inside the kernels.

:class:`ConvolvedKernels` and the kernels' shared parts (the softmax, the
epilogues) serve any convolution of the map; the 1d convolution's kernels
(:mod:`.candidates.convolved_1d`) reuse them.
"""

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from .triton_common import MIN_DOT, triton

__all__ = ["ConvolvedKernels", "computes_convolution", "convolved_attention", "convolved_attention_2d"]

if triton is not None:
    import triton.language as tl

    from .triton_common import PAD_LOGIT, kept

    @triton.jit
    def map_offsets(bh, rows, cols, T):
        """Where ``[bh, rows, cols]`` of a ``[BH, T, T]`` map lies, and which of it lies inside."""
        inside = (rows[:, None] >= 0) & (rows[:, None] < T) & (cols[None, :] >= 0) & (cols[None, :] < T)
        return (bh * T + rows[:, None]).to(tl.int64) * T + cols[None, :], inside

    @triton.jit
    def is_pad(PADS, b, index, T, HAS_PADS: tl.constexpr):
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
    def softmax_forward(L, PADS, P, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``P = softmax(L)`` over the keys, padded keys masked first, then
        rows and columns of padded tokens set to zero."""
        bh = tl.program_id(1)
        b = bh // H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        pad_row = is_pad(PADS, b, rows, T, HAS_PADS)
        pad_col = is_pad(PADS, b, cols, T, HAS_PADS)
        offsets, valid = map_offsets(bh, rows, cols, T)
        logits = tl.load(L + offsets, mask=valid, other=float("-inf")).to(tl.float32)
        logits = tl.where(pad_col[None, :] & (cols[None, :] < T), PAD_LOGIT, logits)
        logits = tl.where(rows[:, None] < T, logits, 0.0)  # no row: finite, and stored nowhere
        e = tl.exp(logits - tl.max(logits, 1)[:, None])
        p = e / tl.sum(e, 1)[:, None]
        p = tl.where(pad_row[:, None] | pad_col[None, :], 0.0, p)
        tl.store(P + offsets, p, mask=valid)

    @triton.jit
    def store_output(z, OUT, PADS, seed, dropout_p, b, bh, rows, cols, T, HAS_PADS: tl.constexpr,
                     DROPOUT: tl.constexpr):
        """``OUT = dropout(ReLU(z))`` over a tile, padded key columns zero."""
        out = tl.maximum(z, 0.0)
        out = tl.where(is_pad(PADS, b, cols, T, HAS_PADS)[None, :], 0.0, out)
        if DROPOUT:
            out = tl.where(kept(seed, bh, rows, cols, T, dropout_p), out / (1.0 - dropout_p), 0.0)
        offsets, valid = map_offsets(bh, rows, cols, T)
        tl.store(OUT + offsets, out.to(OUT.dtype.element_ty), mask=valid)

    @triton.jit
    def output_gradient(z, G_OUT, G_Z, PADS, seed, dropout_p, b, bh, rows, cols, T, HAS_PADS: tl.constexpr,
                        DROPOUT: tl.constexpr):
        """:func:`store_output` back-propagated to ``z`` (the convolution's
        output before the ReLU) over a tile: stored in ``G_Z`` and returned."""
        offsets, valid = map_offsets(bh, rows, cols, T)
        g = tl.load(G_OUT + offsets, mask=valid, other=0.0).to(tl.float32)
        if DROPOUT:
            g = tl.where(kept(seed, bh, rows, cols, T, dropout_p), g / (1.0 - dropout_p), 0.0)
        g = tl.where(is_pad(PADS, b, cols, T, HAS_PADS)[None, :] | (z <= 0.0), 0.0, g)
        tl.store(G_Z + offsets, g, mask=valid)
        return g

    @triton.jit
    def store_logit_gradient(dp, P, G_L, PADS, b, bh, rows, cols, T, HAS_PADS: tl.constexpr):
        """``G_L``: the logits' gradient from ``dp``, the probabilities' (the
        transposed convolution's output), through the zero padding and the
        softmax (``p * (dp - sum_j p dp)``)."""
        pads = is_pad(PADS, b, rows, T, HAS_PADS)[:, None] | is_pad(PADS, b, cols, T, HAS_PADS)[None, :]
        dp = tl.where(pads, 0.0, dp)
        p = shifted(P, bh, rows, cols, T)
        offsets, valid = map_offsets(bh, rows, cols, T)
        tl.store(G_L + offsets, p * (dp - tl.sum(p * dp, 1)[:, None]), mask=valid)

    @triton.jit
    def _convolved(P, W, bh, h, rows, cols, T, FLIP: tl.constexpr):
        """``sum_{a,b} w[a, b] P[i + a - 1, j + b - 1]`` (``FLIP``: ``P[i - a + 1, j - b + 1]``,
        the transposed convolution) over a tile."""
        acc = tl.zeros((rows.shape[0], cols.shape[0]), dtype=tl.float32)
        for a in tl.static_range(3):
            for b in tl.static_range(3):
                w = tl.load(W + h * 9 + a * 3 + b)
                if FLIP:
                    acc += w * shifted(P, bh, rows - a + 1, cols - b + 1, T)
                else:
                    acc += w * shifted(P, bh, rows + a - 1, cols + b - 1, T)
        return acc

    @triton.jit
    def _conv_forward(P, PADS, W, BIAS, OUT, seed, dropout_p, T, H, HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``OUT = dropout(ReLU(conv(P) + bias))``, padded key columns zero."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        z = _convolved(P, W, bh, h, rows, cols, T, False) + tl.load(BIAS + h)
        store_output(z, OUT, PADS, seed, dropout_p, b, bh, rows, cols, T, HAS_PADS, DROPOUT)

    @triton.jit
    def _conv_backward_out(P, PADS, W, BIAS, G_OUT, G_Z, SLOTS, seed, dropout_p, T, H, HAS_PADS: tl.constexpr,
                           DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``G_Z``: the gradient of the convolution's output (before the ReLU);
        this program's share of the filter's (9) and bias's (1) gradients into its slot."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        z = _convolved(P, W, bh, h, rows, cols, T, False) + tl.load(BIAS + h)
        g = output_gradient(z, G_OUT, G_Z, PADS, seed, dropout_p, b, bh, rows, cols, T, HAS_PADS, DROPOUT)
        slot = SLOTS + (bh * tl.num_programs(0) + tl.program_id(0)) * 10
        for a in tl.static_range(3):
            for c in tl.static_range(3):
                tl.store(slot + a * 3 + c, tl.sum(g * shifted(P, bh, rows + a - 1, cols + c - 1, T)))
        tl.store(slot + 9, tl.sum(g))

    @triton.jit
    def _softmax_backward(P, PADS, W, G_Z, G_L, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
        """``G_L``: the logits' gradient, the transposed convolution of ``G_Z``
        through the zero padding and the softmax."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        dp = _convolved(G_Z, W, bh, h, rows, cols, T, True)
        store_logit_gradient(dp, P, G_L, PADS, b, bh, rows, cols, T, HAS_PADS)


class ConvolvedKernels(NamedTuple):
    """A convolution of the attention map in kernels: its forward (after
    :func:`softmax_forward`), its output gradient and its softmax backward,
    each launched over ``(row blocks, B * H)`` with ``tiles(length)`` (``BLOCK_M``,
    ``BLOCK_N`` and its own constants), the slots per program of the output
    gradient, and the filter's and bias's gradients from the probabilities,
    ``G_Z`` and the slots (with the heads)."""

    forward: object
    output_gradient: object
    softmax_backward: object
    tiles: Callable[[int], dict]
    slot_size: int
    filter_grads: Callable[[Tensor, Tensor, Tensor, int], tuple]


class _ConvolvedAttention(torch.autograd.Function):
    """The convolved attention of a :class:`ConvolvedKernels`."""

    @staticmethod
    def forward(ctx, logits, pads, weight, bias, dropout_p, seed, out_dtype, kernels):
        batch, heads, length, _ = logits.shape
        ctx.kernels, ctx.dtypes = kernels, (logits.dtype, weight.dtype, bias.dtype)
        logits = logits.float().contiguous()
        ctx.tiles = kernels.tiles(length)
        ctx.grid = (triton.cdiv(length, ctx.tiles["BLOCK_M"]), batch * heads)
        ctx.shape = dict(T=length, H=heads, HAS_PADS=pads is not None)
        ctx.dropout = dict(seed=seed, dropout_p=dropout_p, DROPOUT=dropout_p > 0)
        pads = logits.new_empty(0, dtype=torch.uint8) if pads is None else pads.contiguous().view(torch.uint8)
        weight, bias = weight.float().contiguous(), bias.float().contiguous()
        probs = torch.empty_like(logits)
        softmax_forward[ctx.grid](logits, pads, probs, **ctx.shape, BLOCK_M=ctx.tiles["BLOCK_M"],
                                  BLOCK_N=ctx.tiles["BLOCK_N"])
        out = torch.empty(logits.shape, dtype=out_dtype, device=logits.device)
        kernels.forward[ctx.grid](probs, pads, weight, bias, out, **ctx.dropout, **ctx.shape, **ctx.tiles)
        ctx.save_for_backward(probs, pads, weight, bias)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        probs, pads, weight, bias = ctx.saved_tensors
        kernels = ctx.kernels
        grad_z, grad_logits = torch.empty_like(probs), torch.empty_like(probs)
        slots = torch.empty(ctx.grid[1], ctx.grid[0], kernels.slot_size, dtype=torch.float32, device=probs.device)
        kernels.output_gradient[ctx.grid](probs, pads, weight, bias, grad_out.contiguous(), grad_z, slots,
                                          **ctx.dropout, **ctx.shape, **ctx.tiles)
        kernels.softmax_backward[ctx.grid](probs, pads, weight, grad_z, grad_logits, **ctx.shape, **ctx.tiles)
        grad_weight, grad_bias = kernels.filter_grads(probs, grad_z, slots, ctx.shape["H"])
        logits_dtype, weight_dtype, bias_dtype = ctx.dtypes
        return (grad_logits.to(logits_dtype), None, grad_weight.to(weight_dtype), grad_bias.to(bias_dtype),
                None, None, None, None)


def convolved_attention(kernels: ConvolvedKernels, logits: Tensor, key_padding_mask, weight: Tensor,
                        bias: Tensor, dropout_p: float, seed: int, out_dtype: torch.dtype) -> Tensor:
    """``dropout(A')`` of the convolved attention (Dufter et al. 2020, Sec. 2.5) in ``kernels``.

    Args:
        logits: ``[B, H, T, T]`` scores with every score term, not yet masked.
        key_padding_mask: ``[B, T]`` bool, True at pads, or None.
        weight, bias: the per-head filters and biases.
        dropout_p, seed: attention dropout and its Philox seed.
        out_dtype: the dtype of the returned map (the values').
    """
    return _ConvolvedAttention.apply(logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype, kernels)


def computes_convolution(kind: type) -> Callable[..., bool]:
    """Whether kernels of the convolution ``kind`` (a probability term's type)
    compute a layer: that convolution its one probability term, no value terms."""
    def computes(score_terms, probability_terms, value_terms) -> bool:
        return len(probability_terms) == 1 and len(value_terms) == 0 and type(probability_terms[0]) is kind

    return computes


def _tiles_2d(length: int) -> dict:
    """Whole rows (padded to a power of two), up to 4096 values a tile."""
    width = max(MIN_DOT, triton.next_power_of_2(length))
    return dict(BLOCK_M=max(1, min(16, 4096 // width)), BLOCK_N=width)


def _filter_grads_2d(probs: Tensor, grad_z: Tensor, slots: Tensor, heads: int):
    sums = slots.view(-1, heads, slots.size(1), 10).sum((0, 2))  # per head: 9 filter taps, bias
    return sums[:, :9].view(heads, 1, 3, 3), sums[:, 9]


KERNELS_2D = ConvolvedKernels(_conv_forward, _conv_backward_out, _softmax_backward, _tiles_2d, 10,
                              _filter_grads_2d) if triton is not None else None


def convolved_attention_2d(logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor, dropout_p: float,
                           seed: int, out_dtype: torch.dtype) -> Tensor:
    """:func:`convolved_attention` with the per-head ``[H, 1, 3, 3]`` filters and ``[H]`` biases."""
    return convolved_attention(KERNELS_2D, logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype)
