"""The Triton kernel of Shaw relative keys and values (``shaw_triton``,
``kernels/shaw_flash.py``) against the explicit path and the loop reference.

On a machine without a GPU the kernels run in Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, set by conftest.py); with one, compiled, on CUDA
(``scripts/gpu_check.sh``).  A layer with ``kernel="triton"`` against
the same layer's explicit path in float64: the output and every gradient (the
projections' weights carry ``dq``, ``dk``, ``dv``; both key and both value
tables), sequential and structural positions, one set and both, a table wider
than the sentence, pads anywhere and sentences without a real key, lengths
that do not fill the 16-row blocks and T=1; half precision to its rounding;
dropout against the kernel's own mask; and which layers take the kernel.
"""

import copy
import logging
import os

import pytest
import torch
from torch import nn

pytest.importorskip("triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from test_attention import (  # noqa: E402
    EMBED, HEADS, OPTION_SETS, build, chosen, reference_attention, right_padding_mask,
)

from fairseq_posattn.kernels import manual, triton_common  # noqa: E402
from fairseq_posattn.modules import candidates, kernel_choice  # noqa: E402
from fairseq_posattn.kernels.triton_common import draw_seed, kept, padded  # noqa: E402
from fairseq_posattn.modules import AttentionContext  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)

@triton.jit(do_not_specialize=["seed"])
def _dropout_keep(OUT, seed, dropout_p, T, BLOCK: tl.constexpr):
    bh = tl.program_id(0)
    rows = tl.arange(0, BLOCK)
    keep = kept(seed, bh, rows, rows, T, dropout_p)
    mask = (rows[:, None] < T) & (rows[None, :] < T)
    tl.store(OUT + bh * T * T + rows[:, None] * T + rows[None, :], keep.to(tl.int8), mask=mask)


def dropout_keep(seed, dropout_p, batch_heads, length, device):
    """``[batch_heads, T, T]`` bool: the probabilities the kernels keep for ``seed`` (their Philox numbers)."""
    out = torch.empty(batch_heads, length, length, dtype=torch.int8, device=device)
    _dropout_keep[(batch_heads,)](out, seed, dropout_p, length, BLOCK=padded(length))
    return out.bool()


# the position sets of a layer: PositionAttentionConfig options
SETS = {
    "sequential": dict(relative_positions=True, max_relative_position=2),
    "sequential-wide": dict(relative_positions=True, max_relative_position=20),  # k > T - 1
    "structural": dict(structural_relative_positions=True, max_structural_relative_position=3),
    "both": dict(relative_positions=True, max_relative_position=4,  # as transformer_struct
                 structural_relative_positions=True, max_structural_relative_position=2),
    # the kernel reads the rotated query and key, Shaw's keys too
    "sequential+rope": dict(relative_positions=True, max_relative_position=2, rotary_positions=True),
}


def pads_anywhere(length):
    """Left pads, holes, right pads, and a sentence with no real key."""
    mask = torch.rand(3, length, generator=torch.Generator().manual_seed(4)) < 0.3
    mask[0, :3] = True
    mask[2] = True
    return mask


# (T, [B, T] padding mask or None)
PADDINGS = {
    "T=1": (1, None),
    "one-block": (16, None),
    "right-padded": (17, right_padding_mask([17, 9, 1], 17)),
    "pads-anywhere": (24, pads_anywhere(24)),
}


def on_kernel(attn, kernel):
    """``attn`` on ``kernel``: an option of --encoder-attention-kernel, or a candidate's name."""
    if kernel in manual.OPTIONS[manual.ATTENTION]:
        attn.kernel = kernel
    else:
        candidates.use(attn, kernel)
    return attn


def flash_and_explicit(options, dtype=torch.float32, dropout=0.0, kernel="triton"):
    """The layer of ``options`` on the Triton kernel (``kernel``), in ``dtype``,
    and the same weights on the explicit path in float64."""
    attn = build(dtype=torch.float64, **options)
    attn.dropout_module.p = dropout
    explicit = copy.deepcopy(attn).to(DEVICE)
    explicit.kernel = "explicit"
    return on_kernel(attn, kernel).to(DEVICE, dtype), explicit


