"""``relation_classifier``: the position-aware self-attention relation
classifier of Bilan & Roth (2018) for ``--task relation_classification``.

Word, POS- and NER-tag embeddings (Sec. 4.1; ``--encoder-embed-dim`` is
their sum) plus the object-distance embedding -> :class:`PositionAwareEncoder`
with :class:`RelationEncoderLayer` layers (Sec. 3.1.2) -> summary ``q`` by
max pooling (Sec. 3) -> the position-aware attention of Zhang et al. (2017)
over the states with the binned entity distances (Eq. 3-5, Sec. 3.2) gives
``z`` -> linear logits.  Architectures: ``relation_classifier`` (a plain
post-norm Transformer layer) and ``bilan_roth_relation``, the paper's final
model (Sec. 4.1); the flags: docs/evaluations.md.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, Embedding, TransformerConfig
from fairseq.modules import FairseqDropout
from torch import nn

from ...modules.options import ATTENTION_LAYERS, EncoderOptions, Need, PositionAttentionConfig, RecurrenceConfig
from .entity_positions import PositionAwareAttention, bin_distances, distance_radius
from ...modules.pooling import masked_max
from .encoder_layer import RelationEncoderLayer, RelationLayerOptions
from ..encoder import PositionAwareEncoder
from ..encoder_only import HEAD_NAME, PositionAwareEncoderModel
from ..transformer_posattn import PositionAwareTransformerModel, _set_unset, transformer_posattn

POSITION_ATTENTION = Need("--relation-pooling position-attention",
                          lambda o: o.relation_pooling == "position-attention", ("relation_pooling",))
ENTITY_DISTANCES = Need("--relation-pooling position-attention or the object distances added to the input "
                        "(no --no-object-position-input)",
                        lambda o: o.relation_pooling == "position-attention" or not o.no_object_position_input,
                        ("relation_pooling", "no_object_position_input"))

@dataclass
class RelationClassifierOptions(EncoderOptions):
    pos_tag_embed_dim: int = field(default=30, metadata={"help": "POS-tag embedding width"})
    ner_tag_embed_dim: int = field(default=30, metadata={"help": "NER-tag embedding width"})
    entity_position_dim: int = field(
        default=30, metadata={"help": "width of the subject/object distance embeddings of "
                                      "the position-aware attention", "needs": (POSITION_ATTENTION,)})
    relation_attention_dim: Optional[int] = field(
        default=None, metadata={"help": "hidden width of the position-aware attention "
                                        "(default: --encoder-embed-dim)", "needs": (POSITION_ATTENTION,)})
    relation_pooling: ChoiceEnum(["position-attention", "max"]) = field(
        default="position-attention",
        metadata={"help": "sentence vector: the position-aware attention or the max-pooled "
                          "encoder states"})
    raw_entity_positions: bool = field(
        default=False,
        metadata={"help": "Zhang et al.'s unbinned distances instead of Bilan & Roth's bins",
                  "needs": (ENTITY_DISTANCES,)})
    no_object_position_input: bool = field(
        default=False,
        metadata={"help": "do not add object-distance embeddings to the encoder input"})
    # the encoder layer of Sec. 3.1.2 (RelationLayerOptions)
    encoder_norm: ChoiceEnum(["layer", "batch"]) = field(
        default="layer", metadata={"help": "normalisation in the encoder layers", "needs": (ATTENTION_LAYERS,)})
    encoder_residual: ChoiceEnum(["per-sublayer", "single"]) = field(
        default="per-sublayer",
        metadata={"help": "a residual around each sublayer, or a single one from the layer "
                          "input to the last normalisation", "needs": (ATTENTION_LAYERS,)})
    encoder_ffn_activation: ChoiceEnum(["fairseq", "rrelu"]) = field(
        default="fairseq",
        metadata={"help": "the feed-forward activation: fairseq's --activation-fn, or RReLU",
                  "needs": (ATTENTION_LAYERS,)})
    encoder_init: ChoiceEnum(["xavier", "kaiming"]) = field(
        default="xavier",
        metadata={"help": "initialisation of the query, key and value matrices",
                  "needs": (ATTENTION_LAYERS,)})


def distance_table(rows: int, dim: int) -> nn.Embedding:
    """Embeddings of entity distances, initialised like fairseq's token embeddings."""
    table = nn.Embedding(rows, dim)
    nn.init.normal_(table.weight, mean=0, std=dim**-0.5)
    return table


class RelationEncoder(PositionAwareEncoder):
    """:class:`PositionAwareEncoder` with :class:`RelationEncoderLayer` layers,
    wrapped as fairseq wraps its encoder layers (activation checkpointing)."""

    def __init__(self, cfg, attention_cfg, dictionary, embed_tokens, layer_options: RelationLayerOptions,
                 recurrence_cfg: RecurrenceConfig):
        self.layer_options = layer_options
        super().__init__(cfg, attention_cfg, dictionary, embed_tokens, recurrence_cfg)

    def build_encoder_layer(self, cfg, layer_index: int):
        return self._wrap_layer(cfg, RelationEncoderLayer(cfg, self.attention_cfg, layer_index,
                                                          self.layer_options, self.shared_terms))


