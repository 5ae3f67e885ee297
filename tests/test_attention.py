"""PositionAwareSelfAttention against fairseq's MultiheadAttention and against a
slow reference that follows the papers' equations with explicit loops."""

import itertools
import math
import types

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_posattn.modules import AttentionContext, PositionAttentionConfig, kernel_choice
from fairseq_posattn.modules.attention import PositionAwareSelfAttention
from fairseq_posattn.modules.convolved_attention import ConvolvedAttention1d

EMBED, HEADS = 12, 3
HEAD_DIM = EMBED // HEADS


def right_padding_mask(lengths, total):
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


def chosen(attn, query, need_weights=False):
    """The name of the kernel that computes a call of ``attn`` on ``query``."""
    return kernel_choice.attention_kernel(attn, query, need_weights)


def build(dtype=torch.float64, layer_index=0, **options):
    cfg = PositionAttentionConfig(**options)
    torch.manual_seed(0)
    attn = PositionAwareSelfAttention(EMBED, HEADS, **cfg.build_terms(EMBED, HEADS, layer_index))
    # random, non-trivial values for every parameter (temperatures, biases too)
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0.0, 0.5)
    return attn.to(dtype)


# --------------------------------------------------------------------------
# slow reference: the papers' equations, one scalar at a time
# --------------------------------------------------------------------------


