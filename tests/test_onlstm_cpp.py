"""The ON-LSTM's C++ cell (the CPU's float32 step) against the scripted loop and the float64 reference.

The scripted loop it is compared with is itself tested against the
plain-loop reference and finite differences, and so is the whole layer on
the cell (test_recurrent.py).  The cell
is built on first use; set ``FAIRSEQ_POSATTN_NO_CPP_CELL=1`` to skip this
module where no C++ compiler is available.
"""

import os

import pytest
import torch

from test_recurrent import D_MODEL, HIDDEN, _packed_inputs, _padded_batch

from fairseq_posattn.modules import onlstm_cpp, packed_steps, recurrent
from fairseq_posattn.modules.recurrent import ONLSTM

if os.environ.get("FAIRSEQ_POSATTN_NO_CPP_CELL", "") not in ("", "0"):
    pytest.skip("FAIRSEQ_POSATTN_NO_CPP_CELL is set", allow_module_level=True)

BATCHES = [[3, 3, 2, 1], [4, 4, 4], [2], [5, 2, 2, 1, 1]]


def test_the_cell_builds():
    assert onlstm_cpp.cell() is not None
    assert onlstm_cpp.handles(torch.zeros(1)) and not onlstm_cpp.handles(torch.zeros(1, dtype=torch.float64))


@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # set by mkldnn.flags
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "baddbmm"])
@pytest.mark.parametrize("num_dir", [1, 2])
@pytest.mark.parametrize("chunk", [1, 2, 4])
@pytest.mark.parametrize("batch_sizes", BATCHES, ids=str)
def test_cell_equals_the_scripted_loop(batch_sizes, chunk, num_dir, onednn):
    """Hidden states, gates and cell states forward (with and without saving),
    the input-projection and recurrent-weight gradients backward; sentences
    ending early, a single step, chunks of 1, 2 and the whole hidden state;
    the recurrent matmuls on oneDNN or on ``baddbmm``."""
    hidden = 8
    inputs = _packed_inputs(num_dir, batch_sizes, chunk, hidden=hidden, dtype=torch.float32, seed=len(batch_sizes))
    with torch.backends.mkldnn.flags(enabled=onednn):
        for save in (True, False):
            scripted = recurrent._onlstm_forward(*[t.clone() for t in inputs], batch_sizes, hidden, chunk, save, onednn)
            hs, acts, cells = onlstm_cpp.onlstm_forward(*[t.clone() for t in inputs], batch_sizes, hidden, chunk, save)
            assert len(acts) == (num_dir if save else 0)  # the gates: one [N, G] per direction, kept only to save
            acts = torch.stack(acts) if save else scripted[1]
            for name, a, b in zip(["hs", "acts", "cells"], (hs, acts, cells), scripted):
                assert a.shape == b.shape, name
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
        hs, acts, cells = scripted = recurrent._onlstm_forward(*inputs, batch_sizes, hidden, chunk, True, onednn)
        grad = torch.randn(hs.shape, generator=torch.Generator().manual_seed(7))
        expected = recurrent._onlstm_backward(grad, inputs[3], hs, acts.clone(), cells, batch_sizes, hidden, chunk,
                                              onednn)
        grad_xg, grad_w_hh = onlstm_cpp.onlstm_backward(grad, inputs[3], hs, list(acts.clone()), cells, batch_sizes,
                                                        hidden, chunk)
    for name, a, b in zip(["grad_xg", "grad_w_hh"], (torch.stack(grad_xg), grad_w_hh), expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)


def test_auto_takes_the_cell_for_float32_on_the_cpu(monkeypatch):
    """``kernel="auto"``: the cell for float32 CPU tensors, the scripted loop for float64."""
    calls = []
    forward = onlstm_cpp.onlstm_forward
    monkeypatch.setattr(onlstm_cpp, "onlstm_forward", lambda *a: calls.append(a[0].dtype) or forward(*a))
    x, lengths = _padded_batch([3, 2], D_MODEL)
    for dtype in (torch.float32, torch.float64):
        ONLSTM(D_MODEL, HIDDEN).to(dtype)(x.to(dtype), lengths)
    assert calls == [torch.float32]


