"""Putting a candidate kernel (:mod:`..kernels.candidates`) in a model's
layers: no flag value reaches one, the benchmarks (run by
``scripts/gpu_check.sh``) and the tests do it with :func:`use`.
"""

from typing import List

from torch import nn

from ..kernels.manual import CANDIDATES, RECURRENCE
from .attention import PositionAwareSelfAttention
from .kernel_choice import layer_terms, serves, unavailable
from .recurrent import ONLSTM

__all__ = ["use"]


def use(model: nn.Module, name: str) -> List[nn.Module]:
    """Run the candidate ``name`` in every layer of ``model`` that it computes
    (for the benchmarks; no flag reaches it); returns those layers.  A
    candidate that cannot run here or computes no layer is refused."""
    by_name = {k.name: k for k in CANDIDATES}
    if name not in by_name:
        raise ValueError(f"{name}: not a candidate ({', '.join(by_name)})")
    reason = unavailable(name)
    if reason is not None:
        raise ValueError(f"the candidate {name}: {reason}")
    if by_name[name].layer == RECURRENCE:
        layers = [m for m in model.modules() if isinstance(m, ONLSTM)]
    else:
        layers = [m for m in model.modules() if isinstance(m, PositionAwareSelfAttention)
                  and serves(name, layer_terms(m))]
    if not layers:
        raise ValueError(f"the candidate {name} computes no layer of this model")
    for layer in layers:
        layer.kernel = name
    return layers
