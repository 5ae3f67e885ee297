"""RoPE, ALiBi, T5's relative bias, PASCAL and the dependency-distance bias
(issue 48's building blocks) against scalar loops written from the papers'
equations, with tiny tensors."""

import math

import numpy as np
import pytest
import torch

from fairseq_posattn.modules.attention_context import AttentionContext, gather_time, right_padding_order
from fairseq_posattn.modules.linear_biases import LinearDistanceBias, alibi_slopes
from fairseq_posattn.modules.parent_scaling import ParentScaledLogits
from fairseq_posattn.modules.rotary import RotaryPositions
from fairseq_posattn.modules.t5_bias import T5RelativeBias, relative_position_bucket
from fairseq_posattn.structure import batch_encoded_parent_positions, batch_encoded_tree_distances, encode_piece_tree

B, H, T, D = 2, 3, 5, 8


def queries(dtype=torch.float32, seed=0):
    return torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ---------------------------------------------------------------- RoPE (Su et al. 2021, Eq. 34)

def rope_reference(x, base=10000.0):
    """Eq. 34 as written: adjacent dimensions (2i, 2i+1) rotated by m theta_i, theta_i = base^(-2i/d)."""
    out = x.clone().double()
    for b in range(x.size(0)):
        for h in range(x.size(1)):
            for m in range(x.size(2)):
                for i in range(x.size(3) // 2):
                    angle = m * base ** (-2 * i / x.size(3))
                    x0, x1 = float(x[b, h, m, 2 * i]), float(x[b, h, m, 2 * i + 1])
                    out[b, h, m, 2 * i] = x0 * math.cos(angle) - x1 * math.sin(angle)
                    out[b, h, m, 2 * i + 1] = x1 * math.cos(angle) + x0 * math.sin(angle)
    return out


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_rope_is_eq34_with_halves_paired(base):
    """Halves paired (i with i + d/2) = Eq. 34's adjacent pairs after the permutation 0, d/2, 1, d/2+1, ..."""
    q, k = queries(), queries(seed=1)
    rotated_q, rotated_k = RotaryPositions(D, base)(q, k)
    adjacent = torch.arange(D).view(2, -1).t().reshape(-1)  # [0, 4, 1, 5, 2, 6, 3, 7]
    for x, rotated in ((q, rotated_q), (k, rotated_k)):
        torch.testing.assert_close(rotated[..., adjacent].double(), rope_reference(x[..., adjacent], base))


def test_rope_dot_products_depend_only_on_the_offset():
    """Eq. 16: the same q and k vectors at every position give a Toeplitz q_m . k_n."""
    q = torch.randn(D).expand(1, 1, 12, D)
    k = torch.randn(D).expand(1, 1, 12, D)
    rotated_q, rotated_k = RotaryPositions(D)(q, k)
    scores = (rotated_q @ rotated_k.transpose(-1, -2))[0, 0]
    for offset in range(-11, 12):
        diagonal = scores.diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(scores.diagonal(0)[0], scores.diagonal(3)[0])  # and it does depend on it


def test_rope_refuses_an_odd_head_dimension_and_caches_per_length():
    with pytest.raises(ValueError, match="--encoder-embed-dim / --encoder-attention-heads"):
        RotaryPositions(7)
    rope = RotaryPositions(D)
    cos, _ = rope.cos_sin(T, torch.device("cpu"), torch.float32)
    assert rope.cos_sin(T, torch.device("cpu"), torch.float32)[0] is cos
    assert rope.cos_sin(T + 1, torch.device("cpu"), torch.float32)[0].shape == (T + 1, D)


def test_rope_half_precision_is_finite_and_close():
    q = queries() * 30
    rotated, _ = RotaryPositions(D)(q.half(), q.half())
    assert rotated.dtype == torch.float16 and torch.isfinite(rotated).all()
    torch.testing.assert_close(rotated.float(), RotaryPositions(D)(q, q)[0], atol=0.1, rtol=1e-2)


# ---------------------------------------------------------------- ALiBi (Press et al. 2022, Sec. 3)

def paper_slopes(heads):
    """Closed form: with n the largest power of two <= H, 2^(-8h/n) for h <= n, then 2^(-8(2(h-n)-1)/2n)."""
    n = 1 << (heads.bit_length() - 1)
    return [2 ** (-8 * h / n) if h <= n else 2 ** (-8 * (2 * (h - n) - 1) / (2 * n)) for h in range(1, heads + 1)]


@pytest.mark.parametrize("heads", range(1, 17))
def test_alibi_slopes_follow_the_papers_rule(heads):
    assert alibi_slopes(heads) == pytest.approx(paper_slopes(heads), rel=1e-12)


def test_alibi_slopes_of_the_papers_examples():
    assert alibi_slopes(8) == pytest.approx([2.0**-h for h in range(1, 9)])  # 1/2, 1/4, ..., 1/256
    assert alibi_slopes(16) == pytest.approx([2 ** (-h / 2) for h in range(1, 17)])  # 1/2^0.5, ..., 1/2^8


def linear_bias_reference(slopes, distance):
    """-m_h |distance(b, i, j)| with loops."""
    out = torch.zeros(distance.size(0), len(slopes), distance.size(1), distance.size(2), dtype=torch.float64)
    for b in range(out.size(0)):
        for h, m in enumerate(slopes):
            for i in range(out.size(2)):
                for j in range(out.size(3)):
                    out[b, h, i, j] = -m * abs(int(distance[b, i, j]))
    return out


def test_alibi_is_minus_slope_times_distance_on_both_sides():
    bias = LinearDistanceBias(H)(queries(), None, AttentionContext(T, torch.device("cpu")))
    assert bias.shape == (1, H, T, T) and bias.dtype == torch.float32
    steps = torch.arange(T)
    want = linear_bias_reference(alibi_slopes(H), (steps[None, :] - steps[:, None]).unsqueeze(0))
    torch.testing.assert_close(bias.double(), want)
    assert torch.equal(bias, bias.transpose(-1, -2))


# ---------------------------------------------------------------- the dependency-distance bias

def test_tree_distance_bias_is_alibi_slopes_times_path_length():
    # "Bush held a tal@@ k with Sharon" beside a one-word sentence, left-padded by the collater
    trees = [encode_piece_tree([2, 0, 4, 2, 6, 2], [0, 1, 2, 3, 3, 4, 5]), encode_piece_tree([0], [0])]
    distance, _ = batch_encoded_tree_distances(trees)
    context = AttentionContext(distance.size(1), torch.device("cpu"), {"tree_distance": distance})
    bias = LinearDistanceBias(H, "tree_distance")(queries(), None, context)
    assert bias.shape == (2, H, 8, 8)
    torch.testing.assert_close(bias.double(), linear_bias_reference(alibi_slopes(H), distance))
    assert bias[0, 0, 3, 4] == 0 and bias[0, 0, 2, 5] == -alibi_slopes(H)[0] * 4  # talk's pieces; a..with


def test_linear_bias_refuses_unknown_distances_and_missing_trees():
    with pytest.raises(ValueError, match="tree_distance"):
        LinearDistanceBias(H, "structural")
    with pytest.raises(KeyError, match="tree_distance"):
        LinearDistanceBias(H, "tree_distance")(queries(), None, AttentionContext(T, torch.device("cpu")))


# ---------------------------------------------------------------- T5 (Raffel et al. 2020, Sec. 2.1)

def t5_bucket_reference(relative_position, num_buckets, max_distance):
    """T5's reference definition for one position, bidirectional, its float32 arithmetic included."""
    num_buckets //= 2
    bucket = num_buckets if relative_position > 0 else 0
    n = abs(relative_position)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    ratio = np.float32(np.log(np.float32(n) / np.float32(max_exact))) / np.float32(math.log(max_distance / max_exact))
    return bucket + min(max_exact + int(np.float32(ratio * np.float32(num_buckets - max_exact))), num_buckets - 1)


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20), (64, 256), (6, 10)])
def test_t5_buckets_match_the_reference_definition(num_buckets, max_distance):
    relative = torch.arange(-300, 301)
    buckets = relative_position_bucket(relative, num_buckets, max_distance)
    assert buckets.tolist() == [t5_bucket_reference(r, num_buckets, max_distance) for r in range(-300, 301)]
    # every bucket reached, none beyond, but num_buckets/2: distance 0 is in the lower half, as in T5
    assert set(buckets.tolist()) == set(range(num_buckets)) - {num_buckets // 2}


def test_t5_bucket_landmarks():
    buckets = relative_position_bucket(torch.tensor([0, -1, 1, -7, 7, -8, 8, -127, 127, -128, 128, -1000, 1000]))
    assert buckets.tolist() == [0, 1, 17, 7, 23, 8, 24, 15, 31, 15, 31, 15, 31]


def test_t5_bias_reads_its_table_by_bucket_and_trains_it():
    term = T5RelativeBias(16, H, num_buckets=8, max_distance=6)
    bias = term(queries(), None, AttentionContext(T, torch.device("cpu")))
    assert bias.shape == (1, H, T, T)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                assert bias[0, h, i, j] == term.weight[t5_bucket_reference(j - i, 8, 6), h]
    bias.square().sum().backward()
    assert term.weight.grad is not None and term.weight.grad.abs().sum() > 0


def test_one_t5_table_shared_by_the_layers_is_one_parameter():
    term = T5RelativeBias(16, H)
    layers = torch.nn.ModuleList(torch.nn.ModuleList([term]) for _ in range(3))
    assert len(list(layers.parameters())) == 1
    state = layers.state_dict()
    assert len(state) == 3 and all(torch.equal(v, term.weight) for v in state.values())


@pytest.mark.parametrize("num_buckets, max_distance, flag", [(3, 128, "buckets"), (7, 128, "buckets"),
                                                             (32, 8, "max-distance")])
def test_t5_refuses_bucket_settings_it_cannot_serve(num_buckets, max_distance, flag):
    with pytest.raises(ValueError, match="--t5-bias-" + flag):
        T5RelativeBias(16, H, num_buckets, max_distance)


# ---------------------------------------------------------------- PASCAL (Bugliarello & Okazaki 2020, Sec. 3)

def pascal_reference(logits, parents, heads, sigma):
    """S_ij N(j; p_i, sigma^2) on the chosen heads, with loops."""
    out = logits.double().clone()
    for b in range(logits.size(0)):
        for h in heads:
            for i in range(logits.size(2)):
                for j in range(logits.size(3)):
                    density = math.exp(-(j - float(parents[b, i])) ** 2 / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)
                    out[b, h, i, j] = float(logits[b, h, i, j]) * density
    return out


@pytest.mark.parametrize("heads, sigma", [([0, 2], 1.0), ([1], 0.5)])
def test_pascal_scales_the_chosen_heads_by_the_parents_density(heads, sigma):
    trees = [encode_piece_tree([2, 0, 4, 2, 6, 2], [0, 1, 2, 3, 3, 4, 5]), encode_piece_tree([0, 1], [0, 1])]
    parents, _ = batch_encoded_parent_positions(trees)
    length = parents.size(1)
    logits = torch.randn(2, H, length, length)
    context = AttentionContext(length, torch.device("cpu"), token_positions={"parents": parents})
    scaled = ParentScaledLogits(H, heads, sigma)(logits, context)
    torch.testing.assert_close(scaled.double(), pascal_reference(logits, parents, heads, sigma))
    untouched = [h for h in range(H) if h not in heads]
    assert torch.equal(scaled[:, untouched], logits[:, untouched])


def test_pascal_half_precision_is_finite():
    parents = torch.tensor([[1.0, 1.0, 3.5, 1.0, 4.0]])
    logits = torch.randn(1, H, T, T).half() * 100
    context = AttentionContext(T, torch.device("cpu"), token_positions={"parents": parents})
    scaled = ParentScaledLogits(H, [0, 1])(logits, context)
    assert scaled.dtype == torch.float16 and torch.isfinite(scaled).all()


def test_pascal_refuses_heads_outside_the_layer_and_missing_parents():
    for heads in ([], [3], [-1]):
        with pytest.raises(ValueError, match="heads"):
            ParentScaledLogits(H, heads)
    with pytest.raises(ValueError, match="sigma"):
        ParentScaledLogits(H, [0], sigma=0)
    with pytest.raises(KeyError, match="parents"):
        ParentScaledLogits(H, [0])(torch.zeros(1, H, T, T), AttentionContext(T, torch.device("cpu")))


def test_score_terms_are_finite_and_float32_beside_half_precision_queries():
    context = AttentionContext(T, torch.device("cpu"))
    for term in (LinearDistanceBias(H), T5RelativeBias(16, H).half()):
        bias = term(queries(torch.float16), None, context)
        assert torch.isfinite(bias).all() and bias.dtype in (torch.float32, torch.float16)


def test_tree_inputs_of_a_left_padded_batch_match_each_sentence_alone_once_right_padded():
    """The collater's left-padded tree distances and parents, reordered as the encoder reorders the tokens
    (right_padding_order), give every sentence the bias and scaling it gets alone: positions, not columns."""
    trees = [encode_piece_tree([2, 0, 4, 2, 6, 2], [0, 1, 2, 3, 3, 4, 5]), encode_piece_tree([2, 0], [0, 0, 1])]
    distance, lengths = batch_encoded_tree_distances(trees, left_pad=True)
    parents, _ = batch_encoded_parent_positions(trees, left_pad=True)
    length = parents.size(1)
    pads = torch.arange(length)[None, :] < (length - lengths)[:, None]
    order = right_padding_order(pads)
    distance = gather_time(gather_time(distance, order, 1), order, 2)
    parents = parents.gather(1, order)
    context = AttentionContext(length, torch.device("cpu"), {"tree_distance": distance}, {"parents": parents})
    logits = torch.randn(1, H, length, length).expand(2, -1, -1, -1)
    bias = LinearDistanceBias(H, "tree_distance")(None, None, context)
    scaled = ParentScaledLogits(H, [0, 2])(logits, context)
    for b, tree in enumerate(trees):
        n = int(lengths[b])
        alone_distance, _ = batch_encoded_tree_distances([tree])
        alone_parents, _ = batch_encoded_parent_positions([tree])
        alone = AttentionContext(n, torch.device("cpu"), {"tree_distance": alone_distance}, {"parents": alone_parents})
        assert torch.equal(bias[b, :, :n, :n], LinearDistanceBias(H, "tree_distance")(None, None, alone)[0])
        assert torch.equal(scaled[b, :, :n, :n], ParentScaledLogits(H, [0, 2])(logits[:1, :, :n, :n], alone)[0])
