"""The candidate kernels (``fairseq_posattn/kernels/candidates``) against the
definitions their production rivals are tested against, and how they are
reached: by :func:`fairseq_posattn.modules.candidates.use` (the benchmarks),
never by a flag.

* ``onlstm_persistent``: every step in one launch (on the CPU one launch per
  phase), against the reference and against the per-step kernels;
* ``onlstm_cuda_graphs``: the per-step kernels replayed from CUDA graphs,
  against the reference across batches of one bucket, new weights, growth,
  more layers in flight than slots, a forward without its backward;
* ``conv1d_triton``: the 1d convolved attention's kernels against the
  layer's explicit path.

On a machine without a GPU the kernels run in Triton's interpreter
(``TRITON_INTERPRET=1``, set by conftest.py), and a CUDA graph's "replay"
runs the first call's steps again on the same buffers, which is what a
graph's fixed addresses mean.
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from test_attention import OPTION_SETS  # noqa: E402
from test_convolved_kernel import (  # noqa: E402
    assert_dropout_is_the_explicit_maps_with_the_kernels_mask, assert_half_precision_is_the_explicit_path,
    assert_the_encoder_is_the_explicit_one,
)
from test_recurrent import LENGTHS, assert_kernel_is_the_reference  # noqa: E402
from test_relative_flash import PADDINGS, assert_kernel_is_the_explicit_path, assert_takes_the_kernel  # noqa: E402

from fairseq_posattn.kernels import onlstm_triton  # noqa: E402
from fairseq_posattn.kernels.candidates import onlstm_cuda_graphs, onlstm_persistent  # noqa: E402
from fairseq_posattn.modules import candidates  # noqa: E402
from fairseq_posattn.modules.onlstm_reference import reversal_index  # noqa: E402
from fairseq_posattn.modules.recurrent import ONLSTM  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)


def test_no_flag_reaches_a_candidate():
    """A candidate's name is no value of the flags; the bench's way in names what it cannot do."""
    with pytest.raises(ValueError, match="--encoder-recurrent-kernel onlstm_persistent: it is not one of"):
        ONLSTM(6, 4, kernel="onlstm_persistent")
    with pytest.raises(ValueError, match="nope: not a candidate"):
        candidates.use(ONLSTM(6, 4), "nope")
    with pytest.raises(ValueError, match="the candidate conv1d_triton computes no layer of this model"):
        candidates.use(ONLSTM(6, 4), "conv1d_triton")


# ---- onlstm_persistent -------------------------------------------------------------------

@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (3, 6), (4, 8)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_persistent_kernels_are_the_reference(bidirectional, chunk, hidden, lengths):
    """The steps in one launch (on the CPU: one launch per phase), forward and
    backward: output and every gradient are the reference's."""
    assert_kernel_is_the_reference("onlstm_persistent", lengths, chunk, bidirectional, hidden=hidden, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_persistent_kernels_in_half_precision_are_the_reference_in_half(dtype):
    assert_kernel_is_the_reference("onlstm_persistent", [4, 3, 3, 1], 2, True, hidden=8, dtype=dtype,
                                   device=DEVICE, atol=1e-2, rtol=1e-2)


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
    # the launch's shape is the kernels' own: no other way to see that the problem spreads over programs
    shape = onlstm_persistent._persistent_shape(hidden, chunk, 2, batch_sizes[0],
                                                onlstm_persistent._multiprocessors(torch.device(DEVICE)))
    assert shape["PROGRAMS"] > 1 and batch_sizes[0] > shape["BLOCK_B"] and hidden > shape["BLOCK_K"]
    return [a.to(DEVICE, dtype) for a in args], batch_sizes, hidden, chunk


HALF_ROUNDING = dict(atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype, save, chunk", [
    (torch.float32, True, 1), (torch.float32, False, 4), (torch.float16, True, 1), (torch.bfloat16, False, 4),
], ids=["fp32-training-chunk1", "fp32-inference-chunk4", "fp16-training-chunk1", "bf16-inference-chunk4"])
def test_the_persistent_forward_spreads_rows_and_columns(dtype, save, chunk):
    """:func:`spread_problem`: the states and saved gates of the per-step
    kernels, to their matmul's rounding (half: the per-step matmul rounds to
    half, the persistent one keeps float32)."""
    args, batch_sizes, hidden, chunk = spread_problem(dtype, chunk)
    steps = onlstm_triton.onlstm_forward(*args, batch_sizes, hidden, chunk, save)
    launch = onlstm_persistent.onlstm_forward(*args, batch_sizes, hidden, chunk, save)
    tolerance = {} if dtype == torch.float32 else HALF_ROUNDING
    for name, a, b in zip(["hidden states", "saved gates", "cell states"], steps, launch):
        torch.testing.assert_close(b, a, msg=name, **tolerance)


