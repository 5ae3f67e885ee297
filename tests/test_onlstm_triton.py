"""The ON-LSTM's fused Triton steps (the CUDA path, ``onlstm_triton``) against the reference.

On a machine without a GPU the kernels run in Triton's interpreter on the
CPU (``TRITON_INTERPRET=1``, set by conftest.py); with one, compiled, on
CUDA.  Values and gradients of the whole layer against the reference's,
chunks of 1, 2, 3 (tiles padded to powers of two) and 4, sentences ending at
different steps, half precision.
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from test_recurrent import LENGTHS, assert_kernel_is_the_reference  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)


@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (2, 6), (3, 6), (4, 8)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_triton_steps_are_the_reference(bidirectional, chunk, hidden, lengths):
    assert_kernel_is_the_reference("triton", lengths, chunk, bidirectional, hidden=hidden, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_the_reference_in_half(dtype):
    """Half matmuls, float32 gate arithmetic and cell state, as the reference:
    the same to half's rounding."""
    assert_kernel_is_the_reference("triton", [4, 3, 3, 1], 2, True, hidden=8, dtype=dtype, device=DEVICE,
                                   atol=1e-2, rtol=1e-2)
