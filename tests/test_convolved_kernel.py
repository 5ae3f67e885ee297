"""The Triton kernels of the 2d convolved attention (``conv2d_triton``,
``kernels/convolved_2d.py``) against the layer's explicit path: values and
every gradient (the input, the projections, the filters and biases, the
score terms'), pads anywhere and sentences without a real token, lengths that
fill no block, half precision, dropout with the kernels' own mask, and which
layers take them.  The 1d convolution's kernels, a candidate, are tested in
test_candidates.py with these helpers.

On a machine without a GPU the kernels run in Triton's interpreter on the
CPU (``TRITON_INTERPRET=1``, set by conftest.py); on CUDA, compiled
(``scripts/gpu_check.sh``).
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from test_attention import OPTION_SETS  # noqa: E402
from test_relative_flash import (  # noqa: E402
    PADDINGS, assert_kernel_is_the_explicit_path, assert_takes_the_kernel, dropout_keep, flash_and_explicit,
)

from fairseq_posattn.kernels.triton_common import draw_seed  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and Triton's interpreter is off (TRITON_INTERPRET=1)", allow_module_level=True)

LAYERS = {
    "conv2d": OPTION_SETS["conv2d"],
    "conv2d+P+temperature": dict(convolved_attention="2d", position_interactions="P", interaction_max_len=32,
                                 learnable_temperature=True),
    "conv2d+shaw-keys+bilan": dict(convolved_attention="2d", relative_positions=True, max_relative_position=2,
                                   no_relative_values=True, query_relative_positions=True,
                                   query_relative_clip=3),
    # the kernels take the logits the layer computes: PASCAL's scaling of the rotated q k^T included
    "conv2d+pascal+rope+alibi+depdist": dict(convolved_attention="2d", pascal_heads=2, rotary_positions=True,
                                             alibi=True, dependency_distance_bias=True),
}


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_kernels_are_the_explicit_path(layer, padding):
    assert_kernel_is_the_explicit_path(LAYERS[layer], padding, "conv2d_triton")


def assert_half_precision_is_the_explicit_path(options, dtype, kernel="triton"):
    length, mask = PADDINGS["right-padded"]
    attn, explicit = flash_and_explicit(options, dtype=dtype, kernel=kernel)
    x = torch.randn(length, 3, attn.embed_dim, dtype=torch.float64, device=DEVICE)
    mask = mask.to(DEVICE)
    out, _ = attn(x.to(dtype), key_padding_mask=mask)
    expected, _ = explicit(x, key_padding_mask=mask)
    real = ~mask.t()[:, :, None]
    tolerance = 2e-2 if dtype == torch.float16 else 8e-2
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.double() * real, expected * real, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_the_explicit_path_to_its_rounding(dtype):
    assert_half_precision_is_the_explicit_path(LAYERS["conv2d+P+temperature"], dtype)


def assert_dropout_is_the_explicit_maps_with_the_kernels_mask(options, kernel="triton"):
    """In training the kernels drop entries of ``A'`` by their Philox mask:
    the output is ``(A' * keep / (1 - p)) V`` with the explicit path's ``A'``,
    and so are the gradients of the input and of the filters."""
    length, mask = PADDINGS["right-padded"]
    attn, explicit = flash_and_explicit(options, dropout=0.25, kernel=kernel)
    attn.train()
    explicit.eval()
    mask = mask.to(DEVICE)
    x = torch.randn(length, 3, attn.embed_dim, dtype=torch.float64, device=DEVICE)
    real = ~mask.t()[:, :, None]
    weighting = torch.randn(length, 3, attn.embed_dim, dtype=torch.float64, device=DEVICE) * real
    torch.manual_seed(11)
    x32 = x.float().requires_grad_()
    out, _ = attn(x32, key_padding_mask=mask)
    (out.double() * weighting).sum().backward()
    torch.manual_seed(11)
    seed = draw_seed()  # what the layer drew
    keep = dropout_keep(seed, 0.25, 3 * attn.num_heads, length, DEVICE).view(3, attn.num_heads, length, length)
    x64 = x.clone().requires_grad_()
    _, maps = explicit(x64, key_padding_mask=mask, need_weights=True)
    q, k, v = explicit._project(x64)
    values = torch.matmul(maps * keep / 0.75, v).permute(2, 0, 1, 3).reshape(length, 3, attn.embed_dim)
    expected = explicit.out_proj(values)
    (expected * weighting).sum().backward()
    assert 0.15 < 1 - keep.float().mean() < 0.35
    torch.testing.assert_close(out.double() * real, expected * real, atol=2e-5, rtol=2e-4)
    torch.testing.assert_close(x32.grad.double(), x64.grad, atol=2e-5, rtol=2e-4)
    for got, want in zip(attn.probability_terms[0].parameters(), explicit.probability_terms[0].parameters()):
        torch.testing.assert_close(got.grad.double(), want.grad, atol=2e-5, rtol=2e-4)


def test_dropout_is_the_explicit_maps_with_the_kernels_mask():
    assert_dropout_is_the_explicit_maps_with_the_kernels_mask(LAYERS["conv2d"])


# layer options -> whether the 2d kernels compute it (under --encoder-attention-kernel triton)
TAKES_THE_KERNELS = {
    "conv2d": True,
    "conv2d+P+temperature": True,
    "conv2d+shaw-keys+bilan": True,
    "conv2d+pascal+rope+alibi+depdist": True,
    "conv1d": False,
    "everything_1d": False,
    "everything_2d": False,  # Shaw values read the convolved map
}


@pytest.mark.parametrize("name", sorted(TAKES_THE_KERNELS))
def test_which_layers_take_the_kernels(name):
    options = LAYERS.get(name) or OPTION_SETS[name]
    assert_takes_the_kernel(options, "conv2d_triton", TAKES_THE_KERNELS[name])


def assert_the_encoder_is_the_explicit_one(arch, on_kernel):
    """The encoder of ``arch`` put on its kernels by ``on_kernel(flags)`` (the
    flags, the model), left-padded batch: its output and parameter gradients
    are those of the same weights with ``--encoder-attention-kernel explicit``."""
    from fairseq_posattn.models.from_flags import build_model_from_flags

    flags = ["--arch", arch, "--encoder-layers", "2", "--decoder-layers", "1",
             "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
             "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
             "--max-source-positions", "64", "--dropout", "0"]
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 50, (2, 9), generator=generator)
    tokens[1, :3] = 1  # left padding
    tokens[:, -1] = 2
    lengths = torch.tensor([9, 6])
    # a random weighting of the output: the gradients of out.pow(2).sum() through the
    # final layer norm nearly cancel, and float32 would keep little of them on either path
    weighting = torch.randn(9, 2, 16, generator=generator).to(DEVICE)
    results = []
    for kernel in ("explicit", "fast"):
        torch.manual_seed(0)
        if kernel == "explicit":
            _, model = build_model_from_flags(flags + ["--encoder-attention-kernel", "explicit"], 50)
        else:
            model = on_kernel(flags)
        encoder = model.encoder.to(DEVICE).train()
        out = encoder(tokens.to(DEVICE), lengths.to(DEVICE))["encoder_out"][0]
        results.append([out, *torch.autograd.grad((out * weighting).sum(), list(encoder.parameters()))])
    names = ["output"] + [name for name, _ in model.encoder.named_parameters()]
    for name, got, expected in zip(names, results[1], results[0]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4, msg=name)


def test_a_convolved_model_on_the_kernels_through_the_flag():
    from fairseq_posattn.models.from_flags import build_model_from_flags

    def on_triton(flags):
        _, model = build_model_from_flags(flags + ["--encoder-attention-kernel", "triton"], 50)
        assert all(layer.self_attn.kernel == "triton" for layer in model.encoder.layers)
        return model

    assert_the_encoder_is_the_explicit_one("transformer_posattn_conv2d", on_triton)