@pytest.mark.parametrize("dtype, chunk", [(torch.float32, 1), (torch.float32, 4), (torch.bfloat16, 4)],
                         ids=["fp32-chunk1", "fp32-chunk4", "bf16-chunk4"])
def test_the_persistent_backward_spreads_rows_and_units(dtype, chunk):
    """:func:`spread_problem`: the gate gradients and the recurrent weight's
    gradient of the per-step kernels' backward, to one rounding of the dtype."""
    args, batch_sizes, hidden, chunk = spread_problem(dtype, chunk)
    hs, acts, cells = onlstm_triton.onlstm_forward(*args, batch_sizes, hidden, chunk, True)
    grad_hs = torch.randn(hs.shape, device=DEVICE).to(dtype)
    w_hh = args[3]
    steps = onlstm_triton.onlstm_backward(grad_hs, w_hh, hs, acts.clone(), cells, batch_sizes, hidden, chunk)
    launch = onlstm_persistent.onlstm_backward(grad_hs, w_hh, hs, acts.clone(), cells, batch_sizes, hidden, chunk)
    tolerance = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else HALF_ROUNDING
    for name, a, b in zip(["gate gradients", "recurrent weight gradient"], steps, launch):
        torch.testing.assert_close(b, a, msg=name, **tolerance)


