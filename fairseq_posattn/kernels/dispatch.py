"""Which code computes the encoder's self-attention and its ON-LSTM
recurrence, decided here and nowhere else.

:data:`KERNELS` is the one table: the flags' choices, help and build-log
lines and the manual's tables (``python -m fairseq_posattn.kernels``) come
from it.  :func:`check` refuses, when a layer is built, an option that cannot
run here or compute the layer; per call :func:`attention_kernel` and
:func:`recurrent_kernel` pick the kernel.  No flag value asks for the
:data:`CANDIDATES`: only :func:`.candidates.use` puts one in a layer.
"""

import argparse
import functools
import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..modules.convolved_attention import ConvolvedAttention1d, ConvolvedAttention2d
from . import convolved_2d, onlstm_cpp, onlstm_triton, shaw_flash, triton_common
from .candidates import convolved_1d, onlstm_cuda_graphs, onlstm_persistent
from .onlstm_packed import PackedRecurrence

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kernel:
    """One way to compute a ``layer``: its ``name``, the flag ``option`` that
    asks for it (None: a candidate), the manual's words for what it
    ``computes`` and where ``auto`` takes it, its ``home``, what the layer
    calls (``run``; for the recurrence a :class:`.onlstm_packed.PackedRecurrence`),
    whether it ``serves(score_terms, probability_terms, value_terms)``, why
    it is ``unavailable()`` here; a candidate's ``verdict`` (the measurement
    that promotes or removes it) and ``removed_option``."""

    name: str
    layer: str
    option: Optional[str]
    computes: str
    auto: str
    home: str
    run: object = None
    serves: Optional[Callable[..., bool]] = None
    unavailable: Callable[[], Optional[str]] = lambda: None
    verdict: str = ""
    removed_option: Optional[str] = None


ATTENTION, RECURRENCE = "attention", "recurrence"
FLAGS = {ATTENTION: "--encoder-attention-kernel", RECURRENCE: "--encoder-recurrent-kernel"}
_NEEDS_TRITON = dict(unavailable=triton_common.unavailable)

SHAW_TRITON = Kernel(
    "shaw_triton", ATTENTION, "triton", "Shaw relative keys and values of one or two position sets, and no other "
    "term, in one flash-style Triton kernel", "on CUDA where Triton is installed", "fairseq_posattn.kernels.shaw_flash",
    run=shaw_flash.shaw_flash_attention, serves=shaw_flash.computes_layer, **_NEEDS_TRITON)
CONV2D_TRITON = Kernel(
    "conv2d_triton", ATTENTION, "triton", "the 2d convolved attention (softmax, masks, convolution, ReLU, dropout) "
    "in Triton kernels, after any score terms, without value terms", "on CUDA where Triton is installed",
    "fairseq_posattn.kernels.convolved_2d", run=convolved_2d.convolved_attention_2d,
    serves=convolved_2d.computes_convolution(ConvolvedAttention2d), **_NEEDS_TRITON)
SDPA = Kernel(
    "sdpa", ATTENTION, "sdpa", "PyTorch's fused scaled_dot_product_attention, the score terms and the padding as its "
    "additive mask (no probability or value terms)", "where no gradient must reach the score terms, and on CUDA "
    "in float16 or bfloat16 also where one must", "torch.nn.functional")
EXPLICIT = Kernel(
    "explicit", ATTENTION, "explicit", "every term, in PyTorch's operations as the layer defines them", "otherwise: "
    "where the weights are asked for, in float64, with probability or value terms no Triton kernel computes here, "
    "or with a gradient for the score terms outside CUDA's half precision", "fairseq_posattn.modules.attention")
ONLSTM_CPP = Kernel(
    "onlstm_cpp", RECURRENCE, "cpu", "the time steps in C++, float32, with a hand-written backward and oneDNN's "
    "packed weights", "for float32 on the CPU where the cell is built (fairseq-posattn-build-cell)",
    "fairseq_posattn.kernels.onlstm_cpp", run=PackedRecurrence(onlstm_cpp.onlstm_forward, onlstm_cpp.onlstm_backward),
    unavailable=onlstm_cpp.unavailable_reason)
