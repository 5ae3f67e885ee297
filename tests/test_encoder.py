"""The encoder and model: stock equivalence, padding invariance, build-time errors."""

import copy
import types

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.models.transformer.transformer_config import (
    DecoderConfig,
    EncDecBaseConfig,
    QuantNoiseConfig,
)
from torch import nn

import fairseq_posattn  # noqa: F401  (registers the archs)
from fairseq_posattn.models.encoder import PositionAwareEncoder
from fairseq_posattn.models.transformer_posattn import (
    DUFTER_ROWS,
    PositionAwareTransformerModel,
)
from fairseq_posattn.modules import PositionAttentionConfig
from fairseq_posattn.modules.options import RecurrenceConfig
from fairseq_posattn.modules.attention_context import gather_time, right_padding_order

from conftest import encoded_tree_inputs, random_piece_tree

VOCAB = Dictionary()
for _word in "a b c d e f g h i j k l m n o p".split():
    VOCAB.add_symbol(_word)


def small_config(**overrides):
    cfg = TransformerConfig()
    # fairseq-fixed's defaults for these sub-configs are the classes themselves:
    # give this config instances of its own, or the settings below leak into
    # every later TransformerConfig()
    cfg.encoder, cfg.decoder, cfg.quant_noise = EncDecBaseConfig(), DecoderConfig(), QuantNoiseConfig()
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
    # float64: the two compute attention in different orders, and float32
    # rounding differences between them depend on the CPU's kernels
    stock = TransformerEncoderBase(cfg, VOCAB, embedding(16)).double()
    ours = PositionAwareEncoder(cfg, PositionAttentionConfig(), VOCAB, embedding(16)).double()
    assert set(ours.state_dict()) == set(stock.state_dict())
    ours.load_state_dict(stock.state_dict())
    tokens = batch(sentences([7, 3, 5, 1]))
    expected = stock(tokens, return_all_hiddens=True)
    actual = ours(tokens, return_all_hiddens=True)
    keep = tokens.ne(VOCAB.pad()).t()[:, :, None]
    for key in ("encoder_out", "encoder_states"):
        for a, b in zip(actual[key], expected[key]):
            torch.testing.assert_close(a * keep, b * keep, atol=1e-12, rtol=0)
    torch.testing.assert_close(actual["encoder_embedding"][0], expected["encoder_embedding"][0])
    assert torch.equal(actual["encoder_padding_mask"][0], expected["encoder_padding_mask"][0])
    assert torch.equal(actual["src_lengths"][0], expected["src_lengths"][0])

    weight = torch.randn_like(expected["encoder_out"][0]) * keep
    grads_stock = torch.autograd.grad((expected["encoder_out"][0] * weight).sum(), list(stock.parameters()))
    grads_ours = torch.autograd.grad((actual["encoder_out"][0] * weight).sum(), list(ours.parameters()))
    for a, b in zip(grads_ours, grads_stock):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


RECURRENCE_FIELDS = {f.name for f in RecurrenceConfig.option_fields()}
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
    # Hao et al. (2019): recurrent layers before/after the SAN layers
    "onlstm+san+shortcut": dict(encoder_recurrent_layers=2, encoder_shortcut=True,
                                encoder_position_embedding="none"),
    "lstm+san": dict(encoder_recurrent_layers=1, encoder_recurrent_cell="lstm"),
    "san+onlstm-uni": dict(encoder_recurrent_layers=1, encoder_stack_order="attention-first",
                           encoder_recurrent_unidirectional=True, encoder_onlstm_chunk_size=2),
    "onlstm+san+P+conv1d": dict(encoder_recurrent_layers=1, position_interactions="P",
                                interaction_max_len=12, convolved_attention="1d"),
    "rope": dict(rotary_positions=True, encoder_position_embedding="none"),
    # rotary positions compose with PE[con] and the convolutions: nothing to refuse
    "rope+concat": dict(rotary_positions=True, encoder_position_embedding="concat", encoder_position_concat_dim=4),
    "rope+conv1d+shaw": dict(rotary_positions=True, convolved_attention="1d", interaction_max_len=12,
                             relative_positions=True, max_relative_position=2),
    "alibi": dict(alibi=True, encoder_position_embedding="none"),
    "t5": dict(t5_relative_bias=True, t5_bias_buckets=8, t5_bias_max_distance=6, encoder_position_embedding="none"),
    "methods+onlstm": dict(rotary_positions=True, alibi=True, t5_relative_bias=True, encoder_recurrent_layers=1),
}


