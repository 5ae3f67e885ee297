"""Recurrent encoder layers (ON-LSTM, LSTM): the ON-LSTM's definition
(fairseq_posattn.modules.onlstm_reference) against a transcription of Shen et
al.'s equations, every fast path against that definition (values and
gradients), padding, counts, half precision, and the choice of the kernel.

The transcription below is written independently of the package: one
sentence at a time, a plain loop over time steps, explicit gates, float64.
It shares with the package only the documented parameter layout (``gates =
x @ weight_ih[d] + h @ weight_hh[d] + bias_ih[d] + bias_hh[d]``, gate units
``[f, i, o, c_hat, master_f, master_i]``, direction 0 forward).
"""

import logging
import os

import pytest
import torch
from torch import nn

from fairseq_posattn.kernels import manual, onednn, onlstm_cpp, triton_common
from fairseq_posattn.modules import candidates, kernel_choice
from fairseq_posattn.modules.onlstm_reference import cumax, onlstm_reference, reversal_index
from fairseq_posattn.modules.recurrent import ONLSTM, RecurrentLayer

D_MODEL = 6
HIDDEN = 4
needs_cell = pytest.mark.skipif(not onlstm_cpp.available(), reason="the C++ cell is not built here")


def _ref_direction(xs, w_ih, w_hh, b, hidden, chunk):
    """ON-LSTM over the rows of ``xs`` ``[L, C]`` (Shen et al. 2019), plain loop."""
    m = hidden // chunk
    h = xs.new_zeros(hidden)
    c = xs.new_zeros(hidden)
    outs = []
    for x in xs:
        z = x @ w_ih + h @ w_hh + b
        f = torch.sigmoid(z[0:hidden])
        i = torch.sigmoid(z[hidden : 2 * hidden])
        o = torch.sigmoid(z[2 * hidden : 3 * hidden])
        c_hat = torch.tanh(z[3 * hidden : 4 * hidden])
        master_f = torch.cumsum(torch.softmax(z[4 * hidden : 4 * hidden + m], 0), 0)
        master_i = 1 - torch.cumsum(torch.softmax(z[4 * hidden + m : 4 * hidden + 2 * m], 0), 0)
        master_f = master_f.repeat_interleave(chunk)  # master unit k -> neurons k*chunk .. k*chunk+chunk-1
        master_i = master_i.repeat_interleave(chunk)
        w = master_f * master_i
        f_hat = f * w + (master_f - w)
        i_hat = i * w + (master_i - w)
        c = f_hat * c + i_hat * c_hat
        h = o * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs)


def _ref_layer(x, lengths, params, hidden, chunk, bidirectional, residual):
    """The whole ON-LSTM layer, sentence by sentence; pads 0."""
    w_ih, w_hh, b_ih, b_hh, proj_w, proj_b = params
    out = torch.zeros_like(x)
    for b, n in enumerate(lengths.tolist()):
        xs = x[:n, b]
        hs = [_ref_direction(xs, w_ih[0], w_hh[0], b_ih[0] + b_hh[0], hidden, chunk)]
        if bidirectional:
            hs.append(_ref_direction(xs.flip(0), w_ih[1], w_hh[1], b_ih[1] + b_hh[1], hidden, chunk).flip(0))
        y = torch.cat(hs, -1) @ proj_w.t() + proj_b
        out[:n, b] = y + xs if residual else y
    return out


def _padded_batch(lengths, dim, dtype=torch.float64, pad_value=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(max(lengths), len(lengths), dim, generator=g, dtype=dtype)
    if pad_value is not None:
        for b, n in enumerate(lengths):
            x[n:, b] = pad_value
    return x, torch.tensor(lengths)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_the_definition_is_shen_et_als_equations(bidirectional, chunk, dtype, tol):
    """The reference layer (packing-free, autograd's backward) against the
    sentence-by-sentence transcription: outputs and every gradient, pads
    holding junk, exactly zero output and gradient at the pads."""
    torch.manual_seed(0)
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, bidirectional=bidirectional, chunk_size=chunk,
                           kernel="reference").to(dtype)
    rnn = layer.rnn
    assert rnn.num_gates == 4 * HIDDEN + 2 * HIDDEN // chunk
    x, lengths = _padded_batch([5, 2, 4, 1], D_MODEL, pad_value=3.0)
    upstream = torch.randn(x.shape, dtype=torch.float64)

    x_mod = x.to(dtype).requires_grad_()
    y_mod = layer(x_mod, lengths)
    (y_mod * upstream.to(dtype)).sum().backward()

    params = [p.detach().double().requires_grad_() for p in
              (rnn.weight_ih, rnn.weight_hh, rnn.bias_ih, rnn.bias_hh, layer.proj.weight, layer.proj.bias)]
    x_ref = x.to(dtype).double().requires_grad_()
    y_ref = _ref_layer(x_ref, lengths, params, HIDDEN, chunk, bidirectional, residual=True)
    (y_ref * upstream).sum().backward()

    close = dict(atol=tol, rtol=tol, check_dtype=False)
    torch.testing.assert_close(y_mod, y_ref, **close)
    torch.testing.assert_close(x_mod.grad, x_ref.grad, **close)
    mine = (rnn.weight_ih, rnn.weight_hh, rnn.bias_ih, rnn.bias_hh, layer.proj.weight, layer.proj.bias)
    for name, p, q in zip(["weight_ih", "weight_hh", "bias_ih", "bias_hh", "proj.weight", "proj.bias"], mine, params):
        torch.testing.assert_close(p.grad, q.grad, msg=name, **close)
    pad = torch.arange(x.size(0)).unsqueeze(1) >= lengths.unsqueeze(0)
    assert (y_mod[pad] == 0).all() and (x_mod.grad[pad] == 0).all()