ONLSTM_TRITON = Kernel(
    "onlstm_triton", RECURRENCE, "triton", "per time step one matmul and one fused Triton kernel, with a "
    "hand-written backward", "on CUDA in float32, float16 or bfloat16 where Triton is installed",
    "fairseq_posattn.kernels.onlstm_triton",
    run=PackedRecurrence(onlstm_triton.onlstm_forward, onlstm_triton.onlstm_backward), **_NEEDS_TRITON)
ONLSTM_REFERENCE = Kernel(
    "onlstm_reference", RECURRENCE, "reference", "the definition (Hao et al. 2019, Eq. 3-9), autograd's backward",
    "otherwise (float64, bfloat16 on the CPU, no C++ cell or no Triton)", "fairseq_posattn.modules.onlstm_reference")

KERNELS = (EXPLICIT, SDPA, SHAW_TRITON, CONV2D_TRITON, ONLSTM_REFERENCE, ONLSTM_CPP, ONLSTM_TRITON)
# each flag's values: auto, then its kernels' in the table's order
OPTIONS = {layer: ("auto",) + tuple(dict.fromkeys(k.option for k in KERNELS if k.layer == layer))
           for layer in (ATTENTION, RECURRENCE)}

# the candidates (.candidates): no flag value asks for them, candidates.use puts them in a model's layers
_VERDICT = ("promoted to auto's choice on a GPU where it beats {rival} beyond the per-repeat spread at the default "
            "and a WMT-like batch, in fp16 and bf16 ({bench}); removed otherwise")


def _recurrence_candidate(module, computes: str, removed_option: str, *layout) -> Kernel:
    """A candidate for onlstm_triton's place in ``module``, measured on the row ``onlstm-san-<removed_option>``."""
    bench = f"fairseq-posattn-bench-recurrent --device cuda, fairseq-posattn-bench --rows onlstm-san-{removed_option}"
    return Kernel(module.__name__.rsplit(".", 1)[1], RECURRENCE, None, computes, "", module.__name__,
                  run=PackedRecurrence(module.onlstm_forward, module.onlstm_backward, *layout),
                  removed_option=removed_option, verdict=_VERDICT.format(rival="onlstm_triton", bench=bench),
                  **_NEEDS_TRITON)


CANDIDATES = (
    _recurrence_candidate(onlstm_persistent, "every time step of a layer in one Triton launch each way, the "
                          "programs sharing each step's matmul with a barrier between phases", "persistent"),
    _recurrence_candidate(onlstm_cuda_graphs, "onlstm_triton's steps replayed from CUDA graphs, the batch padded to "
                          "multiples of 8 sentences and steps", "graph", onlstm_cuda_graphs.bucketed_layout),
    Kernel("conv1d_triton", ATTENTION, None, "the 1d convolved attention (softmax, masks, convolution along the "
           "queries as matmuls, ReLU, dropout) in Triton kernels, after any score terms, without value terms", "",
           "fairseq_posattn.kernels.candidates.convolved_1d", run=convolved_1d.convolved_attention_1d,
           serves=convolved_2d.computes_convolution(ConvolvedAttention1d), removed_option="triton", **_NEEDS_TRITON,
           verdict=_VERDICT.format(rival="the explicit path", bench="fairseq-posattn-bench --rows conv1d,conv1d-triton")),
)
_CANDIDATES = {k.name: k for k in CANDIDATES}
REMOVED_IN = "0.3.0"
_REMOVED = {(RECURRENCE, "compile"): "torch.compile of the reference measured slower than the kernels auto takes "
                                     "(docs/results/benchmarks/cpu/compile.txt); fairseq-posattn-bench-compile "
                                     "compiles the layer itself"}
