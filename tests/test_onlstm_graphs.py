"""The ON-LSTM's Triton steps replayed from CUDA graphs
(``--encoder-recurrent-kernel graph``, :mod:`fairseq_posattn.modules.onlstm.cuda_graphs`):
the slots that hold a layer's buffers from its forward to its backward,
replays across batches of one bucket, new weights, growth, more layers in
flight than slots.  On CUDA the graphs are recorded; without a GPU the steps
run in Triton's interpreter and a "replay" runs the first call's steps again
on the same buffers, which is what a graph's fixed addresses mean.
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from fairseq_posattn.modules.onlstm import cuda_graphs  # noqa: E402
from fairseq_posattn.modules.onlstm.reference import reversal_index  # noqa: E402
from fairseq_posattn.modules.recurrent import ONLSTM  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)

HIDDEN, CHUNK = 6, 2
DIM = 2 * HIDDEN  # a layer's output is the next one's input


@pytest.fixture(autouse=True)
def fresh_slots(monkeypatch):
    """Every test starts without slots."""
    monkeypatch.setattr(cuda_graphs, "_SLOTS", {})
    yield


def layers(count=1, seed=0):
    """``count`` graph layers and reference layers with the same weights."""
    torch.manual_seed(seed)
    graphed = [ONLSTM(DIM, HIDDEN, chunk_size=CHUNK, kernel="graph").to(DEVICE) for _ in range(count)]
    reference = [ONLSTM(DIM, HIDDEN, chunk_size=CHUNK, kernel="reference").to(DEVICE) for _ in range(count)]
    for g, r in zip(graphed, reference):
        r.load_state_dict(g.state_dict())
    return graphed, reference


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


def count_replays(monkeypatch):
    """The number of replays so far, as a one-element list."""
    replays = [0]
    run_slot = cuda_graphs._Slot.run

    def counting(slot, key, steps):
        replays[0] += key in slot.graphs
        run_slot(slot, key, steps)

    monkeypatch.setattr(cuda_graphs._Slot, "run", counting)
    return replays


def test_the_batch_is_padded_to_the_bucket():
    layer, _ = layers()
    lengths = torch.tensor([5, 2, 3], device=DEVICE)
    in_rows, batch_sizes, packed_row = layer[0]._layout("graph", lengths, reversal_index(lengths, 5), 5, 3)
    assert batch_sizes == [8] * 8
    assert in_rows.numel() == 2 * 64
    assert packed_row[4, 0] == 4 * 8 and packed_row[4, 1] == 64 and packed_row[2, 2] == 2 * 8 + 2


def test_batches_of_one_bucket_replay_the_first_ones_graphs(monkeypatch):
    """Three batches of different lengths and sizes in one bucket: the first
    records a forward and a backward graph, the others replay them, every
    result the reference's; inference records its own and replays it."""
    replays = count_replays(monkeypatch)
    graphed, reference = layers()
    for seed, lengths in enumerate([[7, 3, 5], [2, 6, 6, 1], [8, 8]]):
        assert_same(graphed, reference, *batch(lengths, seed))
    assert replays[0] == 4
    x, lengths = batch([4, 2], 3)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(graphed[0](x, lengths), reference[0](x, lengths), atol=2e-5, rtol=1e-4)
    assert replays[0] == 5
    assert len(cuda_graphs._SLOTS[x.device]) == 1


def test_a_replay_reads_the_weights_of_its_call():
    """The graph reads a copy of the recurrent weights made at each call: an
    update between calls (in place, as an optimizer does) is seen."""
    graphed, reference = layers()
    x, lengths = batch([6, 4], 0)
    assert_same(graphed, reference, x, lengths)
    for g, r in zip(graphed[0].parameters(), reference[0].parameters()):
        noise = 0.1 * torch.randn_like(g)
        g.data.add_(noise)
        r.data.add_(noise)
    assert_same(graphed, reference, x, lengths)


def test_layers_in_flight_take_a_slot_each_and_the_backward_frees_them(monkeypatch):
    replays = count_replays(monkeypatch)
    graphed, reference = layers(3)
    x, lengths = batch([5, 3, 1], 0)
    assert_same(graphed, reference, x, lengths)
    slots = cuda_graphs._SLOTS[x.device]
    assert len(slots) == 3 and not any(slot.busy() for slot in slots)
    assert_same(graphed, reference, x, lengths)
    assert replays[0] == 6 and len(slots) == 3


def test_a_forward_without_backward_holds_its_slot_until_it_is_freed():
    graphed, _ = layers()
    x, lengths = batch([5, 3], 0)
    held = graphed[0](x.requires_grad_(), lengths)
    slots = cuda_graphs._SLOTS[x.device]
    assert slots[0].busy()
    graphed[0](x, lengths)
    assert len(slots) == 2
    del held
    assert not slots[0].busy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_second_backward_through_the_slot_is_refused(dtype):
    graphed, _ = layers()
    graphed[0].to(dtype)
    x, lengths = batch([5, 3], 0)
    y = graphed[0](x.to(dtype).requires_grad_(), lengths).float().sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_larger_batch_grows_the_buffers_and_drops_the_graphs_that_read_them():
    """The forward's buffers grow: every graph goes; the backward's grow
    after the forward recorded its graph: only the backward's go."""
    graphed, reference = layers()
    x, lengths = batch([3, 2], 0)
    assert_same(graphed, reference, x, lengths)
    slot = cuda_graphs._SLOTS[x.device][0]
    assert len(slot.graphs) == 2
    assert_same(graphed, reference, *batch([12, 9, 3], 1))
    assert [(key[0], len(key[1])) for key in slot.graphs] == [("forward", 16), ("backward", 16)]
    assert_same(graphed, reference, *batch([3, 2], 2))  # smaller again: the grown buffers serve it
    assert len(slot.graphs) == 4


def test_more_layers_in_flight_than_slots_run_without_graphs(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_SLOTS", 2)
    graphed, reference = layers(3)
    x, lengths = batch([5, 3, 1], 0)
    assert_same(graphed, reference, x, lengths)
    assert len(cuda_graphs._SLOTS[x.device]) == 2


def test_the_least_recently_used_graph_goes_first(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPHS", 3)
    graphed, reference = layers()
    for seed, lengths in enumerate([[12, 9], [3, 2], [12, 9]]):
        x, lengths = batch(lengths, seed)
        assert_same(graphed, reference, x, lengths)
    slot = cuda_graphs._SLOTS[x.device][0]
    assert [(key[0], len(key[1])) for key in slot.graphs] == [("backward", 8), ("forward", 16), ("backward", 16)]


def test_a_slot_made_under_inference_mode_serves_training():
    """Buffers made in ``torch.inference_mode`` (a decoding run first) would be
    inference tensors, which autograd cannot save: the slot makes plain ones."""
    graphed, reference = layers()
    x, lengths = batch([5, 3], 0)
    with torch.inference_mode():
        torch.testing.assert_close(graphed[0](x, lengths), reference[0](x, lengths), atol=2e-5, rtol=1e-4)
    assert_same(graphed, reference, x, lengths)
