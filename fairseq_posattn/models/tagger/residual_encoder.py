"""An encoder of attention-only residual layers (Dufter et al. 2020)."""

from typing import Dict, Optional

from fairseq.modules import FairseqDropout
from torch import nn

from ...modules.attention import PositionAwareSelfAttention
from ...modules.options import PositionAttentionConfig
from ..encoder import PositionAwareEncoder


class ResidualAttentionLayer(nn.Module):
    """Dropout -> multi-head self-attention -> residual add, with no
    feed-forward block and no layer norm: the layer of Dufter et al.'s (2020)
    tagger (the authors' code; Sec. 2.1: "a residual connection ... around
    each attention layer").

    ``input_dropout``: the dropout before the attention (an encoder whose
    embedding dropout feeds the first layer passes 0 there).
    """

    def __init__(self, embed_dim: int, num_heads: int, input_dropout: float,
                 attention_dropout: float, attention_cfg: PositionAttentionConfig,
                 layer_index: int, shared_terms: Optional[Dict[str, nn.Module]] = None):
        super().__init__()
        self.dropout_module = FairseqDropout(input_dropout, module_name=self.__class__.__name__)
        self.self_attn = PositionAwareSelfAttention(
            embed_dim,
            num_heads,
            dropout=attention_dropout,
            **attention_cfg.build_terms(embed_dim, num_heads, layer_index, shared_terms),
        )

    def forward(self, x, encoder_padding_mask, context):
        """``x``: ``[T, B, C]``; ``encoder_padding_mask``: ``[B, T]`` or None."""
        x = self.dropout_module(x)
        attended, _ = self.self_attn(x, key_padding_mask=encoder_padding_mask, context=context)
        return x + attended


class ResidualAttentionEncoder(PositionAwareEncoder):
    """:class:`PositionAwareEncoder` (embedding, position options, padding
    handling) whose layers are :class:`ResidualAttentionLayer`: dropout ->
    attention -> residual add, no feed-forward block, no layer norm.

    The embedding dropout is the first layer's input dropout, so the first
    layer adds none; later layers drop their input with ``cfg.dropout``.
    """

    def build_encoder_layer(self, cfg, layer_index: int):
        return ResidualAttentionLayer(
            cfg.encoder.embed_dim,
            cfg.encoder.attention_heads,
            input_dropout=cfg.dropout if layer_index > 0 else 0.0,
            attention_dropout=cfg.attention_dropout,
            attention_cfg=self.attention_cfg,
            layer_index=layer_index,
            shared_terms=self.shared_terms,
        )
