"""One multi-head self-attention layer that composes position terms.

Every term is a small module; this layer applies them in one fixed order::

    q, k   = projections        (times the temperatures gamma_q, gamma_k)
    q, k   = rotation terms     rotary positions (RoFormer)
    S      = q k^T / sqrt(d_h)                       (Vaswani et al. 2017, Eq. 1)
    S      = logit-scaling terms  PASCAL's parent scaling of the chosen heads
    logits = S + score terms    P, R, Shaw keys, Bilan & Roth relative scores,
                                ALiBi, T5's bias, the dependency-distance bias
    masked at padded keys
    probs  = softmax(logits)    in float32
    probs  = probability terms  convolved attention (1d / 2d)
    out    = dropout(probs) V + value terms (Shaw values)

Every later step and every kernel sees the rotated ``q`` and ``k``: a score
term that reads the query (Shaw keys) reads the rotated one.  The
logit-scaling terms multiply the content logits only, before any score term is
added (as PASCAL's code scales them before its masks are added).

With no term and no temperature it computes what fairseq's
``MultiheadAttention`` computes for the same weights; its parameters carry
the same names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), so stock
checkpoints load into it.  Which code computes a call (the steps above,
PyTorch's fused attention or a Triton kernel) is decided per call by
:func:`.kernel_choice.attention_kernel`.
"""

from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from ..kernels.manual import ATTENTION
from ..kernels.shaw_flash import bucket_dtype, shaw_flash_attention
from ..kernels.triton_common import draw_seed
from .attention_context import AttentionContext
from .kernel_choice import CONVOLUTIONS, Terms, attention_kernel, check, shaw_pairs
from .precision import at_least_float32