def context(length, batch=3):
    """Sequential positions and random tree-like structural ones (``[B, T, T]``
    int8, as ``translation_struct`` collates them), beyond the clips too; tree
    distances and PASCAL's parent positions."""
    generator = torch.Generator().manual_seed(5)
    structural = torch.randint(-5, 6, (batch, length, length), dtype=torch.int8, generator=generator)
    distances = torch.randint(1, 6, (batch, length, length), dtype=torch.int8, generator=generator).triu(1)
    parents = torch.randint(0, 2 * length - 1, (batch, length), generator=generator) / 2
    return AttentionContext(length, torch.device(DEVICE),
                            {"structural": structural.to(DEVICE),
                             "tree_distance": (distances + distances.transpose(1, 2)).to(DEVICE)},
                            {"parents": parents.to(DEVICE)})


def outputs_and_grads(attn, x, mask, length, autocast=None):
    """The layer's output and the gradients of a random weighting of all its
    rows (pad rows too) w.r.t. the input and every parameter, in float64."""
    x = x.detach().requires_grad_()
    with torch.autocast(DEVICE, dtype=autocast, enabled=autocast is not None):
        out, _ = attn(x, key_padding_mask=mask, context=context(length, x.size(1)))
    weight = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    weight = weight.to(DEVICE)
    inputs = [x, *attn.parameters()]
    grads = torch.autograd.grad((out.double() * weight).sum(), inputs)
    names = ["output", "input"] + [name for name, _ in attn.named_parameters()]
    return dict(zip(names, [out.detach().double(), *(g.double() for g in grads)]))


def assert_same(got, expected, dtype, units):
    """Every result within ``units`` of ``dtype``'s rounding of the largest
    value of them all (a gradient that is zero but for rounding, as ``k``'s
    with one key, is held to the same scale)."""
    assert got.keys() == expected.keys()
    scale = max(float(result.abs().max()) for result in expected.values())
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0,
                                   atol=units * torch.finfo(dtype).eps * scale,
                                   msg=lambda message: f"{name}: {message}")


def assert_kernel_is_the_explicit_path(options, padding, name, kernel="triton"):
    """The layer of ``options`` on ``kernel`` takes the Triton kernel ``name``: its values and
    every gradient in float32, to float32's rounding of the float64 explicit path."""
    length, mask = PADDINGS[padding]
    attn, explicit = flash_and_explicit(options, kernel=kernel)
    mask = None if mask is None else mask.to(DEVICE)
    x = torch.randn(length, 3, EMBED, dtype=torch.float64, device=DEVICE)
    assert chosen(attn, torch.empty(0, device=DEVICE)) == name
    expected = outputs_and_grads(explicit, x, mask, length)
    assert_same(outputs_and_grads(attn, x.float(), mask, length), expected, torch.float32, 32)


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("sets", sorted(SETS))
def test_the_kernel_is_the_explicit_path(sets, padding):
    assert_kernel_is_the_explicit_path(SETS[sets], padding, "shaw_triton")


@pytest.mark.parametrize("name", ["shaw", "shaw_wide", "rope_shaw"])
def test_the_kernel_matches_the_loop_reference(name):
    attn = build(dtype=torch.float32, **OPTION_SETS[name]).eval()
    attn.kernel = "triton"
    length, lengths = 7, [7, 4, 1]
    x = torch.randn(length, len(lengths), EMBED)
    with torch.no_grad():
        mask = right_padding_mask(lengths, length).to(DEVICE)
        out, _ = attn.to(DEVICE)(x.to(DEVICE), key_padding_mask=mask)
    expected = reference_attention(attn.cpu().double(), x.double(), lengths)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[:n, b].cpu().double(), expected[:n, b], atol=1e-5, rtol=1e-4)


