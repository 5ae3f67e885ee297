"""Packed-sequence bookkeeping shared by the ON-LSTM's recurrences.

The TorchScript loop (:mod:`.recurrent`), the C++ loop (:mod:`.onlstm_cpp`)
and the fused Triton steps (:mod:`.onlstm_triton`) walk the same packed
layout -- time-major rows, sentences sorted longest first, step ``t`` over
the ``batch_sizes[t]`` sentences longer than ``t`` -- and share its buffers,
its step offsets and the recurrent weight gradient computed after the loop;
on the CPU the matmuls take oneDNN's packed weights (laid out once per call,
or in inference kept from call to call).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

__all__ = [
    "direction_matmuls", "direction_weight_grads", "forget_onednn_layouts", "gate_buffers", "kept_onednn_layouts", "onednn_applies",
    "onednn_layouts", "onednn_weights", "recurrent_matmul", "recurrent_weight_grad",
    "state_buffers", "step_starts",
]


def gate_buffers(xs: Tensor, w_ih: Tensor, bias: Tensor, save: bool) -> Tuple[Tensor, Tensor]:
    """The input projections ``xg [D, N, G]`` of all steps and directions (one
    ``baddbmm`` with the bias) and the buffer of the activated gates (``xg``
    itself when the dtypes agree; empty without ``save``)."""
    num_dir, num_rows, _ = xs.shape
    acc = torch.promote_types(xs.dtype, torch.float32)
    xg = torch.baddbmm(bias, xs, w_ih)
    if not save:
        acts = torch.empty(num_dir, 0, w_ih.size(2), dtype=acc, device=xs.device)
    elif xg.dtype == acc:
        acts = xg
    else:
        acts = torch.empty(xg.shape, dtype=acc, device=xs.device)
    return xg, acts


def state_buffers(xs: Tensor, batch_sizes: List[int], hidden: int, save: bool) -> Tuple[Tensor, Tensor]:
    """The forward's cell states (every step's, or one step's without
    ``save``; float32 or wider) and hidden states ``[D, N + 1, hidden]``
    (``xs``'s dtype), row ``N`` zero, for packed inputs ``xs [D, N, C]``."""
    num_dir, num_rows, _ = xs.shape
    acc = torch.promote_types(xs.dtype, torch.float32)
    max_batch = batch_sizes[0] if len(batch_sizes) > 0 else 0
    cells = torch.empty(num_dir, num_rows if save else max_batch, hidden, dtype=acc, device=xs.device)
    out = torch.empty(num_dir, num_rows + 1, hidden, dtype=xs.dtype, device=xs.device)
    out[:, num_rows] = 0.0
    return cells, out


def step_starts(batch_sizes: List[int]) -> List[int]:
    """First packed row of each step."""
    starts: List[int] = []
    start = 0
    for n in batch_sizes:
        starts.append(start)
        start += n
    return starts


def recurrent_weight_grad(hs: Tensor, grad_xg: List[Tensor], w_hh: Tensor, batch_sizes: List[int]) -> Tensor:
    """``dW_hh = sum_t h_{t-1}^T dg_t`` (``h_{-1} = 0``; ``grad_xg`` one ``[N, G]``
    per direction): one matmul per direction over all steps.

    ``h_{t-1}`` is the first ``batch_sizes[t]`` rows of step ``t - 1``, all
    of it without padding."""
    steps = len(batch_sizes)
    if steps < 2:
        return torch.zeros_like(w_hh)
    first = batch_sizes[0]
    num_rows = grad_xg[0].size(0)
    if batch_sizes[steps - 1] == first:
        h_prev = hs[:, : num_rows - first]
    else:
        starts = step_starts(batch_sizes)
        h_prev = torch.cat([hs[:, starts[t - 1] : starts[t - 1] + batch_sizes[t]] for t in range(1, steps)], 1)
    return direction_weight_grads(h_prev, [g[first:] for g in grad_xg], w_hh)


def direction_weight_grads(x: Tensor, grad_out: List[Tensor], weight: Tensor) -> Tensor:
    """The gradient of a per-direction product ``x[d] @ weight[d]``: ``x[d]^T @ grad_out[d]``
    for every direction, one ``mm`` each written into one tensor shaped like ``weight``."""
    grad = torch.empty_like(weight)
    for d in range(len(grad_out)):
        torch.mm(x[d].t(), grad_out[d], out=grad[d])
    return grad


def onednn_weights(w: Tensor, batch_sizes: List[int]) -> List[Tensor]:
    """:func:`onednn_layouts` of the recurrent weight ``w [D, K, M]`` for the
    per-step products ``h @ w[d]`` (none when no step reads ``h_{t-1}``).

    Laid out once per call (a copy of the weight), then every step's
    ``[n, K] @ [K, M]`` reads it as one blocked GEMM: on a 2-core AVX-512
    CPU about twice the speed of ``baddbmm`` at ``n = 32, K = 512, M = 3072``."""
    if len(batch_sizes) < 2:
        return []
    return onednn_layouts(w, batch_sizes[0])


def onednn_layouts(w: Tensor, rows: int) -> List[Tensor]:
    """Each direction's ``w[d]`` (``w [D, K, M]``) in oneDNN's packed layout for ``[rows, K] @ w[d]``."""
    return [torch.ops.mkldnn._reorder_linear_weight(w[d].t().contiguous(), rows) for d in range(w.size(0))]


_KEPT = WeakIdKeyDictionary()  # weight -> (a copy of the values laid out, their oneDNN layouts)


def kept_onednn_layouts(w: Tensor, rows: int) -> List[Tensor]:
    """:func:`onednn_layouts` of ``w``, kept with ``w`` for as long as it holds
    the same values: inference reads the same weights call after call, and
    laying them out costs about 8 ms of a layer's 180 at d = 512.  Each call
    compares ``w`` with a copy of the values laid out (about 1 ms per
    weight), which also sees writes through ``w.data`` that autograd's version
    counter does not.  Memory: a copy and a layout of ``w`` until ``w`` is
    freed or :func:`forget_onednn_layouts` drops them."""
    kept = _KEPT.get(w)
    if kept is None or not torch.equal(kept[0], w):
        kept = (w.detach().clone(), onednn_layouts(w, rows))
        _KEPT[w] = kept
    return kept[1]


def forget_onednn_layouts(*weights: Tensor) -> None:
    """Drop the layouts :func:`kept_onednn_layouts` keeps for ``weights`` (training
    changes them every update: keeping them would only hold memory)."""
    for w in weights:
        _KEPT.pop(w, None)


def direction_matmuls(x: List[Tensor], w: List[Tensor], packed: List[Tensor]) -> List[Tensor]:
    """``x[d] @ w[d]`` for every direction (a ``[D, ...]`` tensor or a list
    of one matrix per direction each), one matrix each: ``mm``, or one oneDNN
    matmul each on ``packed`` (:func:`onednn_layouts` of ``w``; at
    ``[2048, 512] @ [512, 3072]`` on a 2-core AVX-512 CPU 32 ms against
    ``mm``'s 40)."""
    if len(packed) == 0:
        return [torch.mm(x[d], w[d]) for d in range(len(x))]
    return [torch.ops.mkldnn._linear_pointwise(x[d], packed[d], None, "none", [None], "") for d in range(len(x))]


def recurrent_matmul(base: Tensor, h: Tensor, w: Tensor, packed: List[Tensor]) -> Tensor:
    """``base + h @ w`` over ``[D, n, *]`` tensors: one ``baddbmm``, or with
    :func:`onednn_weights` one oneDNN matmul per direction with the sum fused in."""
    if len(packed) == 0:
        return torch.baddbmm(base, h, w)
    return torch.stack([torch.ops.mkldnn._linear_pointwise(h[d], base[d], packed[d], None, "add")
                        for d in range(len(packed))])


# torch has the packed-weight ops (torch < 2.0 has neither)
_ONEDNN_OPS = all(hasattr(torch.ops.mkldnn, op) for op in ("_reorder_linear_weight", "_linear_pointwise"))


def onednn_applies(w: Tensor) -> bool:
    """oneDNN's packed matmuls take the recurrence: float32 on a CPU, oneDNN built and enabled
    (``torch.backends.mkldnn.flags(enabled=False)`` turns them off), and a torch that has the ops."""
    return (w.device.type == "cpu" and w.dtype == torch.float32 and _ONEDNN_OPS
            and torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled))