@register_model("relation_classifier")
class PositionAwareRelationClassifier(PositionAwareEncoderModel):
    """Bilan & Roth (2018): self-attention encoder + position-aware attention."""

    option_groups = (*PositionAwareEncoderModel.option_groups, RelationClassifierOptions)

    def __init__(self, args, encoder, tag_embeddings, object_position_input, entity_positions,
                 attention, head):
        super().__init__(encoder)
        self.tag_embeddings = tag_embeddings  # pos_tags, ner_tags
        self.object_position_input = object_position_input  # None or [2R+1, C]
        self.entity_positions = entity_positions  # [2R+1, P], shared by subject and object
        self.attention = attention  # None: classify the max-pooled summary
        self.classification_heads = nn.ModuleDict({HEAD_NAME: head})
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.binned = not args.raw_entity_positions
        self.radius = (entity_positions.num_embeddings - 1) // 2

    @classmethod
    def build_model(cls, args, task):
        relation_classifier(args)
        cls.prepare_encoder_args(args)
        if args.encoder_ffn_activation == "rrelu" and args.activation_fn != "relu":
            raise ValueError(
                f"--activation-fn {args.activation_fn} has no effect with --encoder-ffn-activation "
                f"rrelu (bilan_roth_relation's default): pass --encoder-ffn-activation fairseq to use it"
            )
        width = args.encoder_embed_dim
        word_dim = width - args.pos_tag_embed_dim - args.ner_tag_embed_dim
        if word_dim < 1:
            raise ValueError(
                f"--encoder-embed-dim {width} must exceed --pos-tag-embed-dim "
                f"{args.pos_tag_embed_dim} + --ner-tag-embed-dim {args.ner_tag_embed_dim} "
                f"(it is their sum plus the word embedding width)"
            )
        words = PositionAwareTransformerModel.build_embedding(args, task.source_dictionary, word_dim,
                                                              args.encoder_embed_path)
        tags = nn.ModuleDict({
            key: Embedding(len(task.tag_dictionaries[name]), dim, task.tag_dictionaries[name].pad())
            for key, name, dim in (("pos_tags", "stanford_pos", args.pos_tag_embed_dim),
                                   ("ner_tags", "stanford_ner", args.ner_tag_embed_dim))
        })
        layer_options = RelationLayerOptions(norm=args.encoder_norm, residual=args.encoder_residual,
                                             activation=args.encoder_ffn_activation, init=args.encoder_init)
        encoder = RelationEncoder(
            TransformerConfig.from_namespace(args), PositionAttentionConfig.from_namespace(args),
            task.source_dictionary, words, layer_options, RecurrenceConfig.from_namespace(args),
        )
        rows = 2 * distance_radius(args.max_source_positions, not args.raw_entity_positions) + 1
        object_input = None if args.no_object_position_input else distance_table(rows, width)
        attention = None
        if args.relation_pooling == "position-attention":
            attention = PositionAwareAttention(width, width, args.entity_position_dim,
                                               args.relation_attention_dim)
        return cls(args, encoder, tags, object_input, distance_table(rows, args.entity_position_dim), attention,
                   nn.Linear(width, task.num_classes()))

    def distance_rows(self, distances):
        """Table rows of token-to-entity distances (binned unless ``--raw-entity-positions``)."""
        if self.binned:
            distances = bin_distances(distances)
        return distances.clamp(-self.radius, self.radius) + self.radius

    def forward(self, src_tokens, pos_tags, ner_tags, subject_distances, object_distances,
                src_lengths=None, features_only=True, classification_head_name=None):
        """Logits ``[B, relations]`` and ``{"attention": [B, T] or None}``."""
        embedded = torch.cat([self.encoder.embed_tokens(src_tokens), self.tag_embeddings["pos_tags"](pos_tags),
                              self.tag_embeddings["ner_tags"](ner_tags)], dim=-1)
        object_rows = self.distance_rows(object_distances)
        if self.object_position_input is not None:
            embedded = embedded + self.object_position_input(object_rows)
        states, padding_mask = self.encode(src_tokens, src_lengths, token_embeddings=embedded)
        summary = masked_max(states, padding_mask)
        weights = None
        if self.attention is None:
            sentence = summary
        else:
            sentence, weights = self.attention(
                self.dropout_module(states), padding_mask, summary,
                self.entity_positions(self.distance_rows(subject_distances)),
                self.entity_positions(object_rows),
            )
        head = self.classification_heads[classification_head_name or HEAD_NAME]
        return head(self.dropout_module(sentence)), {"attention": weights}


@register_model_architecture("relation_classifier", "relation_classifier")
def relation_classifier(args):
    """360 = 300 + 30 + 30 dims, 1 layer, 3 heads, ffn 130, dropout 0.4 / 0.1,
    a plain post-norm layer with sinusoidal positions."""
    _set_unset(args, dict(encoder_embed_dim=360, encoder_layers=1, encoder_attention_heads=3,
                          encoder_ffn_embed_dim=130, dropout=0.4, attention_dropout=0.1, no_scale_embedding=True,
                          max_source_positions=DEFAULT_MAX_SOURCE_POSITIONS))
    RelationClassifierOptions.set_defaults(args)
    _set_unset(args, dict(relation_attention_dim=args.encoder_embed_dim))
    transformer_posattn(args)


@register_model_architecture("relation_classifier", "bilan_roth_relation")
def bilan_roth_relation(args):
    """The paper's final model (Sec. 3 and 4.1)."""
    _set_unset(args, dict(encoder_position_embedding="none", query_relative_positions=True, encoder_norm="batch",
                          encoder_residual="single", encoder_ffn_activation="rrelu", encoder_init="kaiming"))
    relation_classifier(args)
