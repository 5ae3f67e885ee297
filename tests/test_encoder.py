"""The encoder and model: stock equivalence, padding invariance, build-time errors."""

import types

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from torch import nn

import fairseq_posattn  # noqa: F401  (registers the archs)
from fairseq_posattn.models.encoder import PositionAwareEncoder
from fairseq_posattn.models.transformer_posattn import (
    DUFTER_ROWS,
    PositionAwareTransformerModel,
)
from fairseq_posattn.modules import PositionAttentionConfig
from fairseq_posattn.modules.attention_context import gather_time, right_padding_order

VOCAB = Dictionary()
for _word in "a b c d e f g h i j k l m n o p".split():
    VOCAB.add_symbol(_word)


def small_config(**overrides):
    cfg = TransformerConfig()
    cfg.encoder.embed_dim = 16
    cfg.encoder.ffn_embed_dim = 24
    cfg.encoder.attention_heads = 4
    cfg.encoder.layers = 2
    cfg.dropout = 0.0
    cfg.max_source_positions = 12
    for key, value in overrides.items():
        target, name = (cfg.encoder, key[len("encoder_"):]) if key.startswith("encoder_") else (cfg, key)
        setattr(target, name, value)
    return cfg


def embedding(dim):
    torch.manual_seed(5)
    return nn.Embedding(len(VOCAB), dim, padding_idx=VOCAB.pad())


def sentences(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.cat([torch.randint(VOCAB.nspecial, len(VOCAB), (n - 1,), generator=g),
                   torch.tensor([VOCAB.eos()])])
        for n in lengths
    ]


def batch(sents, left_pad=True):
    T = max(len(s) for s in sents)
    out = torch.full((len(sents), T), VOCAB.pad())
    for b, s in enumerate(sents):
        if left_pad:
            out[b, T - len(s):] = s
        else:
            out[b, : len(s)] = s
    return out


def real_outputs(encoder_out, tokens):
    """Per sentence, the encoder states of its real tokens: list of [n, C]."""
    x = encoder_out["encoder_out"][0]
    keep = tokens.ne(VOCAB.pad())
    return [x[keep[b], b] for b in range(tokens.size(0))]


# --------------------------------------------------------------------------


def test_right_padding_order_moves_tokens_first_and_inverts():
    mask = torch.tensor([[True, True, False, False], [False, False, False, False],
                         [True, False, False, False]])
    order = right_padding_order(mask)
    assert mask.gather(1, order).tolist() == [[False, False, True, True], [False] * 4,
                                               [False, False, False, True]]
    x = torch.randn(3, 4, 2)
    assert torch.equal(gather_time(gather_time(x, order, 1), order.argsort(1), 1), x)
    assert right_padding_order(mask.flip(1)) is None


@pytest.mark.parametrize("normalize_before", [False, True])
@pytest.mark.parametrize("learned_pos", [False, True])
def test_every_option_off_equals_fairseq_encoder(normalize_before, learned_pos):
    cfg = small_config(encoder_normalize_before=normalize_before, encoder_learned_pos=learned_pos)
    torch.manual_seed(0)
    stock = TransformerEncoderBase(cfg, VOCAB, embedding(16))
    ours = PositionAwareEncoder(cfg, PositionAttentionConfig(), VOCAB, embedding(16))
    assert set(ours.state_dict()) == set(stock.state_dict())
    ours.load_state_dict(stock.state_dict())
    tokens = batch(sentences([7, 3, 5, 1]))
    expected = stock(tokens, return_all_hiddens=True)
    actual = ours(tokens, return_all_hiddens=True)
    keep = tokens.ne(VOCAB.pad()).t()[:, :, None]
    for key in ("encoder_out", "encoder_states"):
        for a, b in zip(actual[key], expected[key]):
            torch.testing.assert_close(a * keep, b * keep, atol=1e-6, rtol=0)
    torch.testing.assert_close(actual["encoder_embedding"][0], expected["encoder_embedding"][0])
    assert torch.equal(actual["encoder_padding_mask"][0], expected["encoder_padding_mask"][0])
    assert torch.equal(actual["src_lengths"][0], expected["src_lengths"][0])

    weight = torch.randn_like(expected["encoder_out"][0]) * keep
    grads_stock = torch.autograd.grad((expected["encoder_out"][0] * weight).sum(), list(stock.parameters()))
    grads_ours = torch.autograd.grad((actual["encoder_out"][0] * weight).sum(), list(ours.parameters()))
    for a, b in zip(grads_ours, grads_stock):  # two layers of float32 rounding
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


ENCODER_OPTIONS = {
    "none": {},
    "pe_concat": dict(encoder_position_embedding="concat", encoder_position_concat_dim=4),
    "no_positions": dict(encoder_position_embedding="none"),
    **{name: dict(row, interaction_max_len=12) for name, row in DUFTER_ROWS.items()},
    "pr_all_layers": dict(position_interactions="PR", interaction_max_len=12, position_interaction_layers="all"),
    "shaw": dict(relative_positions=True, max_relative_position=3),
    "bilan": dict(query_relative_positions=True, query_relative_clip=4),
    "everything": dict(
        position_interactions="PR", interaction_max_len=12, learnable_temperature=True,
        convolved_attention="1d", relative_positions=True, max_relative_position=2,
        query_relative_positions=True, encoder_position_embedding="concat",
    ),
}