Terms = Tuple[Sequence, Sequence, Sequence]  # a layer's score, probability and value terms
NO_TERMS = ((), (), ())


def kernels(layer: str, option: Optional[str] = None) -> List[Kernel]:
    """``layer``'s kernels (those that ``option`` asks for)."""
    return [k for k in KERNELS if k.layer == layer and option in (None, k.option)]


def _auto_order(layer: str) -> List[Kernel]:
    """``layer``'s kernels in the order ``auto`` tries them: the Triton kernels first, the one it takes otherwise last."""
    return sorted(kernels(layer), key=lambda k: (k.auto.startswith("otherwise"), k.serves is None))


def _computes(kernel: Kernel, terms: Terms) -> bool:
    if kernel.serves is not None:
        return kernel.serves(*terms)
    return kernel is not SDPA or not (terms[1] or terms[2])


def removed(layer: str, option: str, terms: Optional[Terms] = None) -> Optional[str]:
    """The refusal of a value removed from ``layer``'s flag (for a layer of ``terms``), or None."""
    why, scope = _REMOVED.get((layer, option)), ""
    for c in CANDIDATES:
        if (c.layer, c.removed_option) == (layer, option) and (terms is None or _computes(c, terms)):
            why = f"it ran {c.name}, now a candidate ({c.home}) that no flag reaches: {c.verdict}"
            scope = "" if c.serves is None else f" for the layers {c.name} computes"
    flag = FLAGS[layer]
    return why and (f"{flag} {option} was removed{scope} in {REMOVED_IN} (CHANGELOG.md): {why}. Use auto (the "
                    f"default); a checkpoint saved with it loads with --model-overrides "
                    f"\"{{'{flag[2:].replace('-', '_')}': 'auto'}}\"")


def refusal(layer: str, option: str, terms: Terms = NO_TERMS) -> Optional[str]:
    """Why ``option`` cannot compute a ``layer`` of ``terms`` here, or None."""
    flag, asked = FLAGS[layer], kernels(layer, option)
    if option not in OPTIONS[layer]:
        return removed(layer, option) or f"{flag} {option}: it is not one of {', '.join(OPTIONS[layer])}"
    reasons = [k.unavailable() for k in asked]
    if asked and all(reasons):
        return f"{flag} {option}: {reasons[0]}"
    if option == "sdpa" and not _computes(SDPA, terms):
        return (f"{flag} sdpa: PyTorch's fused attention does not return the probabilities that convolved "
                "attention and Shaw relative values need: use auto or explicit (or triton, for Shaw relative keys "
                "and values alone)")
    if layer == ATTENTION and option == "triton" and not any(_computes(k, terms) for k in asked):
        return removed(layer, option, terms) or (
            f"{flag} triton: no Triton kernel computes the layer's terms ("
            + "; ".join(f"{k.name}: {k.computes}" for k in asked) + "): use auto, explicit or sdpa")
    return None


def check(layer: str, option: str, terms: Terms = NO_TERMS) -> None:
    """Refuse, when a layer is built, an option that cannot compute it here (:func:`refusal`)."""
    reason = refusal(layer, option, terms)
    if reason is not None:
        raise ValueError(reason)


def parse_option(layer: str):
    """The argparse ``type`` of ``layer``'s flag: a value not in :data:`OPTIONS` is refused by name."""
    def parse(value: str) -> str:
        if value not in OPTIONS[layer]:
            raise argparse.ArgumentTypeError(refusal(layer, value))
        return value

    return parse


_warn_once = functools.lru_cache(maxsize=None)(logger.warning)


