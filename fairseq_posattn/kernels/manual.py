"""The manual's words about each kernel, and nothing else: what it computes,
the flag value that asks for it, where ``auto`` takes it, its code; for a
candidate the measurement that promotes or removes it.  The flags' choices
and help, the build log and the manual's tables (``python -m
fairseq_posattn.kernels``) are made from them; which kernel runs is
:mod:`fairseq_posattn.modules.kernel_choice`'s to decide.
"""

from dataclasses import dataclass
from typing import List, Optional

ATTENTION, RECURRENCE = "attention", "recurrence"
FLAGS = {ATTENTION: "--encoder-attention-kernel", RECURRENCE: "--encoder-recurrent-kernel"}


@dataclass(frozen=True)
class Entry:
    """One kernel of a ``layer``: the flag value ``option`` that asks for it
    (None: a candidate), what it ``computes``, its code's ``home``, where
    ``auto`` takes it; a candidate's ``verdict`` and the flag value it once had
    (``removed_option``)."""

    name: str
    layer: str
    option: Optional[str]
    computes: str
    home: str
    auto: str = ""
    verdict: str = ""
    removed_option: Optional[str] = None


KERNELS = (
    Entry(name="explicit", layer=ATTENTION, option="explicit",
          computes="every term, in PyTorch's operations as the layer defines them",
          auto="otherwise: where the weights are asked for, in float64, with probability, value or logit-scaling "
               "terms no Triton kernel computes here, or with a gradient for the score terms outside CUDA's half "
               "precision",
          home="fairseq_posattn.modules.attention"),
    Entry(name="sdpa", layer=ATTENTION, option="sdpa",
          computes="PyTorch's fused scaled_dot_product_attention, the score terms and the padding as its additive "
                   "mask (no probability, value or logit-scaling terms)",
          auto="where no gradient must reach the score terms, and on CUDA in float16 or bfloat16 also where one must",
          home="torch.nn.functional"),
    Entry(name="shaw_triton", layer=ATTENTION, option="triton",
          computes="Shaw relative keys and values of one or two position sets, and no other term but rotary "
                   "positions, in one flash-style Triton kernel",
          auto="on CUDA where Triton is installed", home="fairseq_posattn.kernels.shaw_flash"),
    Entry(name="conv2d_triton", layer=ATTENTION, option="triton",
          computes="the 2d convolved attention (softmax, masks, convolution, ReLU, dropout) in Triton kernels, after "
                   "any score and logit-scaling terms, without value terms",
          auto="on CUDA where Triton is installed", home="fairseq_posattn.kernels.convolved_2d"),
    Entry(name="onlstm_reference", layer=RECURRENCE, option="reference",
          computes="the definition (Hao et al. 2019, Eq. 3-9), autograd's backward",
          auto="otherwise (float64, bfloat16 on the CPU, no C++ cell or no Triton)",
          home="fairseq_posattn.modules.onlstm_reference"),
    Entry(name="onlstm_cpp", layer=RECURRENCE, option="cpu",
          computes="the time steps in C++, float32, with a hand-written backward and oneDNN's packed weights",
          auto="for float32 on the CPU where the cell is built (fairseq-posattn-build-cell)",
          home="fairseq_posattn.kernels.onlstm_cpp"),
    Entry(name="onlstm_triton", layer=RECURRENCE, option="triton",
          computes="per time step one matmul and one fused Triton kernel, with a hand-written backward",
          auto="on CUDA in float32, float16 or bfloat16 where Triton is installed",
          home="fairseq_posattn.kernels.onlstm_triton"),
)
# the order in which auto's rules take each layer's kernels (docs/architectures.md, docs/hybrids.md)
AUTO_ORDER = {ATTENTION: ("shaw_triton", "conv2d_triton", "sdpa", "explicit"),
              RECURRENCE: ("onlstm_cpp", "onlstm_triton", "onlstm_reference")}
