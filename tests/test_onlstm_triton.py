"""The ON-LSTM's fused Triton steps (the CUDA path) against the reference.

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



@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (3, 6), (4, 8)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_persistent_kernels_are_the_reference(bidirectional, chunk, hidden, lengths):
    """The steps in one launch (on the CPU: one launch per phase), forward and
    backward: output and every gradient are the reference's."""
    assert_kernel_is_the_reference("persistent", lengths, chunk, bidirectional, hidden=hidden, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_persistent_kernels_in_half_precision_are_the_reference_in_half(dtype):
    assert_kernel_is_the_reference("persistent", [4, 3, 3, 1], 2, True, hidden=8, dtype=dtype, device=DEVICE,
                                   atol=1e-2, rtol=1e-2)


def spread_problem(dtype, chunk):
    """Two blocks of 16 rows (19 sentences, ending at every step), 40 units and
    240 or 180 gate columns: several programs, each with its own columns and
    rows, partly masked tiles of rows, columns and depth: ``(xs, w_ih, bias,
    w_hh), batch_sizes, hidden, chunk``."""
    torch.manual_seed(0)
    num_dir, hidden, dim = 2, 40, 8
    lengths = [7, 7, 5, 3, 3, 1] + [2] * 13
    batch_sizes = [sum(length > t for length in lengths) for t in range(max(lengths))]
    gates = 4 * hidden + 2 * (hidden // chunk)
    rows = sum(batch_sizes)
    args = [torch.randn(num_dir, rows, dim), 0.3 * torch.randn(num_dir, dim, gates),
            0.1 * torch.randn(num_dir, 1, gates), 0.2 * torch.randn(num_dir, hidden, gates)]
    return [a.to(DEVICE, dtype) for a in args], batch_sizes, hidden, chunk


HALF_ROUNDING = dict(atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype, save, chunk", [
    (torch.float32, True, 1), (torch.float32, False, 4), (torch.float16, True, 1), (torch.bfloat16, False, 4),
], ids=["fp32-training-chunk1", "fp32-inference-chunk4", "fp16-training-chunk1", "bf16-inference-chunk4"])
def test_the_persistent_forward_spreads_rows_and_columns(dtype, save, chunk):
    """:func:`spread_problem`: the states and saved gates of the per-step
    kernels, to their matmul's rounding (half: the per-step matmul rounds to
    half, the persistent one keeps float32)."""
    from fairseq_posattn.modules.onlstm import triton_steps

    args, batch_sizes, hidden, chunk = spread_problem(dtype, chunk)
    shape = triton_steps._persistent_shape(hidden, chunk, 2, batch_sizes[0],
                                           triton_steps._multiprocessors(torch.device(DEVICE)))
    assert shape["PROGRAMS"] > 1 and batch_sizes[0] > shape["BLOCK_B"] and hidden > shape["BLOCK_K"]
    steps = triton_steps.onlstm_forward(*args, batch_sizes, hidden, chunk, save)
    launch = triton_steps.onlstm_forward_persistent(*args, batch_sizes, hidden, chunk, save)
    tolerance = {} if dtype == torch.float32 else HALF_ROUNDING
    for name, a, b in zip(["hidden states", "saved gates", "cell states"], steps, launch):
        torch.testing.assert_close(b, a, msg=name, **tolerance)


@pytest.mark.parametrize("dtype, chunk", [(torch.float32, 1), (torch.float32, 4), (torch.bfloat16, 4)],
                         ids=["fp32-chunk1", "fp32-chunk4", "bf16-chunk4"])
def test_the_persistent_backward_spreads_rows_and_units(dtype, chunk):
    """:func:`spread_problem`: the gate gradients and the recurrent weight's
    gradient of the per-step kernels' backward, to one rounding of the dtype."""
    from fairseq_posattn.modules.onlstm import triton_steps

    args, batch_sizes, hidden, chunk = spread_problem(dtype, chunk)
    hs, acts, cells = triton_steps.onlstm_forward(*args, batch_sizes, hidden, chunk, True)
    grad_hs = torch.randn(hs.shape, device=DEVICE).to(dtype)
    w_hh = args[3]
    steps = triton_steps.onlstm_backward(grad_hs, w_hh, hs, acts.clone(), cells, batch_sizes, hidden, chunk)
    launch = triton_steps.onlstm_backward_persistent(grad_hs, w_hh, hs, acts.clone(), cells, batch_sizes, hidden,
                                                     chunk)
    tolerance = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else HALF_ROUNDING
    for name, a, b in zip(["gate gradients", "recurrent weight gradient"], steps, launch):
        torch.testing.assert_close(b, a, msg=name, **tolerance)


def test_one_launch_with_one_program_per_direction_is_the_reference(monkeypatch):
    """Every step in one launch, the barriers included: Triton's interpreter
    runs programs one after another, so one program per direction (which the
    barrier waits for alone; the phase-per-launch tests cover several), with
    the GPU's larger row tile (partly masked)."""
    from fairseq_posattn.modules.onlstm import triton_steps

    shape = triton_steps._persistent_shape

    def one_program(hidden, chunk_size, num_dir, rows, multiprocessors):
        tiles = shape(hidden, chunk_size, num_dir, rows, multiprocessors)
        gates = 4 * hidden + 2 * (hidden // chunk_size)
        return dict(tiles, PROGRAMS=1, BLOCK_P=2, BLOCK_N=max(16, triton_steps._block(gates)),
                    BLOCK_H=max(16, triton_steps._block(hidden)), BLOCK_B=32, ONE_LAUNCH=True)

    monkeypatch.setattr(triton_steps, "_persistent_shape", one_program)
    assert_kernel_is_the_reference("persistent", [4, 3, 3, 1], 2, True, hidden=8, device=DEVICE)


@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (3, 6)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_steps_replayed_from_graphs_are_the_reference(bidirectional, chunk, hidden, lengths):
    """The batch padded to the graphs' bucket, every sentence running every
    step: output and every gradient are the reference's (on the CPU the
    "graph" runs the steps again)."""
    assert_kernel_is_the_reference("graph", lengths, chunk, bidirectional, hidden=hidden, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_steps_replayed_from_graphs_in_half_precision_are_the_reference_in_half(dtype):
    assert_kernel_is_the_reference("graph", [4, 3, 3, 1], 2, True, hidden=8, dtype=dtype, device=DEVICE,
                                   atol=1e-2, rtol=1e-2)