# sentence lengths of a batch: sentences ending early, one step, all the same length
LENGTHS = [[4, 3, 1], [5, 5, 5], [1], [6, 2, 2, 1, 5]]


def assert_kernel_is_the_reference(kernel, lengths, chunk, bidirectional, hidden=HIDDEN, dtype=torch.float32,
                                   device="cpu", atol=2e-5, rtol=1e-4):
    """``kernel`` (an option of --encoder-recurrent-kernel, or a candidate's
    name) against the reference with the same weights: the output (with and
    without grad), the gradients of the input and of every parameter (the
    fast path's hand-written backward against autograd's)."""
    torch.manual_seed(len(lengths) + chunk)
    option = kernel if kernel in manual.OPTIONS[manual.RECURRENCE] else "auto"
    fast = ONLSTM(D_MODEL, hidden, bidirectional=bidirectional, chunk_size=chunk, kernel=option)
    if option != kernel:
        candidates.use(fast, kernel)
    fast = fast.to(device, dtype)
    reference = ONLSTM(D_MODEL, hidden, bidirectional=bidirectional, chunk_size=chunk, kernel="reference")
    reference.load_state_dict(fast.state_dict())
    x, lengths = _padded_batch(lengths, D_MODEL, dtype=torch.float32, pad_value=-4.0, seed=chunk)
    x = x.to(device, dtype)
    upstream = torch.randn(x.size(0), x.size(1), fast.num_directions * hidden, device=device, dtype=dtype)
    results = []
    for rnn in (fast, reference.to(device, dtype)):
        xi = x.clone().requires_grad_()
        y = rnn(xi, lengths)
        (y * upstream).sum().backward()
        with torch.no_grad():
            assert torch.equal(rnn(x, lengths), y.detach())  # inference computes what training does
        results.append([y.detach(), xi.grad] + [p.grad for p in rnn.parameters()])
    names = ["output", "x.grad"] + [name for name, _ in fast.named_parameters()]
    for name, a, b in zip(names, *results):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=name)


@needs_cell
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("chunk", [1, 2, 4])
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_the_cpu_cell_is_the_reference(lengths, chunk, bidirectional):
    assert_kernel_is_the_reference("cpu", lengths, chunk, bidirectional)


@needs_cell
@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # set by mkldnn.flags
def test_the_cpu_cell_without_onednn_is_the_reference():
    with torch.backends.mkldnn.flags(enabled=False):
        assert_kernel_is_the_reference("cpu", [5, 3, 3, 1], 2, True)


@needs_cell
def test_a_broken_onednn_op_falls_back_to_addmm(monkeypatch, caplog):
    """A private oneDNN op whose signature changed (faked: it raises what a
    wrong call raises) turns oneDNN off once, with a warning; the cell then
    computes the same with ``addmm``."""
    def changed(*args, **kwargs):
        raise RuntimeError("mkldnn::_reorder_linear_weight() Expected a value of type 'int' for argument 'batch_size'")

    # the op is private by nature, and the probe's answer is kept per process: no other way to break it
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", changed)
    monkeypatch.setattr(onednn, "_PROBE", {})
    with caplog.at_level(logging.WARNING, logger=onednn.__name__):
        assert not onednn.applies(torch.zeros(2, 2))
    assert "oneDNN's packed matmuls do not work here" in caplog.text
    assert_kernel_is_the_reference("cpu", [4, 2], 1, True)


