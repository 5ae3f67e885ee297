"""``transformer_posattn``: fairseq's Transformer with a position-aware encoder.

The decoder is fairseq's stock decoder; every option is an encoder option
(:class:`~fairseq_posattn.modules.options.PositionAttentionConfig`).
Named architectures give the rows of Dufter et al. (2020), Table 2, the
best row of Wang et al. (2019), Table 1 (``transformer_struct``), the hybrids
of Hao et al. (2019) and one per position method (``transformer_rope``,
``_alibi``, ``_t5bias``, ``_pascal``, ``_depdist``).
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (DEFAULT_MAX_SOURCE_POSITIONS, TransformerConfig, TransformerModel,
                                        base_architecture, transformer_vaswani_wmt_en_de_big)

from ..modules.options import PositionAttentionConfig, RecurrenceConfig
from ..modules.quant_noise import check_block_size
from .encoder import PositionAwareEncoder


def add_options(parser, groups) -> None:
    """The flags of option dataclasses (defaults left to the architectures)."""
    for group in groups:
        group.add_args(parser)


def check_encoder_options(args) -> None:
    """Refuse, at build time, encoder option combinations that cannot work
    and fairseq flags that the encoder cannot honour."""
    attention_cfg = PositionAttentionConfig.from_namespace(args)
    attention_cfg.check(
        embed_dim=args.encoder_embed_dim,
        num_heads=args.encoder_attention_heads,
        max_source_positions=getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS,
        share_all_embeddings=getattr(args, "share_all_embeddings", False),
        learned_pos=getattr(args, "encoder_learned_pos", False),
        no_token_positional_embeddings=getattr(args, "no_token_positional_embeddings", False),
    )
    quant_noise_on = (getattr(args, "quant_noise_pq", 0) or 0) > 0
    block_size = getattr(args, "quant_noise_pq_block_size", 8) if quant_noise_on else 0
    RecurrenceConfig.from_namespace(args).check(
        embed_dim=args.encoder_embed_dim,
        attention_layers=args.encoder_layers,
        position_embedding=attention_cfg.encoder_position_embedding,
        quant_noise_block_size=block_size,
        quant_noise_scalar=getattr(args, "quant_noise_scalar", 0) or 0,
        layers_to_keep=getattr(args, "encoder_layers_to_keep", None),
    )
    check_attention_layer_flags(args, block_size)
    check_every_parameter_gets_a_gradient(args)


def check_attention_layer_flags(args, block_size: int) -> None:
    """Refuse fairseq's flags for its own encoder layers that the
    self-attention layers and the embedding cannot honour: xFormers
    attention, and quant-noise blocks (``fairseq.modules.quant_noise``) that
    do not divide a weight's input features (fairseq would stop on an
    assertion that names no flag)."""
    if getattr(args, "encoder_xformers_att_config", None):
        raise ValueError(
            "--encoder-xformers-att-config: the encoder's self-attention layers are "
            "PositionAwareSelfAttention, which has no xFormers path (it runs PyTorch's "
            "scaled_dot_product_attention where it can)"
        )
    widths = [("embedding's quant-noise layer and the self-attention layers (--encoder-embed-dim)",
               args.encoder_embed_dim)]
    if args.encoder_layers:
        widths.append(("self-attention layers' second feed-forward layer (--encoder-ffn-embed-dim)",
                       args.encoder_ffn_embed_dim))
    check_block_size(block_size, widths)


def keep_encoder_layers(args) -> None:
    """fairseq's ``--encoder-layers-to-keep`` (LayerDrop's pruning, Fan et al.
    2019) as ``TransformerModel.build_model`` applies it, for the models that
    are no ``TransformerModel``: the encoder gets that many layers, and
    loading a checkpoint prunes its ``encoder.layers.N`` to them
    (``checkpoint_utils.prune_state_dict``)."""
    if getattr(args, "encoder_layers_to_keep", None):
        args.encoder_layers = len(args.encoder_layers_to_keep.split(","))


def check_every_parameter_gets_a_gradient(args) -> None:
    """Refuse LayerDrop under PyTorch's DistributedDataParallel without
    ``--find-unused-parameters``: the skipped layers' parameters get no
    gradient, which it refuses at the next update ("Expected to have finished
    reduction in the prior iteration").  Every other option combination gives
    every parameter a gradient (tests/test_distributed.py); ``legacy_ddp``
    fills missing ones with zeros."""
    dropping = [flag for flag, name in (("--encoder-layerdrop", "encoder_layerdrop"),
                                        ("--decoder-layerdrop", "decoder_layerdrop"))
                if (getattr(args, name, 0) or 0) > 0]
    if (dropping and (getattr(args, "distributed_world_size", 1) or 1) > 1
            and getattr(args, "ddp_backend", None) in ("c10d", "pytorch_ddp")
            and not getattr(args, "find_unused_parameters", False)):
        raise ValueError(
            f"{' and '.join(dropping)} skip whole layers, whose parameters then get no "
            f"gradient, which --ddp-backend {args.ddp_backend} refuses: add "
            f"--find-unused-parameters (or use --ddp-backend legacy_ddp)"
        )


@register_model("transformer_posattn")
class PositionAwareTransformerModel(TransformerModel):
    """Transformer (Vaswani et al. 2017) whose encoder takes position options."""

    # the plugin's options; fairseq's legacy Transformer declares the others (why
    # no dataclass is registered with the model: fairseq_posattn.config_check)
    option_groups = (PositionAttentionConfig, RecurrenceConfig)

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_options(parser, cls.option_groups)

    @classmethod
    def build_model(cls, args, task):
        transformer_posattn(args)
        check_encoder_options(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        attention_cfg = PositionAttentionConfig.from_namespace(args)
        if attention_cfg.encoder_position_embedding == "concat":
            # PE[con]: token embeddings fill the width the positions leave
            width = args.encoder_embed_dim - attention_cfg.position_concat_dim(args.encoder_embed_dim)
            embed_tokens = cls.build_embedding(args, src_dict, width, args.encoder_embed_path)
        return PositionAwareEncoder(TransformerConfig.from_namespace(args), attention_cfg, src_dict, embed_tokens,
                                    RecurrenceConfig.from_namespace(args))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer=None, alignment_heads=None, **tree_inputs):
        """fairseq's forward, passing the tree inputs of ``translation_struct``
        (those the encoder's ``tree_inputs`` names) on to the encoder."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   **tree_inputs)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)


@register_model_architecture("transformer_posattn", "transformer_posattn")
def transformer_posattn(args):
    """Base size (d=512, 8 heads, ffn 2048, 6+6 layers), every option at its default."""
    PositionAttentionConfig.set_defaults(args)
    RecurrenceConfig.set_defaults(args)
    fit_source_positions_to_tables(args)
    base_architecture(args)


def fit_source_positions_to_tables(args) -> None:
    """With P, R or conv1d tables of t positions (overflow ``error``), an
    unset ``--max-source-positions`` is t instead of fairseq's 1024, which
    the tables could not cover; a larger value given on the command line is
    still refused (:meth:`PositionAttentionConfig.check`)."""
    attention_cfg = PositionAttentionConfig.from_namespace(args)
    if (getattr(args, "max_source_positions", None) is None and attention_cfg.uses_position_tables()
            and attention_cfg.interaction_overflow == "error"):
        args.max_source_positions = attention_cfg.interaction_max_len


@register_model_architecture("transformer_posattn", "transformer_posattn_big")
def transformer_posattn_big(args):
    """Big size (d=1024, 16 heads, ffn 4096, dropout 0.3), every position option at its default."""
    transformer_vaswani_wmt_en_de_big(args)
    transformer_posattn(args)


def _set_unset(args, options):
    for name, value in options.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def _paper_row(options, base=transformer_posattn):
    """An architecture function: ``options`` where unset, then ``base``'s defaults."""

    def architecture(args):
        _set_unset(args, options)
        base(args)

    return architecture


# Wang et al. (2019), Table 1 row 9 / Table 2 last row: sequential absolute and
# relative positions, structural absolute (fused) and relative positions, r = 16.
STRUCTURE_OPTIONS = dict(relative_positions=True, structural_position_embedding="fuse",
                         structural_relative_positions=True)

# Dufter et al. (2020), Table 2: P, R and P+R replace the position embeddings;
# temperature and the convolutions keep PE[add].
DUFTER_ROWS = {
    "transformer_posattn_p": dict(position_interactions="P", encoder_position_embedding="none"),
    "transformer_posattn_r": dict(position_interactions="R", encoder_position_embedding="none"),
    "transformer_posattn_pr": dict(position_interactions="PR", encoder_position_embedding="none"),
    "transformer_posattn_temp": dict(learnable_temperature=True),
    "transformer_posattn_conv1d": dict(convolved_attention="1d"),
    "transformer_posattn_conv2d": dict(convolved_attention="2d"),
}

# Hao et al. (2019): the hybrid encoder and the rows of its Tables 1 and 2.
# Position embeddings are off where recurrent layers come first: the
# recurrence already orders the tokens (the paper's encoders feed word
# embeddings to the recurrent stack); a self-attention stack that comes first
# keeps PE[add].
HYBRID = dict(encoder_position_embedding="none", encoder_recurrent_cell="onlstm")
HAO_ROWS = {
    # Table 1
    "transformer_lstm6": dict(HYBRID, encoder_recurrent_cell="lstm", encoder_recurrent_layers=6,
                              encoder_layers=0),
    "transformer_onlstm6": dict(HYBRID, encoder_recurrent_layers=6, encoder_layers=0),
    "transformer_lstm6_san4": dict(HYBRID, encoder_recurrent_cell="lstm",
                                   encoder_recurrent_layers=6, encoder_layers=4),
    "transformer_onlstm6_san4": dict(HYBRID, encoder_recurrent_layers=6, encoder_layers=4),
    "transformer_onlstm3_san3": dict(HYBRID, encoder_recurrent_layers=3, encoder_layers=3),
    # Table 2
    "transformer_san3_onlstm3": dict(encoder_recurrent_layers=3, encoder_layers=3,
                                     encoder_stack_order="attention-first"),
    "transformer_lstm8": dict(HYBRID, encoder_recurrent_cell="lstm", encoder_recurrent_layers=8,
                              encoder_layers=0),
    "transformer_san10": dict(encoder_layers=10),
}
# Table 1 rows 7 (base) and 9 (big): 3 ON-LSTM + 3 SAN layers with the short-cut
ONLSTM_SAN = dict(HYBRID, encoder_recurrent_layers=3, encoder_layers=3, encoder_shortcut=True)

# One position method in place of the position embeddings: RoFormer's rotary positions, ALiBi, T5's
# bias; the dependency-distance bias with ALiBi, since tree distances carry no word order.
METHOD_ROWS = {
    "transformer_rope": dict(encoder_position_embedding="none", rotary_positions=True),
    "transformer_alibi": dict(encoder_position_embedding="none", alibi=True),
    "transformer_t5bias": dict(encoder_position_embedding="none", t5_relative_bias=True),
    "transformer_depdist": dict(encoder_position_embedding="none", alibi=True, dependency_distance_bias=True),
}
# Bugliarello & Okazaki (2020), WMT16 En-De: PE[add] and 5 of the 8 heads of the first layer parent-scaled
PASCAL_HEADS = 5

ARCHITECTURES = {
    "transformer_struct": (STRUCTURE_OPTIONS, transformer_posattn),
    "transformer_struct_big": (STRUCTURE_OPTIONS, transformer_posattn_big),
    **{name: (options, transformer_posattn) for name, options in DUFTER_ROWS.items()},
    "onlstm_san_transformer": (ONLSTM_SAN, transformer_posattn),
    "onlstm_san_transformer_big": (ONLSTM_SAN, transformer_posattn_big),
    **{name: (options, transformer_posattn) for name, options in HAO_ROWS.items()},
    **{name: (options, transformer_posattn) for name, options in METHOD_ROWS.items()},
}
for _name, (_options, _base) in ARCHITECTURES.items():
    register_model_architecture("transformer_posattn", _name)(_paper_row(_options, _base))


@register_model_architecture("transformer_posattn", "transformer_pascal")
def transformer_pascal(args):
    """PE[add] and PASCAL in the last :data:`PASCAL_HEADS` heads of the first layer (every head of an encoder
    with fewer), the base size otherwise."""
    base_architecture(args)  # the number of heads
    _set_unset(args, dict(pascal_heads=min(PASCAL_HEADS, args.encoder_attention_heads)))
    transformer_posattn(args)
