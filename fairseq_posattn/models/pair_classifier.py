"""``sentence_pair_classifier``: two sentences, one shared position-aware
encoder, one relation label (the logical-inference evaluation of Hao et al.
2019, Sec. 3.3 and Fig. 1).

Both sentences go through the encoder in one batch and are pooled
(``--pooling``); ``--classifier-layers`` ReLU layers read ``[u; v; u*v;
|u-v|]``.  The interface is that of fairseq's ``sentence_prediction``
criterion.  Named architectures (Fig. 1: two hidden layers with the
short-cut, after Tran et al. 2018): ``logic_san``, ``logic_lstm``,
``logic_onlstm``, ``logic_onlstm_san`` (docs/evaluations.md).
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from torch import nn

from ..modules.options import EncoderOptions, Need
from ..modules.pooling import POOLING
from .encoder_only import HEAD_NAME, PositionAwareEncoderModel
from .transformer_posattn import _paper_row, _set_unset, transformer_posattn

CLASSIFIER_LAYERS = Need("hidden classifier layers (--classifier-layers > 0)",
                         lambda o: o.classifier_layers > 0, ("classifier_layers",))


@dataclass
class PairClassifierOptions(EncoderOptions):
    pooling: ChoiceEnum(sorted(POOLING)) = field(
        default="max", metadata={"help": "sentence vector from the encoder states"})
    classifier_layers: int = field(
        default=1, metadata={"help": "hidden ReLU layers of the pair classifier"})
    classifier_hidden_dim: Optional[int] = field(
        default=None, metadata={"help": "their width (default: --encoder-embed-dim)",
                                "needs": (CLASSIFIER_LAYERS,)})
    classifier_dropout: Optional[float] = field(
        default=None, metadata={"help": "dropout before each classifier layer (default: --dropout)"})


class PairClassificationHead(nn.Module):
    """``[u; v; u*v; |u-v|]`` -> ``layers`` x (dropout, linear, ReLU) -> dropout, linear."""

    def __init__(self, input_dim: int, hidden_dim: int, num_classes: int, layers: int, dropout: float):
        super().__init__()
        widths = [4 * input_dim] + [hidden_dim] * layers
        blocks = []
        for width_in, width_out in zip(widths, widths[1:]):
            blocks += [nn.Dropout(dropout), nn.Linear(width_in, width_out), nn.ReLU()]
        blocks += [nn.Dropout(dropout), nn.Linear(widths[-1], num_classes)]
        self.mlp = nn.Sequential(*blocks)

    def forward(self, u, v):
        return self.mlp(torch.cat([u, v, u * v, (u - v).abs()], dim=-1))


@register_model("sentence_pair_classifier")
class SentencePairClassifier(PositionAwareEncoderModel):
    """A shared :class:`PositionAwareEncoder` over both sentences, pooled, classified."""

    option_groups = (*PositionAwareEncoderModel.option_groups, PairClassifierOptions)

    def __init__(self, encoder, pooling: str, head: PairClassificationHead):
        super().__init__(encoder)
        self.pooling = pooling
        self.classification_heads = nn.ModuleDict({HEAD_NAME: head})

    @classmethod
    def build_model(cls, args, task):
        sentence_pair_classifier(args)
        encoder = cls.build_position_aware_encoder(args, task.source_dictionary)
        head = PairClassificationHead(args.encoder_embed_dim, args.classifier_hidden_dim, task.num_classes(),
                                      args.classifier_layers, args.classifier_dropout)
        return cls(encoder, args.pooling, head)

    def sentence_vectors(self, premise_tokens, hypothesis_tokens):
        """Pooled encodings ``[B, C]`` of both sentences, from one encoder pass."""
        width = max(premise_tokens.size(1), hypothesis_tokens.size(1))
        pad = self.encoder.padding_idx
        both = torch.cat([F.pad(t, (0, width - t.size(1)), value=pad) for t in (premise_tokens, hypothesis_tokens)])
        states, padding_mask = self.encode(both)
        vectors = POOLING[self.pooling](states, padding_mask)
        return vectors[: premise_tokens.size(0)], vectors[premise_tokens.size(0):]

    def forward(self, premise_tokens, hypothesis_tokens, features_only=True, classification_head_name=None):
        """Logits ``[B, classes]`` and an empty dict (``sentence_prediction``'s interface)."""
        u, v = self.sentence_vectors(premise_tokens, hypothesis_tokens)
        head = self.classification_heads[classification_head_name or HEAD_NAME]
        return head(u, v), {}


@register_model_architecture("sentence_pair_classifier", "sentence_pair_classifier")
def sentence_pair_classifier(args):
    """d=128, 4 heads, ffn 256, dropout 0.1, 2 self-attention layers, max pooling."""
    _set_unset(args, dict(encoder_embed_dim=128, encoder_ffn_embed_dim=256, encoder_attention_heads=4,
                          encoder_layers=2, dropout=0.1))
    PairClassifierOptions.set_defaults(args)
    _set_unset(args, dict(classifier_hidden_dim=args.encoder_embed_dim, classifier_dropout=args.dropout))
    transformer_posattn(args)


NO_POSITIONS = dict(encoder_position_embedding="none")  # the recurrence orders the tokens
LOGIC_ROWS = {
    "logic_san": dict(encoder_layers=2),
    "logic_lstm": dict(NO_POSITIONS, encoder_layers=0, encoder_recurrent_layers=2,
                       encoder_recurrent_cell="lstm"),
    "logic_onlstm": dict(NO_POSITIONS, encoder_layers=0, encoder_recurrent_layers=2,
                         encoder_recurrent_cell="onlstm"),
    "logic_onlstm_san": dict(NO_POSITIONS, encoder_layers=1, encoder_recurrent_layers=1,
                             encoder_recurrent_cell="onlstm", encoder_shortcut=True),
}


for _name, _options in LOGIC_ROWS.items():
    register_model_architecture("sentence_pair_classifier", _name)(_paper_row(_options, sentence_pair_classifier))
