"""The ON-LSTM recurrence on the CPU in C++.

The TorchScript loop of :mod:`.recurrent` spends a fifth of a float32 CPU
layer in some twenty small ATen kernels per step (the gates, cumax, the cell
update and their gradients), each a pass over memory with its own dispatch,
and a Python-level interpreter between the steps.  Here the whole loop over
the time steps is one call into ``csrc/onlstm_cell.cpp``, forward and
backward: per step one recurrent matmul per direction (oneDNN's packed
weights, as in the loop) and one pass over the step's rows for the gate
arithmetic -- the same equations (Hao et al. 2019, Eq. 3-9, after Shen et
al. 2019), the same buffers and in-place writes as the scripted loop, so
:class:`.recurrent._ONLSTMFunction` takes either.

Inference (no ``save``) keeps no gate buffer, so its input projection is one
oneDNN matmul per direction into a tensor of its own, and the oneDNN
layouts of both weights are kept from call to call while the weights do not
change (:func:`.packed_steps.kept_onednn_layouts`): beam search runs the
encoder once per batch with the same weights.

The cell is compiled on first use with ``torch.utils.cpp_extension`` (a C++
compiler and ninja are needed; the build is cached under
``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``).  Where it
cannot be built, :func:`handles` is false and the layer keeps the scripted
loop, after one warning.  ``FAIRSEQ_POSATTN_NO_CPP_CELL=1`` skips the build.
"""

import os
import shutil
import warnings
from typing import List, Tuple

import torch
from torch import Tensor

from fairseq_posattn.modules.packed_steps import (
    direction_matmuls, forget_onednn_layouts, kept_onednn_layouts, onednn_applies, onednn_layouts, onednn_weights,
    recurrent_weight_grad, state_buffers,
)

__all__ = ["cell", "handles", "onlstm_forward", "onlstm_backward"]

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "onlstm_cell.cpp")
_cell = None  # the compiled module once built; False once a build failed or was skipped
# what the compiler may use, from what torch's own kernels use on this CPU
_ISA_FLAGS = {"avx2": ["-mavx2", "-mfma"], "avx512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"]}


def cell():
    """The compiled ops (``forward``, ``backward``; built on the first call), or None where they cannot be built."""
    global _cell
    if _cell is None:
        _cell = False
        if os.environ.get("FAIRSEQ_POSATTN_NO_CPP_CELL", "") not in ("", "0"):
            return None
        try:
            from torch.utils.cpp_extension import load

            if shutil.which("ninja") is None:  # an environment used without activating it
                import ninja

                os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")

            isa = torch.backends.cpu.get_cpu_capability().lower()  # the build is cached per instruction set
            # -fopenmp: at::parallel_for splits the rows over torch's own OpenMP threads
            flags = ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"] + _ISA_FLAGS.get(isa, [])
            load("fairseq_posattn_onlstm_cell_" + isa, [_SOURCE], extra_cflags=flags, extra_ldflags=["-fopenmp"],
                 is_python_module=False)  # registers the ops (ATen headers only: a quicker build than pybind's)
            _cell = torch.ops.fairseq_posattn_onlstm
        except Exception as err:  # no compiler, no ninja, no headers: the scripted loop stays
            warnings.warn("the ON-LSTM's C++ cell could not be built (%s); the CPU takes the TorchScript loop" % err)
    return _cell or None


def handles(xs: Tensor) -> bool:
    """True where the C++ cell applies: ``xs`` float32 on the CPU, and the cell builds."""
    return xs.device.type == "cpu" and xs.dtype == torch.float32 and cell() is not None


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, List[Tensor], Tensor]:
    """:func:`.recurrent._onlstm_forward` with the loop over the steps in C++; same
    arguments, same results, except that the gates come as one ``[N, G]`` per
    direction (none without ``save``)."""
    onednn = onednn_applies(w_hh)
    if save:  # training: the weights change every update, lay them out anew
        forget_onednn_layouts(w_ih, w_hh)
        layouts_ih = onednn_layouts(w_ih, xs.size(1)) if onednn else []
        layouts_hh = onednn_weights(w_hh, batch_sizes) if onednn else []
    else:  # inference: the same weights call after call
        layouts_ih = kept_onednn_layouts(w_ih, xs.size(1)) if onednn else []
        layouts_hh = kept_onednn_layouts(w_hh, batch_sizes[0]) if onednn and len(batch_sizes) > 1 else []
    xg = direction_matmuls(xs, w_ih, layouts_ih)  # the cell adds the bias
    acts = xg if save else []  # the gates overwrite their own pre-activations
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    cell().forward(xg, bias, w_hh, layouts_hh, batch_sizes, acts, cells, out, chunk_size)
    return out, acts, cells


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: List[Tensor], cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[List[Tensor], Tensor]:
    """:func:`.recurrent._onlstm_backward` with the loop over the steps in C++; same
    arguments, same results, except that the gates and their gradients come as
    one ``[N, G]`` per direction."""
    if len(batch_sizes) == 0:
        return acts, torch.zeros_like(w_hh)
    w_t = w_hh.transpose(1, 2)  # [D, G, hidden]
    packed = onednn_weights(w_t, batch_sizes) if onednn_applies(w_hh) else []
    dc = torch.zeros(len(acts), batch_sizes[0], hidden)
    cell().backward(grad_hs, w_t, packed, acts, cells, batch_sizes, dc, chunk_size)  # float32: over the gates
    # the cell wrote over the saved gates: a second backward must be refused
    for a in acts:
        torch.autograd.graph.increment_version(a)
    return acts, recurrent_weight_grad(hs, acts, w_hh, batch_sizes)
