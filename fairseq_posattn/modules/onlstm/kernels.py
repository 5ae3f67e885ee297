"""Which implementation runs the ON-LSTM recurrence, decided here and nowhere else.

``--encoder-recurrent-kernel`` (:data:`KERNELS`):

* ``auto``: ``cpu`` for float32 on the CPU where the C++ cell is built,
  ``triton`` on CUDA in float32, float16 or bfloat16 where Triton is
  installed, ``reference`` everywhere else (float64, bfloat16 on the CPU, no
  compiler, no Triton);
* ``reference``: :func:`.reference.onlstm_reference`, autograd's backward;
* ``cpu``: the C++ cell (:mod:`.cpu_cell`); ``triton``: the fused steps
  (:mod:`.triton_steps`; on the CPU only under ``TRITON_INTERPRET=1``);
* ``persistent``: on CUDA, every step of a layer in one launch forward and
  one backward, the recurrent matmul spread over the programs with a barrier
  between phases (:func:`.triton_steps.onlstm_forward_persistent`); where
  asked for, until a GPU has measured it against ``triton``;
* ``graph``: on CUDA, the ``triton`` steps replayed from CUDA graphs, one
  recorded per padded batch shape (:mod:`.cuda_graphs`); where asked for,
  until a GPU has measured it;
* ``compile``: the reference compiled by ``torch.compile`` (recompiled for
  each new batch shape; for ``fairseq-posattn-bench-compile``).

An explicit kernel that cannot run here is refused when the model is built.
"""

from typing import Optional

import torch

from . import cpu_cell, triton_steps

__all__ = ["KERNELS", "TRITON_KERNELS", "check", "choose", "describe"]

KERNELS = ("auto", "reference", "cpu", "triton", "persistent", "graph", "compile")
TRITON_KERNELS = ("triton", "persistent", "graph")  # those that run Triton kernels


def unavailable(kernel: str) -> Optional[str]:
    """Why ``kernel`` cannot run on this machine, or None."""
    if kernel not in KERNELS:
        return f"it is not one of {', '.join(KERNELS)}"
    if kernel == "cpu":
        return cpu_cell.unavailable_reason()
    if kernel in TRITON_KERNELS and triton_steps.triton is None:
        return "it needs the triton package (pip install triton)"
    return None


def check(kernel: str) -> None:
    """Refuse, at build time, a kernel that cannot run here, with the reason."""
    reason = unavailable(kernel)
    if reason is not None:
        raise ValueError(f"--encoder-recurrent-kernel {kernel}: {reason}")


def choose(kernel: str, device: torch.device, dtype: torch.dtype) -> str:
    """The kernel that runs for the option ``kernel`` on inputs of this device and dtype."""
    if kernel != "auto":
        return kernel
    if device.type == "cpu" and dtype == torch.float32 and cpu_cell.available():
        return "cpu"
    if device.type == "cuda" and dtype in triton_steps.DTYPES and triton_steps.triton is not None:
        return "triton"
    return "reference"


def describe(kernel: str) -> str:
    """What ``kernel`` runs on this machine, for the log at model build."""
    if kernel != "auto":
        return kernel
    cpu = "cpu (the C++ cell)" if cpu_cell.available() else "reference (no C++ cell built)"
    cuda = "triton" if triton_steps.triton is not None else "reference (no Triton)"
    return f"auto: {cpu} for float32 on the CPU, {cuda} on CUDA, reference otherwise"
