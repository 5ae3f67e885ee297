"""Which code computes the encoder's self-attention and its ON-LSTM
recurrence, decided here and nowhere else.

:data:`KERNELS` is the one table of kernels.  The choices of
``--encoder-attention-kernel`` and ``--encoder-recurrent-kernel``
(:data:`OPTIONS`), their help (:func:`help_text`), the build log's line
(:func:`describe`) and the manual's tables (``python -m
fairseq_posattn.kernels``) come from it.  When a layer is built,
:func:`check` refuses an option that cannot run here or cannot compute the
layer's terms, and names the CHANGELOG entry of a removed one
(:func:`removed`); per call, :func:`attention_kernel` and
:func:`recurrent_kernel` pick the kernel.

``auto`` takes, for the attention: a Triton kernel where one computes the
layer's terms on CUDA; else PyTorch's fused attention where no gradient must
reach the score terms (on CUDA in half precision also where one must); the
explicit steps otherwise and whenever the probabilities are needed.  For the
recurrence: the C++ cell for float32 on the CPU, the Triton steps on CUDA,
the reference otherwise.  A layer's ``kernel`` may also name a candidate
(:mod:`.candidates`); only :func:`.candidates.use` sets one.
"""

import argparse
import functools
import logging
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..modules.convolved_attention import ConvolvedAttention2d
from . import Kernel, convolved_2d, onlstm_cpp, onlstm_triton, shaw_flash, triton_common
from .candidates import CANDIDATES
from .onlstm_packed import PackedRecurrence

__all__ = ["FLAGS", "KERNELS", "OPTIONS", "attention_kernel", "check", "describe", "help_text", "markdown_table",
           "parse_option", "recurrent_kernel", "removed"]

logger = logging.getLogger(__name__)

ATTENTION, RECURRENCE = "attention", "recurrence"
FLAGS = {ATTENTION: "--encoder-attention-kernel", RECURRENCE: "--encoder-recurrent-kernel"}
HALF = (torch.float16, torch.bfloat16)

EXPLICIT = Kernel(
    "explicit", ATTENTION, "explicit", "every term, in PyTorch's operations as the layer defines them",
    "otherwise: where the weights are asked for, in float64, with probability or value terms no Triton kernel "
    "computes here, or with a gradient for the score terms outside CUDA's half precision",
    "fairseq_posattn.modules.attention")
SDPA = Kernel(
    "sdpa", ATTENTION, "sdpa", "PyTorch's fused scaled_dot_product_attention, the score terms and the padding "
    "as its additive mask (no probability or value terms)",
    "where no gradient must reach the score terms, and on CUDA in float16 or bfloat16 also where one must",
    "torch.nn.functional")
SHAW_TRITON = Kernel(
    "shaw_triton", ATTENTION, "triton", "Shaw relative keys and values of one or two position sets, and no other "
    "term, in one flash-style Triton kernel", "on CUDA where Triton is installed",
    "fairseq_posattn.kernels.shaw_flash", run=shaw_flash.shaw_flash_attention, serves=shaw_flash.computes_layer,
    unavailable=triton_common.unavailable)
CONV2D_TRITON = Kernel(
    "conv2d_triton", ATTENTION, "triton", "the 2d convolved attention (softmax, masks, convolution, ReLU, "
    "dropout) in Triton kernels, after any score terms, without value terms", "on CUDA where Triton is installed",
    "fairseq_posattn.kernels.convolved_2d", run=convolved_2d.convolved_attention_2d,
    serves=convolved_2d.computes_convolution(ConvolvedAttention2d), unavailable=triton_common.unavailable)
ONLSTM_REFERENCE = Kernel(
    "onlstm_reference", RECURRENCE, "reference", "the definition (Hao et al. 2019, Eq. 3-9), autograd's backward",
    "otherwise (float64, bfloat16 on the CPU, no C++ cell or no Triton)", "fairseq_posattn.modules.onlstm_reference")
ONLSTM_CPP = Kernel(
    "onlstm_cpp", RECURRENCE, "cpu", "the time steps in C++, float32, with a hand-written backward and "
    "oneDNN's packed weights", "for float32 on the CPU where the cell is built (fairseq-posattn-build-cell)",
    "fairseq_posattn.kernels.onlstm_cpp", run=PackedRecurrence(onlstm_cpp.onlstm_forward, onlstm_cpp.onlstm_backward),
    unavailable=onlstm_cpp.unavailable_reason)
ONLSTM_TRITON = Kernel(
    "onlstm_triton", RECURRENCE, "triton", "per time step one matmul and one fused Triton kernel, with a "
    "hand-written backward", "on CUDA in float32, float16 or bfloat16 where Triton is installed",
    "fairseq_posattn.kernels.onlstm_triton",
    run=PackedRecurrence(onlstm_triton.onlstm_forward, onlstm_triton.onlstm_backward),
    unavailable=triton_common.unavailable)

