"""The encoder's options, declared once: :class:`EncoderOptions`, the base of
every option group (fairseq flags from dataclass fields, checked on every route
by :mod:`fairseq_posattn.config_check`); :class:`Need`, what an option needs to
take effect; the position options (:class:`PositionAttentionConfig`, with the
factory of one layer's attention terms) and the recurrent options of Hao et al.
2019 (:class:`RecurrenceConfig`: K (ON-)LSTM layers and the ``--encoder-layers``
self-attention layers, stacked in either order, with the short-cut of Eq. 10)."""

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Tuple

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from torch import nn

from ..kernels import manual
from ..structure.batch import TreeInputs
from ..structure.tree import PARENT_ANCHORS
from . import kernel_choice
from .convolved_attention import ConvolvedAttention1d, ConvolvedAttention2d
from .direct_interactions import AbsolutePositionInteraction, RelativePositionInteraction
from .linear_biases import LinearDistanceBias
from .parent_scaling import ParentScaledLogits
from .quant_noise import check_block_size
from .relative_positions import QueryProjectedRelativeScores, RelativeKeys, RelativeValues
from .rotary import RotaryPositions
from .t5_bias import T5RelativeBias, check_buckets

POSITION_EMBEDDING_CHOICES = ChoiceEnum(["add", "concat", "none"])
INTERACTION_CHOICES = ChoiceEnum(["none", "P", "R", "PR"])
INTERACTION_LAYER_CHOICES = ChoiceEnum(["first", "all"])
OVERFLOW_CHOICES = ChoiceEnum(["error", "clamp"])
CONVOLUTION_CHOICES = ChoiceEnum(["none", "1d", "2d"])
STRUCTURAL_EMBEDDING_CHOICES = ChoiceEnum(["none", "fuse", "add"])
ATTENTION_KERNEL_CHOICES = ChoiceEnum(list(manual.OPTIONS[manual.ATTENTION]))
CELL_CHOICES = ChoiceEnum(["onlstm", "lstm"])
ORDER_CHOICES = ChoiceEnum(["recurrent-first", "attention-first"])
RECURRENT_KERNEL_CHOICES = ChoiceEnum(list(manual.OPTIONS[manual.RECURRENCE]))
PASCAL_LAYER_CHOICES = ChoiceEnum(["first", "all"])
PARENT_ANCHOR_CHOICES = ChoiceEnum(list(PARENT_ANCHORS))


def plain(value):
    """An option's value as the command line and a checkpoint give it: fairseq's choice enums as strings."""
    return value.value if isinstance(value, Enum) else value


@dataclass(frozen=True)
class Need:
    """What an option needs to take effect, declared in its field's metadata
    (``"needs": (Need, ...)``) and checked when the model is built
    (:func:`fairseq_posattn.config_check.refuse_inert`): ``condition`` in
    flags, met when ``met(options)`` is true of the model's options (every
    group's, filled in by the architecture); a refusal shows the values of
    the options named in ``shown``."""
    condition: str
    met: Callable[[Any], bool]
    shown: Tuple[str, ...]


ATTENTION_LAYERS = Need("self-attention layers (--encoder-layers > 0)", lambda o: o.encoder_layers > 0,
                        ("encoder_layers",))
SEVERAL_ATTENTION_LAYERS = Need("more than one self-attention layer (--encoder-layers > 1)",
                                lambda o: o.encoder_layers > 1, ("encoder_layers",))
CONCAT = Need("--encoder-position-embedding concat", lambda o: o.encoder_position_embedding == "concat",
              ("encoder_position_embedding",))
INTERACTIONS = Need("--position-interactions P, R or PR", lambda o: o.position_interactions != "none",
                    ("position_interactions",))
TABLES = Need("--position-interactions or --convolved-attention 1d, whose tables have --interaction-max-len "
              "positions", lambda o: PositionAttentionConfig.from_namespace(o).uses_position_tables(),
              ("position_interactions", "convolved_attention"))
