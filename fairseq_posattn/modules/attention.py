"""One multi-head self-attention layer that composes position terms.

Every term is a small module; this layer applies them in one fixed order::

    logits = q k^T / sqrt(d_h)                       (Vaswani et al. 2017, Eq. 1)
           + score terms        P, R, Shaw keys, Bilan & Roth relative scores
    masked at padded keys
    probs  = softmax(logits)    in float32
    probs  = probability terms  convolved attention (1d / 2d)
    out    = dropout(probs) V + value terms (Shaw values)

With no term and no temperature it computes what fairseq's
``MultiheadAttention`` computes for the same weights; its parameters carry
the same names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), so stock
checkpoints load into it.

Which code computes a call is decided in one place, :meth:`_path`, from the
layer's ``kernel`` (``--encoder-attention-kernel``, :data:`ATTENTION_KERNELS`),
its terms, the device, the dtype and whether a gradient must reach the score
terms:

* ``triton``: a Triton kernel for the layer's terms: Shaw relative keys and
  values (one or two position sets, no other term) inside the flash-style
  attention of :mod:`.relative_flash`, or the 1d or 2d convolved attention
  (after any score terms, without value terms) with its softmax, masks and
  dropout in :mod:`.convolved_kernel`; ``auto`` takes those of
  :data:`AUTO_TRITON_KERNELS` on CUDA where Triton is installed;
* ``sdpa``: PyTorch's ``scaled_dot_product_attention`` with the score terms
  and the padding as its additive mask (cast to the query's dtype, which it
  requires; its kernels accumulate the softmax in float32); ``auto`` takes it
  where no gradient must reach the score terms (no terms, or inference), and
  on CUDA in half precision also where one must, as an explicit ``sdpa`` does
  everywhere (the bias's gradient then comes from PyTorch's backward of the
  fused attention);
* ``explicit``: the steps above, written out; whenever the probabilities are
  needed (probability or value terms, attention weights asked for).

An explicit kernel that cannot compute the layer's terms is refused when the
layer is built.
"""

import functools
import logging
import os
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from . import convolved_kernel, relative_flash
from .attention_context import AttentionContext
from .convolved_attention import ConvolvedAttention1d, ConvolvedAttention2d
from .precision import at_least_float32

logger = logging.getLogger(__name__)

ATTENTION_KERNELS = ("auto", "explicit", "sdpa", "triton")
# the Triton kernels that ``auto`` takes on CUDA: those that have passed their tests compiled on a
# GPU (scripts/gpu_check.sh) and measured at least as fast as the explicit path there (docs/benchmarks.md)
AUTO_TRITON_KERNELS = ("shaw_kernel", "conv2d_kernel")
# the convolved attention's kernels, by path
CONVOLVED_KERNELS = {"conv1d_kernel": convolved_kernel.convolved_attention_1d,
                     "conv2d_kernel": convolved_kernel.convolved_attention_2d}
# where ``auto`` hands trainable score terms to PyTorch's fused attention: on CUDA in these dtypes,
# where it measured at least as fast as the explicit path (docs/benchmarks.md)
AUTO_SDPA_WITH_GRAD_DTYPES = (torch.float16, torch.bfloat16)