def build_encoder(options_, **config):
    recurrent = {k: v for k, v in options_.items() if k in RECURRENCE_FIELDS}
    attention_cfg = PositionAttentionConfig(
        **{k: v for k, v in options_.items() if k not in RECURRENCE_FIELDS})
    width = 16
    if attention_cfg.encoder_position_embedding == "concat":
        width -= attention_cfg.position_concat_dim(16)
    torch.manual_seed(0)
    encoder = PositionAwareEncoder(small_config(**config), attention_cfg, VOCAB, embedding(width),
                                   RecurrenceConfig(**recurrent))
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


# arch: (position embeddings, rotation terms, logit-scaling terms, score terms) of each of its 2 layers
METHOD_ARCHS = {
    "transformer_rope": (False, [["RotaryPositions"]] * 2, [[]] * 2, [[]] * 2),
    "transformer_alibi": (False, [[]] * 2, [[]] * 2, [["LinearDistanceBias"]] * 2),
    "transformer_t5bias": (False, [[]] * 2, [[]] * 2, [["T5RelativeBias"]] * 2),
    "transformer_pascal": (True, [[]] * 2, [["ParentScaledLogits"], []], [[]] * 2),
    "transformer_depdist": (False, [[]] * 2, [[]] * 2, [["LinearDistanceBias", "LinearDistanceBias"]] * 2),
}


@pytest.mark.parametrize("arch", sorted(METHOD_ARCHS))
def test_position_method_architectures(arch):
    args = parse(arch)
    model = PositionAwareTransformerModel.build_model(args, TASK)
    positions, rotations, scalings, scores = METHOD_ARCHS[arch]
    assert (model.encoder.embed_positions is not None) == positions
    layers = [layer.self_attn for layer in model.encoder.layers]
    for kind, expected in (("rotation_terms", rotations), ("logit_scaling_terms", scalings),
                           ("score_terms", scores)):
        assert [[type(t).__name__ for t in getattr(attn, kind)] for attn in layers] == expected, kind
    if arch == "transformer_depdist":
        assert [t.distance for t in layers[0].score_terms] == ["sequential", "tree_distance"]
    if arch == "transformer_pascal":  # the last 5 of 8 heads; every head of a smaller encoder
        assert layers[0].logit_scaling_terms[0].heads == [0, 1]
        full = options.parse_args_and_arch(options.get_training_parser(),
                                           ["data-bin", "--arch", arch, "--task", "translation"])
        assert (full.pascal_heads, full.encoder_attention_heads, full.pascal_layers) == (5, 8, "first")
        assert full.encoder_position_embedding == "add" and full.pascal_anchor == "mean"


