"""Recurrent encoder layers (ON-LSTM, LSTM): equations, gradients, padding, counts, half precision.

The ON-LSTM reference below is written independently of the module: one
sentence at a time, a plain Python loop over time steps, explicit gates,
float64, autograd for its gradients.  It shares with the module only the
documented parameter layout (``gates = x @ weight_ih[d] + h @ weight_hh[d] +
bias_ih[d] + bias_hh[d]``, gate units ``[f, i, o, c_hat, master_f, master_i]``,
direction 0 forward).
"""

import pytest
import torch
from torch import nn

from fairseq_posattn.modules import onlstm_cpp, onlstm_triton, packed_steps, recurrent
from fairseq_posattn.modules.recurrent import ONLSTM, RecurrentLayer, _ONLSTMFunction, cumax, reversal_index

D_MODEL = 6
HIDDEN = 4


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
@pytest.mark.parametrize("dtype, tol, kernel", [(torch.float64, 1e-10, "script"), (torch.float32, 1e-5, "script"),
                                               (torch.float32, 1e-5, "cpp")])
def test_onlstm_matches_reference_forward_and_gradients(bidirectional, chunk, dtype, tol, kernel):
    """float64 takes ``baddbmm``; float32 on a CPU the oneDNN packed matmuls,
    with the scripted gate arithmetic or the C++ cell (packing, reversal,
    projection and pads included)."""
    if kernel == "cpp" and onlstm_cpp.cell() is None:
        pytest.skip("the C++ cell is not built here")
    torch.manual_seed(0)
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, bidirectional=bidirectional, chunk_size=chunk,
                           kernel=kernel).to(dtype)
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
    # pad positions: exactly zero output, exactly zero gradient
    pad = torch.arange(x.size(0)).unsqueeze(1) >= lengths.unsqueeze(0)
    assert (y_mod[pad] == 0).all() and (x_mod.grad[pad] == 0).all()


def _packed_inputs(num_dir, batch_sizes, chunk, dim=D_MODEL, hidden=HIDDEN, dtype=torch.float64, scale=1.0, seed=1):
    """Random ``_onlstm_forward`` arguments: packed inputs of ``sum(batch_sizes)`` rows."""
    g = torch.Generator().manual_seed(seed)
    gates = 4 * hidden + 2 * hidden // chunk
    shapes = [(num_dir, sum(batch_sizes), dim), (num_dir, dim, gates), (num_dir, 1, gates), (num_dir, hidden, gates)]
    return [(scale * torch.randn(s, generator=g, dtype=torch.float64)).to(dtype) for s in shapes]


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("num_dir", [1, 2])
@pytest.mark.parametrize("batch_sizes", [[3, 3, 3, 3], [3, 3, 2, 1]])
def test_onlstm_function_gradcheck(num_dir, chunk, batch_sizes, monkeypatch):
    """The hand-written backward against finite differences (float64), with and without sentences ending early.

    gradcheck differentiates one graph many times, but the backward writes the
    gate gradients over the saved gates (a second backward is refused, see
    below): here it gets a copy of them each time."""
    backward = recurrent._onlstm_backward
    monkeypatch.setattr(recurrent, "_onlstm_backward",
                        lambda grad, w_hh, hs, acts, *rest: backward(grad, w_hh, hs, acts.clone(), *rest))
    inputs = [t.requires_grad_() for t in _packed_inputs(num_dir, batch_sizes, chunk, scale=0.5)]
    assert torch.autograd.gradcheck(
        lambda *a: _ONLSTMFunction.apply(*a, batch_sizes, HIDDEN, chunk, True), inputs)


