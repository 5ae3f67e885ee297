"""oneDNN's packed weights for the ON-LSTM's float32 matmuls on the CPU: the
only module that calls torch's private ``mkldnn::_reorder_linear_weight``
(a weight laid out once) and ``mkldnn::_linear_pointwise`` (a product with
it; the C++ cell :mod:`.onlstm_cpp` calls it on the layouts it is handed).
Used only on the torch releases they were checked on
(:data:`ONEDNN_TESTED_TORCH`) after one probe call of each has worked;
anywhere else the products are ``mm``/``addmm``.
"""

import logging
from typing import List

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["MATMUL_OPS", "ONEDNN_TESTED_TORCH", "applies", "direction_matmuls", "forget_layouts", "layouts"]

logger = logging.getLogger(__name__)

# the torch releases whose oneDNN ops the package was checked on (first, last)
ONEDNN_TESTED_TORCH = ((2, 11), (2, 13))
# the profiler's names of the oneDNN matmul (for fairseq-posattn-bench-recurrent --profile)
MATMUL_OPS = ("mkldnn::_linear_pointwise",)


def layouts(w: Tensor, rows: int, keep: bool = False) -> List[Tensor]:
    """Each ``w[d]`` (``w [D, K, M]``) in oneDNN's layout for ``[rows, K] @ w[d]`` (none where
    :func:`applies` says no); with ``keep`` (inference) kept while ``w`` holds the values
    laid out (compared each call), until ``w`` is freed or :func:`forget_layouts`."""
    if not applies(w):
        return []
    if not keep:
        return [torch.ops.mkldnn._reorder_linear_weight(w[d].t().contiguous(), rows) for d in range(w.size(0))]
    kept = _KEPT.get(w)
    if kept is None or not torch.equal(kept[0], w):
        kept = _KEPT[w] = (w.detach().clone(), layouts(w, rows))
    return kept[1]


_KEPT = WeakIdKeyDictionary()  # weight -> (a copy of the values laid out, their oneDNN layouts)


def forget_layouts(*weights: Tensor) -> None:
    """Drop the layouts kept for ``weights`` (training changes them every update)."""
    for w in weights:
        _KEPT.pop(w, None)


def direction_matmuls(x: List[Tensor], w: List[Tensor], packed: List[Tensor]) -> List[Tensor]:
    """``x[d] @ w[d]`` for every direction: ``mm``, or oneDNN's matmul on ``packed`` (:func:`layouts` of ``w``)."""
    if len(packed) == 0:
        return [torch.mm(x[d], w[d]) for d in range(len(x))]
    return [torch.ops.mkldnn._linear_pointwise(x[d], packed[d], None, "none", [None], "") for d in range(len(x))]


_PROBE: dict = {}


def _onednn_works() -> bool:
    """One probe call of each private op, once per process; an error from either turns them off with one warning."""
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


def applies(w: Tensor) -> bool:
    """oneDNN's packed matmuls take the products: float32 on a CPU, oneDNN built and
    enabled, a torch release in :data:`ONEDNN_TESTED_TORCH`, and the probe worked."""
    first, last = ONEDNN_TESTED_TORCH
    release = tuple(int(part) for part in torch.__version__.split(".")[:2])
    return (w.device.type == "cpu" and w.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled)
            and first <= release <= last and _onednn_works())