class PositionAwareSelfAttention(nn.Module):
    """Multi-head self-attention with optional position terms.

    Args:
        embed_dim, num_heads, dropout, bias: as fairseq's ``MultiheadAttention``.
        learnable_temperature: Dufter et al. (2020) Sec. 2.4: per-head scalars
            ``gamma_q, gamma_k, gamma_v`` (initialised to 1) multiplying the
            query, key and value projections.
        rotation_terms: modules ``(q, k) -> (q, k)`` on ``[B, H, T, d_h]``.
        logit_scaling_terms: modules ``(S, context) -> S`` on the float32
            content logits ``[B, H, T, T]``.
        score_terms: modules ``(query, inputs, context) -> [B or 1, H, T, T]``
            added to the logits; ``query`` is ``[B, H, T, d_h]`` already
            scaled by ``1/sqrt(d_h)``, ``inputs`` the layer input ``[T, B, C]``;
            each declares ``reads_query``, whether it depends on the query or
            the input (:func:`.kernel_choice.gradient_through_scores`).
        probability_terms: modules ``(probs, key_padding_mask, context) ->
            probs`` applied after the softmax.
        value_terms: modules ``(probs, context) -> [B, H, T, d_h]`` added to
            the attended values.
        kernel: what computes the attention: one of
            :data:`..kernels.manual.OPTIONS` (``triton`` runs on the CPU
            only under ``TRITON_INTERPRET=1``).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 learnable_temperature: bool = False, score_terms: Sequence[nn.Module] = (),
                 probability_terms: Sequence[nn.Module] = (), value_terms: Sequence[nn.Module] = (),
                 rotation_terms: Sequence[nn.Module] = (), logit_scaling_terms: Sequence[nn.Module] = (),
                 q_noise: float = 0.0, qn_block_size: int = 8, kernel: str = "auto"):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        check(ATTENTION, kernel, Terms(score_terms, probability_terms, value_terms, rotation_terms,
                                       logit_scaling_terms))
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)

        def projection():
            return quant_noise(nn.Linear(embed_dim, embed_dim, bias=bias), q_noise, qn_block_size)

        self.k_proj = projection()
        self.v_proj = projection()
        self.q_proj = projection()
        self.out_proj = projection()
        # fairseq's initialisation: scaled Xavier for q/k/v, Xavier for the output
        for proj in (self.k_proj, self.v_proj, self.q_proj):
            nn.init.xavier_uniform_(proj.weight, gain=2**-0.5)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

        # gamma_q, gamma_k, gamma_v
        self.temperature = nn.Parameter(torch.ones(3, num_heads)) if learnable_temperature else None
        self.score_terms = nn.ModuleList(score_terms)
        self.probability_terms = nn.ModuleList(probability_terms)
        self.value_terms = nn.ModuleList(value_terms)
        self.rotation_terms = nn.ModuleList(rotation_terms)
        self.logit_scaling_terms = nn.ModuleList(logit_scaling_terms)
        self.kernel = kernel
        # True: every call returns its weights (as with need_weights), so that
        # forward hooks see them (fairseq_posattn.analysis.attention_maps)
        self.expose_weights = False

    @property
    def plain_projections(self) -> bool:
        """Whether temperature may scale the q, k, v weights instead of the
        projections' outputs.  Not with fairseq's quant noise, which rewrites
        a weight in a forward pre-hook (``--quant-noise-pq``), nor with its
        scalar quantization, which replaces the projections by ``IntLinear``
        modules after the build (``--quant-noise-scalar``): those projections
        must be called as modules."""
        return all(type(proj) is nn.Linear and not (proj._forward_pre_hooks or proj._forward_hooks)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))

    def _project(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        length, batch, _ = x.shape
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if self.temperature is None:
            outputs = [proj(x) for proj in projections]
        else:
            gamma = self.temperature.repeat_interleave(self.head_dim, dim=1)  # [3, C]: per head, per unit
            if self.plain_projections:
                # gamma on the rows of the three weights stacked: the same products in one
                # matmul, and backward keeps no unscaled output
                weight = torch.cat([proj.weight for proj in projections]) * gamma.reshape(-1, 1)
                bias = None if self.q_proj.bias is None else torch.cat([proj.bias for proj in projections])
                outputs = F.linear(x, weight, None if bias is None else bias * gamma.reshape(-1)).chunk(3, dim=-1)
            else:
                outputs = [proj(x) * g for proj, g in zip(projections, gamma)]
        q, k, v = (out.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3) for out in outputs)
        return q, k, v

    def _score_bias(self, q: Tensor, x: Tensor, context: AttentionContext) -> Optional[Tensor]:
        if len(self.score_terms) == 0:
            return None
        scaled_q = q * self.scaling
        bias = None
        for term in self.score_terms:
            scores = at_least_float32(term(scaled_q, x, context))
            bias = scores if bias is None else bias + scores
        return bias

    def forward(self, x: Tensor, key_padding_mask: Optional[Tensor] = None,
                context: Optional[AttentionContext] = None,
                need_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
            x: ``[T, B, C]``.
            key_padding_mask: ``[B, T]``, True at pads.
            context: positions for the terms; sequential ones by default.
            need_weights: also return the per-head attention ``[B, H, T, T]``
                (after the probability terms, before dropout).

        Returns:
            ``([T, B, C], weights or None)``
        """
        length, batch, _ = x.shape
        need_weights = need_weights or self.expose_weights
        if context is None:
            context = AttentionContext(length, x.device)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.to(torch.bool)
        q, k, v = self._project(x)
        for term in self.rotation_terms:
            q, k = term(q, k)
        kernel = attention_kernel(self, q, need_weights)
        bias = None if kernel == "shaw_triton" else self._score_bias(q, x, context)

        weights = None
        if kernel == "shaw_triton":
            out = self._shaw_flash(q, k, v, key_padding_mask, context)
        elif kernel in CONVOLUTIONS:  # the convolved attention's probabilities in Triton kernels
            _, convolved_attention = CONVOLUTIONS[kernel]
            filters = self.probability_terms[0].filters(length)
            probs = convolved_attention(self._logits(q, k, bias, context), key_padding_mask, *filters,
                                        *self._kernel_dropout(), v.dtype)
            out = torch.matmul(probs, v)
        elif kernel == "sdpa":
            mask = self._additive_mask(bias, key_padding_mask, q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 dropout_p=self.dropout_module.p if self._dropout_active() else 0.0)
        else:
            logits = self._logits(q, k, bias, context)
            if key_padding_mask is not None:
                logits = logits.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(torch.float32).min)
            probs = torch.softmax(logits, dim=-1)
            for term in self.probability_terms:
                probs = term(probs, key_padding_mask, context)
            if need_weights:
                weights = probs
            probs = self.dropout_module(probs)
            out = torch.matmul(probs.to(v.dtype), v)
            for term in self.value_terms:
                out = out + term(probs, context).to(out.dtype)

        out = out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim)
        return self.out_proj(out), weights

    def _logits(self, q: Tensor, k: Tensor, bias: Optional[Tensor], context: AttentionContext) -> Tensor:
        """``S = q k^T / sqrt(d_h)``, scaled by the logit-scaling terms, + the score terms, in float32 or wider."""
        logits = at_least_float32(torch.matmul(q * self.scaling, k.transpose(-1, -2)))
        for term in self.logit_scaling_terms:
            logits = term(logits, context)
        return logits if bias is None else logits + bias

    def _shaw_flash(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
                    context: AttentionContext) -> Tensor:
        """Shaw keys and values (Eq. 3-4) of each position set inside the Triton kernel."""
        position_sets = [
            (context.buckets(keys.positions, keys.clip, bucket_dtype(keys.clip)), keys.embedding, values.embedding)
            for keys, values in shaw_pairs(self.score_terms, self.value_terms)
        ]
        dropout_p, seed = self._kernel_dropout()
        return shaw_flash_attention(q, k, v, key_padding_mask, position_sets, dropout_p=dropout_p, seed=seed)

    def _kernel_dropout(self) -> Tuple[float, int]:
        """The attention dropout of the Triton kernels and their Philox seed."""
        if self._dropout_active() and self.dropout_module.p > 0:
            return self.dropout_module.p, draw_seed()
        return 0.0, 0

    def _dropout_active(self) -> bool:
        return self.training or self.dropout_module.apply_during_inference

    @staticmethod
    def _additive_mask(bias: Optional[Tensor], key_padding_mask: Optional[Tensor],
                       dtype: torch.dtype) -> Optional[Tensor]:
        """Score bias and padding as one additive mask in ``dtype`` for the fused kernel.

        Pads get the dtype's most negative finite value, not ``-inf``, so a
        row without any real key yields a uniform distribution, never NaN.
        """
        if key_padding_mask is None:
            return None if bias is None else bias.to(dtype)
        pads = key_padding_mask[:, None, None, :]
        mask = torch.zeros(pads.shape, dtype=dtype, device=pads.device) if bias is None else bias.to(dtype)
        return mask.masked_fill(pads, torch.finfo(dtype).min)