HALF_CASES = [("module", torch.float16), ("module", torch.bfloat16), ("autocast", torch.bfloat16)]


@pytest.mark.parametrize("how, dtype", HALF_CASES, ids=["fp16", "bf16", "autocast-bf16"])
def test_half_precision_is_the_explicit_path_to_its_rounding(how, dtype):
    """Half inputs (and tables), float32 softmax and accumulators: the output
    and every gradient within a few units of half's rounding of the float64
    path's largest value."""
    length, mask = PADDINGS["pads-anywhere"]
    attn, explicit = flash_and_explicit(SETS["both"], dtype if how == "module" else torch.float32)
    x = torch.randn(length, 3, EMBED, dtype=torch.float64, device=DEVICE)
    got = outputs_and_grads(attn, x.to(dtype if how == "module" else torch.float32), mask.to(DEVICE),
                            length, autocast=dtype if how == "autocast" else None)
    assert_same(got, outputs_and_grads(explicit, x, mask.to(DEVICE), length), dtype, 4)


class FixedDropout(nn.Module):
    """Dropout with a given mask in training, for the explicit path."""

    def __init__(self, keep, p):
        super().__init__()
        self.keep, self.p = keep, p

    def forward(self, probs):
        return probs * self.keep / (1 - self.p) if self.training else probs


def test_dropout_is_the_explicit_path_with_the_kernels_mask():
    """In training the kernel drops the probabilities that meet ``V`` and the
    value tables alike, as the explicit path does; the backward regenerates
    the same mask (its gradients are the explicit path's with that mask)."""
    length, mask = PADDINGS["right-padded"]
    p = 0.3
    attn, explicit = flash_and_explicit(SETS["both"], dropout=p)
    x = torch.randn(length, 3, EMBED, dtype=torch.float64, device=DEVICE)
    torch.manual_seed(11)
    got = outputs_and_grads(attn.train(), x.float(), mask.to(DEVICE), length)
    torch.manual_seed(11)
    keep = dropout_keep(draw_seed(), p, 3 * HEADS, length, DEVICE).view(3, HEADS, length, length)
    explicit.dropout_module = FixedDropout(keep, p)
    assert_same(got, outputs_and_grads(explicit.train(), x, mask.to(DEVICE), length), torch.float32, 32)
    with torch.no_grad():  # evaluation: no dropout
        outputs = [layer.eval()(x.to(dtype), key_padding_mask=mask.to(DEVICE), context=context(length))[0]
                   for layer, dtype in ((attn, torch.float32), (explicit, torch.float64))]
    torch.testing.assert_close(outputs[0].double(), outputs[1], atol=1e-5, rtol=1e-4)


def test_the_dropout_mask_keeps_one_minus_p_and_follows_the_seed():
    keep = dropout_keep(7, 0.25, 8, 48, DEVICE)
    assert abs(keep.float().mean().item() - 0.75) < 0.02
    assert torch.equal(keep, dropout_keep(7, 0.25, 8, 48, DEVICE))
    assert (keep != dropout_keep(8, 0.25, 8, 48, DEVICE)).float().mean() > 0.2


# layer options -> whether the Triton kernel serves it (kernel="triton")
TAKES_THE_KERNEL = {
    "sequential": True,
    "structural": True,
    "both": True,
    "shaw_keys_only": False,  # no value term: the fused kernel's case in inference
    "shaw+temperature": True,  # temperature scales the projections, outside the kernel
    "shaw+P": False,
    "shaw+bilan": False,
    "shaw+conv2d": False,
    "sequential+rope": True,  # rotation never changes the kernel
    "shaw+pascal": False,  # PASCAL scales logits the kernel keeps inside
}


def layer_options(name):
    if name in SETS:
        return SETS[name]
    if name in OPTION_SETS:
        return OPTION_SETS[name]
    first, second = name.split("+")
    seconds = {"temperature": {"learnable_temperature": True}, "pascal": {"pascal_heads": 1}}
    return {**OPTION_SETS[first], **OPTION_SETS.get(second, seconds.get(second))}


