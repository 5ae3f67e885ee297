"""CANDIDATE: the 1d convolved attention in Triton kernels.

Dufter et al. (2020), Sec. 2.5, with the 1d convolution: a width-3
convolution along the queries whose channels are the ``T`` keys, a
``[3T, T]`` filter and a ``[T]`` bias per head
(:class:`...modules.convolved_attention.ConvolvedAttention1d`), so each tile
of queries is a matmul of its three shifted rows of probabilities with the
filter (``tl.dot``, IEEE float32 as the explicit path's matmuls), in the 2d
convolution's kernels (:mod:`..convolved_2d`); the filter's and bias's
gradients are sums over the batch in PyTorch.
"""

import torch
from torch import Tensor

from ..convolved_2d import Convolution, convolved_attention
from ..triton_common import MIN_DOT, triton

__all__ = ["convolved_attention_1d"]

if triton is not None:
    import triton.language as tl

    from ..convolved_2d import shifted

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
                p = shifted(P, bh, rows + shift, k, T)
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
    def _pre_activation_1d(P, W, BIAS, bh, h, rows, cols, T, BLOCK_K: tl.constexpr):
        bias = tl.load(BIAS + h * T + cols, mask=cols < T, other=0.0)
        return _convolved_1d(P, W, bh, h, rows, cols, T, BLOCK_K, False) + bias[None, :]

    @triton.jit
    def _transposed_1d(G, W, bh, h, rows, cols, T, BLOCK_K: tl.constexpr):
        return _convolved_1d(G, W, bh, h, rows, cols, T, BLOCK_K, True)


def _tiles_1d(length: int) -> dict:
    """Whole rows (padded to a power of two), ``tl.dot``'s smallest row tile, depth chunks of up to 32."""
    width = max(MIN_DOT, triton.next_power_of_2(length))
    return dict(BLOCK_M=MIN_DOT, BLOCK_N=width, BLOCK_K=min(32, width))


def _filter_grads_1d(probs: Tensor, grad_z: Tensor, slots: Tensor, heads: int):
    """For each offset a, the sum over sentences and queries of ``P[b, h, i + a - 1, k] G_Z[b, h, i, j]``."""
    length = probs.size(2)
    shifted_maps = torch.nn.functional.pad(probs, (0, 0, 1, 1))  # zero rows around each map
    grad_weight = torch.stack([torch.einsum("bhik,bhij->hkj", shifted_maps[:, :, a : a + length], grad_z)
                               for a in range(3)], 1)
    return grad_weight, grad_z.sum((0, 2))


def convolved_attention_1d(logits: Tensor, key_padding_mask, weight: Tensor, bias: Tensor, dropout_p: float,
                           seed: int, out_dtype: torch.dtype) -> Tensor:
    """:func:`..convolved_2d.convolved_attention` with the per-head filters
    ``[H, 3, T, T]`` (offset -1, 0, +1 along the queries; key in; key out)
    and biases ``[H, T]`` for this length (:meth:`.ConvolvedAttention1d.filters`)."""
    conv = Convolution(_pre_activation_1d, _transposed_1d, _tiles_1d, False, _filter_grads_1d)
    return convolved_attention(conv, logits, key_padding_mask, weight, bias, dropout_p, seed, out_dtype)
