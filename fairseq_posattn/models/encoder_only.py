"""Encoder-only models: :class:`PositionAwareEncoder` without a decoder.

:class:`PositionAwareEncoderModel` is the base of the plugin's classifiers
(and any other encoder-only head): it takes the encoder's command-line flags
(fairseq's Transformer flags without the decoder's, plus every position and
recurrence option), builds and validates the encoder, and reports
``max_positions``.  A subclass adds its head and its ``forward``.
"""

import argparse

from fairseq.models import BaseFairseqModel
from fairseq.models.transformer import TransformerModel

from .encoder import PositionAwareEncoder
from .transformer_posattn import (PositionAwareTransformerModel, add_options, check_encoder_options,
                                  keep_encoder_layers)

# the head name fairseq's sentence_prediction criterion asks for by default
HEAD_NAME = "sentence_classification_head"

# fairseq Transformer flags that only a decoder reads (besides --decoder-*)
DECODER_ONLY = {
    "share_decoder_input_output_embed", "share_all_embeddings", "max_target_positions",
    "adaptive_softmax_cutoff", "adaptive_softmax_dropout", "adaptive_softmax_factor",
    "adaptive_input", "adaptive_input_factor", "adaptive_input_cutoff", "tie_adaptive_weights",
    "tie_adaptive_proj", "no_cross_attention", "cross_self_attention",
}


class PositionAwareEncoderModel(BaseFairseqModel):
    """A :class:`PositionAwareEncoder` plus a task-specific head (subclasses)."""

    option_groups = PositionAwareTransformerModel.option_groups  # a head adds its own

    def __init__(self, encoder: PositionAwareEncoder):
        super().__init__()
        self.encoder = encoder

    @classmethod
    def add_args(cls, parser):
        """fairseq's Transformer flags without the decoder's, and the
        model's options (:attr:`option_groups`)."""
        # the same default handling as the parser's (fairseq's model group
        # suppresses unset flags so that the arch functions fill them in)
        full = argparse.ArgumentParser(add_help=False, argument_default=parser.argument_default)
        TransformerModel.add_args(full)
        group = parser.add_argument_group("encoder")
        for action in full._actions:
            if not (action.dest.startswith(("decoder_", "no_decoder_")) or action.dest in DECODER_ONLY):
                group._add_action(action)
        add_options(group, cls.option_groups)

    @staticmethod
    def prepare_encoder_args(args) -> None:
        """What ``transformer_posattn``'s ``build_model`` does to the encoder's
        flags before it builds the encoder: refuse those the encoder cannot
        honour, and keep ``--encoder-layers-to-keep`` layers."""
        check_encoder_options(args)
        keep_encoder_layers(args)

    @classmethod
    def build_position_aware_encoder(cls, args, dictionary) -> PositionAwareEncoder:
        """The encoder that ``transformer_posattn`` would build for ``args``
        (token embeddings of ``--encoder-embed-dim``, ``--encoder-embed-path``
        if given), after :meth:`prepare_encoder_args`."""
        cls.prepare_encoder_args(args)
        embed_tokens = PositionAwareTransformerModel.build_embedding(
            args, dictionary, args.encoder_embed_dim, args.encoder_embed_path
        )
        return PositionAwareTransformerModel.build_encoder(args, dictionary, embed_tokens)

    def encode(self, src_tokens, src_lengths=None, **encoder_inputs):
        """Encoder states ``[B, T, C]`` and the padding mask ``[B, T]``."""
        out = self.encoder(src_tokens, src_lengths=src_lengths, **encoder_inputs)
        return out["encoder_out"][0].transpose(0, 1), out["encoder_padding_mask"][0]

    def max_positions(self):
        return self.encoder.max_positions()