def test_the_cell_refuses_what_it_does_not_compute():
    forward = onlstm_cpp.cell().forward
    g = 6 * HIDDEN
    xg, bias, w_hh = list(torch.zeros(2, 3, g)), torch.zeros(2, 1, g), torch.zeros(2, HIDDEN, g)
    cells, out = torch.zeros(2, 3, HIDDEN), torch.zeros(2, 4, HIDDEN)

    def run(xg=xg, bias=bias, out=out, batch_sizes=(2, 1)):
        forward(xg, bias, w_hh, [], list(batch_sizes), xg, cells, out, 1)

    run()  # the arguments as they should be
    with pytest.raises(RuntimeError, match="expected a float32 CPU tensor"):
        run(xg=[t.double() for t in xg])
    with pytest.raises(RuntimeError, match="gates: expected 24 units"):
        run(bias=bias[:, :, :-1])
    with pytest.raises(RuntimeError, match="units must be contiguous"):
        run(out=torch.zeros(2, 4, 2 * HIDDEN)[:, :, ::2])
    with pytest.raises(RuntimeError, match=r"bias: expected \[2, 1, 24\]"):
        run(bias=bias[:1])
    with pytest.raises(RuntimeError, match="z: expected 2 tensors, got 1"):
        run(xg=xg[:1])
    with pytest.raises(RuntimeError, match=r"xg: expected 3 rows \(the sum of batch_sizes\), got 2"):
        run(xg=[t[:2] for t in xg])
    with pytest.raises(RuntimeError, match="batch_sizes: expected positive and non-increasing"):
        run(batch_sizes=(1, 2))


def test_a_failed_build_falls_back_to_the_scripted_loop(monkeypatch):
    """No compiler: one warning, ``handles`` false, and ``kernel="auto"`` keeps the scripted loop."""
    import torch.utils.cpp_extension as cpp_extension

    def fail(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(cpp_extension, "load", fail)
    monkeypatch.setattr(onlstm_cpp, "_cell", None)
    with pytest.warns(UserWarning, match="no compiler here"):
        assert onlstm_cpp.cell() is None
    assert not onlstm_cpp.handles(torch.zeros(1))
    with pytest.raises(ValueError, match="kernel='cpp' needs the C\\+\\+ cell"):
        ONLSTM(D_MODEL, HIDDEN, kernel="cpp")
    x, lengths = _padded_batch([3, 2], D_MODEL, dtype=torch.float32)
    layer, scripted = ONLSTM(D_MODEL, HIDDEN), ONLSTM(D_MODEL, HIDDEN, kernel="script")
    scripted.load_state_dict(layer.state_dict())
    assert torch.equal(layer(x, lengths), scripted(x, lengths))


def _reorders(fn):
    """Profiled calls of oneDNN's weight layout in ``fn()``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()].count("mkldnn::_reorder_linear_weight")


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_inference_keeps_the_weight_layouts_while_the_weights_do_not_change():
    """Inference lays each weight out once and keeps it; a weight written to in
    place (also through ``.data``, which autograd's version counter misses), or
    replaced, is laid out again (a stale layout would compute with the old
    weights); a training forward drops what was kept."""
    rnn = ONLSTM(D_MODEL, HIDDEN, kernel="cpp")
    x, lengths = _padded_batch([4, 3, 4], D_MODEL, dtype=torch.float32)

    def infer():
        with torch.no_grad():
            return rnn(x, lengths)

    def fresh():  # the same weights in a new module: nothing kept for them
        other = ONLSTM(D_MODEL, HIDDEN, kernel="cpp")
        other.load_state_dict(rnn.state_dict())
        with torch.no_grad():
            return other(x, lengths)

    assert _reorders(infer) == 4  # w_ih and w_hh, both directions
    assert _reorders(infer) == 0
    with torch.no_grad():
        rnn.weight_hh.mul_(1.5)  # an optimizer's in-place update
    assert _reorders(infer) == 2
    torch.testing.assert_close(infer(), fresh(), atol=0, rtol=0)
    rnn.load_state_dict({k: v * 0.5 for k, v in rnn.state_dict().items()})
    assert torch.equal(infer(), fresh())
    rnn.weight_ih.data = rnn.weight_ih.data.clone().neg_()  # new storage, same parameter
    assert torch.equal(infer(), fresh())
    version = rnn.weight_hh._version
    rnn.weight_hh.data.mul_(0.5)  # as fairseq's own optimizers write: no version bump
    assert rnn.weight_hh._version == version
    assert _reorders(infer) == 2
    assert torch.equal(infer(), fresh())
    assert rnn.weight_ih in packed_steps._KEPT and rnn.weight_hh in packed_steps._KEPT
    rnn(x, lengths).sum().backward()  # training: the weights are about to change
    assert rnn.weight_ih not in packed_steps._KEPT and rnn.weight_hh not in packed_steps._KEPT