def attention_kernel(layer, query: Tensor, need_weights: bool) -> Kernel:
    """What computes this call of the attention ``layer`` (its ``kernel``, its terms) on ``query``."""
    option = layer.kernel
    terms = (layer.score_terms, layer.probability_terms, layer.value_terms)
    if need_weights or option == "explicit":
        return EXPLICIT
    fast = [k for k in ([_CANDIDATES[option]] if option in _CANDIDATES else kernels(ATTENTION, "triton"))
            if option in ("auto", "triton", k.name) and _computes(k, terms)]
    if fast and query.dtype in triton_common.DTYPES and (
            option != "auto" or (query.is_cuda and fast[0].unavailable() is None)):
        if query.is_cuda or triton_common.interpreted():
            return fast[0]
        _warn_once(f"{fast[0].name} (--encoder-attention-kernel {option}): the Triton kernels run on CUDA tensors "
                   f"(or in Triton's interpreter, TRITON_INTERPRET=1); on {query.device} the explicit path computes "
                   "the same function")
    if not _computes(SDPA, terms):
        return EXPLICIT
    # a gradient must reach the score terms: under no_grad a slice of a parameter still says requires_grad
    score_grad = torch.is_grad_enabled() and len(layer.score_terms) > 0 and (
        query.requires_grad or any(p.requires_grad for p in layer.score_terms.parameters()))
    half_cuda = option == "auto" and query.is_cuda and query.dtype in (torch.float16, torch.bfloat16)
    return SDPA if option == "sdpa" or not score_grad or half_cuda else EXPLICIT


def recurrent_kernel(option: str, device: torch.device, dtype: torch.dtype) -> Kernel:
    """What runs the ON-LSTM recurrence for ``option`` on inputs of this device and (matmul) dtype."""
    if option != "auto":
        return _CANDIDATES.get(option) or kernels(RECURRENCE, option)[0]
    if device.type == "cpu" and dtype == torch.float32 and ONLSTM_CPP.unavailable() is None:
        return ONLSTM_CPP
    if device.type == "cuda" and dtype in triton_common.DTYPES and ONLSTM_TRITON.unavailable() is None:
        return ONLSTM_TRITON
    return ONLSTM_REFERENCE


def describe(layer: str, option: str, terms: Optional[Sequence[Terms]] = None) -> str:
    """The build log's line: what ``option`` runs here for layers of ``terms`` (None: any)."""
    def computes(kernel):
        return terms is None or any(_computes(kernel, t) for t in terms)

    if option != "auto":
        names = [k.name for k in kernels(layer, option) if computes(k)] or [option]
        return f"{FLAGS[layer]} {option}: {' or '.join(names)}"
    return f"{FLAGS[layer]} auto: " + "; ".join(
        f"{k.name} {k.auto}" + (f" (not here: {k.unavailable()})" if k.unavailable() else "")
        for k in _auto_order(layer) if computes(k))


def help_text(layer: str) -> str:
    """The help of ``layer``'s flag."""
    what = {ATTENTION: "what computes the encoder's self-attention", RECURRENCE: "what runs the ON-LSTM recurrence"}
    asks = ", ".join(f"{option} ({' or '.join(k.name for k in kernels(layer, option))})"
                     for option in OPTIONS[layer][1:])
    return (f"{what[layer]}: auto takes " + "; ".join(f"{k.name} {k.auto}" for k in _auto_order(layer))
            + f"; {asks} ask for one; a value that cannot run here or compute the layers is refused")


def markdown_table(layer: Optional[str] = None) -> str:
    """The manual's table of ``layer``'s kernels (None: the candidates')."""
    if layer is None:
        return "\n".join(["| kernel | computes | promoted or removed by | code |", "|---|---|---|---|"]
                         + [f"| `{k.name}` | {k.computes} | {k.verdict} | `{k.home}` |" for k in CANDIDATES])
    return "\n".join([f"| kernel | {FLAGS[layer]} | computes | `auto` takes it | code |", "|---|---|---|---|---|"]
                     + [f"| `{k.name}` | `{k.option}` | {k.computes} | {k.auto} | `{k.home}` |"
                        for k in kernels(layer)])
