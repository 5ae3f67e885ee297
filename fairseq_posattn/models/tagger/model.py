"""``posattn_tagger``: the part-of-speech tagger of Dufter et al. (2020).

Sec. 2.1 and the authors' code: word embedding (+ position embedding, added
or concatenated) concatenated with a character-CNN vector (Yu et al. 2017);
4 attention-only residual layers of 4 heads (dropout 0.1); a softmax layer
on the embedding concatenated with the last layer's output.  The layers are
:class:`PositionAwareSelfAttention`, so every option of
:class:`PositionAttentionConfig` applies; named architectures give the rows
of the paper's Table 2.  fairseq's encoder flags are no options of this
model.  Where it differs from the authors' Keras code: docs/evaluations.md.
"""

import logging
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.models.transformer import Embedding, TransformerConfig
from torch import nn

from ...modules.options import ATTENTION_LAYERS, EncoderOptions, PositionAttentionConfig
from .word_features import CharacterCNN, WordFeatures, load_word_vectors, read_vector_width
from .residual_encoder import ResidualAttentionEncoder
from ..transformer_posattn import (DUFTER_ROWS, _paper_row, _set_unset, add_options,
                                  keep_encoder_layers)

logger = logging.getLogger(__name__)

DEFAULT_WORD_EMBED_DIM = 128  # the authors' UD setting


@dataclass
class TaggerOptions(EncoderOptions):
    encoder_layers: int = field(default=4, metadata={"help": "attention layers"})
    encoder_attention_heads: int = field(default=4, metadata={"help": "heads per layer",
                                                              "needs": (ATTENTION_LAYERS,)})
    dropout: float = field(
        default=0.1, metadata={"help": "dropout on the embeddings and before every layer"}
    )
    attention_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the attention probabilities", "needs": (ATTENTION_LAYERS,)}
    )
    word_embed_dim: Optional[int] = field(
        default=None,
        metadata={"help": "word embedding width (default: the pretrained vectors' width, "
                          f"else {DEFAULT_WORD_EMBED_DIM})"},
    )
    char_embed_dim: int = field(
        default=64, metadata={"help": "character embedding and character-CNN width"}
    )
    char_conv_layers: int = field(default=3, metadata={"help": "character-CNN layers"})
    char_kernel_size: int = field(default=5, metadata={"help": "character-CNN filter width (odd)"})
    pretrained_word_vectors: Optional[str] = field(
        default=None,
        metadata={"help": "fastText text file (.vec) initialising the word embeddings of "
                          "the training vocabulary (fine-tuned; read at training start only)"},
    )


@register_model("posattn_tagger")
class PositionAwareTagger(BaseFairseqModel):
    """Sequence tagger: word features -> :class:`ResidualAttentionEncoder` ->
    linear layer on ``[features; last layer]``, logits ``[B, T, tags]``."""

    option_groups = (TaggerOptions, PositionAttentionConfig)

    def __init__(self, encoder: ResidualAttentionEncoder, classifier: nn.Linear):
        super().__init__()
        self.encoder = encoder
        self.classifier = classifier

    @classmethod
    def add_args(cls, parser):
        add_options(parser, cls.option_groups)

    @classmethod
    def build_model(cls, args, task):
        posattn_tagger(args)
        keep_encoder_layers(args)  # given by --model-overrides: the parser has no such flag
        if args.interaction_max_len is None:
            # the task's --max-piece-length, resolved from the checkpoint by now;
            # written back, so that the checkpoint records it
            args.interaction_max_len = task.max_positions()
        options = TaggerOptions.from_namespace(args)
        attention_cfg = PositionAttentionConfig.from_namespace(args)
        vocabulary = task.vocabulary
        features = WordFeatures(cls._word_embedding(options, vocabulary.words),
                                CharacterCNN(len(vocabulary.chars), options.char_embed_dim,
                                             vocabulary.chars.pad(), options.char_conv_layers,
                                             options.char_kernel_size))
        width = features.embedding_dim
        if attention_cfg.encoder_position_embedding == "concat":
            width += attention_cfg.position_concat_dim(width)
        max_positions = task.max_positions()
        attention_cfg.check(embed_dim=width, num_heads=options.encoder_attention_heads,
                            max_source_positions=max_positions, share_all_embeddings=False)
        encoder_cfg = TransformerConfig.from_namespace(Namespace(
            encoder_embed_dim=width,
            encoder_layers=options.encoder_layers,
            encoder_attention_heads=options.encoder_attention_heads,
            encoder_learned_pos=True,
            dropout=options.dropout,
            attention_dropout=options.attention_dropout,
            max_source_positions=max_positions,
            no_scale_embedding=True,
        ))
        encoder = ResidualAttentionEncoder(encoder_cfg, attention_cfg, vocabulary.words, features)
        classifier = nn.Linear(features.embedding_dim + width, len(vocabulary.tags))
        return cls(encoder, classifier)

    @staticmethod
    def _word_embedding(options: TaggerOptions, dictionary) -> nn.Embedding:
        path = options.pretrained_word_vectors
        embedding = Embedding(len(dictionary), options.word_embed_dim, dictionary.pad())
        if path:
            found = load_word_vectors(path, embedding, dictionary)
            logger.info("pretrained vectors for %d of %d words from %s",
                        found, len(dictionary) - dictionary.nspecial, path)
        return embedding

    def forward(self, src_tokens, src_lengths, src_chars):
        features = self.encoder.embed_tokens(src_tokens, src_chars)
        out = self.encoder(src_tokens, src_lengths, token_embeddings=features)
        hidden = out["encoder_out"][0].transpose(0, 1)
        # the residual from the embeddings to the output (Sec. 2.1)
        return self.classifier(torch.cat([out["encoder_embedding"][0], hidden], dim=-1))

    def max_positions(self):
        return self.encoder.max_positions()


@register_model_architecture("posattn_tagger", "posattn_tagger")
def posattn_tagger(args):
    """SAN+PE[add] (learned position embeddings); P, R and conv1d tables of
    t = the task's --max-piece-length (settled in ``build_model``, once the task's
    options are resolved); PE[con] positions 64 wide (the authors')."""
    vectors = getattr(args, "pretrained_word_vectors", None)
    _set_unset(args, dict(
        encoder_position_concat_dim=64,
        # settled here, so that the checkpoint's arguments record it
        word_embed_dim=read_vector_width(vectors) if vectors else DEFAULT_WORD_EMBED_DIM,
    ))
    TaggerOptions.set_defaults(args)
    PositionAttentionConfig.set_defaults(args, leave_unset=["interaction_max_len"])


# Dufter et al. (2020), Table 2: the baselines SAN (no positions) and
# SAN+PE[con], and the MT encoder's rows (P, R, P+R replace PE[add]; Temp,
# Conv, Conv2d keep it).
TAGGER_ROWS = {
    "posattn_tagger_san": dict(encoder_position_embedding="none"),
    "posattn_tagger_pe_con": dict(encoder_position_embedding="concat"),
    **{"posattn_tagger_" + name[len("transformer_posattn_"):]: options
       for name, options in DUFTER_ROWS.items()},
}


for _name, _options in TAGGER_ROWS.items():
    register_model_architecture("posattn_tagger", _name)(_paper_row(_options, base=posattn_tagger))
