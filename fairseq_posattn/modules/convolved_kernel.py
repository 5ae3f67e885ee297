"""The convolved attention around its convolution in Triton kernels.

Dufter, Schmitt & Schütze (2020), Sec. 2.5: ``A' = ReLU(conv(softmax(A)))``,
computed as :mod:`.convolved_attention` and the attention layer's explicit
path compute it: padded keys at float32's most negative logit before the
softmax, rows and columns of padded tokens zeroed before the convolution
("same" zero padding), padded key columns zeroed after the ReLU, then the
attention dropout.

* 2d (:func:`convolved_attention_2d`): one 3x3 filter and bias per head.
  Two kernels run the forward (the softmax with its masks; the convolution,
  ReLU, mask and dropout, writing the map in the values' dtype for ``A' V``)
  and two the backward (the gradient of the convolution's output, with each
  program's share of the filter's and bias's gradients in its own slot,
  summed afterwards; the transposed convolution and the softmax's backward).
* 1d (:func:`convolved_attention_1d`): a width-3 convolution along the
  queries whose channels are the ``T`` keys, a ``[3T, T]`` filter and a
  ``[T]`` bias per head, so each tile of queries is a matmul of its three
  shifted rows of probabilities with the filter (``tl.dot``).  The same
  softmax kernel, then one kernel forward; backward one for the gradient of
  the convolution's output, one for the transposed convolution and the
  softmax's backward, and the filter's and bias's gradients as sums over the
  batch in PyTorch (three matmuls and a sum).

Each replaces some fifteen PyTorch kernels over ``[B, H, T, T]`` maps.  The
padded probabilities are kept for the backward (float32); the dropout mask
is regenerated from its Philox seed, as :mod:`.relative_flash` does.
Everything is float32 inside the kernels (the 1d matmuls in IEEE float32,
as the explicit path's).
"""

import torch
from torch import Tensor

from .relative_flash import MIN_DOT, triton

__all__ = ["convolved_attention_1d", "convolved_attention_2d"]

