"""The encoder's recurrent options (Hao et al. 2019): K (ON-)LSTM layers and
the fairseq ``--encoder-layers`` self-attention layers, stacked in either
order, with the short-cut of Eq. 10."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum

from .attention_config import EncoderOptions

CELL_CHOICES = ChoiceEnum(["onlstm", "lstm"])
ORDER_CHOICES = ChoiceEnum(["recurrent-first", "attention-first"])


@dataclass
class RecurrenceConfig(EncoderOptions):
    encoder_recurrent_layers: int = field(
        default=0,
        metadata={
            "help": "K recurrent encoder layers (Hao et al. 2019) besides the "
            "--encoder-layers self-attention layers; 0 = a plain SAN encoder"
        },
    )
    encoder_recurrent_cell: CELL_CHOICES = field(
        default="onlstm",
        metadata={"help": "recurrent cell: onlstm (ordered neurons, Shen et al. 2019) or lstm"},
    )
    encoder_recurrent_hidden_dim: Optional[int] = field(
        default=None,
        metadata={"help": "hidden units per direction (default: --encoder-embed-dim)"},
    )
    encoder_recurrent_unidirectional: bool = field(
        default=False,
        metadata={"help": "left-to-right recurrent layers (default: bidirectional)"},
    )
    encoder_onlstm_chunk_size: int = field(
        default=1,
        metadata={"help": "ON-LSTM master-gate chunk size (neurons per master unit)"},
    )
    encoder_stack_order: ORDER_CHOICES = field(
        default="recurrent-first",
        metadata={
            "help": "recurrent-first: K recurrent layers, then the SAN layers on "
            "their output (the paper's cascade); attention-first: the reverse "
            "(its Table 2 row 2)"
        },
    )
    encoder_shortcut: bool = field(
        default=False,
        metadata={
            "help": "Eq. 10 short-cut: the encoder output is the sum of the "
            "recurrent and the SAN stacks' outputs"
        },
    )

    def hidden_dim(self, embed_dim: int) -> int:
        return self.encoder_recurrent_hidden_dim or embed_dim

    def check(self, embed_dim: int, attention_layers: int, position_embedding: str) -> None:
        """Refuse, at build time, combinations that cannot work; name the flags."""
        layers = self.encoder_recurrent_layers
        if layers < 0:
            raise ValueError(f"--encoder-recurrent-layers must be >= 0, got {layers}")
        if layers == 0 and attention_layers == 0:
            raise ValueError(
                "--encoder-layers 0 and --encoder-recurrent-layers 0 leave the encoder "
                "without layers"
            )
        if self.encoder_shortcut and (layers == 0 or attention_layers == 0):
            raise ValueError(
                f"--encoder-shortcut adds the recurrent and the self-attention stacks' "
                f"outputs, but --encoder-recurrent-layers is {layers} and "
                f"--encoder-layers is {attention_layers}"
            )
        hidden = self.hidden_dim(embed_dim)
        if self.encoder_onlstm_chunk_size < 1 or hidden % self.encoder_onlstm_chunk_size:
            raise ValueError(
                f"--encoder-onlstm-chunk-size {self.encoder_onlstm_chunk_size} must divide "
                f"the recurrent hidden size {hidden} (--encoder-recurrent-hidden-dim)"
            )
        if layers and self.recurrent_first and attention_layers and position_embedding == "concat":
            raise ValueError(
                "with recurrent layers first, position embeddings are added to the "
                "self-attention input: --encoder-position-embedding concat cannot widen it"
            )

    @property
    def recurrent_first(self) -> bool:
        return self.encoder_stack_order == "recurrent-first"