def test_onednn_only_on_the_torch_releases_it_was_run_with(monkeypatch):
    weight = torch.zeros(2, 2)
    assert onednn.applies(weight) == torch.backends.mkldnn.is_available()
    monkeypatch.setattr(onednn, "ONEDNN_TESTED_TORCH", ((1, 0), (1, 13)))
    assert not onednn.applies(weight)


@pytest.mark.parametrize("cell, kernel", [("onlstm", "auto"), ("onlstm", "reference"), ("lstm", "auto")])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_padding_does_not_matter(cell, kernel, bidirectional, residual):
    """Each sentence alone equals the same sentence inside a padded batch (pads hold junk)."""
    torch.manual_seed(5)
    layer = RecurrentLayer(D_MODEL, cell, hidden_dim=HIDDEN, bidirectional=bidirectional, residual=residual,
                           kernel=kernel)
    lengths = [3, 7, 1, 5]
    x, lens = _padded_batch(lengths, D_MODEL, dtype=torch.float32, pad_value=7.5)
    x.requires_grad_()
    y = layer(x, lens)
    upstream = torch.randn(y.shape)
    (y * upstream).sum().backward()
    batch_grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    summed = {n: torch.zeros_like(p) for n, p in layer.named_parameters()}
    for b, n in enumerate(lengths):
        layer.zero_grad()
        xb = x.detach()[:n, b : b + 1].clone().requires_grad_()
        yb = layer(xb, torch.tensor([n]))
        torch.testing.assert_close(y[:n, b : b + 1], yb, atol=1e-5, rtol=1e-5)
        (yb * upstream[:n, b : b + 1]).sum().backward()
        torch.testing.assert_close(x.grad[:n, b : b + 1], xb.grad, atol=1e-5, rtol=1e-5)
        for name, p in layer.named_parameters():
            summed[name] += p.grad
        assert (y[n:, b] == 0).all()
        assert (x.grad[n:, b] == 0).all()
    # pad steps add nothing to the parameter gradients either
    for name in summed:
        torch.testing.assert_close(batch_grads[name], summed[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_lstm_layer_equals_nn_lstm_sentence_by_sentence(bidirectional):
    torch.manual_seed(6)
    layer = RecurrentLayer(D_MODEL, "lstm", hidden_dim=HIDDEN, bidirectional=bidirectional).double()
    assert isinstance(layer.rnn, nn.LSTM)
    lengths = [4, 6, 2]
    x, lens = _padded_batch(lengths, D_MODEL, pad_value=-9.0)
    y = layer(x, lens)
    for b, n in enumerate(lengths):
        h, _ = layer.rnn(x[:n, b : b + 1])  # plain nn.LSTM on the sentence alone, no packing
        expected = layer.proj(h) + x[:n, b : b + 1]
        torch.testing.assert_close(y[:n, b : b + 1], expected, atol=1e-12, rtol=1e-10)
        assert (y[n:, b] == 0).all()


def test_parameter_counts_at_d512():
    def count(module):
        return sum(p.numel() for p in module.parameters())

    assert count(RecurrentLayer(512, "lstm")) == 4_727_296
    assert count(RecurrentLayer(512, "onlstm")) == 6_828_544  # biases on input and recurrent projections
    onlstm = RecurrentLayer(512, "onlstm")
    assert onlstm.rnn.weight_ih.shape == (2, 512, 3072) and onlstm.rnn.bias_hh.shape == (2, 3072)
    assert onlstm.proj.weight.shape == (512, 1024)
    # one direction: hidden -> d projection; chunking shrinks the master gates
    assert RecurrentLayer(512, "onlstm", bidirectional=False).proj.weight.shape == (512, 512)
    assert count(RecurrentLayer(512, "onlstm", chunk_size=8).rnn) == 2 * (4 * 512 + 2 * 64) * (512 + 512 + 2)


def test_init_bounds_and_errors():
    layer = RecurrentLayer(8, "onlstm", hidden_dim=16)
    bound = 1 / 16 ** 0.5
    for p in layer.rnn.parameters():
        assert p.abs().max() <= bound
    with pytest.raises(ValueError):
        RecurrentLayer(8, "onlstm", hidden_dim=6, chunk_size=4)
    with pytest.raises(ValueError):
        RecurrentLayer(8, "gru")
    with pytest.raises(ValueError):
        RecurrentLayer(8, "lstm", chunk_size=2)


def test_dropout_on_output_only_and_no_state():
    torch.manual_seed(7)
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, dropout=0.5, residual=False)
    assert list(layer.buffers()) == []
    x, lengths = _padded_batch([4, 2], D_MODEL, dtype=torch.float32)
    layer.train()
    a, b = layer(x, lengths), layer(x, lengths)
    assert not torch.equal(a, b)  # fresh mask each call
    assert (a[2:, 1] == 0).all() and (b[2:, 1] == 0).all()
    layer.eval()
    torch.testing.assert_close(layer(x, lengths), layer(x, lengths))


def test_single_step_and_full_length_batches():
    torch.manual_seed(8)
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN).double()
    x, lengths = _padded_batch([1, 1], D_MODEL)
    x.requires_grad_()
    layer(x, lengths).sum().backward()
    assert torch.isfinite(x.grad).all()
    params = [p.detach().clone() for p in
              (layer.rnn.weight_ih, layer.rnn.weight_hh, layer.rnn.bias_ih, layer.rnn.bias_hh, layer.proj.weight, layer.proj.bias)]
    torch.testing.assert_close(layer(x, lengths), _ref_layer(x, lengths, params, HIDDEN, 1, True, True))


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_bfloat16_autocast_and_module(cell):
    torch.manual_seed(9)
    layer = RecurrentLayer(16, cell, hidden_dim=16)
    x, lengths = _padded_batch([6, 3, 5], 16, dtype=torch.float32)
    reference = layer(x, lengths)

    xa = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xa, lengths)
    y.float().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(xa.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    torch.testing.assert_close(y.float(), reference, atol=0.1, rtol=0.05)

    half = RecurrentLayer(16, cell, hidden_dim=16)
    half.load_state_dict(layer.state_dict())
    half = half.to(torch.bfloat16)
    xb = x.to(torch.bfloat16).requires_grad_()
    y = half(xb, lengths)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(xb.grad).all()
    assert all(p.grad.dtype == torch.bfloat16 and torch.isfinite(p.grad).all() for p in half.parameters())
    torch.testing.assert_close(y.float(), reference, atol=0.1, rtol=0.05)
    pad = torch.arange(6).unsqueeze(1) >= lengths.unsqueeze(0)
    assert (y[pad] == 0).all()


def test_onlstm_module_standalone_shapes():
    rnn = ONLSTM(5, 4, bidirectional=True, chunk_size=2)
    out = rnn(torch.randn(3, 2, 5), torch.tensor([3, 2]))
    assert out.shape == (3, 2, 8)
    assert "chunk_size=2" in repr(rnn)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gates_and_cell_state_are_float32_under_half(dtype):
    """With half inputs the reference's matmuls give half, but the gates,
    cumax's softmax and the cell states are float32: 40 steps with 64 master
    units (a cumsum of 64 probabilities per step) stay within two roundings
    of float64 run on the same half pre-activations (an identity input
    projection), the hidden state rounded to half each step in both."""
    torch.manual_seed(11)
    hidden, steps = 64, 40
    gates = 4 * hidden + 2 * hidden
    pre_activations = (2 * torch.randn(steps, 3, gates)).to(dtype)
    lengths = torch.tensor([steps, steps, steps - 10])
    w_hh = (0.3 * torch.randn(2, hidden, gates)).to(dtype)
    identity = torch.eye(gates, dtype=dtype).expand(2, gates, gates)
    bias = torch.zeros(2, gates, dtype=dtype)
    ours = onlstm_reference(pre_activations, lengths, identity, w_hh, bias, 1)
    assert ours.dtype == dtype
    exact = onlstm_reference(*[t.double() for t in (pre_activations,)], lengths,
                             *[t.double() for t in (identity, w_hh, bias)], 1)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(ours.double(), exact, atol=4 * eps, rtol=4 * eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cumax_monotone_in_unit_interval(dtype):
    torch.manual_seed(3)
    x = (10 * torch.randn(64, 37)).to(dtype)
    y = cumax(x)
    assert y.dtype == dtype
    y = y.double()
    assert (y[:, 1:] >= y[:, :-1]).all()
    assert (y >= 0).all() and (y <= 1 + 1e-6).all()
    torch.testing.assert_close(y[:, -1], torch.ones(64, dtype=torch.float64), atol=1e-2 if dtype == torch.bfloat16 else 1e-6, rtol=0)
    one_minus = 1 - y
    assert (one_minus[:, 1:] <= one_minus[:, :-1]).all()


def test_reversal_index():
    idx = reversal_index(torch.tensor([3, 1, 4]), 4)
    assert idx.t().tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    # an involution
    assert torch.equal(torch.gather(idx, 0, idx), torch.arange(4).unsqueeze(1).expand(4, 3))


@pytest.mark.parametrize("kernel", ["cpu", "triton"])
def test_second_backward_through_the_layer_is_refused(kernel):
    """The fast paths write the gate gradients over the saved gates (behind
    autograd's back, then bump the version): a second backward through the
    same graph must fail, not read them."""
    reason = kernel_choice.refusal(manual.RECURRENCE, kernel)
    if reason:
        pytest.skip(reason)
    device = "cuda" if kernel == "triton" and torch.cuda.is_available() else "cpu"
    if device == "cpu" and kernel == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and Triton's interpreter is off")
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, kernel=kernel).to(device)
    x, lengths = _padded_batch([3, 2], D_MODEL, dtype=torch.float32)
    y = layer(x.to(device).requires_grad_(), lengths).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_auto_chooses_by_device_dtype_and_what_is_installed(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def chosen(option, device, dtype):
        return kernel_choice.recurrent_kernel(option, device, dtype)

    cell = "onlstm_cpp" if onlstm_cpp.available() else "onlstm_reference"
    assert chosen("auto", cpu, torch.float32) == cell
    assert chosen("auto", cpu, torch.float64) == "onlstm_reference"
    assert chosen("auto", cpu, torch.bfloat16) == "onlstm_reference"
    gpu = "onlstm_triton" if triton_common.triton is not None else "onlstm_reference"
    assert chosen("auto", cuda, torch.float16) == gpu
    assert chosen("auto", cuda, torch.float64) == "onlstm_reference"
    assert chosen("reference", cpu, torch.float32) == "onlstm_reference"
    monkeypatch.setattr(triton_common, "triton", None)
    assert chosen("auto", cuda, torch.bfloat16) == "onlstm_reference"


def test_an_explicit_kernel_that_cannot_run_is_refused_at_build(monkeypatch):
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel cuda: it is not one of auto, reference, cpu, "
                                         "triton$"):
        ONLSTM(D_MODEL, HIDDEN, kernel="cuda")
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel apply to --encoder-recurrent-cell onlstm"):
        RecurrentLayer(D_MODEL, "lstm", kernel="reference")
    monkeypatch.setattr(triton_common, "triton", None)
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel triton: it needs the triton package"):
        ONLSTM(D_MODEL, HIDDEN, kernel="triton")
    # the cell's loading is kept per process: no other way to see a machine without it
    monkeypatch.setattr(onlstm_cpp, "_loaded", {"reason": "the C++ cell is not built: run fairseq-posattn-build-cell"})
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel cpu: the C\\+\\+ cell is not built"):
        ONLSTM(D_MODEL, HIDDEN, kernel="cpu")
    assert kernel_choice.recurrent_kernel("auto", torch.device("cpu"), torch.float32) == "onlstm_reference"
    assert ONLSTM(D_MODEL, HIDDEN).kernel == "auto"


@pytest.mark.parametrize("kernel", ["persistent", "graph", "compile"])
def test_a_removed_kernel_is_refused_at_build_naming_the_changelog(kernel):
    with pytest.raises(ValueError, match=f"^--encoder-recurrent-kernel {kernel} was removed in 0.3.0 "
                                         r"\(CHANGELOG.md\): .* --model-overrides"):
        ONLSTM(D_MODEL, HIDDEN, kernel=kernel)


@pytest.mark.parametrize("compiler, says", [
    ("/nonexistent/c++", "no C\\+\\+ compiler \\('/nonexistent/c\\+\\+' is not on the PATH"),
    ("false", "the C\\+\\+ cell did not build \\(.*false"),
])
def test_building_the_cell_without_a_compiler_says_so_and_what_runs(monkeypatch, tmp_path, compiler, says):
    """fairseq-posattn-build-cell without a working compiler: one line naming
    the compiler or the failed step and that the CPU then runs the reference,
    no traceback, a non-zero exit, and nothing loaded."""
    monkeypatch.setenv("FAIRSEQ_POSATTN_CELL_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", compiler)
    with pytest.raises(SystemExit, match=says + ".*the ON-LSTM runs the reference on the CPU"):
        onlstm_cpp.build_main([])
    assert not list(tmp_path.rglob("*.so"))


def test_the_model_log_names_the_kernel(caplog):
    from fairseq_posattn.models.from_flags import build_model_from_flags

    with caplog.at_level(logging.INFO, logger="fairseq_posattn.models.encoder"):
        build_model_from_flags(["--arch", "onlstm_san_transformer", "--encoder-embed-dim", "16",
                                "--encoder-attention-heads", "2", "--encoder-ffn-embed-dim", "16",
                                "--decoder-embed-dim", "16", "--decoder-attention-heads", "2",
                                "--encoder-recurrent-kernel", "reference"], 20)
    assert "3 ON-LSTM layers, --encoder-recurrent-kernel reference" in caplog.text