def reference_attention(attn, x, lengths):
    """x: [T, B, C]; lengths: true lengths (right padding)."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    terms = {type(t).__name__: t for t in itertools.chain(
        attn.score_terms, attn.probability_terms, attn.value_terms)}

    def linear(layer, vec):
        out = layer.weight @ vec
        return out + layer.bias if layer.bias is not None else out

    gamma = attn.temperature if attn.temperature is not None else torch.ones(3, H, dtype=x.dtype)
    out = torch.zeros(T, B, C, dtype=x.dtype)
    for b in range(B):
        n = lengths[b]
        q = [linear(attn.q_proj, x[i, b]) for i in range(T)]
        k = [linear(attn.k_proj, x[i, b]) for i in range(T)]
        v = [linear(attn.v_proj, x[i, b]) for i in range(T)]
        heads_out = []
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            qh = [gamma[0, h] * q[i][sl] for i in range(T)]
            kh = [gamma[1, h] * k[i][sl] for i in range(T)]
            vh = [gamma[2, h] * v[i][sl] for i in range(T)]
            A = torch.zeros(T, T, dtype=x.dtype)
            for i in range(T):
                for j in range(T):
                    A[i, j] = qh[i] @ kh[j] / math.sqrt(D)
                    if "AbsolutePositionInteraction" in terms:
                        t = terms["AbsolutePositionInteraction"]
                        A[i, j] += t.weight[h, min(i, t.max_len - 1), min(j, t.max_len - 1)]
                    if "RelativePositionInteraction" in terms:
                        t = terms["RelativePositionInteraction"]
                        reach = t.max_len - 1
                        A[i, j] += t.weight[h, max(-reach, min(reach, i - j)) + reach]
                    if "RelativeKeys" in terms:
                        t = terms["RelativeKeys"]
                        rel = max(-t.clip, min(t.clip, j - i)) + t.clip
                        A[i, j] += qh[i] @ t.embedding[rel] / math.sqrt(D)
                    if "QueryProjectedRelativeScores" in terms:
                        t = terms["QueryProjectedRelativeScores"]
                        r = (t.query_proj.weight @ x[i, b])[sl]
                        rel = max(-t.clip, min(t.clip, j - i)) + t.clip
                        A[i, j] += r @ t.relative_vectors[h, rel] / math.sqrt(D)
            P = torch.zeros(T, T, dtype=x.dtype)
            for i in range(T):
                row = torch.exp(A[i, :n] - A[i, :n].max())
                P[i, :n] = row / row.sum()
            if "ConvolvedAttention1d" in terms:
                t = terms["ConvolvedAttention1d"]
                P = reference_conv1d(P, n, t.weight[h], t.bias[h], t.max_len)
            if "ConvolvedAttention2d" in terms:
                t = terms["ConvolvedAttention2d"]
                P = reference_conv2d(P, n, t.weight[h, 0], t.bias[h])
            z = []
            for i in range(T):
                zi = torch.zeros(D, dtype=x.dtype)
                for j in range(n):
                    zi = zi + P[i, j] * vh[j]
                    if "RelativeValues" in terms:
                        t = terms["RelativeValues"]
                        rel = max(-t.clip, min(t.clip, j - i)) + t.clip
                        zi = zi + P[i, j] * t.embedding[rel]
                z.append(zi)
            heads_out.append(z)
        for i in range(T):
            concat = torch.cat([heads_out[h][i] for h in range(H)])
            out[i, b] = linear(attn.out_proj, concat)
    return out


def reference_conv1d(P, n, weight, bias, max_len):
    """Dufter Fig. 1 top: per query row q, out[q, o] = b[o] + sum_{d,i} w[d, i, o] P[q+d-1, i]."""
    T = P.size(0)
    src = P.clone()
    src[n:, :] = 0
    src[:, n:] = 0
    out = torch.zeros_like(P)
    pos = lambda p: min(p, max_len - 1)  # noqa: E731
    for q in range(T):
        for o in range(n):
            acc = bias[pos(o)].clone()
            for d in range(3):
                row = q + d - 1
                if 0 <= row < T:
                    for i in range(T):
                        acc = acc + weight[d, pos(i), pos(o)] * src[row, i]
            out[q, o] = max(acc, torch.zeros_like(acc))
    return out


def reference_conv2d(P, n, weight, bias):
    T = P.size(0)
    src = P.clone()
    src[n:, :] = 0
    src[:, n:] = 0
    out = torch.zeros_like(P)
    for r in range(T):
        for c in range(n):
            acc = bias.clone()
            for dr in range(3):
                for dc in range(3):
                    rr, cc = r + dr - 1, c + dc - 1
                    if 0 <= rr < T and 0 <= cc < T:
                        acc = acc + weight[dr, dc] * src[rr, cc]
            out[r, c] = max(acc, torch.zeros_like(acc))
    return out


OPTION_SETS = {
    "none": {},
    "temperature": dict(learnable_temperature=True),
    "P": dict(position_interactions="P", interaction_max_len=8),
    "R": dict(position_interactions="R", interaction_max_len=8),
    "PR": dict(position_interactions="PR", interaction_max_len=8),
    "shaw": dict(relative_positions=True, max_relative_position=2),
    "shaw_keys_only": dict(relative_positions=True, max_relative_position=2, no_relative_values=True),
    "bilan": dict(query_relative_positions=True, query_relative_clip=3),
    # tables wider than any distance in the batch (only the middle rows are reachable)
    "bilan_wide": dict(query_relative_positions=True, query_relative_clip=10),
    "shaw_wide": dict(relative_positions=True, max_relative_position=9),
    "conv1d": dict(convolved_attention="1d", interaction_max_len=8),
    "conv2d": dict(convolved_attention="2d"),
    "everything_1d": dict(
        position_interactions="PR", interaction_max_len=8, learnable_temperature=True,
        relative_positions=True, max_relative_position=2, query_relative_positions=True,
        query_relative_clip=3, convolved_attention="1d",
    ),
    "everything_2d": dict(
        position_interactions="P", interaction_max_len=8, learnable_temperature=True,
        relative_positions=True, max_relative_position=1, convolved_attention="2d",
    ),
    "all_score_terms": dict(
        position_interactions="PR", interaction_max_len=8, learnable_temperature=True,
        relative_positions=True, max_relative_position=2, no_relative_values=True,
        query_relative_positions=True, query_relative_clip=3,
    ),
}


@pytest.mark.parametrize("kernel", ["auto", "explicit"])
@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_matches_loop_reference(name, kernel):
    attn = build(encoder_attention_kernel=kernel, **OPTION_SETS[name]).eval()
    T, lengths = 6, [6, 4, 1]
    torch.manual_seed(1)
    x = torch.randn(T, len(lengths), EMBED, dtype=torch.float64)
    mask = right_padding_mask(lengths, T)
    out, _ = attn(x, key_padding_mask=mask)
    expected = reference_attention(attn, x, lengths)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[:n, b], expected[:n, b], atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("name", ["P", "R", "conv1d"])
def test_clamp_beyond_table_matches_reference(name):
    options = dict(OPTION_SETS[name], interaction_max_len=4, interaction_overflow="clamp")
    attn = build(**options).eval()
    T, lengths = 7, [7, 5]
    x = torch.randn(T, 2, EMBED, dtype=torch.float64)
    out, _ = attn(x, key_padding_mask=right_padding_mask(lengths, T))
    expected = reference_attention(attn, x, lengths)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[:n, b], expected[:n, b], atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("name", ["P", "R", "conv1d", "everything_1d"])
def test_longer_than_table_is_a_clear_error(name):
    attn = build(**dict(OPTION_SETS[name], interaction_max_len=4))
    x = torch.randn(5, 2, EMBED, dtype=torch.float64)
    with pytest.raises(ValueError, match="--interaction-max-len 4"):
        attn(x)


@pytest.mark.parametrize("name", ["none", "temperature", "P", "PR", "bilan", "shaw_keys_only"])
def test_fused_and_explicit_paths_agree(name):
    """``auto`` takes PyTorch's fused attention whenever no gradient must reach
    the score terms: no score terms (gradients flow through it then), or frozen
    layers and an input that needs no gradient."""
    options = OPTION_SETS[name]
    fused = build(**options)
    explicit = build(encoder_attention_kernel="explicit", **options)
    scored = len(fused.score_terms) > 0
    for attn in (fused, explicit):
        attn.requires_grad_(not scored)
    mask = right_padding_mask([6, 3, 5], 6)
    x = torch.randn(6, 3, EMBED, dtype=torch.float64, requires_grad=not scored)
    q = fused._project(x)[0]
    assert chosen(fused, q, False) == "sdpa"
    assert chosen(explicit, q, False) == "explicit"
    outputs = [attn(x, key_padding_mask=mask)[0].masked_fill(mask.t()[:, :, None], 0.0)
               for attn in (fused, explicit)]
    torch.testing.assert_close(outputs[0], outputs[1])
    if not scored:
        grads = [torch.autograd.grad((out**2).sum(), [x, *attn.parameters()])
                 for out, attn in zip(outputs, (fused, explicit))]
        for got, expected in zip(*grads):
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", ["P", "R", "PR", "bilan", "shaw_keys_only", "all_score_terms"])
def test_sdpa_with_trainable_score_terms_equals_the_explicit_path(name):
    """``--encoder-attention-kernel sdpa`` hands trainable score terms to
    PyTorch's fused attention as its mask: output and the gradients of the
    input and of every parameter (the terms' included) are the explicit path's,
    with padding."""
    options = OPTION_SETS[name]
    sdpa = build(encoder_attention_kernel="sdpa", **options).train()
    explicit = build(encoder_attention_kernel="explicit", **options).train()
    explicit.load_state_dict(sdpa.state_dict())
    mask = right_padding_mask([6, 3, 5], 6)
    x = torch.randn(6, 3, EMBED, dtype=torch.float64, requires_grad=True)
    assert chosen(sdpa, sdpa._project(x)[0], False) == "sdpa"
    weight = torch.randn(6, 3, EMBED, dtype=torch.float64).masked_fill(mask.t()[:, :, None], 0.0)
    results = []
    for attn in (sdpa, explicit):
        out = attn(x, key_padding_mask=mask)[0]
        params = [p for p in attn.parameters()]
        results.append([out * weight, *torch.autograd.grad((out * weight).sum(), [x, *params])])
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-9)


def test_trainable_score_terms_take_the_explicit_path():
    attn = build(**OPTION_SETS["P"])
    q = attn._project(torch.randn(4, 2, EMBED, dtype=torch.float64))[0]
    assert chosen(attn, q, False) == "explicit"
    with torch.no_grad():
        assert chosen(attn, q, False) == "sdpa"
    assert chosen(build(**OPTION_SETS["conv2d"]), q, False) == "explicit"
    assert chosen(build(), q, True) == "explicit"
    assert chosen(build(), q, False) == "sdpa"


@pytest.mark.parametrize("dtype, path", [(torch.float16, "sdpa"), (torch.bfloat16, "sdpa"),
                                         (torch.float32, "explicit")])
def test_auto_hands_trainable_score_terms_to_sdpa_on_cuda_in_half_precision(dtype, path):
    """On CUDA in fp16 and bf16, where it measured at least as fast as the
    explicit path, ``auto`` runs trainable score terms in PyTorch's fused
    attention; in float32 (and on the CPU: the test above) explicitly. Asking
    for the weights, or for ``explicit``, still gets the explicit path."""
    cuda_query = types.SimpleNamespace(is_cuda=True, device=torch.device("cuda"), dtype=dtype,
                                       requires_grad=True)
    for name in ("P", "R", "PR", "bilan", "shaw_keys_only"):
        attn = build(**OPTION_SETS[name])
        assert chosen(attn, cuda_query, False) == path, name
        assert chosen(attn, cuda_query, True) == "explicit"
        attn.kernel = "explicit"
        assert chosen(attn, cuda_query, False) == "explicit"


@pytest.mark.parametrize("kernel, name, says", [
    ("flash", "none", "it is not one of auto, explicit, sdpa, triton"),
    ("sdpa", "conv2d", "does not return the probabilities"),
    ("sdpa", "shaw", "does not return the probabilities"),
    ("triton", "P", "no Triton kernel computes the layer's terms .shaw_triton: Shaw relative keys and values"),
    ("triton", "shaw_keys_only", "no Triton kernel computes the layer's terms"),
    ("triton", "everything_1d", "conv2d_triton: the 2d convolved attention .* without value terms"),
    ("triton", "everything_2d", "no Triton kernel computes the layer's terms"),
])
def test_a_kernel_that_cannot_compute_the_terms_is_refused_at_build(kernel, name, says):
    with pytest.raises(ValueError, match=f"--encoder-attention-kernel {kernel}: .*{says}"):
        build(encoder_attention_kernel=kernel, **OPTION_SETS[name])


# --------------------------------------------------------------------------
# every option off == fairseq's MultiheadAttention
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["auto", "explicit", "sdpa"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "left-padding"])
def test_equals_fairseq_multihead_attention(padded, kernel):
    torch.manual_seed(3)
    embed, heads, T, B = 16, 4, 7, 3
    # float64: the two compute in different orders, and float32 rounding
    # differences between them depend on the CPU's kernels
    stock = MultiheadAttention(embed, heads, self_attention=True).double()
    ours = PositionAwareSelfAttention(embed, heads, kernel=kernel).double()
    ours.load_state_dict(stock.state_dict())
    x = torch.randn(T, B, embed, dtype=torch.float64, requires_grad=True)
    mask = None
    if padded:
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask[1, :3] = True
        mask[2, :1] = True
    expected, _ = stock(x, x, x, key_padding_mask=mask, need_weights=False)
    actual, _ = ours(x, key_padding_mask=mask)
    torch.testing.assert_close(actual, expected, atol=1e-12, rtol=0)

    weight = torch.randn_like(expected)
    grads_stock = torch.autograd.grad((expected * weight).sum(), [x, *stock.parameters()])
    grads_ours = torch.autograd.grad((actual * weight).sum(), [x, *ours.parameters()])
    for a, b in zip(grads_ours, grads_stock):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_state_dict_names_are_fairseqs():
    stock = MultiheadAttention(8, 2, self_attention=True)
    assert set(PositionAwareSelfAttention(8, 2).state_dict()) == set(stock.state_dict())


# --------------------------------------------------------------------------
# details of single terms
# --------------------------------------------------------------------------


def test_relative_interaction_is_directional():
    attn = build(position_interactions="R", interaction_max_len=5)
    (term,) = attn.score_terms
    bias = term(None, None, AttentionContext(4, torch.device("cpu")))[0]  # [H, T, T]
    for h in range(HEADS):
        for i, j in itertools.product(range(4), repeat=2):
            assert bias[h, i, j] == term.weight[h, i - j + 4]
    assert not torch.allclose(bias[0], bias[0].t())


def test_position_interactions_only_in_first_layer_by_default():
    cfg = PositionAttentionConfig(position_interactions="PR", interaction_max_len=8)
    assert len(cfg.build_terms(EMBED, HEADS, 0)["score_terms"]) == 2
    assert cfg.build_terms(EMBED, HEADS, 1)["score_terms"] == []
    cfg.position_interaction_layers = "all"
    assert len(cfg.build_terms(EMBED, HEADS, 3)["score_terms"]) == 2


def test_parameter_counts_follow_the_paper():
    t = 10
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    base = count(build())
    assert count(build(position_interactions="P", interaction_max_len=t)) - base == HEADS * t * t
    assert count(build(position_interactions="R", interaction_max_len=t)) - base == HEADS * (2 * t - 1)
    assert count(build(convolved_attention="1d", interaction_max_len=t)) - base == HEADS * (3 * t * t + t)
    assert count(build(convolved_attention="2d")) - base == HEADS * 10
    assert count(build(learnable_temperature=True)) - base == 3 * HEADS


def test_temperature_starts_at_one_and_is_identity():
    cfg = PositionAttentionConfig(learnable_temperature=True)
    torch.manual_seed(0)
    with_temp = PositionAwareSelfAttention(EMBED, HEADS, **cfg.build_terms(EMBED, HEADS, 0))
    assert torch.equal(with_temp.temperature, torch.ones(3, HEADS))
    torch.manual_seed(0)
    plain = PositionAwareSelfAttention(EMBED, HEADS)
    x = torch.randn(4, 2, EMBED)
    torch.testing.assert_close(with_temp(x)[0], plain(x)[0])


def _saved_bytes(fn):
    """Bytes of the distinct storages autograd saves for the backward of ``fn()``."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def test_temperature_scales_the_projection_weights_and_keeps_no_extra_activation():
    """gamma on the projection's rows (the default) computes what gamma on its
    output computes (the path fairseq's quant noise, a forward pre-hook on
    the weights, needs), gradients included; and its backward keeps no more
    than the stock attention's but the three scaled weights."""
    cfg = PositionAttentionConfig(learnable_temperature=True)
    torch.manual_seed(0)
    on_weights = PositionAwareSelfAttention(EMBED, HEADS, **cfg.build_terms(EMBED, HEADS, 0)).double()
    on_outputs = PositionAwareSelfAttention(EMBED, HEADS, q_noise=0.5, qn_block_size=4,
                                            **cfg.build_terms(EMBED, HEADS, 0)).double().eval()
    with torch.no_grad():
        for p in on_weights.parameters():
            p.normal_(0.0, 0.5)
    on_outputs.load_state_dict(on_weights.state_dict())
    on_weights.eval()
    assert on_weights.plain_projections and not on_outputs.plain_projections
    x = torch.randn(7, 2, EMBED, dtype=torch.float64)
    mask = right_padding_mask([7, 4], 7)
    outs = [attn(x, key_padding_mask=mask)[0] for attn in (on_weights, on_outputs)]
    torch.testing.assert_close(outs[0], outs[1])
    grads = [torch.autograd.grad(out.sum(), list(attn.parameters())) for out, attn in zip(outs, (on_weights, on_outputs))]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)

    batch, length = 8, 32  # activations [T, B, C] much larger than a weight [C, C]
    x = torch.randn(length, batch, EMBED)
    torch.manual_seed(0)
    plain = PositionAwareSelfAttention(EMBED, HEADS)
    with_temperature = PositionAwareSelfAttention(EMBED, HEADS, **cfg.build_terms(EMBED, HEADS, 0))
    extra = _saved_bytes(lambda: with_temperature(x)) - _saved_bytes(lambda: plain(x))
    # the three scaled weights, the biases and gamma per unit; scaling the
    # outputs instead keeps three unscaled projections, [T, B, C] each
    assert 0 < extra <= 3 * (EMBED * EMBED + 2 * EMBED) * 4 < length * batch * EMBED * 4