def assert_takes_the_kernel(options, name, takes, kernel="triton"):
    """``auto`` takes the Triton kernel ``name`` on CUDA (unless it is a
    candidate), ``kernel`` on any device, for the layers it computes
    (``takes``); never where the weights are asked for, in float64, or with
    ``explicit``.  A candidate is refused by the layers it does not compute."""
    attn = build(dtype=torch.float32, **options)
    query = torch.empty(1, device=DEVICE)
    candidate = kernel not in manual.OPTIONS[manual.ATTENTION]
    assert (chosen(attn, query) == name) == (DEVICE == "cuda" and takes and not candidate)
    if candidate and not takes:
        with pytest.raises(ValueError, match=f"the candidate {kernel} computes no layer of this model"):
            candidates.use(attn, kernel)
        return
    on_kernel(attn, kernel)
    assert (chosen(attn, query) == name) == takes
    assert chosen(attn, query, need_weights=True) == "explicit"
    assert chosen(attn, query.double()) != name
    attn.kernel = "explicit"
    assert chosen(attn, query) == "explicit"


@pytest.mark.parametrize("name", sorted(TAKES_THE_KERNEL))
def test_which_layers_take_the_kernel(name):
    assert_takes_the_kernel(layer_options(name), "shaw_triton", TAKES_THE_KERNEL[name])


def test_a_cpu_tensor_outside_the_interpreter_takes_the_explicit_path(monkeypatch, caplog):
    """A model asked for the Triton kernels (trained on a GPU, say) runs on the
    CPU: the explicit path computes it, and the log says so once."""
    attn = build(dtype=torch.float32, encoder_attention_kernel="triton", **OPTION_SETS["shaw"])
    explicit = copy.deepcopy(attn)
    explicit.kernel = "explicit"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    kernel_choice._warn_once.cache_clear()  # the warning is once per process: forget earlier tests' (no other way)
    x = torch.randn(4, 2, EMBED)
    with caplog.at_level(logging.WARNING, logger=kernel_choice.__name__):
        assert chosen(attn, x) == "explicit"
        torch.testing.assert_close(attn(x)[0], explicit(x)[0])
        attn(x)
    assert caplog.text.count("the explicit path computes the same function") == 1


def test_the_kernel_needs_triton(monkeypatch):
    monkeypatch.setattr(triton_common, "triton", None)
    with pytest.raises(ValueError, match="--encoder-attention-kernel triton: it needs the triton package"):
        build(dtype=torch.float32, encoder_attention_kernel="triton", **OPTION_SETS["shaw"])


def test_transformer_struct_encoder_on_the_kernel():
    """The whole encoder of ``transformer_struct`` (left-padded batch, right-padded
    inside, tree positions reordered with it): output and parameter gradients
    of the kernel's layers against the explicit path's."""
    from fairseq_posattn.bench.models import make_trees
    from fairseq_posattn.models.from_flags import build_model_from_flags

    torch.manual_seed(0)
    _, model = build_model_from_flags(
        ["--arch", "transformer_struct", "--encoder-layers", "2", "--decoder-layers", "1",
         "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
         "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--max-source-positions", "64"], 50)
    lengths = torch.tensor([9, 6])
    tokens = torch.randint(4, 50, (2, 9))
    tokens[1, :3] = 1  # left padding
    tokens[:, -1] = 2
    trees = make_trees(model.encoder, lengths, 9, seed=0)
    results = []
    for kernel in ("explicit", "triton"):
        encoder = copy.deepcopy(model.encoder).to(DEVICE).eval()
        for layer in encoder.layers:
            layer.self_attn.kernel = kernel
        out = encoder(tokens.to(DEVICE), lengths.to(DEVICE), **{k: t.to(DEVICE) for k, t in trees.items()})
        out = out["encoder_out"][0]
        grads = torch.autograd.grad(out.pow(2).sum(), list(encoder.parameters()))
        results.append([out, *grads])
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