TABLES_OR_QUERY_CLIP = Need(
    "--position-interactions, --convolved-attention 1d, or --query-relative-positions without "
    "--query-relative-clip", lambda o: PositionAttentionConfig.from_namespace(o).uses_interaction_max_len(),
    ("position_interactions", "convolved_attention", "query_relative_positions", "query_relative_clip"))
RELATIVE = Need("--relative-positions", lambda o: o.relative_positions, ("relative_positions",))
ANY_RELATIVE = Need("--relative-positions or --structural-relative-positions",
                    lambda o: o.relative_positions or o.structural_relative_positions,
                    ("relative_positions", "structural_relative_positions"))
QUERY_RELATIVE = Need("--query-relative-positions", lambda o: o.query_relative_positions,
                      ("query_relative_positions",))
STRUCTURAL_RELATIVE = Need("--structural-relative-positions", lambda o: o.structural_relative_positions,
                           ("structural_relative_positions",))
TREE_OPTIONS = ("structural_position_embedding", "structural_relative_positions", "dependency_distance_bias",
                "pascal_heads")  # the options that make an encoder read dependency trees
TREES = Need("a model that reads dependency trees (--structural-position-embedding fuse or add, "
             "--structural-relative-positions, --dependency-distance-bias or --pascal-heads)",
             lambda o: PositionAttentionConfig.from_namespace(o).uses_structure(), TREE_OPTIONS)
ROTARY = Need("--rotary-positions", lambda o: o.rotary_positions, ("rotary_positions",))
T5 = Need("--t5-relative-bias", lambda o: o.t5_relative_bias, ("t5_relative_bias",))
PASCAL = Need("--pascal-heads > 0", lambda o: o.pascal_heads > 0, ("pascal_heads",))
RECURRENT_LAYERS = Need("recurrent layers (--encoder-recurrent-layers > 0)",
                        lambda o: o.encoder_recurrent_layers > 0, ("encoder_recurrent_layers",))
ONLSTM = Need("--encoder-recurrent-cell onlstm", lambda o: o.encoder_recurrent_cell == "onlstm",
              ("encoder_recurrent_cell",))


@dataclass
class EncoderOptions(FairseqDataclass):
    """An option group of the plugin's models: fairseq flags from its fields
    (checked on every route: :mod:`fairseq_posattn.config_check`), filled
    from an argparse namespace (legacy architectures) or defaults."""

    @classmethod
    def option_fields(cls):
        return [f for f in fields(cls) if not f.name.startswith("_")]

    def __post_init__(self):
        # choices arrive as fairseq's enum members or as plain strings
        for f in self.option_fields():
            setattr(self, f.name, plain(getattr(self, f.name)))

    @classmethod
    def add_args(cls, parser) -> None:
        """The options as fairseq flags.  One whose metadata names a ``parse``
        function takes it as its type (a refusal that names the value), added
        before fairseq's generator, which leaves a flag already added as it is."""
        for f in cls.option_fields():
            if "parse" in f.metadata:
                parser.add_argument("--" + f.name.replace("_", "-"), type=f.metadata["parse"],
                                    choices=[choice.value for choice in f.type], help=f.metadata["help"])
        gen_parser_from_dataclass(parser, cls(), delete_default=True)

    @classmethod
    def from_namespace(cls, args):
        return cls(**{f.name: getattr(args, f.name, f.default) for f in cls.option_fields()})

    @classmethod
    def set_defaults(cls, args, leave_unset=()) -> None:
        """Fill the options the command line and the architecture left unset,
        except those named in ``leave_unset`` (None, for ``build_model`` to settle)."""
        for f in cls.option_fields():
            if getattr(args, f.name, None) is None:
                setattr(args, f.name, None if f.name in leave_unset else f.default)