def test_scripted_and_eager_loops_agree():
    batch_sizes = [3, 3, 2, 2, 1, 1]
    inputs = _packed_inputs(2, batch_sizes, 1, dtype=torch.float32, seed=2)
    scripted = recurrent._onlstm_forward(*inputs, batch_sizes, HIDDEN, 1, True)
    eager = recurrent._onlstm_forward_eager(*[t.clone() for t in inputs], batch_sizes, HIDDEN, 1, True)
    for a, b in zip(scripted, eager):
        torch.testing.assert_close(a, b)
    grad = torch.randn(scripted[0].shape)
    hs, acts, cells = scripted
    scripted = recurrent._onlstm_backward(grad, inputs[3], hs, acts.clone(), cells, batch_sizes, HIDDEN, 1)
    eager = recurrent._onlstm_backward_eager(grad, inputs[3], hs, acts.clone(), cells, batch_sizes, HIDDEN, 1)
    for a, b in zip(scripted, eager):
        torch.testing.assert_close(a, b)


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@needs_onednn
@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("save", [True, False])
def test_onednn_recurrent_matmuls_equal_baddbmm(chunk, save):
    """oneDNN's packed weights compute the loops' ``baddbmm`` products (to
    float32 round-off), forward and backward, sentences ending early included;
    the eager loop (the fallback without TorchScript) takes them too."""
    batch_sizes = [4, 4, 3, 3, 1]
    inputs = _packed_inputs(2, batch_sizes, chunk, dtype=torch.float32, seed=5)
    runs = [loop(*[t.clone() for t in inputs], batch_sizes, HIDDEN, chunk, save, onednn)
            for loop, onednn in ((recurrent._onlstm_forward, False), (recurrent._onlstm_forward, True),
                                 (recurrent._onlstm_forward_eager, True))]
    for ours in runs[1:]:
        for a, b in zip(ours, runs[0]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    if save:
        grad = torch.randn(runs[0][0].shape, generator=torch.Generator().manual_seed(6))
        hs, acts, cells = runs[0]
        grads = [loop(grad, inputs[3], hs, acts.clone(), cells, batch_sizes, HIDDEN, chunk, onednn)
                 for loop, onednn in ((recurrent._onlstm_backward, False), (recurrent._onlstm_backward, True),
                                      (recurrent._onlstm_backward_eager, True))]
        for ours in grads[1:]:
            for a, b in zip(ours, grads[0]):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _matmul_calls(rnn, x, lengths, train=True):
    """Profiled calls of oneDNN's packed matmul, ``baddbmm`` and ``addmm`` in one
    forward + backward of the :class:`ONLSTM` ``rnn`` (or one forward without grad)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        if train:
            rnn(x.requires_grad_(), lengths).sum().backward()
        else:
            with torch.no_grad():
                rnn(x, lengths)
    names = [e.name for e in prof.events()]
    return tuple(names.count(op) for op in ("mkldnn::_linear_pointwise", "aten::baddbmm", "aten::addmm"))


@needs_onednn
@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # set by mkldnn.flags
@pytest.mark.parametrize("kernel", ["script", "cpp"])
def test_float32_cpu_recurrence_takes_onednn(kernel, monkeypatch):
    """Every recurrent product of a float32 CPU layer is one oneDNN matmul per
    direction ((T - 1) steps forward and as many backward), on the scripted
    loop and the C++ cell alike, and so is the input projection's backward;
    the C++ cell's input projection too.  float64,
    ``torch.backends.mkldnn.flags(enabled=False)`` and a torch without the
    packed-weight ops keep ``baddbmm`` (``addmm`` per direction on the cell)."""
    if kernel == "cpp" and onlstm_cpp.cell() is None:
        pytest.skip("the C++ cell is not built here")
    rnn = ONLSTM(D_MODEL, HIDDEN, kernel=kernel)
    x, lengths = _padded_batch([5, 3, 5], D_MODEL, dtype=torch.float32)
    steps = int(lengths.max()) - 1
    loop = kernel == "script"  # the loop's input projection is one baddbmm with the bias
    projections = 0 if loop else 2  # the cell's input projection: one per direction
    assert _matmul_calls(rnn, x.clone(), lengths) == (2 * 2 * steps + 2 + projections, int(loop), 0)
    assert _matmul_calls(rnn, x.clone(), lengths, train=False) == (2 * steps + projections, int(loop), 0)
    expected = (0, 1 + 2 * steps, 0) if loop else (0, 0, 2 * 2 * steps)
    with torch.backends.mkldnn.flags(enabled=False):
        assert _matmul_calls(rnn, x.clone(), lengths) == expected
    monkeypatch.setattr(packed_steps, "_ONEDNN_OPS", False)  # as on torch < 2.0
    assert _matmul_calls(rnn, x.clone(), lengths) == expected
    if loop:
        assert _matmul_calls(rnn.double(), x.double(), lengths) == (0, 1 + 2 * steps, 0)


def test_inference_path_keeps_nothing_and_equals_the_training_path():
    """Without ``save`` the loop keeps no gates and one step of cell states,
    and computes exactly the hidden states the saving loop computes."""
    batch_sizes = [4, 4, 3, 1]
    inputs = _packed_inputs(2, batch_sizes, 2, dtype=torch.float32, seed=3)
    lean = recurrent._onlstm_forward(*[t.clone() for t in inputs], batch_sizes, HIDDEN, 2, False)
    full = recurrent._onlstm_forward(*inputs, batch_sizes, HIDDEN, 2, True)
    assert torch.equal(lean[0], full[0])
    assert lean[1].numel() == 0 and lean[2].shape == (2, 4, HIDDEN)
    assert full[1].shape == (2, sum(batch_sizes), 4 * HIDDEN + HIDDEN) and full[2].shape == (2, 12, HIDDEN)

    # the layer: no_grad and eval give the training output; nothing is saved for a backward
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, chunk_size=2)
    x, lengths = _padded_batch([4, 3, 1, 4], D_MODEL, dtype=torch.float32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.no_grad():
            y_nograd = layer(x, lengths)
        assert saved == []
        layer.requires_grad_(False)
        y_frozen = layer(x, lengths)  # grad mode on, nothing requires grad
        assert saved == [] and y_frozen.grad_fn is None
        layer.requires_grad_(True)
        y_train = layer(x, lengths)
        assert len(saved) > 0
    assert torch.equal(y_nograd, y_train.detach()) and torch.equal(y_frozen, y_nograd)


@pytest.mark.parametrize("kernel", ["script", "cpp", "triton"])
def test_second_backward_through_the_layer_is_refused(kernel):
    """Every kernel writes the gate gradients over the saved gates (the C++
    cell and the Triton kernels behind autograd's back, then bump the
    version): a second backward through the same graph must fail, not read them."""
    if kernel == "triton" and onlstm_triton.triton is None:
        pytest.skip("triton is not installed")
    if kernel == "cpp" and onlstm_cpp.cell() is None:
        pytest.skip("the C++ cell is not built here")
    device = "cuda" if kernel == "triton" and torch.cuda.is_available() else "cpu"
    layer = RecurrentLayer(D_MODEL, "onlstm", hidden_dim=HIDDEN, kernel=kernel).to(device)
    x, lengths = _padded_batch([3, 2], D_MODEL, dtype=torch.float32)
    y = layer(x.to(device).requires_grad_(), lengths).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_loop_is_scripted():
    # the speed path: no Python per time step (falls back to eager only if TorchScript is gone)
    assert isinstance(recurrent._onlstm_forward, torch.jit.ScriptFunction)
    assert isinstance(recurrent._onlstm_backward, torch.jit.ScriptFunction)


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


def test_master_gates_in_the_loop_are_monotone():
    """The master gates the recurrence actually used (from the saved softmax probabilities)."""
    m = HIDDEN // 2
    batch_sizes = [3, 3, 3, 2, 1]
    _, acts, _ = recurrent._onlstm_forward(*_packed_inputs(2, batch_sizes, 2, dtype=torch.float32, scale=5.0, seed=4),
                                           batch_sizes, HIDDEN, 2, True)
    probs = acts[..., 4 * HIDDEN :].unflatten(-1, (2, m))
    master = torch.cumsum(probs, -1)  # [D, N, 2, m]: master forget, cumax behind master input
    assert (master[..., 1:] >= master[..., :-1]).all()
    assert (master >= 0).all() and (master <= 1 + 1e-6).all()
    master_input = 1 - master[..., 1, :]
    assert (master_input[..., 1:] <= master_input[..., :-1]).all()


def test_reversal_index():
    idx = reversal_index(torch.tensor([3, 1, 4]), 4)
    assert idx.t().tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    # an involution
    assert torch.equal(torch.gather(idx, 0, idx), torch.arange(4).unsqueeze(1).expand(4, 3))


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_padding_does_not_matter(cell, bidirectional, residual):
    """Each sentence alone equals the same sentence inside a padded batch (pads hold junk)."""
    torch.manual_seed(5)
    layer = RecurrentLayer(D_MODEL, cell, hidden_dim=HIDDEN, bidirectional=bidirectional, residual=residual)
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
def test_onlstm_gates_cumax_and_cell_state_are_float32_under_half(dtype):
    """The scripted loop itself: with half inputs its matmuls give half, but
    the gates, cumax's softmax and the cell states are float32, and 40 steps
    with 64 master units (a cumsum of 64 probabilities per step) stay within
    two roundings of float64 run on the same half pre-activations (an
    identity input projection); the backward takes the saved float32 states."""
    torch.manual_seed(11)
    hidden, steps = 64, 40
    gates = 4 * hidden + 2 * hidden
    batch_sizes = [3] * (steps - 10) + [2] * 10
    pre_activations = (2 * torch.randn(2, sum(batch_sizes), gates)).to(dtype)
    w_hh = (0.3 * torch.randn(2, hidden, gates)).to(dtype)
    identity = torch.eye(gates, dtype=dtype).expand(2, gates, gates)
    inputs = [pre_activations, identity, torch.zeros(2, 1, gates, dtype=dtype), w_hh]
    hs, acts, cells = recurrent._onlstm_forward(*inputs, batch_sizes, hidden, 1, True)
    assert hs.dtype == dtype
    assert acts.dtype == cells.dtype == torch.float32
    exact = recurrent._onlstm_forward_eager(*[t.double() for t in inputs], batch_sizes, hidden, 1, True)
    eps = torch.finfo(dtype).eps
    for ours, reference in zip((hs, acts[..., 4 * hidden :], cells), (exact[0], exact[1][..., 4 * hidden :], exact[2])):
        torch.testing.assert_close(ours.double(), reference, atol=2 * eps, rtol=2 * eps)
    grad_hs = torch.randn(hs.shape).to(dtype)
    grad_xg, grad_w = recurrent._onlstm_backward(grad_hs, w_hh, hs, acts, cells, batch_sizes, hidden, 1)
    assert grad_xg.dtype == dtype and torch.isfinite(grad_xg).all() and torch.isfinite(grad_w).all()
