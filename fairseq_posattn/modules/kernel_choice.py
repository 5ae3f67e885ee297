"""Which kernel computes each call of the encoder's self-attention and of its
ON-LSTM recurrence, decided here and nowhere else: :func:`attention_kernel`
and :func:`recurrent_kernel`, one rule after another in the order the manual
states them (docs/architectures.md, "Which code computes a layer";
docs/hybrids.md, "Which kernel runs where").  :func:`check` refuses, when a
layer is built, a flag value that cannot run here or compute the layer.  The
words about each kernel are :mod:`..kernels.manual`'s.
"""

import argparse
import functools
import logging
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..kernels import convolved_2d, onlstm_cpp, onlstm_triton, triton_common
from ..kernels.candidates import convolved_1d, onlstm_cuda_graphs, onlstm_persistent
from ..kernels.manual import ATTENTION, CANDIDATES, FLAGS, OPTIONS, RECURRENCE, REMOVED, REMOVED_IN, entry, kernels
from ..kernels.onlstm_packed import PackedRecurrence
from .convolved_attention import ConvolvedAttention1d, ConvolvedAttention2d
from .relative_positions import RelativeKeys, RelativeValues

logger = logging.getLogger(__name__)


class Terms(NamedTuple):
    """A layer's position terms, by kind (:mod:`.attention`'s order)."""
    score: Sequence = ()
    probability: Sequence = ()
    value: Sequence = ()
    rotation: Sequence = ()
    logit_scaling: Sequence = ()


NO_TERMS = Terms()
# the Triton kernels of a convolved attention: the probability term each computes, and the kernel
CONVOLUTIONS = {"conv2d_triton": (ConvolvedAttention2d, convolved_2d.convolved_attention_2d),
                "conv1d_triton": (ConvolvedAttention1d, convolved_1d.convolved_attention_1d)}
# the fast paths of the recurrence, on their packed layout
PACKED = {
    "onlstm_cpp": PackedRecurrence(onlstm_cpp.onlstm_forward, onlstm_cpp.onlstm_backward),
    "onlstm_triton": PackedRecurrence(onlstm_triton.onlstm_forward, onlstm_triton.onlstm_backward),
    "onlstm_persistent": PackedRecurrence(onlstm_persistent.onlstm_forward, onlstm_persistent.onlstm_backward),
    "onlstm_cuda_graphs": PackedRecurrence(onlstm_cuda_graphs.onlstm_forward, onlstm_cuda_graphs.onlstm_backward,
                                           onlstm_cuda_graphs.bucketed_layout),
}
CANDIDATE_NAMES = tuple(c.name for c in CANDIDATES)
TRITON_KERNELS = ("shaw_triton", *CONVOLUTIONS, "onlstm_triton", "onlstm_persistent", "onlstm_cuda_graphs")


def unavailable(name: str) -> Optional[str]:
    """Why the kernel ``name`` cannot run here, or None."""
    if name == "onlstm_cpp":
        return onlstm_cpp.unavailable_reason()
    return triton_common.unavailable() if name in TRITON_KERNELS else None


def shaw_pairs(score_terms: Sequence[nn.Module], value_terms: Sequence[nn.Module]
               ) -> Optional[List[Tuple[RelativeKeys, RelativeValues]]]:
    """The Shaw (keys, values) pairs of one or two position sets when they are
    all of a layer's score and value terms (what shaw_triton computes), else None."""
    if len(score_terms) != len(value_terms) or not 1 <= len(value_terms) <= 2:
        return None
    pairs = list(zip(score_terms, value_terms))
    for keys, values in pairs:
        if (type(keys) is not RelativeKeys or type(values) is not RelativeValues
                or (keys.positions, keys.clip) != (values.positions, values.clip)):
            return None
    return pairs


def layer_terms(layer) -> Terms:
    """An attention layer's terms."""
    return Terms(layer.score_terms, layer.probability_terms, layer.value_terms, layer.rotation_terms,
                 layer.logit_scaling_terms)