KERNELS = (EXPLICIT, SDPA, SHAW_TRITON, CONV2D_TRITON, ONLSTM_REFERENCE, ONLSTM_CPP, ONLSTM_TRITON)
# each flag's values: auto, then the kernels' options in the table's order
OPTIONS = {layer: ("auto",) + tuple(dict.fromkeys(k.option for k in KERNELS if k.layer == layer))
           for layer in (ATTENTION, RECURRENCE)}
_CANDIDATES = {k.name: k for k in CANDIDATES}
# values removed from the flags that no candidate took over, and why
_REMOVED = {(RECURRENCE, "compile"): "torch.compile of the reference measured slower than the kernels auto takes "
                                     "(docs/results/benchmarks/cpu/compile.txt); fairseq-posattn-bench-compile "
                                     "compiles the reference itself"}
REMOVED_IN = "0.3.0"

Terms = Tuple[Sequence, Sequence, Sequence]  # a layer's score, probability and value terms


def _kernels(layer: str, option: Optional[str] = None) -> List[Kernel]:
    return [k for k in KERNELS if k.layer == layer and option in (None, k.option)]


def _auto_order(layer: str) -> List[Kernel]:
    """The kernels ``auto`` takes, in the order it tries them: those for some terms only (the Triton
    kernels) first, the one it takes otherwise last."""
    return sorted((k for k in _kernels(layer) if k.auto), key=lambda k: (k.auto.startswith("otherwise"),
                                                                         k.serves is None))


def removed(layer: str, option: str, terms: Optional[Terms] = None) -> Optional[str]:
    """The refusal of a value removed from ``layer``'s flag (for the layers
    of ``terms`` where it still names other kernels), or None."""
    flag = FLAGS[layer]
    why, scope = _REMOVED.get((layer, option)), ""
    for candidate in CANDIDATES:
        if (candidate.layer, candidate.removed_option) == (layer, option) and (
                terms is None or candidate.serves is None or candidate.serves(*terms)):
            why = (f"it ran {candidate.name}, now a candidate ({candidate.home}) that no flag reaches: "
                   f"{candidate.verdict}")
            scope = "" if candidate.serves is None else f" for the layers {candidate.name} computes"
    if why is None:
        return None
    dest = flag[2:].replace("-", "_")
    return (f"{flag} {option} was removed{scope} in {REMOVED_IN} (CHANGELOG.md): {why}. Use auto (the "
            f"default); a checkpoint saved with it loads with --model-overrides \"{{'{dest}': 'auto'}}\"")


def refusal(layer: str, option: str, terms: Terms = ((), (), ())) -> Optional[str]:
    """Why ``option`` cannot compute ``layer`` (with ``terms``) here, or None."""
    flag = FLAGS[layer]
    if option not in OPTIONS[layer]:
        return removed(layer, option) or f"{flag} {option}: it is not one of {', '.join(OPTIONS[layer])}"
    if option == "auto":
        return None
    kernels = _kernels(layer, option)
    reasons = [k.unavailable() for k in kernels]
    if all(reasons):
        return f"{flag} {option}: {reasons[0]}"
    if layer == RECURRENCE:
        return None
    if option == "sdpa" and (terms[1] or terms[2]):
        return (f"{flag} sdpa: PyTorch's fused attention does not return the probabilities that convolved "
                "attention and Shaw relative values need: use auto or explicit (or triton, for Shaw relative "
                "keys and values alone)")
    if option == "triton" and not any(k.serves(*terms) for k in kernels):
        return removed(layer, option, terms) or (
            f"{flag} triton: no Triton kernel computes the layer's terms ("
            + "; ".join(f"{k.name}: {k.computes}" for k in kernels) + "): use auto, explicit or sdpa")
    return None


def check(layer: str, option: str, terms: Terms = ((), (), ())) -> None:
    """Refuse, when a layer is built, an option that cannot compute it here (:func:`refusal`)."""
    reason = refusal(layer, option, terms)
    if reason is not None:
        raise ValueError(reason)


def parse_option(layer: str):
    """The argparse ``type`` of ``layer``'s flag: a value that is not one of
    :data:`OPTIONS` is refused by name (a removed one with its CHANGELOG entry)."""
    def parse(value: str) -> str:
        if value not in OPTIONS[layer]:
            raise argparse.ArgumentTypeError(refusal(layer, value))
        return value

    return parse


def _score_terms_need_grad(layer, query: Tensor) -> bool:
    """A gradient must reach the score terms: autograd records, and the
    query or a term's parameter requires one (under ``no_grad`` a slice of
    a parameter still says ``requires_grad``)."""
    return (torch.is_grad_enabled() and len(layer.score_terms) > 0
            and (query.requires_grad or any(p.requires_grad for p in layer.score_terms.parameters())))


