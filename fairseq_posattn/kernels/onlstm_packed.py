"""The packed layout that the ON-LSTM's fast paths (:class:`PackedRecurrence`)
walk: time-major rows, sentences sorted longest first, step ``t`` over the
``batch_sizes[t]`` sentences longer than ``t``, so no pad is computed; its
buffers, step offsets and the weight gradients computed after the loop.
"""

import itertools
from typing import Callable, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["PackedRecurrence", "direction_weight_grads", "gate_buffers", "packed_layout", "recurrent_weight_grad",
           "state_buffers", "step_starts"]


def packed_layout(lengths: Tensor, reverse: Optional[Tensor], seq_len: int,
                  bsz: int) -> Tuple[Tensor, List[int], Tensor]:
    """The rows of ``x.view(T*B, C)`` that each direction reads, in packed
    order (one tensor, direction 0 first; direction 1, if ``reverse``
    (:func:`..modules.onlstm_reference.reversal_index`) is given, each
    sentence backwards), ``batch_sizes``, and the packed row of each
    ``[t, b]`` (``N``, the zero row, at pads)."""
    device = lengths.device
    steps = torch.arange(seq_len, device=device)
    sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
    valid = steps.unsqueeze(1) < sorted_lengths.unsqueeze(0)  # [T, B], sorted columns
    t_idx, k_idx = valid.nonzero(as_tuple=True)  # packed order
    num_rows = t_idx.numel()
    batch_sizes = [n for n in valid.sum(1).tolist() if n > 0]
    b_idx = order[k_idx]
    src_t = [t_idx] if reverse is None else [t_idx, sorted_lengths[k_idx] - 1 - t_idx]
    in_rows = torch.cat([s * bsz + b_idx for s in src_t])
    packed_row = torch.full((seq_len, bsz), num_rows, dtype=torch.long, device=device)
    packed_row[t_idx, b_idx] = torch.arange(num_rows, device=device)
    return in_rows, batch_sizes, packed_row


class PackedRecurrence(NamedTuple):
    """A fast path: ``forward`` and ``backward`` as :mod:`.onlstm_cpp`'s (a
    forward's further results reach its backward after its arguments) on the
    rows of ``layout`` (:func:`packed_layout`'s signature)."""

    forward: Callable
    backward: Callable
    layout: Callable = packed_layout


def gate_buffers(xs: Tensor, w_ih: Tensor, bias: Tensor, save: bool, empty=torch.empty) -> Tuple[Tensor, Tensor]:
    """The input projections ``xg [D, N, G]`` and the activated gates' buffer (``xg`` where the
    dtypes agree; empty without ``save``), from ``empty`` (``torch.empty``'s signature)."""
    num_dir, num_rows, _ = xs.shape
    num_gates = w_ih.size(2)
    acc = torch.promote_types(xs.dtype, torch.float32)
    xg = torch.baddbmm(bias, xs, w_ih, out=empty((num_dir, num_rows, num_gates), dtype=xs.dtype, device=xs.device))
    if not save:
        acts = empty((num_dir, 0, num_gates), dtype=acc, device=xs.device)
    elif xg.dtype == acc:
        acts = xg
    else:
        acts = empty((num_dir, num_rows, num_gates), dtype=acc, device=xs.device)
    return xg, acts


def state_buffers(xs: Tensor, batch_sizes: List[int], hidden: int, save: bool,
                  empty=torch.empty) -> Tuple[Tensor, Tensor]:
    """The cell states (every step's, or one step's without ``save``; float32
    or wider) and hidden states ``[D, N + 1, hidden]``, row ``N`` zero, from ``empty``."""
    num_dir, num_rows, _ = xs.shape
    acc = torch.promote_types(xs.dtype, torch.float32)
    max_batch = batch_sizes[0] if len(batch_sizes) > 0 else 0
    cells = empty((num_dir, num_rows if save else max_batch, hidden), dtype=acc, device=xs.device)
    out = empty((num_dir, num_rows + 1, hidden), dtype=xs.dtype, device=xs.device)
    out[:, num_rows] = 0.0
    return cells, out


def step_starts(batch_sizes: List[int]) -> List[int]:
    """First packed row of each step."""
    return list(itertools.accumulate(batch_sizes[:-1], initial=0)) if batch_sizes else []


def recurrent_weight_grad(hs: Tensor, grad_xg: List[Tensor], w_hh: Tensor, batch_sizes: List[int]) -> Tensor:
    """``dW_hh = sum_t h_{t-1}^T dg_t`` (``h_{-1} = 0``; ``grad_xg`` one ``[N, G]`` per
    direction), one matmul per direction; ``h_{t-1}``: the first ``batch_sizes[t]`` rows of step ``t - 1``."""
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
    """The gradient of a per-direction product ``x[d] @ weight[d]``: ``x[d]^T @ grad_out[d]`` for every ``d``."""
    grad = torch.empty_like(weight)
    for d in range(len(grad_out)):
        torch.mm(x[d].t(), grad_out[d], out=grad[d])
    return grad
