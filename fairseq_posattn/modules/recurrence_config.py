"""The encoder's recurrent options (Hao et al. 2019): K (ON-)LSTM layers and
the fairseq ``--encoder-layers`` self-attention layers, stacked in either
order, with the short-cut of Eq. 10."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum

from ..kernels import manual
from . import kernel_choice
from .attention_config import ATTENTION_LAYERS, EncoderOptions, Need
from .quant_noise import check_block_size

CELL_CHOICES = ChoiceEnum(["onlstm", "lstm"])
ORDER_CHOICES = ChoiceEnum(["recurrent-first", "attention-first"])
KERNEL_CHOICES = ChoiceEnum(list(manual.OPTIONS[manual.RECURRENCE]))

RECURRENT_LAYERS = Need("recurrent layers (--encoder-recurrent-layers > 0)",
                        lambda o: o.encoder_recurrent_layers > 0, ("encoder_recurrent_layers",))
ONLSTM = Need("--encoder-recurrent-cell onlstm", lambda o: o.encoder_recurrent_cell == "onlstm",
              ("encoder_recurrent_cell",))


@dataclass
class RecurrenceConfig(EncoderOptions):
    encoder_recurrent_layers: int = field(default=0, metadata={
        "help": "K recurrent encoder layers (Hao et al. 2019) besides the --encoder-layers self-attention "
                "layers; 0 = a plain SAN encoder"})
    encoder_recurrent_cell: CELL_CHOICES = field(default="onlstm", metadata={
        "help": "recurrent cell: onlstm (ordered neurons, Shen et al. 2019) or lstm",
        "needs": (RECURRENT_LAYERS,)})
    encoder_recurrent_hidden_dim: Optional[int] = field(default=None, metadata={
        "help": "hidden units per direction (default: --encoder-embed-dim)",
        "needs": (RECURRENT_LAYERS,)})
    encoder_recurrent_unidirectional: bool = field(default=False, metadata={
        "help": "left-to-right recurrent layers (default: bidirectional)",
        "needs": (RECURRENT_LAYERS,)})
    encoder_onlstm_chunk_size: int = field(default=1, metadata={
        "help": "ON-LSTM master-gate chunk size (neurons per master unit)",
        "needs": (RECURRENT_LAYERS, ONLSTM)})
    encoder_stack_order: ORDER_CHOICES = field(default="recurrent-first", metadata={
        "help": "recurrent-first: K recurrent layers, then the SAN layers on their output (the paper's "
                "cascade); attention-first: the reverse (its Table 2 row 2)",
        "needs": (RECURRENT_LAYERS, ATTENTION_LAYERS)})
    encoder_shortcut: bool = field(default=False, metadata={
        "help": "Eq. 10 short-cut: the encoder output is the sum of the recurrent and the SAN stacks' outputs"})
    encoder_recurrent_kernel: KERNEL_CHOICES = field(default="auto", metadata={
        "help": manual.help_text(manual.RECURRENCE), "parse": kernel_choice.parse_option(manual.RECURRENCE),
        "needs": (RECURRENT_LAYERS, ONLSTM)})

    def hidden_dim(self, embed_dim: int) -> int:
        return self.encoder_recurrent_hidden_dim or embed_dim

    def check(self, embed_dim: int, attention_layers: int, position_embedding: str,
              quant_noise_block_size: int = 0, quant_noise_scalar: float = 0.0,
              layers_to_keep: Optional[str] = None) -> None:
        """Refuse, at build time, combinations that cannot work; name the flags.

        The last three are fairseq's per-layer flags as they reach the recurrent
        layers: ``--quant-noise-pq-block-size`` when ``--quant-noise-pq`` is on
        (0: off), ``--quant-noise-scalar`` and ``--encoder-layers-to-keep``.
        """
        layers = self.encoder_recurrent_layers
        if layers < 0:
            raise ValueError(f"--encoder-recurrent-layers must be >= 0, got {layers}")
        if layers == 0 and attention_layers == 0:
            raise ValueError("--encoder-layers 0 and --encoder-recurrent-layers 0 leave the encoder without layers")
        if self.encoder_shortcut and (layers == 0 or attention_layers == 0):
            raise ValueError(
                f"--encoder-shortcut adds the recurrent and the self-attention stacks' outputs, but "
                f"--encoder-recurrent-layers is {layers} and --encoder-layers is {attention_layers}"
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
        if layers == 0:
            return
        cells = "the %s layers" % {"onlstm": "ON-LSTM", "lstm": "LSTM"}[self.encoder_recurrent_cell]
        if layers_to_keep:
            raise ValueError(
                f"--encoder-layers-to-keep prunes the self-attention layers only (fairseq "
                f"prunes encoder.layers.N); {cells} (--encoder-recurrent-layers {layers}) cannot be pruned"
            )
        if quant_noise_scalar > 0:
            raise ValueError(
                f"--quant-noise-scalar: fairseq's scalar quantization replaces nn.Linear, "
                f"nn.Embedding and nn.Conv2d modules, so the recurrent weights of {cells} "
                f"would stay unquantized; use --quant-noise-pq"
            )
        # the output projection's D * hidden input features follow from the hidden size's
        check_block_size(quant_noise_block_size, [(f"input weights (--encoder-embed-dim) of {cells}", embed_dim),
                                                  (f"recurrent weights (--encoder-recurrent-hidden-dim) of {cells}",
                                                   hidden)])

    @property
    def recurrent_first(self) -> bool:
        return self.encoder_stack_order == "recurrent-first"