def gradient_through_scores(score_terms: Sequence[nn.Module], query_requires_grad: bool) -> bool:
    """Whether a gradient must reach a score term: one that declares it reads the query (or the layer's
    input: ``reads_query``) when the query needs a gradient, or one with a parameter that needs one (under
    no_grad a slice of a parameter still says requires_grad: the caller asks only with gradients enabled)."""
    return any((term.reads_query and query_requires_grad) or any(p.requires_grad for p in term.parameters())
               for term in score_terms)


def serves(name: str, terms: Terms) -> bool:
    """Whether the kernel ``name`` computes a layer of these terms.  Rotation terms never change the answer:
    every kernel reads the rotated queries and keys."""
    if name == "shaw_triton":  # Shaw keys and values alone: the kernel computes its own logits, unscaled
        return not (terms.probability or terms.logit_scaling) and shaw_pairs(terms.score, terms.value) is not None
    if name in CONVOLUTIONS:  # its convolution the one probability term, after any score terms (and logit
        # scaling: the layer computes the logits it hands over), no value term
        return (len(terms.probability) == 1 and not terms.value
                and type(terms.probability[0]) is CONVOLUTIONS[name][0])
    if name == "sdpa":  # no probabilities come out of the fused attention, and its mask can only add to the logits
        return not (terms.probability or terms.value or terms.logit_scaling)
    return True


_warn_once = functools.lru_cache(maxsize=None)(logger.warning)


def attention_kernel(layer, query: Tensor, need_weights: bool) -> str:
    """The kernel that computes this call of the attention ``layer`` (its ``kernel`` option, its terms) on ``query``."""
    score_grad = torch.is_grad_enabled() and gradient_through_scores(layer.score_terms, query.requires_grad)
    return choose_attention(layer.kernel, layer_terms(layer), query.device, query.dtype, need_weights, score_grad)


def choose_attention(option: str, terms: Terms, device: torch.device, dtype: torch.dtype, need_weights: bool,
                     score_grad: bool) -> str:
    """The kernel that computes an attention layer of ``terms`` for ``option`` on inputs of this device and dtype."""
    # the weights asked for, or explicit: the explicit path
    if need_weights or option == "explicit":
        return "explicit"
    # triton (or a candidate) asked for, or auto on CUDA where Triton is installed: the Triton kernel
    # that computes the layer's terms, in float32, float16 or bfloat16; on the CPU only in Triton's interpreter
    asked = [k.name for k in kernels(ATTENTION, "triton")] if option in ("auto", "triton") else [option]
    triton_kernel = next((name for name in asked if name in TRITON_KERNELS and serves(name, terms)), None)
    cuda = device.type == "cuda"
    if triton_kernel and dtype in triton_common.DTYPES and (
            option != "auto" or (cuda and unavailable(triton_kernel) is None)):
        if cuda or triton_common.interpreted():
            return triton_kernel
        _warn_once(f"{triton_kernel} (--encoder-attention-kernel {option}): the Triton kernels run on CUDA tensors "
                   f"(or in Triton's interpreter, TRITON_INTERPRET=1); on {device} the explicit path computes "
                   "the same function")
    # probability, value or logit-scaling terms: the explicit path
    if not serves("sdpa", terms):
        return "explicit"
    # sdpa asked for; or auto where no gradient must reach the score terms (none has a parameter that trains
    # or reads a query that does: ALiBi, the dependency-distance bias), or on CUDA in half precision
    if option == "sdpa" or not score_grad or (option == "auto" and cuda and dtype in (torch.float16, torch.bfloat16)):
        return "sdpa"
    # otherwise: the explicit path
    return "explicit"


def recurrent_kernel(option: str, device: torch.device, dtype: torch.dtype) -> str:
    """The kernel that runs the ON-LSTM recurrence for ``option`` on inputs of this device and (matmul) dtype."""
    # a kernel asked for by its flag value, refused at build where it cannot run; or a candidate (.candidates.use)
    if option != "auto":
        return option if option in CANDIDATE_NAMES else kernels(RECURRENCE, option)[0].name
    # float32 on the CPU where the C++ cell is built
    if device.type == "cpu" and dtype == torch.float32 and unavailable("onlstm_cpp") is None:
        return "onlstm_cpp"
    # on CUDA in float32, float16 or bfloat16 where Triton is installed
    if device.type == "cuda" and dtype in triton_common.DTYPES and unavailable("onlstm_triton") is None:
        return "onlstm_triton"
    # otherwise: the definition
    return "onlstm_reference"