# each flag's values: auto, then its kernels' in the table's order
OPTIONS = {layer: ("auto",) + tuple(dict.fromkeys(k.option for k in KERNELS if k.layer == layer))
           for layer in (ATTENTION, RECURRENCE)}

_VERDICT = ("promoted to auto's choice on a GPU where it beats {rival} beyond the per-repeat spread at the default "
            "and a WMT-like batch, in fp16 and bf16 ({bench}); removed otherwise")
_RECURRENT_BENCH = "fairseq-posattn-bench-recurrent --device cuda, fairseq-posattn-bench --rows onlstm-san-{}"
# no flag value asks for a candidate: fairseq_posattn.modules.candidates.use puts one in a model's layers
CANDIDATES = (
    Entry(name="onlstm_persistent", layer=RECURRENCE, option=None,
          computes="every time step of a layer in one Triton launch each way, the programs sharing each step's "
                   "matmul with a barrier between phases",
          home="fairseq_posattn.kernels.candidates.onlstm_persistent", removed_option="persistent",
          verdict=_VERDICT.format(rival="onlstm_triton", bench=_RECURRENT_BENCH.format("persistent"))),
    Entry(name="onlstm_cuda_graphs", layer=RECURRENCE, option=None,
          computes="onlstm_triton's steps replayed from CUDA graphs, the batch padded to multiples of 8 sentences "
                   "and steps",
          home="fairseq_posattn.kernels.candidates.onlstm_cuda_graphs", removed_option="graph",
          verdict=_VERDICT.format(rival="onlstm_triton", bench=_RECURRENT_BENCH.format("graph"))),
    Entry(name="conv1d_triton", layer=ATTENTION, option=None,
          computes="the 1d convolved attention (softmax, masks, convolution along the queries as matmuls, ReLU, "
                   "dropout) in Triton kernels, after any score and logit-scaling terms, without value terms",
          home="fairseq_posattn.kernels.candidates.convolved_1d", removed_option="triton",
          verdict=_VERDICT.format(rival="the explicit path",
                                  bench="fairseq-posattn-bench --rows conv1d,conv1d-triton")),
)
REMOVED_IN = "0.3.0"
# flag values removed without a candidate: why
REMOVED = {(RECURRENCE, "compile"): "torch.compile of the reference measured slower than the kernels auto takes "
                                    "(docs/results/benchmarks/cpu/compile.txt); fairseq-posattn-bench-compile "
                                    "compiles the layer itself"}


def kernels(layer: str, option: Optional[str] = None) -> List[Entry]:
    """``layer``'s kernels (those that ``option`` asks for), in the table's order."""
    return [k for k in KERNELS if k.layer == layer and option in (None, k.option)]


def entry(name: str) -> Entry:
    """The kernel or candidate ``name``."""
    return next(k for k in KERNELS + CANDIDATES if k.name == name)


def help_text(layer: str) -> str:
    """The help of ``layer``'s flag."""
    what = {ATTENTION: "what computes the encoder's self-attention", RECURRENCE: "what runs the ON-LSTM recurrence"}
    asks = ", ".join(f"{option} ({' or '.join(k.name for k in kernels(layer, option))})"
                     for option in OPTIONS[layer][1:])
    return (f"{what[layer]}: auto takes " + "; ".join(f"{name} {entry(name).auto}" for name in AUTO_ORDER[layer])
            + f"; {asks} ask for one; a value that cannot run here or compute the layers is refused")


def markdown_table(layer: Optional[str] = None) -> str:
    """The manual's table of ``layer``'s kernels (None: the candidates')."""
    if layer is None:
        return "\n".join(["| kernel | computes | promoted or removed by | code |", "|---|---|---|---|"]
                         + [f"| `{k.name}` | {k.computes} | {k.verdict} | `{k.home}` |" for k in CANDIDATES])
    return "\n".join([f"| kernel | {FLAGS[layer]} | computes | `auto` takes it | code |", "|---|---|---|---|---|"]
                     + [f"| `{k.name}` | `{k.option}` | {k.computes} | {k.auto} | `{k.home}` |"
                        for k in kernels(layer)])
