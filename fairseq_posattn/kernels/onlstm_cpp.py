"""The ON-LSTM recurrence on the CPU in C++ (float32): the time steps of
:func:`..modules.onlstm_reference.onlstm_cell` in ``csrc/onlstm_cell.cpp``,
forward and a hand-written backward.  ``fairseq-posattn-build-cell`` compiles
it ahead of time for this torch, source and CPU instruction set
(:func:`build_dir`); :func:`available` only loads such a build.
"""

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import onednn
from .onlstm_packed import recurrent_weight_grad, state_buffers

__all__ = ["available", "build", "build_dir", "onlstm_backward", "onlstm_forward", "unavailable_reason"]

logger = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "onlstm_cell.cpp")
LIBRARY = "fairseq_posattn_onlstm_cell"
# what the compiler may use, from the instruction set torch's own kernels use on this CPU
ISA_FLAGS = {"avx2": ["-mavx2", "-mfma"],
             "avx512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"]}
_loaded: dict = {}  # {"ops": the registered ops} or {"reason": why not}


def cpu_isa() -> str:
    return torch.backends.cpu.get_cpu_capability().lower()


def build_root() -> str:
    return os.environ.get("FAIRSEQ_POSATTN_CELL_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "fairseq_posattn", "onlstm_cell"))


def build_dir(isa: Optional[str] = None) -> str:
    """Where the cell for this torch, this source and ``isa`` (this CPU's) lives."""
    with open(SOURCE, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()[:12]
    return os.path.join(build_root(), f"torch-{torch.__version__}-{isa or cpu_isa()}-{source}")


def build() -> str:
    """Compile the cell into :func:`build_dir` (a C++ compiler and ninja are needed); returns the library's path."""
    from torch.utils.cpp_extension import load

    directory = build_dir()
    os.makedirs(directory, exist_ok=True)
    flags = ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"] + ISA_FLAGS.get(cpu_isa(), [])
    load(LIBRARY, [SOURCE], extra_cflags=flags, extra_ldflags=["-fopenmp"], build_directory=directory,
         is_python_module=False)  # registers the ops (ATen headers only: a quicker build than pybind's)
    return os.path.join(directory, LIBRARY + ".so")


def _load() -> dict:
    path = os.path.join(build_dir(), LIBRARY + ".so")
    if os.path.exists(path):
        if not hasattr(torch.ops.fairseq_posattn_onlstm, "forward"):
            torch.ops.load_library(path)
        return {"ops": torch.ops.fairseq_posattn_onlstm}
    others = sorted(os.listdir(build_root())) if os.path.isdir(build_root()) else []
    why = (f"built only for {', '.join(others)}, not for torch {torch.__version__} on this "
           f"{cpu_isa()} CPU with this source" if others else "not built")
    return {"reason": f"the C++ cell is {why}: run fairseq-posattn-build-cell (needs a C++ compiler)"}


def unavailable_reason() -> Optional[str]:
    """None where the cell is loaded (or loads now), else why it is not; logged once."""
    if not _loaded:
        _loaded.update(_load())
        if "reason" in _loaded:
            logger.warning("%s; the ON-LSTM runs the reference on the CPU", _loaded["reason"])
    return _loaded.get("reason")


def available() -> bool:
    return unavailable_reason() is None


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, List[Tensor], Tensor]:
    """The recurrence over packed inputs ``xs [D, N, C]``: hidden states ``[D, N + 1, hidden]``
    (row N zero), and with ``save`` the activated gates (one ``[N, G]`` per direction,
    over their pre-activations) and the cell states ``[D, N, hidden]`` for :func:`onlstm_backward`."""
    if save:  # training: the weights change every update, lay them out anew
        onednn.forget_layouts(w_ih, w_hh)
    layouts_ih = onednn.layouts(w_ih, xs.size(1), keep=not save)
    layouts_hh = onednn.layouts(w_hh, batch_sizes[0], keep=not save) if len(batch_sizes) > 1 else []
    xg = onednn.direction_matmuls(xs, w_ih, layouts_ih)  # the cell adds the bias
    acts = xg if save else []  # the gates overwrite their own pre-activations
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    unavailable_reason()
    _loaded["ops"].forward(xg, bias, w_hh, layouts_hh, batch_sizes, acts, cells, out, chunk_size)
    return out, acts, cells


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: List[Tensor], cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[List[Tensor], Tensor]:
    """Back-propagation through time (Hao et al. Eq. 3-9): the gradients of the gates'
    pre-activations (over the saved gates) and of ``w_hh``."""
    if len(batch_sizes) == 0:
        return acts, torch.zeros_like(w_hh)
    w_t = w_hh.transpose(1, 2)  # [D, G, hidden]
    layouts = onednn.layouts(w_t, batch_sizes[0]) if len(batch_sizes) > 1 else []
    dc = torch.zeros(len(acts), batch_sizes[0], hidden)
    _loaded["ops"].backward(grad_hs, w_t, layouts, acts, cells, batch_sizes, dc, chunk_size)
    for a in acts:  # the cell wrote over the saved gates: a second backward must be refused
        torch.autograd.graph.increment_version(a)
    return acts, recurrent_weight_grad(hs, acts, w_hh, batch_sizes)


def build_main(argv=None) -> None:
    """``fairseq-posattn-build-cell``: compile the ON-LSTM's C++ cell for this torch and CPU."""
    parser = argparse.ArgumentParser(prog="fairseq-posattn-build-cell", description=build_main.__doc__)
    parser.parse_args(argv)
    compiler = os.environ.get("CXX", "c++")  # the compiler torch.utils.cpp_extension calls
    fallback = "without it the ON-LSTM runs the reference on the CPU"
    if shutil.which(compiler) is None:
        sys.exit(f"fairseq-posattn-build-cell: no C++ compiler ({compiler!r} is not on the PATH; set CXX "
                 f"or install one, e.g. apt-get install g++); {fallback}")
    try:
        print(build())
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        sys.exit(f"fairseq-posattn-build-cell: the C++ cell did not build ({str(err).strip().splitlines()[-1]}); "
                 f"{fallback}")


if __name__ == "__main__":
    build_main()