@pytest.mark.parametrize("name", ["conv1d", "conv2d"])
def test_convolution_keeps_padded_keys_at_zero(name):
    attn = build(**OPTION_SETS[name]).eval()
    mask = right_padding_mask([5, 2], 6)
    _, weights = attn(torch.randn(6, 2, EMBED, dtype=torch.float64), key_padding_mask=mask, need_weights=True)
    assert torch.all(weights.masked_select(mask[:, None, None, :]) == 0)
    # not renormalised: rows of real queries no longer sum to one
    assert not torch.allclose(weights[0, :, :5].sum(-1), torch.ones(HEADS, 5, dtype=torch.float64))


@pytest.mark.parametrize("length, max_len", [(6, 8), (7, 5)])
def test_conv1d_gradients_match_the_reference(length, max_len):
    torch.manual_seed(0)
    conv = ConvolvedAttention1d(HEADS, max_len, overflow="clamp").double()
    with torch.no_grad():  # rows of zeros would sit on ReLU's kink with the zero bias
        conv.bias.normal_()
    probs = torch.rand(2, HEADS, length, length, dtype=torch.float64, requires_grad=True)
    lengths = [length, 4]
    grad_out = torch.randn(2, HEADS, length, length, dtype=torch.float64)
    out = conv(probs, right_padding_mask(lengths, length), AttentionContext(length, "cpu"))
    got = torch.autograd.grad((out * grad_out).sum(), (probs, conv.weight, conv.bias))
    want_out = torch.stack([
        torch.stack([reference_conv1d(probs[b, h], n, conv.weight[h], conv.bias[h], max_len)
                     for h in range(HEADS)]) for b, n in enumerate(lengths)])
    want = torch.autograd.grad((want_out * grad_out).sum(), (probs, conv.weight, conv.bias))
    torch.testing.assert_close(out, want_out)
    for ours, reference in zip(got, want):
        torch.testing.assert_close(ours, reference)