def test_one_t5_table_serves_every_layer_and_stays_shared_in_a_checkpoint(tmp_path):
    """T5 shares one table between the layers: counted once, its gradient the sum of the layers',
    and a state dict saved and loaded keeps it one table."""
    encoder = build_encoder(ENCODER_OPTIONS["t5"]).train()
    tables = [layer.self_attn.score_terms[0].weight for layer in encoder.layers]
    assert tables[0] is tables[1]
    assert sum(p is tables[0] for p in encoder.parameters()) == 1
    tokens = batch(sentences([6, 4], seed=2))

    def loss(model):
        return model(tokens)["encoder_out"][0].pow(2).sum()

    shared_grad = torch.autograd.grad(loss(encoder), tables[0])[0]
    untied = build_encoder(ENCODER_OPTIONS["t5"]).train()
    for layer in untied.layers:  # each layer its own copy of the same values
        layer.self_attn.score_terms[0] = copy.deepcopy(layer.self_attn.score_terms[0])
    own_tables = [layer.self_attn.score_terms[0].weight for layer in untied.layers]
    per_layer = torch.autograd.grad(loss(untied), own_tables)
    assert all(g.abs().sum() > 0 for g in per_layer)
    torch.testing.assert_close(shared_grad, per_layer[0] + per_layer[1])

    with torch.no_grad():
        tables[0].add_(1.0)
    torch.save(encoder.state_dict(), tmp_path / "encoder.pt")
    loaded = build_encoder(ENCODER_OPTIONS["t5"])
    loaded.load_state_dict(torch.load(tmp_path / "encoder.pt"))
    first, second = (layer.self_attn.score_terms[0].weight for layer in loaded.layers)
    assert first is second and torch.equal(first, tables[0])


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
        (["--convolved-attention", "1d", "--interaction-max-len", "32", "--max-source-positions", "1024"],
         r"--interaction-max-len 32 is smaller than --max-source-positions 1024"),
        (["--position-interactions", "P", "--interaction-max-len", "100", "--max-source-positions", "200"],
         r"--interaction-overflow clamp"),
        (["--encoder-position-embedding", "concat", "--share-all-embeddings"],
         r"cannot be combined with --share-all-embeddings"),
        (["--encoder-position-embedding", "concat", "--encoder-position-concat-dim", "16"],
         r"--encoder-position-concat-dim 16 must be between 1"),
        (["--relative-positions", "--max-relative-position", "0"], r"--max-relative-position must be"),
        (["--rotary-positions", "--encoder-embed-dim", "6"],
         r"--rotary-positions rotates pairs of dimensions, but a head has 3 \(--encoder-embed-dim 6 / "
         r"--encoder-attention-heads 2\)"),
        (["--rotary-positions", "--rotary-base", "1"], r"--rotary-base must be above 1, got 1.0"),
        (["--t5-relative-bias", "--t5-bias-buckets", "7"], r"--t5-bias-buckets must be even and at least 4"),
        (["--t5-relative-bias", "--t5-bias-max-distance", "8"], r"--t5-bias-max-distance \(8\) must exceed"),
        (["--pascal-heads", "3"], r"--pascal-heads 3 must be between 0 \(off\) and --encoder-attention-heads 2"),
        (["--pascal-heads", "-1"], r"--pascal-heads -1 must be between 0"),
        (["--pascal-heads", "1", "--pascal-sigma", "0"], r"--pascal-sigma must be positive, got 0.0"),
        (["--pascal-heads", "1", "--encoder-attention-kernel", "sdpa"],
         r"--encoder-attention-kernel sdpa: .*PASCAL \(--pascal-heads\) multiplies them"),
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


# --------------------------------------------------------------------------
# structural positions (Wang et al. 2019)
# --------------------------------------------------------------------------

STRUCTURE_OPTIONS = {
    "fuse+rel": dict(structural_position_embedding="fuse", structural_relative_positions=True,
                     max_structural_relative_position=3),
    "add": dict(structural_position_embedding="add"),
    "no-sequential+abs": dict(structural_position_embedding="fuse", encoder_position_embedding="none"),
    "rel-only+shaw": dict(structural_relative_positions=True, relative_positions=True,
                          max_relative_position=2, encoder_position_embedding="none"),
    "with-dufter": dict(structural_position_embedding="fuse", structural_relative_positions=True,
                        position_interactions="PR", interaction_max_len=12, convolved_attention="2d"),
}