if triton is not None:
    import triton.language as tl

    from .relative_flash import _PAD_LOGIT, _kept

    @triton.jit
    def _offsets(bh, rows, cols, T):
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
    def _shifted(P, bh, rows, cols, T):
        """``P[bh, rows, cols]`` of a ``[BH, T, T]`` map, zero outside it (the "same" padding)."""
        offsets, inside = _offsets(bh, rows, cols, T)
        return tl.load(P + offsets, mask=inside, other=0.0).to(tl.float32)

    @triton.jit
    def _convolved(P, W, bh, h, rows, cols, T, FLIP: tl.constexpr):
        """``sum_{a,b} w[a, b] P[i + a - 1, j + b - 1]`` (``FLIP``: ``P[i - a + 1, j - b + 1]``,
        the transposed convolution) over a tile."""
        acc = tl.zeros((rows.shape[0], cols.shape[0]), dtype=tl.float32)
        for a in tl.static_range(3):
            for b in tl.static_range(3):
                w = tl.load(W + h * 9 + a * 3 + b)
                if FLIP:
                    acc += w * _shifted(P, bh, rows - a + 1, cols - b + 1, T)
                else:
                    acc += w * _shifted(P, bh, rows + a - 1, cols + b - 1, T)
        return acc

    @triton.jit
    def _convolved_1d(P, W, bh, h, rows, cols, T, BLOCK_K: tl.constexpr, FLIP: tl.constexpr):
        """``sum_a P[rows + a - 1, :] @ W[h, a]`` over a ``[rows, cols]`` tile
        (``W [H, 3, T, T]``: offset, key in, key out); with ``FLIP`` the
        transposed convolution ``sum_a P[rows - a + 1, :] @ W[h, a]^T``."""
        acc = tl.zeros((rows.shape[0], cols.shape[0]), dtype=tl.float32)
        depth = tl.arange(0, BLOCK_K)
        for a in tl.static_range(3):
            shift = 1 - a if FLIP else a - 1
            for k0 in range(0, T, BLOCK_K):
                k = k0 + depth
                p = _shifted(P, bh, rows + shift, k, T)
                inside = (k[:, None] < T) & (cols[None, :] < T)
                if FLIP:  # W[h, a, cols, k]^T
                    w = tl.load(W + ((h * 3 + a) * T + cols[None, :]).to(tl.int64) * T + k[:, None], mask=inside,
                                other=0.0)
                else:  # W[h, a, k, cols]
                    w = tl.load(W + ((h * 3 + a) * T + k[:, None]).to(tl.int64) * T + cols[None, :], mask=inside,
                                other=0.0)
                acc += tl.dot(p, w, input_precision="ieee")
        return acc

    @triton.jit
    def _softmax_forward(L, PADS, P, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
        """``P = softmax(L)`` over the keys, padded keys masked first, then
        rows and columns of padded tokens set to zero."""
        bh = tl.program_id(1)
        b = bh // H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        pad_row = _pads(PADS, b, rows, T, HAS_PADS)
        pad_col = _pads(PADS, b, cols, T, HAS_PADS)
        offsets, valid = _offsets(bh, rows, cols, T)
        logits = tl.load(L + offsets, mask=valid, other=float("-inf")).to(tl.float32)
        logits = tl.where(pad_col[None, :] & (cols[None, :] < T), _PAD_LOGIT, logits)
        logits = tl.where(rows[:, None] < T, logits, 0.0)  # no row: finite, and stored nowhere
        e = tl.exp(logits - tl.max(logits, 1)[:, None])
        p = e / tl.sum(e, 1)[:, None]
        p = tl.where(pad_row[:, None] | pad_col[None, :], 0.0, p)
        tl.store(P + offsets, p, mask=valid)

    @triton.jit
    def _pre_activation(P, W, BIAS, bh, h, rows, cols, T, DIMS: tl.constexpr, BLOCK_K: tl.constexpr):
        """``conv(P) + bias`` over a tile: one 3x3 filter and bias per head
        (``DIMS`` 2), or along the queries with a ``[T]`` bias per head (1)."""
        if DIMS == 2:
            z = _convolved(P, W, bh, h, rows, cols, T, False) + tl.load(BIAS + h)
        else:
            bias = tl.load(BIAS + h * T + cols, mask=cols < T, other=0.0)
            z = _convolved_1d(P, W, bh, h, rows, cols, T, BLOCK_K, False) + bias[None, :]
        return z

    @triton.jit
    def _conv_forward(P, PADS, W, BIAS, OUT, seed, dropout_p, T, H, HAS_PADS: tl.constexpr,
                      DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIMS: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        """``OUT = dropout(ReLU(conv(P) + bias))``, padded key columns zero."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        out = tl.maximum(_pre_activation(P, W, BIAS, bh, h, rows, cols, T, DIMS, BLOCK_K), 0.0)
        out = tl.where(_pads(PADS, b, cols, T, HAS_PADS)[None, :], 0.0, out)
        if DROPOUT:
            out = tl.where(_kept(seed, bh, rows, cols, T, dropout_p), out / (1.0 - dropout_p), 0.0)
        offsets, valid = _offsets(bh, rows, cols, T)
        tl.store(OUT + offsets, out.to(OUT.dtype.element_ty), mask=valid)

    @triton.jit
    def _conv_backward_out(P, PADS, W, BIAS, G_OUT, G_Z, SLOTS, seed, dropout_p, T, H,
                           HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, DIMS: tl.constexpr, BLOCK_K: tl.constexpr):
        """``G_Z``: the gradient of the convolution's output (before the ReLU);
        in 2d this program's share of the filter's (9) and bias's (1) gradients into its slot."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        offsets, valid = _offsets(bh, rows, cols, T)
        g = tl.load(G_OUT + offsets, mask=valid, other=0.0).to(tl.float32)
        if DROPOUT:
            g = tl.where(_kept(seed, bh, rows, cols, T, dropout_p), g / (1.0 - dropout_p), 0.0)
        z = _pre_activation(P, W, BIAS, bh, h, rows, cols, T, DIMS, BLOCK_K)
        g = tl.where(_pads(PADS, b, cols, T, HAS_PADS)[None, :] | (z <= 0.0), 0.0, g)
        tl.store(G_Z + offsets, g, mask=valid)
        if DIMS == 2:
            slot = SLOTS + (bh * tl.num_programs(0) + tl.program_id(0)) * 10
            for a in tl.static_range(3):
                for c in tl.static_range(3):
                    tl.store(slot + a * 3 + c, tl.sum(g * _shifted(P, bh, rows + a - 1, cols + c - 1, T)))
            tl.store(slot + 9, tl.sum(g))

    @triton.jit
    def _softmax_backward(P, PADS, W, G_Z, G_L, T, H, HAS_PADS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, DIMS: tl.constexpr, BLOCK_K: tl.constexpr):
        """``G_L``: the logits' gradient, the transposed convolution of ``G_Z``
        through the zero padding and the softmax (``p * (dp - sum_j p dp)``)."""
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        if DIMS == 2:
            dp = _convolved(G_Z, W, bh, h, rows, cols, T, True)
        else:
            dp = _convolved_1d(G_Z, W, bh, h, rows, cols, T, BLOCK_K, True)
        pads = _pads(PADS, b, rows, T, HAS_PADS)[:, None] | _pads(PADS, b, cols, T, HAS_PADS)[None, :]
        dp = tl.where(pads, 0.0, dp)
        p = _shifted(P, bh, rows, cols, T)
        dl = p * (dp - tl.sum(p * dp, 1)[:, None])
        offsets, valid = _offsets(bh, rows, cols, T)
        tl.store(G_L + offsets, dl, mask=valid)


def _tiles(dims: int, length: int):
    """The launch's tiles: the padded row width (whole rows), rows per program
    (2d: up to 4096 values a tile; 1d: ``tl.dot``'s smallest row tile), and
    the 1d matmuls' depth chunk (with ``DIMS``: the convolution's kind)."""
    width = max(MIN_DOT, triton.next_power_of_2(length))
    rows = max(1, min(16, 4096 // width)) if dims == 2 else MIN_DOT
    return dict(BLOCK_M=rows, BLOCK_N=width), dict(DIMS=dims, BLOCK_K=min(32, width))


class _ConvolvedAttention(torch.autograd.Function):
    """The convolved attention of ``dims`` (1 or 2) dimensions in its kernels."""

    @staticmethod
    def forward(ctx, logits, pads, weight, bias, dropout_p, seed, out_dtype, dims):
        batch, heads, length, _ = logits.shape
        ctx.dims, ctx.dtypes = dims, (logits.dtype, weight.dtype, bias.dtype)
        logits = logits.float().contiguous()
        tiles, ctx.depth = _tiles(dims, length)
        ctx.grid = (triton.cdiv(length, tiles["BLOCK_M"]), batch * heads)
        ctx.launch = dict(T=length, H=heads, HAS_PADS=pads is not None, **tiles)
        ctx.dropout = dict(seed=seed, dropout_p=dropout_p, DROPOUT=dropout_p > 0)
        pads = logits.new_empty(0, dtype=torch.uint8) if pads is None else pads.contiguous().view(torch.uint8)
        weight, bias = weight.float().contiguous(), bias.float().contiguous()
        probs = torch.empty_like(logits)
        _softmax_forward[ctx.grid](logits, pads, probs, **ctx.launch)
        out = torch.empty(logits.shape, dtype=out_dtype, device=logits.device)
        _conv_forward[ctx.grid](probs, pads, weight, bias, out, **ctx.dropout, **ctx.launch, **ctx.depth)
        ctx.save_for_backward(probs, pads, weight, bias)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        probs, pads, weight, bias = ctx.saved_tensors
        grad_z, grad_logits = torch.empty_like(probs), torch.empty_like(probs)
        heads, length = ctx.launch["H"], ctx.launch["T"]
        slots = torch.empty(ctx.grid[1], ctx.grid[0], 10 if ctx.dims == 2 else 0, dtype=torch.float32,
                            device=probs.device)
        _conv_backward_out[ctx.grid](probs, pads, weight, bias, grad_out.contiguous(), grad_z, slots, **ctx.dropout,
                                     **ctx.launch, **ctx.depth)
        _softmax_backward[ctx.grid](probs, pads, weight, grad_z, grad_logits, **ctx.launch, **ctx.depth)
        if ctx.dims == 2:
            sums = slots.view(-1, heads, ctx.grid[0], 10).sum((0, 2))  # per head: 9 filter taps, bias
            grad_weight, grad_bias = sums[:, :9].view(heads, 1, 3, 3), sums[:, 9]
        else:  # for each offset a, the sum over sentences and queries of P[b, h, i + a - 1, k] G_Z[b, h, i, j]
            shifted = torch.nn.functional.pad(probs, (0, 0, 1, 1))  # zero rows around each map
            grad_weight = torch.stack([torch.einsum("bhik,bhij->hkj", shifted[:, :, a : a + length], grad_z)
                                       for a in range(3)], 1)
            grad_bias = grad_z.sum((0, 2))
        logits_dtype, weight_dtype, bias_dtype = ctx.dtypes
        return (grad_logits.to(logits_dtype), None, grad_weight.to(weight_dtype), grad_bias.to(bias_dtype),
                None, None, None, None)


def convolved_attention_2d(
    logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor, dropout_p: float, seed: int,
    out_dtype: torch.dtype,
) -> Tensor:
    """``dropout(A')`` of the 2d convolved attention (Dufter et al. 2020, Sec. 2.5).

    Args:
        logits: ``[B, H, T, T]`` scores with every score term, not yet masked.
        key_padding_mask: ``[B, T]`` bool, True at pads, or None.
        weight, bias: the per-head ``[H, 1, 3, 3]`` filters and ``[H]`` biases.
        dropout_p, seed: attention dropout and its Philox seed.
        out_dtype: the dtype of the returned map (the values').
    """
    return _ConvolvedAttention.apply(logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype, 2)


def convolved_attention_1d(
    logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor, dropout_p: float, seed: int,
    out_dtype: torch.dtype,
) -> Tensor:
    """``dropout(A')`` of the 1d convolved attention (Dufter et al. 2020, Sec. 2.5).

    Args: as :func:`convolved_attention_2d`'s, but ``weight, bias``: the
    per-head filters ``[H, 3, T, T]`` (offset -1, 0, +1 along the queries;
    key in; key out) and biases ``[H, T]`` for this length
    (:meth:`.ConvolvedAttention1d.filters`).
    """
    return _ConvolvedAttention.apply(logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype, 1)
