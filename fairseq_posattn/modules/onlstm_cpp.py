"""The ON-LSTM recurrence on the CPU with each step's element-wise work in C++.

The TorchScript loop of :mod:`.recurrent` spends a fifth of a float32 CPU
layer in some twenty small ATen kernels per step (the gates, cumax, the cell
update and their gradients), each a pass over memory with its own dispatch.
Here a step is one recurrent matmul (oneDNN's packed weights, as in the
loop) and one pass of ``csrc/onlstm_cell.cpp`` over the step's rows, forward
and backward: the same equations (Hao et al. 2019, Eq. 3-9, after Shen et
al. 2019), the same buffers and in-place writes as the scripted loop, so
:class:`.recurrent._ONLSTMFunction` takes either.

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
    forward_buffers, onednn_applies, onednn_weights, recurrent_matmuls, recurrent_weight_grad, step_starts,
)

__all__ = ["cell", "handles", "onlstm_forward", "onlstm_backward"]

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "onlstm_cell.cpp")
_cell = None  # the compiled module once built; False once a build failed or was skipped
# what the compiler may use, from what torch's own kernels use on this CPU
_ISA_FLAGS = {"avx2": ["-mavx2", "-mfma"], "avx512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"]}


def cell():
    """The compiled cell's ops (``step_forward``, ``step_backward``; built on the first call), or None where it cannot be built."""
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


def _none() -> Tensor:
    """The cell's "no such tensor" (an empty ``[0, 0, 0]``)."""
    return torch.empty(0, 0, 0)


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`.recurrent._onlstm_forward` with one matmul and one C++ pass per step; same arguments, same results."""
    step = cell().step_forward
    xg, acts, cells, out = forward_buffers(xs, w_ih, None, batch_sizes, hidden, save)  # the cell adds the bias
    packed = onednn_weights(w_hh, batch_sizes) if onednn_applies(w_hh) else []
    start = 0
    prev = 0  # first row of the previous step
    for t, n in enumerate(batch_sizes):
        stop = start + n
        rows = xg[:, start:stop]
        z = rows.unbind(0) if t == 0 else recurrent_matmuls(rows, out[:, prev : prev + n], w_hh, packed)
        c_new = cells[:, start:stop] if save else cells[:, :n]
        c_prev = _none() if t == 0 else (cells[:, prev : prev + n] if save else c_new)
        step(z, bias, c_prev, acts[:, start:stop] if save else _none(), c_new, out[:, start:stop], chunk_size)
        prev = start
        start = stop
    return out, acts, cells


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`.recurrent._onlstm_backward` with one C++ pass and one matmul per step; same arguments, same results."""
    step = cell().step_backward
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    grad_xg = acts  # float32 throughout: the gate gradients overwrite the gates
    if steps == 0:
        return grad_xg, torch.zeros_like(w_hh)
    w_t = w_hh.transpose(1, 2)  # [D, G, hidden]
    packed = onednn_weights(w_t, batch_sizes) if onednn_applies(w_hh) else []
    starts = step_starts(batch_sizes)
    dc = torch.zeros(num_dir, batch_sizes[0], hidden)
    rec: List[Tensor] = []  # dh from the later step, upstream gradient included: one [n, hidden] per direction
    for t in range(steps - 1, -1, -1):
        start, n = starts[t], batch_sizes[t]
        c_prev = cells[:, starts[t - 1] : starts[t - 1] + n] if t > 0 else _none()
        rows = slice(start, start + n)
        step(acts[:, rows], c_prev, cells[:, rows], grad_hs[:, rows], rec, dc, grad_xg[:, rows], chunk_size)
        if t > 0:
            prev = starts[t - 1]
            rec = recurrent_matmuls(grad_hs[:, prev : prev + n], grad_xg[:, rows], w_t, packed)
    # the cell wrote over the saved gates: a second backward must be refused
    torch.autograd.graph.increment_version(acts)
    return grad_xg, recurrent_weight_grad(hs, grad_xg, w_hh, batch_sizes)
