"""CANDIDATES: kernels tested against the same definitions as the production
ones but not yet measured where they could win; :data:`..dispatch.CANDIDATES`
says what measurement promotes or removes each.  No flag reaches them: the
benchmarks (run by ``scripts/gpu_check.sh``) put them in layers with :func:`use`.
"""

from typing import List

from torch import nn

__all__ = ["use"]


def use(model: nn.Module, name: str) -> List[nn.Module]:
    """Run the candidate ``name`` in every layer of ``model`` that it computes
    (for the benchmarks; no flag reaches it); returns those layers.  A
    candidate that cannot run here or computes no layer is refused."""
    from ...modules.attention import PositionAwareSelfAttention
    from ...modules.recurrent import ONLSTM
    from ..dispatch import CANDIDATES, RECURRENCE

    by_name = {k.name: k for k in CANDIDATES}
    if name not in by_name:
        raise ValueError(f"{name}: not a candidate ({', '.join(by_name)})")
    candidate = by_name[name]
    reason = candidate.unavailable()
    if reason is not None:
        raise ValueError(f"the candidate {name}: {reason}")
    if candidate.layer == RECURRENCE:
        layers = [m for m in model.modules() if isinstance(m, ONLSTM)]
    else:
        layers = [m for m in model.modules() if isinstance(m, PositionAwareSelfAttention)
                  and candidate.serves(m.score_terms, m.probability_terms, m.value_terms)]
    if not layers:
        raise ValueError(f"the candidate {name} computes no layer of this model")
    for layer in layers:
        layer.kernel = name
    return layers