@dataclass
class PositionAttentionConfig(EncoderOptions):
    encoder_position_embedding: POSITION_EMBEDDING_CHOICES = field(default="add", metadata={
        "help": "how the encoder's position embeddings meet the token embeddings: add (PE[add]), concat "
                "(PE[con], Dufter et al. 2020) or none"})
    encoder_position_concat_dim: Optional[int] = field(default=None, metadata={
        "help": "width of the concatenated position embedding (PE[con]); token embeddings get "
                "--encoder-embed-dim minus this (default: a quarter)",
        "needs": (CONCAT,)})
    position_interactions: INTERACTION_CHOICES = field(default="none", metadata={
        "help": "Dufter et al. 2020 direct position interactions added to the logits: P (absolute t x t per "
                "head), R (relative a_{i-j+t}), PR (both)",
        "needs": (ATTENTION_LAYERS,)})
    position_interaction_layers: INTERACTION_LAYER_CHOICES = field(default="first", metadata={
        "help": "encoder layers that get P/R: the first (paper) or all",
        "needs": (INTERACTIONS, SEVERAL_ATTENTION_LAYERS)})
    interaction_max_len: int = field(default=256, metadata={
        "help": "t, the number of positions of the P, R and conv1d tables (must cover --max-source-positions "
                "unless --interaction-overflow clamp)",
        "needs": (ATTENTION_LAYERS, TABLES_OR_QUERY_CLIP)})
    interaction_overflow: OVERFLOW_CHOICES = field(default="error", metadata={
        "help": "inputs longer than --interaction-max-len: error, or clamp (positions past t share the last "
                "row/column, distances the outermost entry)",
        "needs": (ATTENTION_LAYERS, TABLES)})
    learnable_temperature: bool = field(default=False, metadata={
        "help": "Dufter et al. 2020: per-head scalars gamma_q, gamma_k, gamma_v (initialised to 1) multiplying "
                "the query, key and value projections",
        "needs": (ATTENTION_LAYERS,)})
    convolved_attention: CONVOLUTION_CHOICES = field(default="none", metadata={
        "help": "Dufter et al. 2020 convolution of softmax(A) in every encoder layer: 1d (t width-3 filters "
                "along the query axis) or 2d (one 3x3 filter per head)",
        "needs": (ATTENTION_LAYERS,)})
    relative_positions: bool = field(default=False, metadata={
        "help": "Shaw et al. 2018 relative position keys and values in every encoder layer (sequential "
                "positions)",
        "needs": (ATTENTION_LAYERS,)})
    max_relative_position: int = field(default=16, metadata={
        "help": "clip distance k of --relative-positions", "needs": (ATTENTION_LAYERS, RELATIVE)})
    no_relative_values: bool = field(default=False, metadata={
        "help": "Shaw relative keys only, no a^V term (sequential and structural)",
        "needs": (ATTENTION_LAYERS, ANY_RELATIVE)})
    query_relative_positions: bool = field(default=False, metadata={
        "help": "Bilan & Roth 2018 relative scores r_i . m_{j-i} with their own query projection W^r, in every "
                "encoder layer",
        "needs": (ATTENTION_LAYERS,)})
    query_relative_clip: Optional[int] = field(default=None, metadata={
        "help": "largest distance with its own m vector for --query-relative-positions (default: "
                "--interaction-max-len minus 1)",
        "needs": (ATTENTION_LAYERS, QUERY_RELATIVE)})
    structural_position_embedding: STRUCTURAL_EMBEDDING_CHOICES = field(default="none", metadata={
        "help": "Wang et al. 2019 absolute structural positions: the sinusoid of each token's dependency-tree "
                "depth, fused with the sequential position embedding by a learned tanh layer (fuse, Eq. 7) or "
                "added (add); needs --task translation_struct"})
    structural_relative_positions: bool = field(default=False, metadata={
        "help": "Wang et al. 2019 relative structural positions as Shaw relative keys and values in every "
                "encoder layer; needs --task translation_struct",
        "needs": (ATTENTION_LAYERS,)})
    max_structural_relative_position: int = field(default=16, metadata={
        "help": "clip distance r of --structural-relative-positions",
        "needs": (ATTENTION_LAYERS, STRUCTURAL_RELATIVE)})
    rotary_positions: bool = field(default=False, metadata={
        "help": "Su et al. 2021 (RoFormer, Eq. 34) rotary position embeddings: queries and keys of every encoder "
                "layer rotated pairwise by their positions",
        "needs": (ATTENTION_LAYERS,)})
    rotary_base: float = field(default=10000.0, metadata={
        "help": "the base of --rotary-positions' angles theta_i = base^(-2(i-1)/d_h) (RoFormer Eq. 15)",
        "needs": (ATTENTION_LAYERS, ROTARY)})
    alibi: bool = field(default=False, metadata={
        "help": "Press et al. 2022 (ALiBi, Sec. 3) linear biases -m_h |i - j| on the logits of every encoder "
                "layer, symmetric, no parameters",
        "needs": (ATTENTION_LAYERS,)})
    t5_relative_bias: bool = field(default=False, metadata={
        "help": "Raffel et al. 2020 (T5, Sec. 2.1) relative attention bias: a learned scalar per head and "
                "bucket of j - i on the logits, one table shared by every encoder layer",
        "needs": (ATTENTION_LAYERS,)})
    t5_bias_buckets: int = field(default=32, metadata={
        "help": "buckets of --t5-relative-bias (half per direction; even, at least 4)",
        "needs": (ATTENTION_LAYERS, T5)})
    t5_bias_max_distance: int = field(default=128, metadata={
        "help": "distance of --t5-relative-bias beyond which the last bucket of a direction holds",
        "needs": (ATTENTION_LAYERS, T5)})
    dependency_distance_bias: bool = field(default=False, metadata={
        "help": "ALiBi's bias with the number of dependency arcs between the two tokens' words in place of "
                "|i - j| (pieces of one word: 0), in every encoder layer; needs --task translation_struct",
        "needs": (ATTENTION_LAYERS,)})
    pascal_heads: int = field(default=0, metadata={
        "help": "Bugliarello & Okazaki 2020 (PASCAL, Sec. 3): the last N heads of each --pascal-layers layer "
                "multiply their logits by the normal density around the token's dependency parent; 0: off; "
                "needs --task translation_struct",
        "needs": (ATTENTION_LAYERS,)})
    pascal_layers: PASCAL_LAYER_CHOICES = field(default="first", metadata={
        "help": "encoder layers with --pascal-heads: the first (the paper's WMT16 setting) or all",
        "needs": (PASCAL, SEVERAL_ATTENTION_LAYERS)})
    pascal_sigma: float = field(default=1.0, metadata={
        "help": "standard deviation of PASCAL's normal density over key positions",
        "needs": (ATTENTION_LAYERS, PASCAL)})
    pascal_anchor: PARENT_ANCHOR_CHOICES = field(default="mean", metadata={
        "help": "where PASCAL places a parent word split into pieces: mean (the middle of its pieces) or "
                "root (its first piece), both as Bugliarello & Okazaki (2020, Sec. 3) define them",
        "needs": (ATTENTION_LAYERS, PASCAL)})
    encoder_attention_kernel: ATTENTION_KERNEL_CHOICES = field(default="auto", metadata={
        "help": manual.help_text(manual.ATTENTION), "parse": kernel_choice.parse_option(manual.ATTENTION),
        "needs": (ATTENTION_LAYERS,)})

    def tree_inputs(self) -> TreeInputs:
        """The tree inputs of ``translation_struct`` that the encoder reads."""
        return TreeInputs(depths=self.structural_position_embedding != "none",
                          structural_positions=self.structural_relative_positions,
                          tree_distances=self.dependency_distance_bias,
                          parent_anchor=self.pascal_anchor if self.pascal_heads else None)

    def uses_structure(self) -> bool:
        """True if the encoder needs the tree inputs of ``translation_struct``."""
        return bool(self.tree_inputs())

    def pascal_layer(self, layer_index: int) -> bool:
        return self.pascal_heads > 0 and (layer_index == 0 or self.pascal_layers == "all")

    def uses_position_tables(self) -> bool:
        return self.position_interactions != "none" or self.convolved_attention == "1d"

    def uses_interaction_max_len(self) -> bool:
        """True if t sizes a table: P, R, conv1d, or Bilan & Roth's m vectors without their own clip."""
        return self.uses_position_tables() or (self.query_relative_positions
                                               and self.query_relative_clip is None)

    def check(self, embed_dim: int, num_heads: int, max_source_positions: int, share_all_embeddings: bool,
              learned_pos: bool = False, no_token_positional_embeddings: bool = False) -> None:
        """Refuse, at build time, combinations that cannot work; name the flags.

        ``num_heads`` is ``--encoder-attention-heads``; ``learned_pos`` and
        ``no_token_positional_embeddings`` are fairseq's
        ``--encoder-learned-pos`` and ``--no-token-positional-embeddings``.
        """
        if learned_pos and no_token_positional_embeddings:
            raise ValueError(
                "--encoder-learned-pos makes the encoder's position embeddings learned, but "
                "--no-token-positional-embeddings removes them: pass one of the two"
            )
        if learned_pos and self.encoder_position_embedding == "none":
            raise ValueError(
                "--encoder-learned-pos makes the encoder's position embeddings learned, but it "
                "has none (--encoder-position-embedding none, as in transformer_posattn_p, _r, "
                "_pr and the hybrids whose recurrent layers come first): drop the flag, or add "
                "learned positions with --encoder-position-embedding add"
            )
        if no_token_positional_embeddings and self.encoder_position_embedding == "concat":
            raise ValueError(
                "--no-token-positional-embeddings would remove the position embeddings that "
                "--encoder-position-embedding concat appends to the narrowed token embeddings: "
                "use --encoder-position-embedding none instead"
            )
        if self.encoder_position_embedding == "concat":
            width = self.position_concat_dim(embed_dim)
            if not 0 < width < embed_dim:
                raise ValueError(
                    f"--encoder-position-concat-dim {width} must be between 1 and "
                    f"--encoder-embed-dim - 1 ({embed_dim - 1})"
                )
            if share_all_embeddings:
                raise ValueError(
                    "--encoder-position-embedding concat narrows the source token "
                    "embeddings, so it cannot be combined with --share-all-embeddings"
                )
        if self.structural_position_embedding != "none" and self.encoder_position_embedding == "concat":
            raise ValueError(
                "--structural-position-embedding works with --encoder-position-embedding "
                "add or none, not concat"
            )
        if self.interaction_max_len < 1:
            raise ValueError("--interaction-max-len must be at least 1")
        if (self.uses_position_tables() and self.interaction_overflow == "error"
                and self.interaction_max_len < max_source_positions):
            raise ValueError(
                f"--interaction-max-len {self.interaction_max_len} is smaller than --max-source-positions "
                f"{max_source_positions}, so the --position-interactions/--convolved-attention 1d tables cannot "
                f"cover every input: pass --max-source-positions {self.interaction_max_len}, a larger "
                f"--interaction-max-len, or --interaction-overflow clamp"
            )
        for flag, value in (
            ("--max-relative-position", self.max_relative_position),
            ("--max-structural-relative-position", self.max_structural_relative_position),
            ("--query-relative-clip", self.relative_clip()),
        ):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        self.check_methods(embed_dim, num_heads)

    def check_methods(self, embed_dim: int, num_heads: int) -> None:
        """Refuse values of the rotary, T5 and PASCAL options that cannot work."""
        head_dim = embed_dim // num_heads
        if self.rotary_positions and head_dim % 2:
            raise ValueError(f"--rotary-positions rotates pairs of dimensions, but a head has {head_dim} "
                             f"(--encoder-embed-dim {embed_dim} / --encoder-attention-heads {num_heads}): choose "
                             "an even head dimension")
        if not self.rotary_base > 1:
            raise ValueError(f"--rotary-base must be above 1, got {self.rotary_base}")
        check_buckets(self.t5_bias_buckets, self.t5_bias_max_distance)
        if not 0 <= self.pascal_heads <= num_heads:
            raise ValueError(f"--pascal-heads {self.pascal_heads} must be between 0 (off) and "
                             f"--encoder-attention-heads {num_heads}")
        if not self.pascal_sigma > 0:
            raise ValueError(f"--pascal-sigma must be positive, got {self.pascal_sigma}")

    def position_concat_dim(self, embed_dim: int) -> int:
        return embed_dim // 4 if self.encoder_position_concat_dim is None else self.encoder_position_concat_dim

    def relative_clip(self) -> int:
        return self.interaction_max_len - 1 if self.query_relative_clip is None else self.query_relative_clip

    def build_terms(self, embed_dim: int, num_heads: int, layer_index: int,
                    shared: Optional[Dict[str, nn.Module]] = None) -> Dict:
        """Keyword arguments of :class:`PositionAwareSelfAttention` for one layer.  ``shared``: the terms
        that every layer of one encoder shares (T5's table), made by the first layer that asks; None: its own."""
        shared = {} if shared is None else shared
        head_dim = embed_dim // num_heads
        t, overflow = self.interaction_max_len, self.interaction_overflow
        rotation_terms: List[nn.Module] = []
        logit_scaling_terms: List[nn.Module] = []
        score_terms: List[nn.Module] = []
        probability_terms: List[nn.Module] = []
        value_terms: List[nn.Module] = []
        if self.rotary_positions:
            rotation_terms.append(RotaryPositions(head_dim, self.rotary_base))
        if self.pascal_layer(layer_index):
            logit_scaling_terms.append(ParentScaledLogits(num_heads, range(num_heads - self.pascal_heads, num_heads),
                                                          self.pascal_sigma))
        if layer_index == 0 or self.position_interaction_layers == "all":
            if self.position_interactions in ("P", "PR"):
                score_terms.append(AbsolutePositionInteraction(num_heads, t, overflow))
            if self.position_interactions in ("R", "PR"):
                score_terms.append(RelativePositionInteraction(num_heads, t, overflow))
        for on, clip, positions in (
            (self.relative_positions, self.max_relative_position, "sequential"),
            (self.structural_relative_positions, self.max_structural_relative_position, "structural"),
        ):
            if on:
                score_terms.append(RelativeKeys(head_dim, clip, positions))
                if not self.no_relative_values:
                    value_terms.append(RelativeValues(head_dim, clip, positions))
        if self.query_relative_positions:
            score_terms.append(QueryProjectedRelativeScores(embed_dim, num_heads, self.relative_clip()))
        if self.alibi:
            score_terms.append(LinearDistanceBias(num_heads, "sequential"))
        if self.dependency_distance_bias:
            score_terms.append(LinearDistanceBias(num_heads, "tree_distance"))
        if self.t5_relative_bias:
            if "t5" not in shared:
                shared["t5"] = T5RelativeBias(embed_dim, num_heads, self.t5_bias_buckets, self.t5_bias_max_distance)
            score_terms.append(shared["t5"])
        if self.convolved_attention == "1d":
            probability_terms.append(ConvolvedAttention1d(num_heads, t, overflow))
        elif self.convolved_attention == "2d":
            probability_terms.append(ConvolvedAttention2d(num_heads))
        return dict(learnable_temperature=self.learnable_temperature, rotation_terms=rotation_terms,
                    logit_scaling_terms=logit_scaling_terms, score_terms=score_terms,
                    probability_terms=probability_terms, value_terms=value_terms,
                    kernel=self.encoder_attention_kernel)


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
    encoder_recurrent_kernel: RECURRENT_KERNEL_CHOICES = field(default="auto", metadata={
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
