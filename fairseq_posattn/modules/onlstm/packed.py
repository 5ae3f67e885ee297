"""The packed layout that the fast paths of the ON-LSTM (:mod:`.cpu_cell`,
:mod:`.triton_steps`) walk: time-major rows, sentences sorted longest first,
step ``t`` over the ``batch_sizes[t]`` sentences longer than ``t``; its
buffers, its step offsets and the weight gradients computed after the loop.

On a float32 CPU the matmuls take oneDNN's packed weights, through torch's
private ops ``mkldnn::_reorder_linear_weight`` and ``mkldnn::_linear_pointwise``
(the C++ cell calls the latter too).  They are used only on the torch
versions they were run with (:data:`ONEDNN_TESTED_TORCH`) and after one probe
call of each has worked; anywhere else the products are ``mm``/``addmm``.
"""

import logging
from typing import List, Tuple

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

__all__ = [
    "ONEDNN_TESTED_TORCH", "direction_matmuls", "direction_weight_grads", "forget_onednn_layouts", "gate_buffers",
    "kept_onednn_layouts", "onednn_applies", "onednn_layouts", "onednn_weights", "recurrent_weight_grad",
    "state_buffers", "step_starts",
]

logger = logging.getLogger(__name__)

# the torch releases whose oneDNN ops the package was run with (first, last)
ONEDNN_TESTED_TORCH = ((2, 11), (2, 13))


def gate_buffers(xs: Tensor, w_ih: Tensor, bias: Tensor, save: bool, empty=torch.empty) -> Tuple[Tensor, Tensor]:
    """The input projections ``xg [D, N, G]`` of all steps and directions (one
    ``baddbmm`` with the bias) and the buffer of the activated gates (``xg``
    itself when the dtypes agree; empty without ``save``), in buffers taken
    from ``empty`` (``torch.empty``'s signature)."""
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
    """The forward's cell states (every step's, or one step's without
    ``save``; float32 or wider) and hidden states ``[D, N + 1, hidden]``
    (``xs``'s dtype), row ``N`` zero, for packed inputs ``xs [D, N, C]``,
    taken from ``empty`` (``torch.empty``'s signature)."""
    num_dir, num_rows, _ = xs.shape
    acc = torch.promote_types(xs.dtype, torch.float32)
    max_batch = batch_sizes[0] if len(batch_sizes) > 0 else 0
    cells = empty((num_dir, num_rows if save else max_batch, hidden), dtype=acc, device=xs.device)
    out = empty((num_dir, num_rows + 1, hidden), dtype=xs.dtype, device=xs.device)
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
    ``[n, K] @ [K, M]`` reads it as one blocked GEMM."""
    if len(batch_sizes) < 2:
        return []
    return onednn_layouts(w, batch_sizes[0])


def onednn_layouts(w: Tensor, rows: int) -> List[Tensor]:
    """Each direction's ``w[d]`` (``w [D, K, M]``) in oneDNN's packed layout for ``[rows, K] @ w[d]``."""
    return [torch.ops.mkldnn._reorder_linear_weight(w[d].t().contiguous(), rows) for d in range(w.size(0))]


_KEPT = WeakIdKeyDictionary()  # weight -> (a copy of the values laid out, their oneDNN layouts)


def kept_onednn_layouts(w: Tensor, rows: int) -> List[Tensor]:
    """:func:`onednn_layouts` of ``w``, kept with ``w`` for as long as it holds
    the same values: inference reads the same weights call after call.  Each call
    compares ``w`` with a copy of the values laid out, which also sees writes through ``w.data`` that autograd's version
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
    matmul each on ``packed`` (:func:`onednn_layouts` of ``w``)."""
    if len(packed) == 0:
        return [torch.mm(x[d], w[d]) for d in range(len(x))]
    return [torch.ops.mkldnn._linear_pointwise(x[d], packed[d], None, "none", [None], "") for d in range(len(x))]


def _torch_release() -> Tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


_PROBE: dict = {}


def _onednn_works() -> bool:
    """One probe call of each private op, as the matmuls call them (once per
    process); an error from either (a changed signature, a missing op) turns
    them off with one warning."""
    if "works" not in _PROBE:
        try:
            w = torch.ones(2, 3)
            layout = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), 1)
            x = torch.ones(1, 2)
            plain = torch.ops.mkldnn._linear_pointwise(x, layout, None, "none", [None], "")
            summed = torch.ops.mkldnn._linear_pointwise(x, torch.ones(1, 3), layout, None, "add")
            _PROBE["works"] = bool(torch.equal(plain, x @ w) and torch.equal(summed, x @ w + 1))
        except Exception as err:  # noqa: BLE001 - any error from a private op means: don't use it
            logger.warning("oneDNN's packed matmuls do not work here (%s); the ON-LSTM uses addmm", err)
            _PROBE["works"] = False
    return _PROBE["works"]


def onednn_applies(w: Tensor) -> bool:
    """oneDNN's packed matmuls take the products: float32 on a CPU, oneDNN
    built and enabled (``torch.backends.mkldnn.flags(enabled=False)`` turns
    them off), a torch release in :data:`ONEDNN_TESTED_TORCH`, and the probe worked."""
    first, last = ONEDNN_TESTED_TORCH
    return (w.device.type == "cpu" and w.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled)
            and first <= _torch_release() <= last and _onednn_works())