class PositionAwareSelfAttention(nn.Module):
    """Multi-head self-attention with optional position terms.

    Args:
        embed_dim, num_heads, dropout, bias: as fairseq's ``MultiheadAttention``.
        learnable_temperature: Dufter et al. (2020) Sec. 2.4: per-head scalars
            ``gamma_q, gamma_k, gamma_v`` (initialised to 1) multiplying the
            query, key and value projections.
        score_terms: modules ``(query, inputs, context) -> [B or 1, H, T, T]``
            added to the logits; ``query`` is ``[B, H, T, d_h]`` already
            scaled by ``1/sqrt(d_h)``, ``inputs`` the layer input ``[T, B, C]``.
        probability_terms: modules ``(probs, key_padding_mask, context) ->
            probs`` applied after the softmax.
        value_terms: modules ``(probs, context) -> [B, H, T, d_h]`` added to
            the attended values.
        kernel: what computes the attention (:data:`ATTENTION_KERNELS`, see
            the module's docstring and :meth:`_path`); ``triton`` runs on the
            CPU only under ``TRITON_INTERPRET=1``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        learnable_temperature: bool = False,
        score_terms: Sequence[nn.Module] = (),
        probability_terms: Sequence[nn.Module] = (),
        value_terms: Sequence[nn.Module] = (),
        q_noise: float = 0.0,
        qn_block_size: int = 8,
        kernel: str = "auto",
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}"
            )
        reason = kernel_unavailable(kernel, score_terms, probability_terms, value_terms)
        if reason is not None:
            raise ValueError(f"--encoder-attention-kernel {kernel}: {reason}")
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

        if learnable_temperature:
            self.temperature = nn.Parameter(torch.ones(3, num_heads))  # gamma_q, gamma_k, gamma_v
        else:
            self.temperature = None
        self.score_terms = nn.ModuleList(score_terms)
        self.probability_terms = nn.ModuleList(probability_terms)
        self.value_terms = nn.ModuleList(value_terms)
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

    def _split_heads(self, x: Tensor, length: int, batch: int) -> Tensor:
        return x.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

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
        q, k, v = (self._split_heads(out, length, batch) for out in outputs)
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

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        context: Optional[AttentionContext] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
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
        path = self._path(q, need_weights)
        bias = None if path == "shaw_kernel" else self._score_bias(q, x, context)

        weights = None
        if path == "shaw_kernel":
            out = self._relative_flash(q, k, v, key_padding_mask, context)
        elif path in CONVOLVED_KERNELS:
            probs = CONVOLVED_KERNELS[path](self._logits(q, k, bias), key_padding_mask,
                                            *self.probability_terms[0].filters(length), *self._kernel_dropout(),
                                            v.dtype)
            out = torch.matmul(probs, v)
        elif path == "sdpa":
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=self._additive_mask(bias, key_padding_mask, q.dtype),
                dropout_p=self.dropout_module.p if self._dropout_active() else 0.0,
            )
        else:
            logits = self._logits(q, k, bias)
            if key_padding_mask is not None:
                logits = logits.masked_fill(
                    key_padding_mask[:, None, None, :], torch.finfo(torch.float32).min
                )
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

    def _logits(self, q: Tensor, k: Tensor, bias: Optional[Tensor]) -> Tensor:
        """``q k^T / sqrt(d_h)`` + the score terms, in float32 or wider."""
        logits = at_least_float32(torch.matmul(q * self.scaling, k.transpose(-1, -2)))
        return logits if bias is None else logits + bias

    def _path(self, q: Tensor, need_weights: bool) -> str:
        """What computes this call: ``"shaw_kernel"``, ``"conv1d_kernel"`` or
        ``"conv2d_kernel"`` (``triton``), ``"sdpa"`` or ``"explicit"`` (the module's docstring
        gives the rules; this is the only place that applies them)."""
        if need_weights or self.kernel == "explicit":
            return "explicit"
        if q.dtype in relative_flash.DTYPES and (
            self.kernel == "triton" or (self.kernel == "auto" and q.is_cuda and relative_flash.triton is not None)
        ):
            served = triton_kernel(self.score_terms, self.probability_terms, self.value_terms)
            if served is not None and (self.kernel == "triton" or served in AUTO_TRITON_KERNELS):
                if q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
                    return served
                _warn_once(f"--encoder-attention-kernel triton: the Triton kernels run on CUDA tensors (or in "
                           f"Triton's interpreter, TRITON_INTERPRET=1); on {q.device} the explicit path "
                           "computes the same function")
        if len(self.probability_terms) > 0 or len(self.value_terms) > 0:
            return "explicit"
        if self.kernel == "sdpa" or not self._score_terms_need_grad(q):
            return "sdpa"
        if self.kernel == "auto" and q.is_cuda and q.dtype in AUTO_SDPA_WITH_GRAD_DTYPES:
            return "sdpa"
        return "explicit"

    def _score_terms_need_grad(self, q: Tensor) -> bool:
        """A gradient must reach the score terms: autograd records, and the
        query or a term's parameter requires one (under ``no_grad`` a slice of
        a parameter still says ``requires_grad``)."""
        return (
            torch.is_grad_enabled()
            and len(self.score_terms) > 0
            and (q.requires_grad or any(p.requires_grad for p in self.score_terms.parameters()))
        )

    def _relative_flash(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], context: AttentionContext
    ) -> Tensor:
        """Shaw keys and values (Eq. 3-4) of each position set inside the Triton kernel."""
        position_sets = [
            (context.buckets(keys.positions, keys.clip, relative_flash.bucket_dtype(keys.clip)),
             keys.embedding, values.embedding)
            for keys, values in relative_flash.shaw_pairs(self.score_terms, self.value_terms)
        ]
        dropout_p, seed = self._kernel_dropout()
        return relative_flash.relative_flash_attention(
            q, k, v, key_padding_mask, position_sets, dropout_p=dropout_p, seed=seed
        )

    def _kernel_dropout(self) -> Tuple[float, int]:
        """The attention dropout of the Triton kernels and their Philox seed."""
        if self._dropout_active() and self.dropout_module.p > 0:
            return self.dropout_module.p, relative_flash.draw_seed()
        return 0.0, 0

    def _dropout_active(self) -> bool:
        return self.training or self.dropout_module.apply_during_inference

    @staticmethod
    def _additive_mask(
        bias: Optional[Tensor], key_padding_mask: Optional[Tensor], dtype: torch.dtype
    ) -> Optional[Tensor]:
        """Score bias and padding as one additive mask in ``dtype`` for the fused kernel.

        Pads get the dtype's most negative finite value, not ``-inf``, so a
        row without any real key yields a uniform distribution, never NaN.
        """
        if key_padding_mask is None:
            return None if bias is None else bias.to(dtype)
        pads = key_padding_mask[:, None, None, :]
        if bias is None:
            mask = torch.zeros(pads.shape, dtype=dtype, device=pads.device)
        else:
            mask = bias.to(dtype)
        return mask.masked_fill(pads, torch.finfo(dtype).min)


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    logger.warning(message)


def kernel_unavailable(
    kernel: str,
    score_terms: Sequence[nn.Module],
    probability_terms: Sequence[nn.Module],
    value_terms: Sequence[nn.Module],
) -> Optional[str]:
    """Why ``kernel`` cannot compute a layer with these terms, or None."""
    if kernel not in ATTENTION_KERNELS:
        return f"it is not one of {', '.join(ATTENTION_KERNELS)}"
    if kernel == "sdpa" and (len(probability_terms) > 0 or len(value_terms) > 0):
        return ("PyTorch's fused attention does not return the probabilities that convolved "
                "attention and Shaw relative values need: use auto or explicit (or triton, for "
                "Shaw relative keys and values alone)")
    if kernel == "triton" and relative_flash.triton is None:
        return "it needs the triton package (pip install triton)"
    if kernel == "triton" and triton_kernel(score_terms, probability_terms, value_terms) is None:
        return ("the Triton kernels compute Shaw relative keys and values alone (--relative-positions, "
                "--structural-relative-positions) or the convolved attention without value terms "
                "(--convolved-attention 1d or 2d), in every layer: use auto, explicit or sdpa")
    return None


def triton_kernel(
    score_terms: Sequence[nn.Module], probability_terms: Sequence[nn.Module], value_terms: Sequence[nn.Module]
) -> Optional[str]:
    """The Triton kernel that computes a layer with these terms, or None:
    ``"shaw_kernel"`` (:mod:`.relative_flash`: Shaw keys and values of one or
    two position sets, nothing else), ``"conv1d_kernel"`` or ``"conv2d_kernel"``
    (:mod:`.convolved_kernel`: the convolution after any score terms)."""
    if len(probability_terms) == 0 and relative_flash.shaw_pairs(score_terms, value_terms) is not None:
        return "shaw_kernel"
    if len(probability_terms) == 1 and len(value_terms) == 0:
        return {ConvolvedAttention1d: "conv1d_kernel", ConvolvedAttention2d: "conv2d_kernel"}.get(
            type(probability_terms[0]))
    return None