def _triton_kernel(option: str, terms: Terms) -> Optional[Kernel]:
    """The Triton kernel ``option`` asks for that computes a layer of ``terms``, or None."""
    if option in _CANDIDATES:
        candidate = _CANDIDATES[option]
        return candidate if candidate.serves(*terms) else None
    if option in ("auto", "triton"):
        return next((k for k in _kernels(ATTENTION, "triton") if k.serves(*terms)), None)
    return None


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    logger.warning(message)


def attention_kernel(layer, query: Tensor, need_weights: bool) -> Kernel:
    """What computes this call of the attention ``layer`` (its ``kernel``
    option, its terms) on ``query`` ``[B, H, T, d_h]``."""
    option = layer.kernel
    terms = (layer.score_terms, layer.probability_terms, layer.value_terms)
    if need_weights or option == "explicit":
        return EXPLICIT
    fast = _triton_kernel(option, terms)
    if fast is not None and query.dtype in triton_common.DTYPES and (
            option != "auto" or (query.is_cuda and fast.unavailable() is None)):
        if query.is_cuda or triton_common.interpreted():
            return fast
        _warn_once(f"{fast.name} (--encoder-attention-kernel {option}): the Triton kernels run on CUDA tensors "
                   f"(or in Triton's interpreter, TRITON_INTERPRET=1); on {query.device} the explicit path "
                   "computes the same function")
    if len(layer.probability_terms) > 0 or len(layer.value_terms) > 0:
        return EXPLICIT
    if option == "sdpa" or not _score_terms_need_grad(layer, query):
        return SDPA
    if option == "auto" and query.is_cuda and query.dtype in HALF:
        return SDPA
    return EXPLICIT


def recurrent_kernel(option: str, device: torch.device, dtype: torch.dtype) -> Kernel:
    """What runs the ON-LSTM recurrence for ``option`` on inputs of this device and (matmul) dtype."""
    if option == "auto":
        if device.type == "cpu" and dtype == torch.float32 and ONLSTM_CPP.unavailable() is None:
            return ONLSTM_CPP
        if device.type == "cuda" and dtype in triton_common.DTYPES and ONLSTM_TRITON.unavailable() is None:
            return ONLSTM_TRITON
        return ONLSTM_REFERENCE
    return _CANDIDATES.get(option) or _kernels(RECURRENCE, option)[0]


def _may_compute(kernel: Kernel, terms: Iterable[Terms]) -> bool:
    """Whether ``kernel`` computes some layer of ``terms`` (any, where None)."""
    if terms is None or kernel is EXPLICIT or kernel.layer == RECURRENCE:
        return True
    if kernel is SDPA:
        return any(not (probabilities or values) for _, probabilities, values in terms)
    return any(kernel.serves(*layer) for layer in terms)


def describe(layer: str, option: str, terms: Optional[Sequence[Terms]] = None) -> str:
    """The build log's line: what ``option`` runs on this machine, for the
    layers of ``terms`` (every kernel of ``layer`` where None)."""
    flag = FLAGS[layer]
    if option in _CANDIDATES:
        return f"{flag}: the candidate {option}"
    if option != "auto":
        names = [k.name for k in _kernels(layer, option) if _may_compute(k, terms)]
        return f"{flag} {option}: {' or '.join(names)}"
    parts = []
    for kernel in _auto_order(layer):
        if _may_compute(kernel, terms):
            reason = kernel.unavailable()
            parts.append(f"{kernel.name} {kernel.auto}" + (f" (not here: {reason})" if reason else ""))
    return f"{flag} auto: " + "; ".join(parts)


def help_text(layer: str) -> str:
    """The help of ``layer``'s flag."""
    what = {ATTENTION: "what computes the encoder's self-attention",
            RECURRENCE: "what runs the ON-LSTM recurrence"}[layer]
    asks = ", ".join(f"{option} ({' or '.join(k.name for k in _kernels(layer, option))})"
                     for option in OPTIONS[layer][1:])
    return (f"{what}: auto takes " + "; ".join(f"{k.name} {k.auto}" for k in _auto_order(layer))
            + f"; {asks} ask for one; a value that cannot run here or compute the layers is refused")


def markdown_table(layer: Optional[str] = None) -> str:
    """The manual's table of ``layer``'s kernels (None: the candidates'), one row per kernel."""
    if layer is None:
        rows = ["| kernel | computes | promoted or removed by | code |", "|---|---|---|---|"]
        rows += [f"| `{k.name}` | {k.computes} | {k.verdict} | `{k.home}` |" for k in CANDIDATES]
    else:
        rows = [f"| kernel | {FLAGS[layer]} | computes | `auto` takes it | code |", "|---|---|---|---|---|"]
        rows += [f"| `{k.name}` | `{k.option}` | {k.computes} | {k.auto or 'never'} | `{k.home}` |"
                 for k in _kernels(layer)]
    return "\n".join(rows)


def tables() -> Dict[str, str]:
    """The manual's tables, by what they list."""
    return {ATTENTION: markdown_table(ATTENTION), RECURRENCE: markdown_table(RECURRENCE),
            "candidates": markdown_table(None)}
