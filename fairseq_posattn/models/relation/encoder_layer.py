"""The self-attention layer variant of Bilan & Roth (2018, Sec. 3.1.2), after
Roth et al. (2018): one residual connection from the layer input to the last
normalisation, batch instead of layer normalisation, RReLU in the
feed-forward block, Kaiming initialisation of the query/key/value matrices.

Each is an option; with all off the layer is fairseq's post-norm encoder
layer (:class:`PositionAwareEncoderLayer`, same parameters, same function)::

    per-sublayer residuals:  x = N1(x + drop(att(x)));  x = N2(x + drop(ffn(x)))
    single residual:         y = N1(drop(att(x)));      x = N2(x + drop(ffn(y)))

(the second is the authors' published layer: the attention output is
normalised without a residual, the block input joins after the
feed-forward part).
"""

from dataclasses import dataclass

import torch
from torch import nn

from ...modules.encoder_layer import PositionAwareEncoderLayer


@dataclass
class RelationLayerOptions:
    norm: str = "layer"  # "layer" or "batch"
    residual: str = "per-sublayer"  # or "single"
    activation: str = "fairseq"  # fairseq's --activation-fn, or "rrelu"
    init: str = "xavier"  # or "kaiming" (query, key and value matrices)


class MaskedBatchNorm(nn.BatchNorm1d):
    """Batch normalisation over the real tokens of a ``[T, B, C]`` batch.

    Statistics (in training) come from non-pad positions only, so padding
    never changes a real token's output; pad positions come out as 0.
    """

    def forward(self, x, padding_mask=None):
        """``x``: ``[T, B, C]``; ``padding_mask``: ``[B, T]`` (True at pads) or None."""
        if padding_mask is None:
            return super().forward(x.reshape(-1, x.size(-1))).view_as(x)
        real = ~padding_mask.t()
        out = torch.zeros_like(x)
        out[real] = super().forward(x[real])
        return out


class RelationEncoderLayer(PositionAwareEncoderLayer):
    """Post-norm encoder layer with the options of :class:`RelationLayerOptions`."""

    def __init__(self, cfg, attention_cfg, layer_index: int, options: RelationLayerOptions, shared_terms=None):
        if cfg.encoder.normalize_before:
            raise ValueError("the relation classifier's encoder layer is post-norm: drop --encoder-normalize-before")
        self.options = options
        super().__init__(cfg, attention_cfg, layer_index, shared_terms)
        if options.norm == "batch":
            self.self_attn_layer_norm = MaskedBatchNorm(self.embed_dim)
            self.final_layer_norm = MaskedBatchNorm(self.embed_dim)
        if options.activation == "rrelu":
            self.activation_fn = nn.RReLU()
        if options.init == "kaiming":
            for projection in (self.self_attn.q_proj, self.self_attn.k_proj, self.self_attn.v_proj):
                nn.init.kaiming_normal_(projection.weight)

    def _normalize(self, norm, x, padding_mask):
        return norm(x, padding_mask) if self.options.norm == "batch" else norm(x)

    def forward(self, x, encoder_padding_mask, context):
        """``x``: ``[T, B, C]``; ``encoder_padding_mask``: ``[B, T]`` or None."""
        layer_input = x
        x, _ = self.self_attn(x, key_padding_mask=encoder_padding_mask, context=context)
        x = self.dropout_module(x)
        if self.options.residual == "per-sublayer":
            x = x + layer_input
        x = self._normalize(self.self_attn_layer_norm, x, encoder_padding_mask)

        residual = x if self.options.residual == "per-sublayer" else layer_input
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.dropout_module(self.fc2(x))
        return self._normalize(self.final_layer_norm, x + residual, encoder_padding_mask)
