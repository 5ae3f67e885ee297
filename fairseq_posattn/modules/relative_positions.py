"""Relative position terms that interact with a query vector.

* Shaw, Uszkoreit & Vaswani (2018), Eq. 3-4: relation-aware self-attention,
  ``e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_h)`` and
  ``z_i = sum_j p_ij (v_j + a^V_ij)``, with ``a^K``, ``a^V`` looked up by the
  clipped relative position and shared across heads.
* Bilan & Roth (2018), Sec. 3.1.1: ``z_relpos(i, j) = r_i . m_{j-i}`` with
  its own query projection ``r = W^r e_i`` and per-head vectors ``m``.

Neither materialises a ``[B, T, T, d_head]`` tensor: scores are computed
against the ``2k+1``-row table and gathered (Bilan & Roth's, sequential only,
read off as a strided view: :func:`relative_diagonals`), and probabilities
are summed per bucket before they meet the value table.  Shaw's positions
come from the :class:`AttentionContext` by name: sequential (``j - i``) or
tree positions (Wang et al. 2019).
"""

import math

import torch
from torch import Tensor, nn

from .attention_context import AttentionContext, reachable_distance


def reachable_rows(table: Tensor, clip: int, context: AttentionContext, positions: str):
    """The rows of a ``2*clip+1``-row table (last-but-one axis) this batch can
    reach, and the buckets into them."""
    reach = reachable_distance(context, positions, clip)
    rows = table.narrow(-2, clip - reach, 2 * reach + 1)
    return rows, context.buckets(positions, reach)


def relative_scores(queries: Tensor, table: Tensor, buckets: Tensor) -> Tensor:
    """``out[b,h,i,j] = queries[b,h,i] . table[(h,) buckets[b,i,j]]``.

    Args:
        queries: ``[B, H, T, D]``.
        table: ``[R, D]`` shared by the heads, or ``[H, R, D]``.
        buckets: ``[B or 1, T, T]`` rows of ``table``.
    """
    per_row = torch.matmul(queries, table.transpose(-1, -2))  # [B, H, T, R]
    index = buckets.unsqueeze(1).expand(*per_row.shape[:2], *buckets.shape[1:])
    return per_row.gather(-1, index)


def bucketed_values(probs: Tensor, table: Tensor, buckets: Tensor) -> Tensor:
    """``out[b,h,i] = sum_j probs[b,h,i,j] * table[buckets[b,i,j]]``.

    Args:
        probs: ``[B, H, T, T]`` attention probabilities.
        table: ``[R, D]``.
        buckets: ``[B or 1, T, T]`` rows of ``table``.
    """
    index = buckets.unsqueeze(1).expand_as(probs)
    per_bucket = probs.new_zeros(*probs.shape[:-1], table.size(0))
    per_bucket.scatter_add_(-1, index, probs)
    return torch.matmul(per_bucket, table.to(per_bucket.dtype))


def relative_diagonals(per_distance: Tensor) -> Tensor:
    """``out[..., i, j] = per_distance[..., i, j - i + T - 1]``, a view.

    Args:
        per_distance: ``[..., T, 2T-1]`` scores of each query ``i`` against
            every sequential distance ``1-T .. T-1`` (any strides).

    Row ``i`` of the result starts ``T - 1 - i`` columns into row ``i`` of
    ``per_distance``, so a row step of the view is a row step minus a column
    step of ``per_distance``: no index tensor, and autograd keeps nothing for
    backward but the geometry.
    """
    length = per_distance.size(-2)
    *outer, row_stride, column_stride = per_distance.stride()
    return per_distance.as_strided(
        (*per_distance.shape[:-1], length),
        (*outer, row_stride - column_stride, column_stride),
        per_distance.storage_offset() + (length - 1) * column_stride,
    )


class _RelativeTable(nn.Module):
    """A Shaw table: one ``d_h`` vector per clipped relative position ``-k..k``,
    shared across heads, looked up by the named positions of the context."""

    def __init__(self, head_dim: int, clip: int, positions: str = "sequential"):
        super().__init__()
        self.clip = clip
        self.positions = positions
        self.embedding = nn.Parameter(torch.empty(2 * clip + 1, head_dim))
        nn.init.xavier_uniform_(self.embedding)

    def rows(self, context: AttentionContext):
        return reachable_rows(self.embedding, self.clip, context, self.positions)


class RelativeKeys(_RelativeTable):
    """Shaw et al. (2018) Eq. 4: the ``q_i . a^K_ij / sqrt(d_h)`` score term."""

    reads_query = True  # a score term's declaration (kernel_choice.gradient_through_scores)

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext):
        """``query`` is already scaled by ``1/sqrt(d_h)``."""
        return relative_scores(query, *self.rows(context))


class RelativeValues(_RelativeTable):
    """Shaw et al. (2018) Eq. 3: the ``sum_j p_ij a^V_ij`` value term."""

    def forward(self, probs: Tensor, context: AttentionContext):
        return bucketed_values(probs, *self.rows(context))


class QueryProjectedRelativeScores(nn.Module):
    """Bilan & Roth (2018) Sec. 3.1.1: ``z_relpos(i, j) = r_i . m_{j-i}``.

    ``r = W^r e_i`` is a bias-free projection of the layer input, split into
    heads and scaled by ``1/sqrt(d_h)`` like the ordinary query, so the two
    scores the paper sums share one scale.  ``m_{-k..k}`` are learned per
    head; distances beyond ``k`` share the outermost vectors.
    """

    reads_query = True  # the layer's input, through W^r

    def __init__(self, embed_dim: int, num_heads: int, clip: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.clip = clip
        self.query_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.relative_vectors = nn.Parameter(torch.empty(num_heads, 2 * clip + 1, self.head_dim))
        nn.init.xavier_uniform_(self.query_proj.weight, gain=1 / math.sqrt(2))
        nn.init.normal_(self.relative_vectors, std=self.head_dim**-0.5)

    def forward(self, query: Tensor, inputs: Tensor, context: AttentionContext):
        """``[B, H, T, T]`` scores, a strided view of ``[H, T, B, 2T-1]`` rows
        ``r_i . m_d`` for every distance ``d``; the ``1/sqrt(d_h)`` scale goes
        onto the table, so backward keeps only ``W^r e`` and the table."""
        length, batch, _ = inputs.shape
        r = self.query_proj(inputs).view(length * batch, self.num_heads, self.head_dim)
        distances = torch.arange(1 - length, length, device=inputs.device)
        rows = distances.clamp_(-self.clip, self.clip) + self.clip
        table = self.relative_vectors.index_select(1, rows) * self.head_dim**-0.5
        per_distance = torch.bmm(r.transpose(0, 1), table.transpose(1, 2))  # [H, T*B, 2T-1]
        per_distance = per_distance.view(self.num_heads, length, batch, rows.numel())
        return relative_diagonals(per_distance.permute(2, 0, 1, 3))
