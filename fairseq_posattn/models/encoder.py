"""The encoder: position-aware self-attention layers, optionally with
(ON-)LSTM layers before or after them (Hao et al. 2019)."""

import logging
import math
from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import FairseqEncoder
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.modules import FairseqDropout, LayerDropModuleList, LayerNorm, PositionalEmbedding
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..kernels.manual import ATTENTION, RECURRENCE
from ..modules.attention import PositionAwareSelfAttention
from ..modules.attention_context import AttentionContext, gather_time, right_padding_order
from ..modules.encoder_layer import PositionAwareEncoderLayer
from ..modules.kernel_choice import describe, layer_terms
from ..modules.quant_noise import quant_noise_on
from ..modules.options import PositionAttentionConfig, RecurrenceConfig
from ..modules.recurrent import RecurrentLayer
from ..modules.structural_positions import DepthEmbedding, PositionFusion
from ..structure.batch import TreeInputs


logger = logging.getLogger(__name__)


def update_batch_norm_statistics_once(layer: nn.Module) -> None:
    """Under fairseq's ``checkpoint_wrapper`` a training forward runs twice
    (without gradients, then in the backward): the layer's batch
    normalisations skip their running statistics in the first, so that they
    move once per step (as fairscale's ``patch_batchnorm`` does)."""

    def pause(norm, inputs):
        if not torch.is_grad_enabled():
            norm.tracking_before_pause, norm.track_running_stats = norm.track_running_stats, False

    def resume(norm, inputs, output):
        if not torch.is_grad_enabled():
            norm.track_running_stats = norm.tracking_before_pause

    for module in layer.modules():
        if isinstance(module, _BatchNorm):
            module.register_forward_pre_hook(pause)
            module.register_forward_hook(resume)


