"""The ON-LSTM's C++ cell (the CPU's float32 path): built ahead of time and
found again, or named as missing; its argument checks; inference with the
weight layouts it keeps, as the weights change.  Its values and gradients
against the reference are in test_recurrent.py.  Set ``FAIRSEQ_POSATTN_NO_CPP_CELL=1`` to skip this
module where no C++ compiler is available.
"""

import logging
import os

import pytest
import torch

from test_recurrent import D_MODEL, HIDDEN, _padded_batch

from fairseq_posattn.kernels import onednn, onlstm_cpp
from fairseq_posattn.modules.kernel_choice import recurrent_kernel
from fairseq_posattn.modules.recurrent import ONLSTM

if os.environ.get("FAIRSEQ_POSATTN_NO_CPP_CELL", "") not in ("", "0"):
    pytest.skip("FAIRSEQ_POSATTN_NO_CPP_CELL is set", allow_module_level=True)


def test_the_cell_is_built_ahead_for_this_torch_source_and_cpu():
    """scripts/setup_env.sh ran fairseq-posattn-build-cell: the library is in
    the directory of this torch, this source and this CPU's instruction set."""
    assert onlstm_cpp.available()
    directory = os.path.basename(onlstm_cpp.build_dir())
    assert directory.startswith(f"torch-{torch.__version__}-{onlstm_cpp.cpu_isa()}-")
    assert os.path.exists(os.path.join(onlstm_cpp.build_dir(), onlstm_cpp.LIBRARY + ".so"))


def test_a_cell_built_elsewhere_or_none_is_named_and_the_reference_runs(monkeypatch, tmp_path, caplog):
    """No build for this CPU (one for another instruction set only, as when a
    home directory moves to another machine): nothing is compiled, the
    message says what is there and what to run, once, and ``auto`` takes the
    reference; an explicit ``cpu`` is refused at build."""
    (tmp_path / "torch-2.13.0-avx512-0123456789ab").mkdir()
    monkeypatch.setenv("FAIRSEQ_POSATTN_CELL_DIR", str(tmp_path))
    monkeypatch.setattr(onlstm_cpp, "_loaded", {})  # the cell loads once per process: no other way to reload it
    monkeypatch.setattr(onlstm_cpp, "cpu_isa", lambda: "avx2")
    import torch.utils.cpp_extension as cpp_extension

    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: pytest.fail("compiled during a forward"))
    with caplog.at_level(logging.WARNING, logger=onlstm_cpp.__name__):
        assert not onlstm_cpp.available() and not onlstm_cpp.available()
    assert caplog.text.count("run fairseq-posattn-build-cell") == 1
    assert "built only for torch-2.13.0-avx512-0123456789ab" in caplog.text
    assert recurrent_kernel("auto", torch.device("cpu"), torch.float32) == "onlstm_reference"
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel cpu: the C\\+\\+ cell is built only for"):
        ONLSTM(D_MODEL, HIDDEN, kernel="cpu")
    x, lengths = _padded_batch([3, 2], D_MODEL, dtype=torch.float32)
    assert ONLSTM(D_MODEL, HIDDEN)(x, lengths).shape == (3, 2, 2 * HIDDEN)


def test_the_cell_refuses_what_it_does_not_compute():
    forward = torch.ops.fairseq_posattn_onlstm.forward
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


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_inference_follows_the_weights_as_they_change():
    """Inference keeps the weights' oneDNN layouts between calls: a weight
    written to in place (also through ``.data``, which autograd's version
    counter misses), replaced or loaded anew computes with its new values,
    as a fresh module with the same weights does; so does training after
    inference, and inference after training."""
    rnn = ONLSTM(D_MODEL, HIDDEN, kernel="cpu")
    x, lengths = _padded_batch([4, 3, 4], D_MODEL, dtype=torch.float32)
    assert onednn.applies(rnn.weight_ih)

    def infer():
        with torch.no_grad():
            return rnn(x, lengths)

    def fresh():  # the same weights in a new module: nothing kept for them
        other = ONLSTM(D_MODEL, HIDDEN, kernel="cpu")
        other.load_state_dict(rnn.state_dict())
        with torch.no_grad():
            return other(x, lengths)

    first = infer()
    assert torch.equal(infer(), first)
    with torch.no_grad():
        rnn.weight_hh.mul_(1.5)  # an optimizer's in-place update
    assert not torch.equal(infer(), first)
    torch.testing.assert_close(infer(), fresh(), atol=0, rtol=0)
    rnn.load_state_dict({k: v * 0.5 for k, v in rnn.state_dict().items()})
    assert torch.equal(infer(), fresh())
    rnn.weight_ih.data = rnn.weight_ih.data.clone().neg_()  # new storage, same parameter
    assert torch.equal(infer(), fresh())
    version = rnn.weight_hh._version
    rnn.weight_hh.data.mul_(0.5)  # as fairseq's own optimizers write: no version bump
    assert rnn.weight_hh._version == version
    assert torch.equal(infer(), fresh())
    trained = rnn(x, lengths)
    trained.sum().backward()
    assert torch.equal(trained.detach(), fresh())
    with torch.no_grad():
        rnn.weight_ih.add_(0.25)
    assert torch.equal(infer(), fresh())