def removed(layer: str, option: str, terms: Optional[Terms] = None) -> Optional[str]:
    """The refusal of a value removed from ``layer``'s flag (for a layer of ``terms``), or None."""
    why, scope = REMOVED.get((layer, option)), ""
    for c in CANDIDATES:
        if (c.layer, c.removed_option) == (layer, option) and (terms is None or serves(c.name, terms)):
            why = f"it ran {c.name}, now a candidate ({c.home}) that no flag reaches: {c.verdict}"
            scope = f" for the layers {c.name} computes" if layer == ATTENTION else ""
    flag = FLAGS[layer]
    return why and (f"{flag} {option} was removed{scope} in {REMOVED_IN} (CHANGELOG.md): {why}. Use auto (the "
                    f"default); a checkpoint saved with it loads with --model-overrides "
                    f"\"{{'{flag[2:].replace('-', '_')}': 'auto'}}\"")


def refusal(layer: str, option: str, terms: Terms = NO_TERMS) -> Optional[str]:
    """Why ``option`` cannot compute a ``layer`` of ``terms`` here, or None."""
    flag, asked = FLAGS[layer], [k.name for k in kernels(layer, option)]
    if option not in OPTIONS[layer]:
        return removed(layer, option) or f"{flag} {option}: it is not one of {', '.join(OPTIONS[layer])}"
    reasons = [unavailable(name) for name in asked]
    if asked and all(reasons):
        return f"{flag} {option}: {reasons[0]}"
    if option == "sdpa" and terms.logit_scaling:
        return (f"{flag} sdpa: PyTorch's fused attention adds its mask to the logits, but PASCAL (--pascal-heads) "
                "multiplies them: use auto or explicit")
    if option == "sdpa" and not serves("sdpa", terms):
        return (f"{flag} sdpa: PyTorch's fused attention does not return the probabilities that convolved "
                "attention and Shaw relative values need: use auto or explicit (or triton, for Shaw relative keys "
                "and values alone)")
    if layer == ATTENTION and option == "triton" and not any(serves(name, terms) for name in asked):
        return removed(layer, option, terms) or (
            f"{flag} triton: no Triton kernel computes the layer's terms ("
            + "; ".join(f"{name}: {entry(name).computes}" for name in asked) + "): use auto, explicit or sdpa")
    return None


def check(layer: str, option: str, terms: Terms = NO_TERMS) -> None:
    """Refuse, when a layer is built, an option that cannot compute it here (:func:`refusal`)."""
    reason = refusal(layer, option, terms)
    if reason is not None:
        raise ValueError(reason)


def parse_option(layer: str):
    """The argparse ``type`` of ``layer``'s flag: a value not in :data:`..kernels.manual.OPTIONS` is refused by name."""
    def parse(value: str) -> str:
        if value not in OPTIONS[layer]:
            raise argparse.ArgumentTypeError(refusal(layer, value))
        return value

    return parse


def describe(layer: str, option: str, device: torch.device, dtype: torch.dtype, terms: Sequence[Terms] = ()) -> str:
    """The build log's words: the kernel that each layer (of ``terms``, for attention) runs for ``option`` on
    ``device`` in ``dtype``; for attention in training, and in inference where that differs."""
    here = f"{FLAGS[layer]} {option}, in {str(dtype).replace('torch.', '')} on {device.type}: "
    if layer == RECURRENCE:
        return here + recurrent_kernel(option, device, dtype)
    groups = {}  # (in training, in inference): the layers' numbers
    for number, its_terms in enumerate(terms, 1):
        training, inference = (choose_attention(option, its_terms, device, dtype, False, score_grad)
                               for score_grad in (gradient_through_scores(its_terms.score, True), False))
        groups.setdefault((training, inference), []).append(number)
    return here + ", ".join(
        ("" if len(groups) == 1 else f"layer{'s' * (len(numbers) > 1)} {_spans(numbers)} ")
        + training + (f" ({inference} in inference)" if inference != training else "")
        for (training, inference), numbers in groups.items())


def _spans(numbers: List[int]) -> str:
    """Ascending numbers as runs: ``1, 3-5``."""
    runs = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