class PositionAwareEncoder(FairseqEncoder):
    """fairseq's Transformer encoder, with the position options of
    :class:`PositionAttentionConfig` and the recurrent layers of
    :class:`RecurrenceConfig`.

    Parameter names, input and output follow fairseq's
    ``TransformerEncoderBase`` (with every option off it computes the same
    function and loads the same state dict).  Inside, the batch is right-padded
    so that column ``j`` is token position ``j`` for every term and every
    recurrent layer starts at a sentence's first token.  Position embeddings
    (if any) enter the self-attention stack: at the embedding, or at the
    recurrent stack's output when that comes first.  fairseq's per-layer
    flags act on both kinds of layer.
    """

    # the output dictionary has fairseq's layout, so fairseq's reordering applies
    reorder_encoder_out = TransformerEncoderBase.reorder_encoder_out

    def __init__(self, cfg: TransformerConfig, attention_cfg: PositionAttentionConfig, dictionary,
                 embed_tokens: nn.Embedding, recurrence_cfg: Optional[RecurrenceConfig] = None):
        super().__init__(dictionary)
        self.cfg = cfg
        self.attention_cfg = attention_cfg
        self.recurrence_cfg = recurrence_cfg = recurrence_cfg or RecurrenceConfig()
        self.register_buffer("version", torch.Tensor([3]))
        self.dropout_module = FairseqDropout(cfg.dropout, module_name="TransformerEncoder")
        self.encoder_layerdrop = cfg.encoder.layerdrop

        embed_dim = cfg.encoder.embed_dim
        self.padding_idx = embed_tokens.padding_idx
        self.max_source_positions = cfg.max_source_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(embed_tokens.embedding_dim)
        self.embed_positions = self._build_positions(cfg, attention_cfg, self.padding_idx)
        self.embed_depths = self.position_fusion = None
        if attention_cfg.structural_position_embedding != "none":
            self.embed_depths = DepthEmbedding(embed_dim, cfg.max_source_positions, self.padding_idx)
            if attention_cfg.structural_position_embedding == "fuse" and self.embed_positions:
                self.position_fusion = PositionFusion(embed_dim)
        self.layernorm_embedding = LayerNorm(embed_dim, export=cfg.export) if cfg.layernorm_embedding else None
        self.quant_noise = None
        if not cfg.adaptive_input and cfg.quant_noise.pq > 0:
            self.quant_noise = apply_quant_noise(nn.Linear(embed_dim, embed_dim, bias=False), cfg.quant_noise.pq,
                                                 cfg.quant_noise.pq_block_size)

        self.shared_terms = {}  # terms every self-attention layer shares (PositionAttentionConfig.build_terms)
        self.layers = self._layer_list()
        self.layers.extend(self.build_encoder_layer(cfg, i) for i in range(cfg.encoder.layers))
        self.num_layers = len(self.layers)
        self.recurrent_layers = self._layer_list()
        self.recurrent_layers.extend(self.build_recurrent_layer(cfg, recurrence_cfg)
                                     for _ in range(recurrence_cfg.encoder_recurrent_layers))
        self._log_kernels(attention_cfg, recurrence_cfg)
        # position embeddings enter the self-attention stack (see the class doc)
        self.positions_after_recurrence = bool(len(self.recurrent_layers) and len(self.layers)
                                               and recurrence_cfg.recurrent_first)
        self.layer_norm = LayerNorm(embed_dim, export=cfg.export) if cfg.encoder.normalize_before else None

    @property
    def tree_inputs(self) -> TreeInputs:
        """The tree inputs of ``translation_struct`` that :meth:`forward` reads."""
        return self.attention_cfg.tree_inputs()

    @property
    def reads_trees(self) -> bool:
        """True if the encoder needs the tree inputs of ``translation_struct``."""
        return bool(self.tree_inputs)

    def _log_kernels(self, attention_cfg: PositionAttentionConfig, recurrence_cfg: RecurrenceConfig) -> None:
        """The build log's lines: the kernel each layer runs on this machine's device (CUDA where there is one)
        in float32 (:func:`..modules.kernel_choice.describe`)."""
        device, dtype = torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.float32
        attention = [m for m in self.layers.modules() if isinstance(m, PositionAwareSelfAttention)]
        if attention:
            logger.info("%d self-attention layers, %s", len(attention),
                        describe(ATTENTION, attention_cfg.encoder_attention_kernel, device, dtype,
                                 [layer_terms(m) for m in attention]))
        if recurrence_cfg.encoder_recurrent_layers and recurrence_cfg.encoder_recurrent_cell == "onlstm":
            logger.info("%d ON-LSTM layers, %s", recurrence_cfg.encoder_recurrent_layers,
                        describe(RECURRENCE, recurrence_cfg.encoder_recurrent_kernel, device, dtype))

    @staticmethod
    def _build_positions(cfg, attention_cfg, padding_idx):
        mode = attention_cfg.encoder_position_embedding
        if mode == "none" or cfg.no_token_positional_embeddings:
            return None
        width = cfg.encoder.embed_dim
        if mode == "concat":
            width = attention_cfg.position_concat_dim(width)
        return PositionalEmbedding(cfg.max_source_positions, width, padding_idx, learned=cfg.encoder.learned_pos)

    def _layer_list(self) -> nn.ModuleList:
        """fairseq's LayerDrop (Fan et al. 2019), ``--encoder-layerdrop``: each
        training forward skips each layer of the list with probability p."""
        if self.encoder_layerdrop > 0.0:
            return LayerDropModuleList(p=self.encoder_layerdrop)
        return nn.ModuleList([])

    @staticmethod
    def _wrap_layer(cfg, layer: nn.Module) -> nn.Module:
        """fairseq's wrapping of an encoder layer: ``--checkpoint-activations``
        (``--offload-activations`` implies it, as in fairseq's ``build_model``)
        recomputes the layer's activations in the backward, offloaded to the
        CPU in between; FSDP wraps it under ``--ddp-backend fully_sharded``."""
        checkpoint = cfg.checkpoint_activations or cfg.offload_activations
        if checkpoint:
            update_batch_norm_statistics_once(layer)
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def build_encoder_layer(self, cfg, layer_index: int):
        return self._wrap_layer(cfg, PositionAwareEncoderLayer(cfg, self.attention_cfg, layer_index,
                                                               self.shared_terms))

    def build_recurrent_layer(self, cfg, recurrence_cfg: RecurrenceConfig):
        """A recurrent layer with fairseq's per-layer options: quant noise on
        its weight matrices (``--quant-noise-pq``, the blocks of fairseq's
        ``quant_noise``), activation checkpointing and FSDP wrapping."""
        embed_dim = cfg.encoder.embed_dim
        layer = RecurrentLayer(embed_dim, cell=recurrence_cfg.encoder_recurrent_cell,
                               hidden_dim=recurrence_cfg.hidden_dim(embed_dim),
                               bidirectional=not recurrence_cfg.encoder_recurrent_unidirectional,
                               chunk_size=recurrence_cfg.encoder_onlstm_chunk_size, dropout=cfg.dropout,
                               kernel=recurrence_cfg.encoder_recurrent_kernel)
        quant_noise_on(layer, layer.weight_matrices(), cfg.quant_noise.pq, cfg.quant_noise.pq_block_size)
        return self._wrap_layer(cfg, layer)

    def position_vectors(self, src_tokens, depths=None):
        """Sequential and/or structural position embeddings ``[B, T, C']``, or None."""
        positions = None if self.embed_positions is None else self.embed_positions(src_tokens)
        if self.embed_depths is not None:
            structural = self.embed_depths(depths)
            if positions is None:
                positions = structural
            elif self.position_fusion is not None:
                positions = self.position_fusion(positions, structural)
            else:
                positions = positions + structural
        return positions

    def forward_embedding(self, src_tokens, token_embedding=None, depths=None):
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        positions = None if self.positions_after_recurrence else self.position_vectors(src_tokens, depths)
        if positions is not None:
            if self.attention_cfg.encoder_position_embedding == "concat":
                x = torch.cat([embed, positions.type_as(embed)], dim=-1)
            else:
                x = embed + positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None,
                src_depths=None, src_structural_positions=None, src_tree_distances=None, src_parent_positions=None):
        """fairseq's ``TransformerEncoderBase`` arguments and output dictionary, plus
        the tree inputs of ``translation_struct`` that :attr:`tree_inputs` names
        (:class:`~fairseq_posattn.structure.batch.TreeInputs`), laid out like ``src_tokens``."""
        given = dict(src_depths=src_depths, src_structural_positions=src_structural_positions,
                     src_tree_distances=src_tree_distances, src_parent_positions=src_parent_positions)
        missing = [key for key in self.tree_inputs.keys() if given[key] is None]
        if missing:
            raise ValueError(f"the encoder reads the dependency trees of the source, but this batch has no "
                             f"{', '.join(missing)}: train and decode with --task translation_struct")
        padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = bool(padding_mask.any())
        order = right_padding_order(padding_mask) if has_pads else None
        tokens, mask = src_tokens, padding_mask
        relative = {name: positions for name, positions in (("structural", src_structural_positions),
                                                            ("tree_distance", src_tree_distances))
                    if positions is not None}
        depths, parents = src_depths, src_parent_positions
        if order is not None:
            tokens, mask = tokens.gather(1, order), mask.gather(1, order)
            if token_embeddings is not None:
                token_embeddings = gather_time(token_embeddings, order, 1)
            if depths is not None:
                depths = depths.gather(1, order)
            if parents is not None:  # positions within the sentence: only the cells move
                parents = parents.gather(1, order)
            relative = {name: gather_time(gather_time(positions, order, 1), order, 2)
                        for name, positions in relative.items()}

        x, encoder_embedding = self.forward_embedding(tokens, token_embeddings, depths)
        if has_pads:
            x = x * (1 - mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)
        context = AttentionContext(x.size(0), x.device, relative,
                                   None if parents is None else {"parents": parents})

        states = [x] if return_all_hiddens else []
        outputs = {}
        for stack in self._stack_order():
            if stack == "attention":
                if self.positions_after_recurrence:
                    positions = self.position_vectors(tokens, depths)
                    if positions is not None:
                        x = x + self.dropout_module(positions.transpose(0, 1).type_as(x))
                        if has_pads:
                            x = x.masked_fill(mask.t().unsqueeze(-1), 0.0)
                layers, inputs = self.layers, (mask if has_pads else None, context)
            else:
                layers, inputs = self.recurrent_layers, ((~mask).sum(dim=1),)  # the lengths
            for layer in layers:
                x = layer(x, *inputs)
                if return_all_hiddens:
                    states.append(x)
            outputs[stack] = x
        if self.recurrence_cfg.encoder_shortcut:
            x = outputs["recurrent"] + outputs["attention"]  # Hao et al. (2019), Eq. 10
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        if order is not None:
            inverse = order.argsort(dim=1)
            x = gather_time(x, inverse, 0)
            encoder_embedding = gather_time(encoder_embedding, inverse, 1)
            states = [gather_time(state, inverse, 0) for state in states]
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": states,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)],
        }

    def _stack_order(self):
        stacks = [name for name, layers in (("recurrent", self.recurrent_layers),
                                            ("attention", self.layers)) if len(layers)]
        return stacks if self.recurrence_cfg.recurrent_first else stacks[::-1]

    def max_positions(self):
        if self.embed_positions is None:
            return self.max_source_positions
        return min(self.max_source_positions, self.embed_positions.max_positions)