def tree_inputs(n, seed):
    """Arbitrary depth [n] and key-minus-query structural positions [n, n] of one sentence."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 5, (n,), generator=g), torch.randint(-6, 7, (n, n), generator=g)


def batch_tree_inputs(trees, tokens, left_pad=True):
    B, T = tokens.shape
    depths, rel = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, T, dtype=torch.long)
    for b, (d, r) in enumerate(trees):
        n = len(d)
        cols = slice(T - n, T) if left_pad else slice(0, n)
        depths[b, cols], rel[b, cols, cols] = d, r
    return dict(src_depths=depths, src_structural_positions=rel)


@pytest.mark.parametrize("name", sorted(STRUCTURE_OPTIONS))
def test_padding_never_changes_a_sentence_with_trees(name):
    encoder = build_encoder(STRUCTURE_OPTIONS[name])
    sents = sentences([6, 2, 5], seed=3)
    trees = [tree_inputs(len(s), seed=i) for i, s in enumerate(sents)]
    alone = []
    for s, tree in zip(sents, trees):
        tokens = batch([s])
        alone.append(real_outputs(encoder(tokens, **batch_tree_inputs([tree], tokens)), tokens)[0])
    for left_pad in (True, False):
        tokens = batch(sents, left_pad=left_pad)
        out = encoder(tokens, **batch_tree_inputs(trees, tokens, left_pad))
        for got, want in zip(real_outputs(out, tokens), alone):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# PASCAL and the dependency-distance bias, on trees as translation_struct's collater lays them out
TREE_METHOD_OPTIONS = {
    "pascal": dict(pascal_heads=2),
    "pascal-root-all": dict(pascal_heads=4, pascal_layers="all", pascal_anchor="root", pascal_sigma=0.7),
    "depdist": dict(dependency_distance_bias=True, alibi=True, encoder_position_embedding="none"),
    "everything": dict(pascal_heads=1, dependency_distance_bias=True, rotary_positions=True, t5_relative_bias=True,
                       structural_position_embedding="fuse", structural_relative_positions=True,
                       max_structural_relative_position=3, relative_positions=True, max_relative_position=2),
}


@pytest.mark.parametrize("name", sorted(TREE_METHOD_OPTIONS))
def test_padding_never_changes_a_sentence_with_parsed_trees(name):
    encoder = build_encoder(TREE_METHOD_OPTIONS[name])
    sents = sentences([7, 2, 5], seed=3)
    trees = [random_piece_tree(len(s) - 1, seed=i) for i, s in enumerate(sents)]  # the last token: EOS
    alone = []
    for s, tree in zip(sents, trees):
        tokens = batch([s])
        alone.append(real_outputs(encoder(tokens, **encoded_tree_inputs([tree], encoder.tree_inputs)), tokens)[0])
    for left_pad in (True, False):
        tokens = batch(sents, left_pad=left_pad)
        out = encoder(tokens, **encoded_tree_inputs(trees, encoder.tree_inputs, left_pad))
        for got, want in zip(real_outputs(out, tokens), alone):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options, keys", [
    ({}, ()),
    (dict(structural_position_embedding="add"), ("src_depths",)),
    (dict(structural_relative_positions=True), ("src_structural_positions",)),
    (dict(dependency_distance_bias=True), ("src_tree_distances",)),
    (dict(pascal_heads=1, pascal_anchor="root"), ("src_parent_positions",)),
    (TREE_METHOD_OPTIONS["everything"], ("src_depths", "src_structural_positions", "src_tree_distances",
                                         "src_parent_positions")),
])
def test_the_encoder_names_the_tree_inputs_it_reads_and_refuses_a_batch_without_them(options, keys):
    encoder = build_encoder(options)
    assert encoder.tree_inputs.keys() == keys and encoder.reads_trees == bool(keys)
    assert encoder.tree_inputs.parent_anchor == options.get("pascal_anchor", "mean" if "pascal_heads" in options
                                                            else None)
    tokens = batch(sentences([4, 3]))
    given = encoded_tree_inputs([random_piece_tree(3, 0), random_piece_tree(2, 1)], encoder.tree_inputs)
    encoder(tokens, **given)
    for key in keys:
        with pytest.raises(ValueError, match=f"no {key}: train and decode with --task translation_struct"):
            encoder(tokens, **{k: v for k, v in given.items() if k != key})


def test_trees_change_the_encoding():
    encoder = build_encoder(STRUCTURE_OPTIONS["fuse+rel"])
    tokens = batch(sentences([6], seed=5))
    first = encoder(tokens, **batch_tree_inputs([tree_inputs(6, seed=1)], tokens))
    second = encoder(tokens, **batch_tree_inputs([tree_inputs(6, seed=2)], tokens))
    assert not torch.allclose(first["encoder_out"][0], second["encoder_out"][0])


def test_depth_embedding_is_the_sequential_sinusoid_at_that_position():
    from fairseq.modules import PositionalEmbedding

    from fairseq_posattn.modules.structural_positions import DepthEmbedding

    sequential = PositionalEmbedding(20, 16, VOCAB.pad(), learned=False)
    tokens = torch.full((1, 7), VOCAB.eos())
    torch.testing.assert_close(
        DepthEmbedding(16, 20, VOCAB.pad())(torch.arange(7)[None]), sequential(tokens)
    )


def test_additive_fusion_is_parameter_free_sum():
    encoder = build_encoder(STRUCTURE_OPTIONS["add"])
    assert encoder.position_fusion is None
    tokens = batch(sentences([4], seed=6))
    depths = torch.tensor([[0, 2, 1, 3]])
    x, embed = encoder.forward_embedding(tokens, depths=depths)
    expected = embed + encoder.embed_positions(tokens) + encoder.embed_depths(depths)
    torch.testing.assert_close(x, expected)


def test_structural_options_without_trees_name_the_task():
    encoder = build_encoder(STRUCTURE_OPTIONS["add"])
    with pytest.raises(ValueError, match="--task translation_struct"):
        encoder(batch(sentences([3])))


def test_structure_archs_build_the_papers_best_row():
    args = parse("transformer_struct")
    model = PositionAwareTransformerModel.build_model(args, TASK)
    cfg = model.encoder.attention_cfg
    assert (cfg.encoder_position_embedding, cfg.relative_positions, cfg.structural_position_embedding,
            cfg.structural_relative_positions, cfg.max_structural_relative_position,
            cfg.max_relative_position) == ("add", True, "fuse", True, 16, 16)
    positions = [t.positions for t in model.encoder.layers[1].self_attn.score_terms]
    assert positions == ["sequential", "structural"]
    big = parse("transformer_struct_big")
    for name in ("encoder_embed_dim", "encoder_attention_heads", "encoder_ffn_embed_dim", "encoder_layers"):
        delattr(big, name)
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY["transformer_struct_big"](big)
    assert (big.encoder_embed_dim, big.encoder_attention_heads, big.dropout) == (1024, 16, 0.3)
    assert big.structural_relative_positions and big.structural_position_embedding == "fuse"


def test_model_forward_passes_trees_to_the_encoder():
    model = PositionAwareTransformerModel.build_model(parse("transformer_struct"), TASK)
    tokens = batch(sentences([5, 3]))
    trees = batch_tree_inputs([tree_inputs(5, 0), tree_inputs(3, 1)], tokens)
    out = model(tokens, torch.tensor([5, 3]), tokens, **trees)[0]
    assert out.shape == (2, 5, len(VOCAB)) and torch.isfinite(out).all()


# Wang et al. (2019), Table 1: (sequential abs, rel, structural abs, rel) -> flags, as in README
WANG_TABLE1 = {
    1: ((0, 0, 0, 0), ["--encoder-position-embedding", "none"]),
    2: ((0, 0, 1, 0), ["--encoder-position-embedding", "none", "--structural-position-embedding", "fuse"]),
    3: ((0, 0, 0, 1), ["--encoder-position-embedding", "none", "--structural-relative-positions"]),
    4: ((1, 0, 0, 0), []),
    5: ((1, 0, 1, 0), ["--structural-position-embedding", "fuse"]),
    6: ((1, 0, 1, 1), ["--structural-position-embedding", "fuse", "--structural-relative-positions"]),
    7: ((1, 1, 0, 0), ["--relative-positions"]),
    8: ((1, 1, 1, 0), ["--relative-positions", "--structural-position-embedding", "fuse"]),
    9: ((1, 1, 1, 1), None),  # --arch transformer_struct
}


@pytest.mark.parametrize("row", sorted(WANG_TABLE1))
def test_flags_select_every_row_of_wang_table1(row):
    (seq_abs, seq_rel, struct_abs, struct_rel), flags = WANG_TABLE1[row]
    args = parse("transformer_struct") if flags is None else parse("transformer_posattn", *flags)
    model = PositionAwareTransformerModel.build_model(args, TASK)
    encoder = model.encoder
    assert (encoder.embed_positions is not None) == bool(seq_abs)
    assert (encoder.embed_depths is not None) == bool(struct_abs)
    assert (encoder.position_fusion is not None) == bool(seq_abs and struct_abs)
    terms = [t.positions for t in encoder.layers[0].self_attn.score_terms]
    assert terms == ["sequential"] * seq_rel + ["structural"] * struct_rel
    tokens = batch(sentences([5, 3]))
    trees = batch_tree_inputs([tree_inputs(5, 0), tree_inputs(3, 1)], tokens)
    out = model(tokens, torch.tensor([5, 3]), tokens, **trees)[0]
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------
# recurrent layers (Hao et al. 2019)
# --------------------------------------------------------------------------


def test_pure_recurrent_encoder_without_attention_layers():
    encoder = build_encoder(dict(encoder_recurrent_layers=2, encoder_position_embedding="none"),
                            encoder_layers=0)
    assert len(encoder.layers) == 0 and len(encoder.recurrent_layers) == 2
    sents = sentences([6, 2, 4], seed=8)
    alone = [real_outputs(encoder(batch([s])), batch([s]))[0] for s in sents]
    tokens = batch(sents)
    for got, want in zip(real_outputs(encoder(tokens), tokens), alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_shortcut_adds_the_two_stacks_outputs():
    """Eq. 10: with return_all_hiddens the stack outputs are visible; the output is their sum."""
    encoder = build_encoder(ENCODER_OPTIONS["onlstm+san+shortcut"])
    tokens = batch(sentences([5, 3], seed=9))
    out = encoder(tokens, return_all_hiddens=True)
    states = out["encoder_states"]  # embedding, 2 recurrent layers, 2 attention layers
    assert len(states) == 5
    torch.testing.assert_close(out["encoder_out"][0], states[2] + states[4])


def test_positions_enter_the_attention_stack_after_the_recurrence():
    options_ = dict(encoder_recurrent_layers=1, encoder_position_embedding="add")
    encoder = build_encoder(options_)
    assert encoder.positions_after_recurrence
    tokens = batch(sentences([5], seed=10))
    x, embed = encoder.forward_embedding(tokens)
    torch.testing.assert_close(x, embed)  # no positions at the recurrent input (eval: no dropout)
    first = encoder(tokens)["encoder_out"][0]
    encoder.embed_positions = None
    assert not torch.allclose(first, encoder(tokens)["encoder_out"][0])
    assert not build_encoder(dict(options_, encoder_stack_order="attention-first")).positions_after_recurrence


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--encoder-layers", "0"], r"--encoder-layers 0 and --encoder-recurrent-layers 0"),
        (["--encoder-shortcut", "--encoder-recurrent-layers", "2", "--encoder-layers", "0"],
         r"--encoder-shortcut adds"),
        (["--encoder-shortcut"], r"--encoder-recurrent-layers is 0"),
        (["--encoder-recurrent-layers", "1", "--encoder-onlstm-chunk-size", "3"],
         r"--encoder-onlstm-chunk-size 3 must divide"),
        (["--encoder-recurrent-layers", "1", "--encoder-position-embedding", "concat"],
         r"concat cannot widen it"),
    ],
)
def test_impossible_recurrent_combinations_fail_at_build_time(flags, message):
    args = parse("transformer_posattn", *flags)
    with pytest.raises(ValueError, match=message):
        PositionAwareTransformerModel.build_model(args, TASK)


HAO_EXPECTED = {  # arch: (recurrent layers, cell, SAN layers, order, shortcut, positions)
    "onlstm_san_transformer": (3, "onlstm", 3, "recurrent-first", True, "none"),
    "transformer_lstm6": (6, "lstm", 0, "recurrent-first", False, "none"),
    "transformer_onlstm6": (6, "onlstm", 0, "recurrent-first", False, "none"),
    "transformer_lstm6_san4": (6, "lstm", 4, "recurrent-first", False, "none"),
    "transformer_onlstm6_san4": (6, "onlstm", 4, "recurrent-first", False, "none"),
    "transformer_onlstm3_san3": (3, "onlstm", 3, "recurrent-first", False, "none"),
    "transformer_san3_onlstm3": (3, "onlstm", 3, "attention-first", False, "add"),
    "transformer_lstm8": (8, "lstm", 0, "recurrent-first", False, "none"),
    "transformer_san10": (0, "onlstm", 10, "recurrent-first", False, "add"),
}


@pytest.mark.parametrize("arch", sorted(HAO_EXPECTED))
def test_hao_architectures(arch):
    args = options.parse_args_and_arch(
        options.get_training_parser(), ["data-bin", "--arch", arch, "--task", "translation"])
    expected = HAO_EXPECTED[arch]
    assert (args.encoder_recurrent_layers, args.encoder_recurrent_cell, args.encoder_layers,
            args.encoder_stack_order, args.encoder_shortcut,
            args.encoder_position_embedding) == expected
    assert args.encoder_embed_dim == 512


# --------------------------------------------------------------------------
# half precision, every architecture
# --------------------------------------------------------------------------


def plugin_archs():
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m is PositionAwareTransformerModel)


@pytest.mark.parametrize("precision", ["autocast-bf16", "bf16-model"])
@pytest.mark.parametrize("arch", plugin_archs())
def test_every_architecture_trains_in_bfloat16(arch, precision):
    """fairseq's --fp16/--bf16 need a GPU; on CPU the same casts: the model
    under bf16 autocast, and the model itself in bf16 (as --bf16 makes it)."""
    args = parse(arch, "--max-source-positions", "64", "--interaction-max-len", "64",
                 "--encoder-layers", "1", "--dropout", "0.1")
    args.encoder_recurrent_layers = min(args.encoder_recurrent_layers, 1)
    model = PositionAwareTransformerModel.build_model(args, TASK)
    if precision == "bf16-model":
        model = model.bfloat16()
    tokens = batch(sentences([7, 4, 2]))
    trees = encoded_tree_inputs([random_piece_tree(n - 1, n) for n in (7, 4, 2)], model.encoder.tree_inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "autocast-bf16"):
        logits = model(tokens, tokens.ne(VOCAB.pad()).sum(1), tokens, **trees)[0]
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, len(VOCAB)), tokens.view(-1))
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