def build_encoder(options_):
    attention_cfg = PositionAttentionConfig(**options_)
    width = 16
    if attention_cfg.encoder_position_embedding == "concat":
        width -= attention_cfg.position_concat_dim(16)
    torch.manual_seed(0)
    encoder = PositionAwareEncoder(small_config(), attention_cfg, VOCAB, embedding(width))
    with torch.no_grad():  # move every parameter away from its (often trivial) init
        for p in encoder.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return encoder.eval()


@pytest.mark.parametrize("name", sorted(ENCODER_OPTIONS))
def test_padding_never_changes_a_sentence(name):
    encoder = build_encoder(ENCODER_OPTIONS[name])
    sents = sentences([9, 4, 1, 6], seed=1)
    alone = [real_outputs(encoder(batch([s])), batch([s]))[0] for s in sents]
    for left_pad in (True, False):
        tokens = batch(sents, left_pad=left_pad)
        for got, want in zip(real_outputs(encoder(tokens), tokens), alone):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_position_interactions_see_true_positions():
    """P must index true positions: a left-padded sentence keeps its bias rows."""
    encoder = build_encoder(dict(position_interactions="P", interaction_max_len=12,
                                 encoder_position_embedding="none"))
    sents = sentences([3, 8], seed=2)
    with torch.no_grad():
        encoder.layers[0].self_attn.score_terms[0].weight[:, :3, :3] += 5.0
    alone = real_outputs(encoder(batch(sents[:1])), batch(sents[:1]))[0]
    tokens = batch(sents)
    padded = real_outputs(encoder(tokens), tokens)[0]
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------
# the model through fairseq's own argument parsing
# --------------------------------------------------------------------------


def parse(arch, *extra):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser,
        ["data-bin", "--arch", arch, "--task", "translation", "--encoder-layers", "2",
         "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
         "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", *extra],
    )


TASK = types.SimpleNamespace(source_dictionary=VOCAB, target_dictionary=VOCAB)


@pytest.mark.parametrize("arch", ["transformer_posattn", *DUFTER_ROWS])
def test_named_architectures_build_with_their_rows(arch):
    args = parse(arch, "--max-source-positions", "64", "--interaction-max-len", "64")
    model = PositionAwareTransformerModel.build_model(args, TASK)
    attention_cfg = model.encoder.attention_cfg
    for key, value in DUFTER_ROWS.get(arch, {}).items():
        assert getattr(attention_cfg, key) == value
    first, second = (layer.self_attn for layer in model.encoder.layers)
    if "position_interactions" in DUFTER_ROWS.get(arch, {}):
        assert len(first.score_terms) > 0 and len(second.score_terms) == 0
        assert model.encoder.embed_positions is None
    else:
        assert model.encoder.embed_positions is not None
    tokens = batch(sentences([5, 3]))
    out = model(tokens, torch.tensor([5, 3]), tokens)[0]
    assert out.shape == (2, 5, len(VOCAB)) and torch.isfinite(out).all()


def test_base_architecture_is_base_sized():
    args = parse("transformer_posattn")
    for name in ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads"):
        delattr(args, name)
    from fairseq_posattn.models.transformer_posattn import transformer_posattn

    transformer_posattn(args)
    assert (args.encoder_embed_dim, args.encoder_attention_heads, args.encoder_ffn_embed_dim,
            args.encoder_layers) == (512, 8, 16, 6)
    assert args.position_interactions == "none" and args.encoder_position_embedding == "add"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--convolved-attention", "1d", "--interaction-max-len", "32"],
         r"--interaction-max-len 32 is smaller than --max-source-positions 1024"),
        (["--position-interactions", "P", "--interaction-max-len", "100", "--max-source-positions", "200"],
         r"--interaction-overflow clamp"),
        (["--encoder-position-embedding", "concat", "--share-all-embeddings"],
         r"cannot be combined with --share-all-embeddings"),
        (["--encoder-position-embedding", "concat", "--encoder-position-concat-dim", "16"],
         r"--encoder-position-concat-dim 16 must be between 1"),
        (["--relative-positions", "--max-relative-position", "0"], r"--max-relative-position must be"),
    ],
)
def test_impossible_flag_combinations_fail_at_build_time(flags, message):
    args = parse("transformer_posattn", *flags)
    with pytest.raises(ValueError, match=message):
        PositionAwareTransformerModel.build_model(args, TASK)


def test_clamp_makes_a_short_table_legal():
    args = parse("transformer_posattn_conv1d", "--interaction-max-len", "4",
                 "--interaction-overflow", "clamp")
    model = PositionAwareTransformerModel.build_model(args, TASK)
    tokens = batch(sentences([9, 2]))
    assert torch.isfinite(model(tokens, torch.tensor([9, 2]), tokens)[0]).all()


def test_activation_checkpointing_changes_nothing():
    """fairseq's --checkpoint-activations wraps each layer; the context passes through."""
    options_ = ENCODER_OPTIONS["everything"]
    tokens = batch(sentences([7, 3, 5], seed=4))
    results = []
    for checkpointing in (False, True):
        attention_cfg = PositionAttentionConfig(**options_)
        width = 16 - attention_cfg.position_concat_dim(16)
        torch.manual_seed(0)
        encoder = PositionAwareEncoder(
            small_config(checkpoint_activations=checkpointing), attention_cfg, VOCAB, embedding(width)
        )
        assert hasattr(encoder.layers[0], "precheckpoint_forward") == checkpointing
        out = encoder(tokens)["encoder_out"][0]
        (out * tokens.ne(VOCAB.pad()).t()[:, :, None]).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in encoder.parameters()]))
    torch.testing.assert_close(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b)
