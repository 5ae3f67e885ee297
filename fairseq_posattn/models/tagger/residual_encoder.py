"""An encoder of attention-only residual layers (Dufter et al. 2020)."""

from ..modules.encoder_layer import ResidualAttentionLayer
from .encoder import PositionAwareEncoder


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
        )
