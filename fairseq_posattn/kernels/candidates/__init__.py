"""CANDIDATES: kernels that compute what a production kernel computes, tested
against the same definitions, but not yet measured where they could win.
No training flag reaches them: the benchmarks run them
(``fairseq-posattn-bench`` rows ``conv1d-triton``, ``onlstm-san-persistent``,
``onlstm-san-graph``; ``fairseq-posattn-bench-recurrent --kernels``) through
:func:`use`, and ``scripts/gpu_check.sh`` runs those on a GPU.  Each entry of
:data:`CANDIDATES` says what measurement promotes it (to ``auto``'s choice
on that device, in :mod:`..dispatch`) or removes it.
"""

from typing import List

from torch import nn

from ...modules.convolved_attention import ConvolvedAttention1d
from .. import Kernel, triton_common
from ..convolved_2d import computes_convolution
from ..onlstm_packed import PackedRecurrence
from . import convolved_1d, onlstm_cuda_graphs, onlstm_persistent

__all__ = ["CANDIDATES", "use"]

_AGAINST = ("promoted to auto's choice on a GPU where it beats {rival} beyond the per-repeat spread at the "
            "default and a WMT-like batch, in fp16 and bf16 ({bench}); removed otherwise")

CANDIDATES = (
    Kernel("onlstm_persistent", "recurrence", None, "every time step of a layer in one Triton launch each way, "
           "the programs sharing each step's matmul with a barrier between phases", "",
           "fairseq_posattn.kernels.candidates.onlstm_persistent",
           run=PackedRecurrence(onlstm_persistent.onlstm_forward, onlstm_persistent.onlstm_backward),
           unavailable=triton_common.unavailable, removed_option="persistent",
           verdict=_AGAINST.format(rival="onlstm_triton", bench="fairseq-posattn-bench-recurrent --device cuda, "
                                                                 "fairseq-posattn-bench --rows onlstm-san-persistent")),
    Kernel("onlstm_cuda_graphs", "recurrence", None, "onlstm_triton's steps replayed from CUDA graphs, the batch "
           "padded to multiples of 8 sentences and steps", "", "fairseq_posattn.kernels.candidates.onlstm_cuda_graphs",
           run=PackedRecurrence(onlstm_cuda_graphs.onlstm_forward, onlstm_cuda_graphs.onlstm_backward,
                                onlstm_cuda_graphs.bucketed_layout),
           unavailable=triton_common.unavailable, removed_option="graph",
           verdict=_AGAINST.format(rival="onlstm_triton", bench="fairseq-posattn-bench-recurrent --device cuda, "
                                                                 "fairseq-posattn-bench --rows onlstm-san-graph")),
    Kernel("conv1d_triton", "attention", None, "the 1d convolved attention (softmax, masks, convolution along "
           "the queries as matmuls, ReLU, dropout) in Triton kernels, after any score terms, without value terms",
           "", "fairseq_posattn.kernels.candidates.convolved_1d", run=convolved_1d.convolved_attention_1d,
           serves=computes_convolution(ConvolvedAttention1d), unavailable=triton_common.unavailable,
           removed_option="triton",
           verdict=_AGAINST.format(rival="the explicit path", bench="fairseq-posattn-bench --rows "
                                                                    "conv1d,conv1d-triton")),
)


def use(model: nn.Module, name: str) -> List[nn.Module]:
    """Run the candidate ``name`` in every layer of ``model`` that it computes
    (for the benchmarks; no flag reaches it); returns those layers.  A
    candidate that cannot run here or computes no layer is refused."""
    from ...modules.attention import PositionAwareSelfAttention
    from ...modules.recurrent import ONLSTM

    by_name = {k.name: k for k in CANDIDATES}
    if name not in by_name:
        raise ValueError(f"{name}: not a candidate ({', '.join(by_name)})")
    candidate = by_name[name]
    reason = candidate.unavailable()
    if reason is not None:
        raise ValueError(f"the candidate {name}: {reason}")
    if candidate.layer == "recurrence":
        layers = [m for m in model.modules() if isinstance(m, ONLSTM)]
    else:
        layers = [m for m in model.modules() if isinstance(m, PositionAwareSelfAttention)
                  and candidate.serves(m.score_terms, m.probability_terms, m.value_terms)]
    if not layers:
        raise ValueError(f"the candidate {name} computes no layer of this model")
    for layer in layers:
        layer.kernel = name
    return layers
