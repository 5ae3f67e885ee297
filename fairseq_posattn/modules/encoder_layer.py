"""fairseq's Transformer encoder layer around :class:`PositionAwareSelfAttention`."""

from typing import Dict, Optional

from fairseq.modules.quant_noise import quant_noise
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import nn

from .attention import PositionAwareSelfAttention
from .options import PositionAttentionConfig


class PositionAwareEncoderLayer(TransformerEncoderLayerBase):
    """Post- or pre-norm attention + feed-forward block (Vaswani et al. 2017, Sec. 3.1).

    Parameters carry the names of fairseq's ``TransformerEncoderLayerBase``;
    only the self-attention differs, and only when a position option is on.
    """

    def __init__(self, cfg, attention_cfg: PositionAttentionConfig, layer_index: int,
                 shared_terms: Optional[Dict[str, nn.Module]] = None):
        self.attention_cfg = attention_cfg
        self.layer_index = layer_index
        self.shared_terms = shared_terms  # PositionAttentionConfig.build_terms's
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        """The attention with its position terms; fairseq's quant noise
        (``--quant-noise-pq``) on its projections and on the terms' own
        (Bilan & Roth's query projection ``W^r``)."""
        heads = cfg.encoder.attention_heads
        attention = PositionAwareSelfAttention(
            embed_dim,
            heads,
            dropout=cfg.attention_dropout,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            **self.attention_cfg.build_terms(embed_dim, heads, self.layer_index, self.shared_terms),
        )
        for module in attention.score_terms.modules():
            if isinstance(module, nn.Linear):
                quant_noise(module, self.quant_noise, self.quant_noise_block_size)
        return attention

    def forward(self, x, encoder_padding_mask, context):
        """``x``: ``[T, B, C]``; ``encoder_padding_mask``: ``[B, T]`` or None."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, key_padding_mask=encoder_padding_mask, context=context)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.dropout_module(self.fc2(x))
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x