def test_conv1d_of_an_empty_batch_is_empty():
    conv = ConvolvedAttention1d(HEADS, 8)
    out = conv(torch.rand(0, HEADS, 5, 5), None, AttentionContext(5, "cpu"))
    assert out.shape == (0, HEADS, 5, 5)


def test_conv1d_keeps_each_map_once_for_backward():
    """Backward keeps the padded maps (their windows are a view), the ReLU's
    output and the head kernels: no [B, H, T, 3T] window copy, no kernel copy
    per sentence (those were 6 maps more)."""
    batch, length = 8, 16
    conv = ConvolvedAttention1d(HEADS, 32)
    probs = torch.rand(batch, HEADS, length, length, requires_grad=True)
    saved = {}

    def keep(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        conv(probs, right_padding_mask([length, 9] * 4, length), AttentionContext(length, "cpu"))
    parameters = {p.untyped_storage().data_ptr() for p in conv.parameters()}
    kept = sum(n for ptr, n in saved.items() if ptr not in parameters)
    assert kept < 3 * probs.numel() * probs.element_size()


# --------------------------------------------------------------------------
# half precision
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_bfloat16_autocast_forward_backward_is_finite(name):
    attn = build(dtype=torch.float32, **OPTION_SETS[name]).train()
    x = torch.randn(6, 3, EMBED, requires_grad=True)
    mask = right_padding_mask([6, 2, 4], 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = attn(x, key_padding_mask=mask)
    out.float().pow(2).mean().backward()
    assert torch.isfinite(out.float()).all()
    assert torch.isfinite(x.grad).all()
    for p in attn.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_module_in_half_precision_is_finite(name, dtype):
    attn = build(dtype=dtype, **OPTION_SETS[name])
    x = torch.randn(6, 3, EMBED, dtype=dtype, requires_grad=True)
    mask = right_padding_mask([6, 1, 4], 6)
    try:
        out, _ = attn(x, key_padding_mask=mask)
    except RuntimeError as err:  # an operator this CPU build lacks in this dtype
        pytest.skip(f"{dtype} not supported on this CPU: {err}")
    out.float().pow(2).mean().backward()
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    for p in attn.parameters():
        assert torch.isfinite(p.grad).all()


def test_shaw_terms_take_any_per_sentence_relative_positions():
    """Shaw keys/values indexed by a given [B, T, T] tensor (e.g. tree distances),
    against a loop over Eq. 3-4."""
    from fairseq_posattn.modules.relative_positions import RelativeKeys, RelativeValues

    torch.manual_seed(7)
    T, B, clip = 5, 3, 2
    attn = PositionAwareSelfAttention(
        EMBED, HEADS,
        score_terms=[RelativeKeys(HEAD_DIM, clip, positions="tree")],
        value_terms=[RelativeValues(HEAD_DIM, clip, positions="tree")],
    ).double().eval()
    rel = torch.randint(-4, 5, (B, T, T))
    x = torch.randn(T, B, EMBED, dtype=torch.float64)
    lengths = [5, 3, 4]
    out, _ = attn(x, key_padding_mask=right_padding_mask(lengths, T),
                  context=AttentionContext(T, x.device, {"tree": rel}))
    keys, values = attn.score_terms[0].embedding, attn.value_terms[0].embedding
    for b, n in enumerate(lengths):
        q = attn.q_proj(x[:n, b]).view(n, HEADS, HEAD_DIM)
        k = attn.k_proj(x[:n, b]).view(n, HEADS, HEAD_DIM)
        v = attn.v_proj(x[:n, b]).view(n, HEADS, HEAD_DIM)
        z = torch.zeros(n, HEADS, HEAD_DIM, dtype=torch.float64)
        for h in range(HEADS):
            for i in range(n):
                bucket = [max(-clip, min(clip, int(rel[b, i, j]))) + clip for j in range(n)]
                e = torch.stack([q[i, h] @ (k[j, h] + keys[bucket[j]]) for j in range(n)])
                p = torch.softmax(e / math.sqrt(HEAD_DIM), dim=0)
                z[i, h] = sum(p[j] * (v[j, h] + values[bucket[j]]) for j in range(n))
        expected = attn.out_proj(z.reshape(n, EMBED))
        torch.testing.assert_close(out[:n, b], expected, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "right-padding"])
@pytest.mark.parametrize("name", ["bilan", "bilan_wide"])
def test_bilan_gradients_match_the_reference(name, padded):
    """Its scores are a strided view of the per-distance rows: gradients through
    that view (clipped and unclipped tables) against the loop reference."""
    attn = build(**OPTION_SETS[name]).eval()
    lengths = [6, 4, 1] if padded else [6, 6, 6]
    torch.manual_seed(2)
    x = torch.randn(6, len(lengths), EMBED, dtype=torch.float64, requires_grad=True)
    mask = right_padding_mask(lengths, 6)
    out, _ = attn(x, key_padding_mask=mask)
    expected = reference_attention(attn, x, lengths)
    weight = torch.randn_like(out).masked_fill(mask.t()[:, :, None], 0.0)
    term = attn.score_terms[0]
    inputs = (x, term.query_proj.weight, term.relative_vectors, attn.q_proj.weight)
    grads = torch.autograd.grad((out * weight).sum(), inputs)
    expected_grads = torch.autograd.grad((expected * weight).sum(), inputs)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-10, rtol=1e-9)
    with torch.no_grad():  # the fused kernel, the scores as its mask
        torch.testing.assert_close(attn(x, key_padding_mask=mask)[0], out)