def test_one_launch_with_one_program_per_direction_is_the_reference(monkeypatch):
    """Every step in one launch, the barriers included: Triton's interpreter
    runs programs one after another, so one program per direction (which the
    barrier waits for alone; the phase-per-launch tests cover several), with
    the GPU's larger row tile (partly masked)."""
    shape = onlstm_persistent._persistent_shape

    def one_program(hidden, chunk_size, num_dir, rows, multiprocessors):
        tiles = shape(hidden, chunk_size, num_dir, rows, multiprocessors)
        gates = 4 * hidden + 2 * (hidden // chunk_size)
        return dict(tiles, PROGRAMS=1, BLOCK_P=2, BLOCK_N=max(16, 1 << (gates - 1).bit_length()),
                    BLOCK_H=max(16, 1 << (hidden - 1).bit_length()), BLOCK_B=32, ONE_LAUNCH=True)

    # the launch's shape is the kernels' own: no other way to run the one-launch form in the interpreter
    monkeypatch.setattr(onlstm_persistent, "_persistent_shape", one_program)
    assert_kernel_is_the_reference("onlstm_persistent", [4, 3, 3, 1], 2, True, hidden=8, device=DEVICE)


# ---- onlstm_cuda_graphs ------------------------------------------------------------------

@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("chunk,hidden", [(1, 6), (3, 6)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_steps_replayed_from_graphs_are_the_reference(bidirectional, chunk, hidden, lengths):
    """The batch padded to the graphs' bucket, every sentence running every
    step: output and every gradient are the reference's."""
    onlstm_cuda_graphs.clear()
    assert_kernel_is_the_reference("onlstm_cuda_graphs", lengths, chunk, bidirectional, hidden=hidden, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_steps_replayed_from_graphs_in_half_precision_are_the_reference_in_half(dtype):
    onlstm_cuda_graphs.clear()
    assert_kernel_is_the_reference("onlstm_cuda_graphs", [4, 3, 3, 1], 2, True, hidden=8, dtype=dtype,
                                   device=DEVICE, atol=1e-2, rtol=1e-2)


HIDDEN, CHUNK = 6, 2
DIM = 2 * HIDDEN  # a layer's output is the next one's input


@pytest.fixture
def graphed():
    """A function of ``count``: that many layers on CUDA graphs, and as many
    reference layers with the same weights; every test starts without graphs."""
    onlstm_cuda_graphs.clear()

    def layers(count=1, seed=0):
        torch.manual_seed(seed)
        fast = [ONLSTM(DIM, HIDDEN, chunk_size=CHUNK).to(DEVICE) for _ in range(count)]
        for layer in fast:
            candidates.use(layer, "onlstm_cuda_graphs")
        reference = [ONLSTM(DIM, HIDDEN, chunk_size=CHUNK, kernel="reference").to(DEVICE) for _ in range(count)]
        for g, r in zip(fast, reference):
            r.load_state_dict(g.state_dict())
        return fast, reference

    yield layers
    onlstm_cuda_graphs.clear()


def batch(lengths, seed):
    torch.manual_seed(seed)
    x = torch.randn(max(lengths), len(lengths), DIM, device=DEVICE)
    return x, torch.tensor(lengths, device=DEVICE)


def run(stack, x, lengths):
    """The layers one after the other, training: the output and the gradients
    of the input and of every parameter."""
    x = x.clone().requires_grad_()
    h = x
    for layer in stack:
        h = layer(h, lengths)
    h.pow(2).sum().backward()
    grads = [x.grad] + [p.grad.clone() for layer in stack for p in layer.parameters()]
    for layer in stack:
        layer.zero_grad()
    return [h.detach()] + grads


def assert_same(stack, reference, x, lengths):
    for a, b in zip(run(stack, x, lengths), run(reference, x, lengths)):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_the_batch_is_padded_to_the_bucket():
    lengths = torch.tensor([5, 2, 3], device=DEVICE)
    in_rows, batch_sizes, packed_row = onlstm_cuda_graphs.bucketed_layout(lengths, reversal_index(lengths, 5), 5, 3)
    assert batch_sizes == [8] * 8
    assert in_rows.numel() == 2 * 64
    assert packed_row[4, 0] == 4 * 8 and packed_row[4, 1] == 64 and packed_row[2, 2] == 2 * 8 + 2


def test_batches_of_one_bucket_and_inference_are_the_reference(graphed):
    """Batches of different lengths and sizes in one bucket (the first records
    the graphs, the others replay them), then inference twice."""
    fast, reference = graphed()
    for seed, lengths in enumerate([[7, 3, 5], [2, 6, 6, 1], [8, 8]]):
        assert_same(fast, reference, *batch(lengths, seed))
    x, lengths = batch([4, 2], 3)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast[0](x, lengths), reference[0](x, lengths), atol=2e-5, rtol=1e-4)


def test_a_replay_reads_the_weights_of_its_call(graphed):
    """An update between calls (in place, as an optimizer does) is seen."""
    fast, reference = graphed()
    x, lengths = batch([6, 4], 0)
    assert_same(fast, reference, x, lengths)
    for g, r in zip(fast[0].parameters(), reference[0].parameters()):
        noise = 0.1 * torch.randn_like(g)
        g.data.add_(noise)
        r.data.add_(noise)
    assert_same(fast, reference, x, lengths)


@pytest.mark.parametrize("max_slots", [8, 2], ids=["a-slot-each", "more-layers-than-slots"])
def test_layers_in_flight_together_are_the_reference(graphed, monkeypatch, max_slots):
    monkeypatch.setattr(onlstm_cuda_graphs, "MAX_SLOTS", max_slots)
    fast, reference = graphed(3)
    x, lengths = batch([5, 3, 1], 0)
    assert_same(fast, reference, x, lengths)
    assert_same(fast, reference, x, lengths)


def test_a_forward_keeps_its_buffers_until_its_backward(graphed):
    """Two forwards of one layer before their backwards: the second must not
    write over what the first one's backward reads."""
    fast, reference = graphed()
    inputs = [batch([5, 3], 0), batch([7, 2, 2], 1)]
    grads = []
    for layer in (fast[0], reference[0]):
        xs = [x.clone().requires_grad_() for x, _ in inputs]
        outs = [layer(x, lengths) for x, (_, lengths) in zip(xs, inputs)]
        sum(out.pow(2).sum() for out in outs).backward()
        grads.append([x.grad for x in xs] + [p.grad.clone() for p in layer.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_second_backward_through_the_buffers_is_refused(graphed, dtype):
    fast, _ = graphed()
    fast[0].to(dtype)
    x, lengths = batch([5, 3], 0)
    y = fast[0](x.to(dtype).requires_grad_(), lengths).float().sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_growing_shrinking_and_evicted_shapes_are_the_reference(graphed, monkeypatch):
    """A larger batch grows the buffers, a smaller one uses them again, and
    with room for few graphs the least recently used go."""
    monkeypatch.setattr(onlstm_cuda_graphs, "MAX_GRAPHS", 3)
    fast, reference = graphed()
    for seed, lengths in enumerate([[3, 2], [12, 9, 3], [3, 2], [12, 9], [3, 2]]):
        assert_same(fast, reference, *batch(lengths, seed))


def test_buffers_made_under_inference_mode_serve_training(graphed):
    """Buffers made in ``torch.inference_mode`` (a decoding run first) would be
    inference tensors, which autograd cannot save."""
    fast, reference = graphed()
    x, lengths = batch([5, 3], 0)
    with torch.inference_mode():
        torch.testing.assert_close(fast[0](x, lengths), reference[0](x, lengths), atol=2e-5, rtol=1e-4)
    assert_same(fast, reference, x, lengths)


# ---- conv1d_triton -----------------------------------------------------------------------

CONV1D = {
    "conv1d": dict(convolved_attention="1d", interaction_max_len=32),
    "conv1d+R+temperature": dict(convolved_attention="1d", position_interactions="R", interaction_max_len=32,
                                 learnable_temperature=True),
    "conv1d-past-the-table": dict(convolved_attention="1d", interaction_max_len=12, interaction_overflow="clamp"),
}


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("layer", sorted(CONV1D))
def test_the_1d_kernels_are_the_explicit_path(layer, padding):
    assert_kernel_is_the_explicit_path(CONV1D[layer], padding, "conv1d_triton", kernel="conv1d_triton")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_1d_kernels_in_half_precision_are_the_explicit_path_to_its_rounding(dtype):
    assert_half_precision_is_the_explicit_path(CONV1D["conv1d+R+temperature"], dtype, kernel="conv1d_triton")


def test_the_1d_kernels_dropout_is_the_explicit_maps_with_the_kernels_mask():
    assert_dropout_is_the_explicit_maps_with_the_kernels_mask(CONV1D["conv1d"], kernel="conv1d_triton")


@pytest.mark.parametrize("name, takes", [("conv1d", True), ("conv1d+R+temperature", True), ("conv2d", False),
                                         ("everything_1d", False)])
def test_which_layers_take_the_1d_kernels(name, takes):
    assert_takes_the_kernel(CONV1D.get(name) or OPTION_SETS[name], "conv1d_triton", takes, kernel="conv1d_triton")


def test_a_conv1d_model_on_the_candidate():
    """``candidates.use`` puts every layer of ``transformer_posattn_conv1d`` on
    the kernels, as the bench row ``conv1d-triton`` does; the encoder is the
    explicit one."""
    from fairseq_posattn.models.from_flags import build_model_from_flags

    def on_candidate(flags):
        _, model = build_model_from_flags(flags, 50)
        layers = candidates.use(model, "conv1d_triton")
        assert len(layers) == 2 and all(layer.self_attn.kernel == "conv1d_triton" for layer in model.encoder.layers)
        return model

    assert_the_encoder_is_the_explicit_one("transformer_posattn_conv1d", on_candidate)
