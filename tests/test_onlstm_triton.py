"""The ON-LSTM's fused Triton step against the scripted loop and the float64 reference.

On a machine without a GPU the kernels run in Triton's interpreter on the
CPU (``TRITON_INTERPRET=1``, set by conftest.py); with one, compiled, on
CUDA.  The scripted loop they are compared with is itself tested against the
plain-loop reference and finite differences (test_recurrent.py).
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from test_recurrent import D_MODEL, HIDDEN, _packed_inputs, _padded_batch, _ref_layer  # noqa: E402

from fairseq_posattn.modules import onlstm_triton, recurrent  # noqa: E402
from fairseq_posattn.modules.recurrent import ONLSTM, RecurrentLayer  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)

BATCHES = [[3, 3, 2, 1], [4, 4, 4], [2], [5, 2, 2, 1, 1]]


def _both(inputs, batch_sizes, hidden, chunk, save):
    """Forward of the scripted loop and of the kernels on copies of the same inputs."""
    ins = [t.to(DEVICE) for t in inputs]
    scripted = recurrent._onlstm_forward(*[t.clone() for t in ins], batch_sizes, hidden, chunk, save)
    fused = onlstm_triton.onlstm_forward(*[t.clone() for t in ins], batch_sizes, hidden, chunk, save)
    return ins, scripted, fused


@pytest.mark.parametrize("batch_sizes", BATCHES, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (2, 6), (3, 6), (4, 8)])
@pytest.mark.parametrize("num_dir", [1, 2])
def test_forward_and_backward_equal_the_scripted_loop(num_dir, chunk, hidden, batch_sizes):
    """Hidden states, saved gates and cell states, then the input-projection and
    weight gradients; chunks of 1, 2, 3 (tiles padded to powers of two) and 4,
    sentences ending at different steps."""
    inputs = _packed_inputs(num_dir, batch_sizes, chunk, hidden=hidden, dtype=torch.float32, seed=len(batch_sizes))
    ins, scripted, fused = _both(inputs, batch_sizes, hidden, chunk, True)
    for name, a, b in zip(["hs", "acts", "cells"], fused, scripted):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5, msg=name)
    grad = torch.randn(scripted[0].shape, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    grads_scripted = recurrent._onlstm_backward(grad, ins[3], scripted[0], scripted[1].clone(), scripted[2],
                                                batch_sizes, hidden, chunk)
    grads_fused = onlstm_triton.onlstm_backward(grad, ins[3], fused[0], fused[1].clone(), fused[2],
                                                batch_sizes, hidden, chunk)
    for name, a, b in zip(["grad_xg", "grad_w_hh"], grads_fused, grads_scripted):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("chunk", [1, 2])
def test_inference_path_keeps_nothing_and_equals_the_training_path(chunk):
    batch_sizes = [3, 3, 2, 1]
    inputs = _packed_inputs(2, batch_sizes, chunk, dtype=torch.float32, seed=5)
    _, scripted, lean = _both(inputs, batch_sizes, HIDDEN, chunk, False)
    _, _, full = _both(inputs, batch_sizes, HIDDEN, chunk, True)
    assert lean[1].numel() == 0 and lean[2].shape == (2, batch_sizes[0], HIDDEN)
    torch.testing.assert_close(lean[0], full[0], atol=0, rtol=0)
    torch.testing.assert_close(lean[0], scripted[0], atol=2e-6, rtol=1e-5)


def test_half_precision_gates_and_cells_are_float32():
    """float16 matmuls, float32 gate arithmetic and cell state, as the scripted loop."""
    batch_sizes = [3, 2, 2, 1]
    hidden = 8
    inputs = _packed_inputs(2, batch_sizes, 2, hidden=hidden, dtype=torch.float16, scale=0.5, seed=6)
    ins, scripted, fused = _both(inputs, batch_sizes, hidden, 2, True)
    assert fused[0].dtype == torch.float16 and fused[1].dtype == fused[2].dtype == torch.float32
    for a, b in zip(fused, scripted):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-3, rtol=2e-3)
    grad = torch.randn(scripted[0].shape, generator=torch.Generator().manual_seed(7)).half().to(DEVICE)
    grads = [loop(grad, ins[3], hs, acts.clone(), cells, batch_sizes, hidden, 2)
             for loop, (hs, acts, cells) in ((recurrent._onlstm_backward, scripted),
                                              (onlstm_triton.onlstm_backward, fused))]
    for a, b in zip(*grads):
        assert a.dtype == b.dtype == torch.float16
        torch.testing.assert_close(a.float(), b.float(), atol=5e-3, rtol=5e-3)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("chunk", [1, 2])
def test_layer_with_the_kernels_matches_the_reference(bidirectional, chunk):
    """The whole layer (packing, reversal, projection, pads) on the kernels
    against the float64 plain-loop reference, forward and every gradient."""
    torch.manual_seed(0)
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, bidirectional=bidirectional, chunk_size=chunk,
                           kernel="triton").to(DEVICE)
    rnn = layer.rnn
    x, lengths = _padded_batch([5, 2, 4, 1], D_MODEL, pad_value=3.0)
    upstream = torch.randn(x.shape, dtype=torch.float64)
    x_mod = x.float().to(DEVICE).requires_grad_()
    y_mod = layer(x_mod, lengths)
    (y_mod * upstream.float().to(DEVICE)).sum().backward()
    mine = (rnn.weight_ih, rnn.weight_hh, rnn.bias_ih, rnn.bias_hh, layer.proj.weight, layer.proj.bias)
    params = [p.detach().double().cpu().requires_grad_() for p in mine]
    x_ref = x.clone().requires_grad_()
    y_ref = _ref_layer(x_ref, lengths, params, HIDDEN, chunk, bidirectional, residual=True)
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(y_mod.double().cpu(), y_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(x_mod.grad.double().cpu(), x_ref.grad, atol=1e-5, rtol=1e-4)
    for p, q in zip(mine, params):
        torch.testing.assert_close(p.grad.double().cpu(), q.grad, atol=1e-5, rtol=1e-4)
    pad = (torch.arange(x.size(0)).unsqueeze(1) >= lengths.unsqueeze(0)).to(DEVICE)
    assert (y_mod[pad] == 0).all() and (x_mod.grad[pad] == 0).all()


def test_auto_takes_the_kernels_only_where_they_apply(monkeypatch):
    """``kernel="auto"``: the kernels on CUDA, the scripted loop on the CPU and for float64."""
    calls = []
    forward = onlstm_triton.onlstm_forward
    monkeypatch.setattr(onlstm_triton, "onlstm_forward", lambda *a: calls.append(a[0].device.type) or forward(*a))
    x, lengths = _padded_batch([3, 2], D_MODEL, dtype=torch.float32)
    for dtype in (torch.float32, torch.float64):
        layer = ONLSTM(D_MODEL, HIDDEN).to(DEVICE, dtype)
        layer(x.to(DEVICE, dtype), lengths)
    assert calls == (["cuda"] if DEVICE == "cuda" else [])
    assert onlstm_triton.handles(x) is False  # a CPU tensor


def test_kernel_option_is_checked(monkeypatch):
    with pytest.raises(ValueError, match="kernel must be one of auto, script, triton"):
        ONLSTM(D_MODEL, HIDDEN, kernel="cuda")
    with pytest.raises(ValueError, match="apply to cell='onlstm' only"):
        RecurrentLayer(D_MODEL, "lstm", kernel="script")
    monkeypatch.setattr(onlstm_triton, "triton", None)
    with pytest.raises(ValueError, match="needs the triton package"):
        ONLSTM(D_MODEL, HIDDEN, kernel="triton")
    assert ONLSTM(D_MODEL, HIDDEN).kernel == "auto"