def test_relative_diagonals_read_any_strides():
    from fairseq_posattn.modules.relative_positions import relative_diagonals

    length = 5
    rows = torch.randn(3, length, 2, 2 * length + 1).narrow(-1, 1, 2 * length - 1)
    per_distance = rows.permute(2, 0, 1, 3)  # [2, 3, T, 2T-1], offset and permuted
    out = relative_diagonals(per_distance)
    for i, j in itertools.product(range(length), repeat=2):
        assert torch.equal(out[..., i, j], per_distance[..., i, j - i + length - 1])


def test_bilan_scores_keep_only_the_projection_for_backward():
    """Backward keeps ``W^r e`` and the table's reachable rows: no [B, H, T, 2T-1]
    score rows, no table per sentence, no copy of ``r`` (those were 2 score
    maps and the table per sentence and head more)."""
    from fairseq_posattn.modules.relative_positions import QueryProjectedRelativeScores

    length, batch = 16, 8
    term = QueryProjectedRelativeScores(EMBED, HEADS, clip=40)
    inputs = torch.randn(length, batch, EMBED)
    saved = {}

    def keep(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        scores = term(None, inputs, AttentionContext(length, "cpu"))
    assert scores.shape == (batch, HEADS, length, length)
    excluded = {t.untyped_storage().data_ptr() for t in (inputs, *term.parameters())}
    kept = sum(n for ptr, n in saved.items() if ptr not in excluded)
    table = HEADS * (2 * length - 1) * HEAD_DIM
    assert kept <= (inputs.numel() + table) * inputs.element_size() + 8 * (2 * length - 1)


def test_missing_relative_positions_name_the_task():
    from fairseq_posattn.modules.relative_positions import RelativeKeys

    attn = PositionAwareSelfAttention(EMBED, HEADS, score_terms=[RelativeKeys(HEAD_DIM, 2, "tree")])
    with pytest.raises(KeyError, match="no 'tree' relative positions"):
        attn(torch.randn(3, 1, EMBED))


class RecordedCalls(torch.overrides.TorchFunctionMode):
    """The dtypes of the tensors given to the torch functions named in ``names``."""

    def __init__(self, *names):
        super().__init__()
        self.names = names
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names:
            self.calls.append((name, [a.dtype for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


# encoder layers (of 3) that take the fused kernel: (training, inference)
FUSED_LAYERS = {
    ("transformer_posattn",): (3, 3),
    ("transformer_posattn_temp",): (3, 3),
    ("onlstm_san_transformer",): (3, 3),
    ("transformer_posattn_p",): (2, 3),  # P in the first layer: trained there
    ("transformer_posattn_pr",): (2, 3),
    ("transformer_posattn", "--query-relative-positions"): (0, 3),  # score terms only
    ("transformer_posattn", "--relative-positions", "--no-relative-values"): (0, 3),
    ("transformer_posattn", "--relative-positions"): (0, 0),  # Shaw values: a value term
    ("transformer_struct",): (0, 0),  # relative values
    ("transformer_posattn_conv1d",): (0, 0),  # probability terms
    ("transformer_posattn_conv2d",): (0, 0),
    ("transformer_posattn_p", "--encoder-attention-kernel", "sdpa"): (3, 3),
    ("transformer_posattn", "--query-relative-positions", "--encoder-attention-kernel", "sdpa"): (3, 3),
    ("transformer_posattn_p", "--encoder-attention-kernel", "explicit"): (0, 0),
}


def count_fused_layers(flags, device="cpu", dtype=torch.float32):
    """Calls of scaled_dot_product_attention in one encoder pass of a small
    model of ``flags`` on ``device`` in ``dtype``: (in training, under no_grad
    in eval mode)."""
    from fairseq_posattn.bench.models import make_trees
    from fairseq_posattn.models.from_flags import build_model_from_flags

    _, model = build_model_from_flags(
        ["--arch", flags[0], *flags[1:], "--encoder-layers", "3", "--decoder-layers", "1",
         "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim",
         "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--max-source-positions", "64"], 50)
    lengths = torch.tensor([6, 4])
    tokens = torch.randint(4, 50, (2, 6))
    tokens[1, :2] = 1  # left padding
    tokens[:, -1] = 2
    trees = make_trees(model.encoder, lengths, 6, seed=0)
    model.to(device, dtype)
    tokens, lengths = tokens.to(device), lengths.to(device)
    trees = {name: t.to(device) for name, t in trees.items()}
    counted = []
    for training in (True, False):
        model.train(training)
        with torch.set_grad_enabled(training), RecordedCalls("scaled_dot_product_attention") as rec:
            model.encoder(tokens, lengths, **trees)
        counted.append(len(rec.calls))
    return tuple(counted)


@pytest.mark.parametrize("flags", sorted(FUSED_LAYERS), ids=" ".join)
def test_which_layers_take_the_fused_kernel(flags):
    assert count_fused_layers(flags) == FUSED_LAYERS[flags]


HALF_CASES = [("module", torch.float16), ("module", torch.bfloat16), ("autocast", torch.bfloat16)]


@pytest.mark.parametrize("how, dtype", HALF_CASES, ids=["fp16", "bf16", "autocast-bf16"])
@pytest.mark.parametrize("name", ["shaw", "conv1d", "conv2d", "everything_1d", "everything_2d"])
def test_softmax_and_convolution_run_in_float32_under_half(name, how, dtype):
    """Inside a half-precision layer the logits, the softmax and the convolved
    probabilities are float32 (checked on the calls themselves), and the result
    is as close to a float64 run as rounding the weights and inputs allows."""
    reference = build(dtype=torch.float64, **OPTION_SETS[name]).eval()
    attn = build(dtype=dtype if how == "module" else torch.float32, **OPTION_SETS[name]).eval()
    x = torch.randn(6, 3, EMBED, dtype=torch.float64)
    mask = right_padding_mask([6, 2, 4], 6)
    seen = {}
    for term in attn.probability_terms:
        term.register_forward_hook(
            lambda module, inputs, output: seen.update(probs_in=inputs[0].dtype, out=output.dtype))
    recorder = RecordedCalls("softmax", "conv2d")
    with recorder, torch.autocast("cpu", dtype=dtype, enabled=how == "autocast"):
        out, weights = attn(x.to(dtype if how == "module" else torch.float32),
                            key_padding_mask=mask, need_weights=True)
    softmaxes = [dtypes for called, dtypes in recorder.calls if called == "softmax"]
    assert softmaxes and all(dtypes == [torch.float32] for dtypes in softmaxes)
    assert weights.dtype == torch.float32
    if attn.probability_terms:
        assert seen == dict(probs_in=torch.float32, out=torch.float32)
    convolutions = [dtypes for called, dtypes in recorder.calls if called == "conv2d"]
    assert all(set(dtypes) == {torch.float32} for dtypes in convolutions)
    assert bool(convolutions) == (OPTION_SETS[name].get("convolved_attention") == "2d")
    expected, expected_weights = reference(x, key_padding_mask=mask, need_weights=True)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(weights.double(), expected_weights, atol=8 * eps, rtol=8 * eps)
    torch.testing.assert_close(out.double() * ~mask.t()[:, :, None], expected * ~mask.t()[:, :, None],
                               atol=16 * eps, rtol=16 * eps)


def test_padding_masks_are_finite_in_every_precision():
    """No literal large negative anywhere: pads take the most negative value of
    the dtype they meet (float32 logits, or the fused kernel's dtype), so fp16
    never overflows a mask to -inf and a query whose keys are all padded gets a
    uniform row, not NaN."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        bias = torch.full((1, 1, 2, 2), 3.0)
        pads = torch.tensor([[False, True]])
        mask = PositionAwareSelfAttention._additive_mask(bias, pads, dtype)
        assert mask.dtype == dtype and torch.isfinite(mask).all()
        assert mask[..., 1].eq(torch.finfo(dtype).min).all() and mask[..., 0].eq(3.0).all()
    attn = build(dtype=torch.float16, encoder_attention_kernel="explicit", **OPTION_SETS["shaw"])
    x = torch.randn(4, 2, EMBED, dtype=torch.float16)
    all_padded = torch.tensor([[False, False, True, True], [True, True, True, True]])
    out, weights = attn(x, key_padding_mask=all_padded, need_weights=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(weights[1], torch.full_like(weights[1], 0.25))
