"""Shaw relative keys and values inside one flash-style Triton attention kernel.

Shaw, Uszkoreit & Vaswani (2018), Eq. 3-4, for one or two sets of relative
positions (sequential, and Wang et al. 2019's structural positions)::

    e_ij = q_i (k_j + sum_s a^K_s[b_s(i, j)])^T / sqrt(d_h)               (Eq. 4)
    z_i  = sum_j p~_ij (v_j + sum_s a^V_s[b_s(i, j)])                      (Eq. 3)

with ``b_s(i, j)`` the clipped relative position's table row and ``p~`` the
dropped ``softmax(e)``.  An online softmax over key blocks (Dao et al. 2022)
keeps each row's dropped mass per bucket for the value tables; the backward
recomputes ``p`` and the dropout mask (docs/architectures.md).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from .triton_common import interpreted, padded, triton

__all__ = ["bucket_dtype", "shaw_flash_attention"]

if triton is not None:
    import triton.language as tl

    from .triton_common import PAD_LOGIT, kept

    @triton.jit
    def _tile(ptr, rows, cols, row_stride, n_rows, n_cols, other):
        """``ptr[rows[:, None] * row_stride + cols[None, :]]``, ``other`` outside ``n_rows x n_cols``."""
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        return tl.load(ptr + rows[:, None] * row_stride + cols[None, :], mask=mask, other=other)

    @triton.jit
    def _store_tile(ptr, x, rows, cols, row_stride, n_rows, n_cols):
        """``x`` in ``ptr``'s dtype where :func:`_tile` would load it from."""
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        tl.store(ptr + rows[:, None] * row_stride + cols[None, :], x.to(ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _bucket_sums(x, buckets, R: tl.constexpr, R_PAD: tl.constexpr):
        """``out[i, r] = sum_j x[i, j]`` over the keys ``j`` with ``buckets[i, j] == r``."""
        columns = tl.arange(0, R_PAD)[None, :]
        out = tl.zeros((x.shape[0], R_PAD), dtype=tl.float32)
        for r in range(R):
            out += tl.where(columns == r, tl.sum(tl.where(buckets == r, x, 0.0), 1)[:, None], 0.0)
        return out

    @triton.jit
    def _per_row(x, table_ptr, R: tl.constexpr, R_PAD: tl.constexpr, dims, D, PRECISION: tl.constexpr):
        """``x @ table^T``, ``[BLOCK, R_PAD]`` float32: a row's product with every table row."""
        table = _tile(table_ptr, tl.arange(0, R_PAD), dims, D, R, D, 0.0)
        return tl.dot(x, tl.trans(table.to(x.dtype)), input_precision=PRECISION)

    @triton.jit
    def _query_block(Q, AK0, AK1, base, rows, dims, stride_t, T, D, R0: tl.constexpr, R1: tl.constexpr,
                     R0_PAD: tl.constexpr, R1_PAD: tl.constexpr, TWO_SETS: tl.constexpr,
                     FLOAT32_DOTS: tl.constexpr, PRECISION: tl.constexpr):
        """A block of query rows ``q`` (float32 where ``FLOAT32_DOTS``, else the
        dtype every ``tl.dot`` multiplies in) and ``q A^K^T`` of each set."""
        q = _tile(Q + base, rows, dims, stride_t, T, D, 0.0)
        if FLOAT32_DOTS:
            q = q.to(tl.float32)
        qa0 = _per_row(q, AK0, R0, R0_PAD, dims, D, PRECISION)
        qa1 = qa0
        if TWO_SETS:
            qa1 = _per_row(q, AK1, R1, R1_PAD, dims, D, PRECISION)
        return q, qa0, qa1

    @triton.jit
    def _to_table(x, table_ptr, R: tl.constexpr, R_PAD: tl.constexpr, dims, D, PRECISION: tl.constexpr):
        """``x @ table``, ``[BLOCK, D_PAD]`` float32, for per-bucket weights ``x`` ``[BLOCK, R_PAD]``."""
        table = _tile(table_ptr, tl.arange(0, R_PAD), dims, D, R, D, 0.0)
        return tl.dot(x, table.to(tl.float32), input_precision=PRECISION)

    @triton.jit
    def _logits(q, k, qa0, qa1, b0, b1, pads, cols, T, scale,
                TWO_SETS: tl.constexpr, PRECISION: tl.constexpr):
        """``e_ij`` of a tile (Eq. 4) in float32: padded keys at float32's most
        negative value, columns past ``T`` at ``-inf`` (no key at all)."""
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) + tl.gather(qa0, b0, 1)
        if TWO_SETS:
            s += tl.gather(qa1, b1, 1)
        s = tl.where(pads[None, :] != 0, PAD_LOGIT, s * scale)
        return tl.where(cols[None, :] < T, s, float("-inf"))

    @triton.jit
    def _tile_grads(q, k, v, do, qa0, qa1, da0, da1, b0, b1, pads, row_max, row_sum, delta,
                    seed, dropout_p, bh, rows, cols, T, scale,
                    TWO_SETS: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr):
        """A tile's dropped probabilities ``p~`` and score gradient ``dS`` (float32),
        recomputed from each row's maximum and normaliser."""
        s = _logits(q, k, qa0, qa1, b0, b1, pads, cols, T, scale, TWO_SETS, PRECISION)
        p = tl.exp(s - row_max[:, None]) / row_sum[:, None]
        p = tl.where(rows[:, None] < T, p, 0.0)
        # dL/dp~_ij = dO_i . (v_j + sum_s a^V_s[b_s(i, j)])
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION) + tl.gather(da0, b0, 1)
        if TWO_SETS:
            dp += tl.gather(da1, b1, 1)
        dropped = p
        if DROPOUT:
            keep = kept(seed, bh, rows, cols, T, dropout_p)
            dropped = tl.where(keep, p / (1.0 - dropout_p), 0.0)
            dp = tl.where(keep, dp / (1.0 - dropout_p), 0.0)
        # no gradient reaches a padded key's logit (the explicit path overwrites it)
        return dropped, tl.where(pads[None, :] != 0, 0.0, p * (dp - delta[:, None]))

    @triton.jit
    def _row_block(Q, DO, M, L, DELTA, AK0, AV0, AK1, AV1, base, bh, rows, dims, stride_t, T, D,
                   R0: tl.constexpr, R1: tl.constexpr, R0_PAD: tl.constexpr, R1_PAD: tl.constexpr,
                   TWO_SETS: tl.constexpr, FLOAT32_DOTS: tl.constexpr, PRECISION: tl.constexpr):
        """What the backward reads of a block of query rows: :func:`_query_block`,
        ``dO``, the rows' maximum, normaliser and ``dO . O``, and ``dO A^V^T``."""
        q, qa0, qa1 = _query_block(Q, AK0, AK1, base, rows, dims, stride_t, T, D, R0, R1, R0_PAD, R1_PAD,
                                   TWO_SETS, FLOAT32_DOTS, PRECISION)
        do = _tile(DO + base, rows, dims, stride_t, T, D, 0.0).to(q.dtype)
        row_max = tl.load(M + bh * T + rows, mask=rows < T, other=0.0)
        row_sum = tl.load(L + bh * T + rows, mask=rows < T, other=1.0)
        delta = tl.load(DELTA + bh * T + rows, mask=rows < T, other=0.0)
        da0 = _per_row(do.to(tl.float32), AV0, R0, R0_PAD, dims, D, PRECISION)
        da1 = da0
        if TWO_SETS:
            da1 = _per_row(do.to(tl.float32), AV1, R1, R1_PAD, dims, D, PRECISION)
        return q, do, row_max, row_sum, delta, qa0, qa1, da0, da1

    @triton.jit
    def _key_block(K, V, PADS, B0, B1, base, b, rows, cols, dims, stride_t, bucket_b0, bucket_b1, T, D,
                   HAS_PADS: tl.constexpr, TWO_SETS: tl.constexpr, dtype: tl.constexpr):
        """What every kernel reads of a block of keys for a block of query rows:
        ``k``, ``v``, which keys are pads, and the buckets of both sets (int32)."""
        k = _tile(K + base, cols, dims, stride_t, T, D, 0.0).to(dtype)
        v = _tile(V + base, cols, dims, stride_t, T, D, 0.0).to(dtype)
        pads = tl.zeros(cols.shape, dtype=tl.int8)
        if HAS_PADS:
            pads = tl.load(PADS + b * T + cols, mask=cols < T, other=0).to(tl.int8)
        b0 = _tile(B0 + b * bucket_b0, rows, cols, T, T, T, 0).to(tl.int32)
        b1 = b0
        if TWO_SETS:
            b1 = _tile(B1 + b * bucket_b1, rows, cols, T, T, T, 0).to(tl.int32)
        return k, v, pads, b0, b1

    @triton.jit(do_not_specialize=["seed"])
    def _forward(
        Q, K, V, OUT, M, L, PADS, B0, AK0, AV0, B1, AK1, AV1,
        seed, dropout_p, scale, stride_b, stride_h, stride_t, bucket_b0, bucket_b1, H, T, D,
        R0: tl.constexpr, R1: tl.constexpr, R0_PAD: tl.constexpr, R1_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        TWO_SETS: tl.constexpr, HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr,
        FLOAT32_DOTS: tl.constexpr, PRECISION: tl.constexpr,
    ):
        """One block of query rows of one sentence and head: ``z`` (Eq. 3), the
        rows' softmax maximum ``M`` and normaliser ``L``."""
        bh = tl.program_id(1)
        b = bh // H
        base = b * stride_b + (bh % H) * stride_h
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, BLOCK_D)
        q, qa0, qa1 = _query_block(Q, AK0, AK1, base, rows, dims, stride_t, T, D, R0, R1, R0_PAD, R1_PAD,
                                   TWO_SETS, FLOAT32_DOTS, PRECISION)
        row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        mass0 = tl.zeros((BLOCK_M, R0_PAD), dtype=tl.float32)  # p~ per bucket of each set
        mass1 = tl.zeros((BLOCK_M, R1_PAD), dtype=tl.float32)
        for start in range(0, T, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            k, v, pads, b0, b1 = _key_block(K, V, PADS, B0, B1, base, b, rows, cols, dims, stride_t,
                                            bucket_b0, bucket_b1, T, D, HAS_PADS, TWO_SETS, q.dtype)
            s = _logits(q, k, qa0, qa1, b0, b1, pads, cols, T, scale, TWO_SETS, PRECISION)
            new_max = tl.maximum(row_max, tl.max(s, 1))
            rescale = tl.exp(row_max - new_max)
            p = tl.exp(s - new_max[:, None])
            row_sum = row_sum * rescale + tl.sum(p, 1)
            if DROPOUT:
                p = tl.where(kept(seed, bh, rows, cols, T, dropout_p), p / (1.0 - dropout_p), 0.0)
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            mass0 = mass0 * rescale[:, None] + _bucket_sums(p, b0, R0, R0_PAD)
            if TWO_SETS:
                mass1 = mass1 * rescale[:, None] + _bucket_sums(p, b1, R1, R1_PAD)
            row_max = new_max
        acc += _to_table(mass0, AV0, R0, R0_PAD, dims, D, PRECISION)
        if TWO_SETS:
            acc += _to_table(mass1, AV1, R1, R1_PAD, dims, D, PRECISION)
        _store_tile(OUT + base, acc / row_sum[:, None], rows, dims, stride_t, T, D)
        tl.store(M + bh * T + rows, row_max, mask=rows < T)
        tl.store(L + bh * T + rows, row_sum, mask=rows < T)

    @triton.jit(do_not_specialize=["seed"])
    def _backward_rows(
        Q, K, V, DO, DQ, M, L, DELTA, PADS, B0, AK0, AV0, B1, AK1, AV1,
        DAK0, DAV0, DAK1, DAV1,
        seed, dropout_p, scale, stride_b, stride_h, stride_t, bucket_b0, bucket_b1, H, T, D,
        R0: tl.constexpr, R1: tl.constexpr, R0_PAD: tl.constexpr, R1_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        TWO_SETS: tl.constexpr, HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr,
        FLOAT32_DOTS: tl.constexpr, PRECISION: tl.constexpr,
    ):
        """One block of query rows: ``dq``, and this block's share of the table
        gradients ``dA^K_s = scale * G_s^T q`` and ``dA^V_s = W_s^T dO``, with
        ``G_s``, ``W_s`` the score gradient and the dropped probabilities per
        bucket, written to the block's own slot of ``DAK*``, ``DAV*``."""
        bh = tl.program_id(1)
        b = bh // H
        base = b * stride_b + (bh % H) * stride_h
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, BLOCK_D)
        q, do, row_max, row_sum, delta, qa0, qa1, da0, da1 = _row_block(
            Q, DO, M, L, DELTA, AK0, AV0, AK1, AV1, base, bh, rows, dims, stride_t, T, D,
            R0, R1, R0_PAD, R1_PAD, TWO_SETS, FLOAT32_DOTS, PRECISION)
        dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        grad0 = tl.zeros((BLOCK_M, R0_PAD), dtype=tl.float32)
        mass0 = tl.zeros((BLOCK_M, R0_PAD), dtype=tl.float32)
        grad1 = tl.zeros((BLOCK_M, R1_PAD), dtype=tl.float32)
        mass1 = tl.zeros((BLOCK_M, R1_PAD), dtype=tl.float32)
        for start in range(0, T, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            k, v, pads, b0, b1 = _key_block(K, V, PADS, B0, B1, base, b, rows, cols, dims, stride_t,
                                            bucket_b0, bucket_b1, T, D, HAS_PADS, TWO_SETS, q.dtype)
            dropped, ds = _tile_grads(q, k, v, do, qa0, qa1, da0, da1, b0, b1, pads, row_max, row_sum,
                                      delta, seed, dropout_p, bh, rows, cols, T, scale,
                                      TWO_SETS, DROPOUT, PRECISION)
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
            grad0 += _bucket_sums(ds, b0, R0, R0_PAD)
            mass0 += _bucket_sums(dropped, b0, R0, R0_PAD)
            if TWO_SETS:
                grad1 += _bucket_sums(ds, b1, R1, R1_PAD)
                mass1 += _bucket_sums(dropped, b1, R1, R1_PAD)
        dq += _to_table(grad0, AK0, R0, R0_PAD, dims, D, PRECISION)
        if TWO_SETS:
            dq += _to_table(grad1, AK1, R1, R1_PAD, dims, D, PRECISION)
        _store_tile(DQ + base, dq * scale, rows, dims, stride_t, T, D)
        slot = bh * tl.num_programs(0) + tl.program_id(0)
        q32 = q.to(tl.float32)
        do32 = do.to(tl.float32)
        _store_table_grad(DAK0 + slot * R0 * D, grad0 * scale, q32, R0, R0_PAD, dims, D, PRECISION)
        _store_table_grad(DAV0 + slot * R0 * D, mass0, do32, R0, R0_PAD, dims, D, PRECISION)
        if TWO_SETS:
            _store_table_grad(DAK1 + slot * R1 * D, grad1 * scale, q32, R1, R1_PAD, dims, D, PRECISION)
            _store_table_grad(DAV1 + slot * R1 * D, mass1, do32, R1, R1_PAD, dims, D, PRECISION)

    @triton.jit
    def _store_table_grad(ptr, per_bucket, x, R: tl.constexpr, R_PAD: tl.constexpr, dims, D,
                          PRECISION: tl.constexpr):
        """``ptr[r] = sum_i per_bucket[i, r] x_i``: a block's share of a table gradient."""
        grad = tl.dot(tl.trans(per_bucket), x, input_precision=PRECISION)
        _store_tile(ptr, grad, tl.arange(0, R_PAD), dims, D, R, D)

    @triton.jit(do_not_specialize=["seed"])
    def _backward_keys(
        Q, K, V, DO, DK, DV, M, L, DELTA, PADS, B0, AK0, AV0, B1, AK1, AV1,
        seed, dropout_p, scale, stride_b, stride_h, stride_t, bucket_b0, bucket_b1, H, T, D,
        R0: tl.constexpr, R1: tl.constexpr, R0_PAD: tl.constexpr, R1_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        TWO_SETS: tl.constexpr, HAS_PADS: tl.constexpr, DROPOUT: tl.constexpr,
        FLOAT32_DOTS: tl.constexpr, PRECISION: tl.constexpr,
    ):
        """One block of keys: ``dk = scale * dS^T q`` and ``dv = p~^T dO``."""
        bh = tl.program_id(1)
        b = bh // H
        base = b * stride_b + (bh % H) * stride_h
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        dims = tl.arange(0, BLOCK_D)
        dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
        dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
        for start in range(0, T, BLOCK_M):
            rows = start + tl.arange(0, BLOCK_M)
            q, do, row_max, row_sum, delta, qa0, qa1, da0, da1 = _row_block(
                Q, DO, M, L, DELTA, AK0, AV0, AK1, AV1, base, bh, rows, dims, stride_t, T, D,
                R0, R1, R0_PAD, R1_PAD, TWO_SETS, FLOAT32_DOTS, PRECISION)
            k, v, pads, b0, b1 = _key_block(K, V, PADS, B0, B1, base, b, rows, cols, dims, stride_t,
                                            bucket_b0, bucket_b1, T, D, HAS_PADS, TWO_SETS, q.dtype)
            dropped, ds = _tile_grads(q, k, v, do, qa0, qa1, da0, da1, b0, b1, pads, row_max, row_sum,
                                      delta, seed, dropout_p, bh, rows, cols, T, scale,
                                      TWO_SETS, DROPOUT, PRECISION)
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION)
            dv += tl.dot(tl.trans(dropped).to(do.dtype), do, input_precision=PRECISION)
        _store_tile(DK + base, dk * scale, cols, dims, stride_t, T, D)
        _store_tile(DV + base, dv, cols, dims, stride_t, T, D)


def bucket_dtype(clip: int) -> torch.dtype:
    """The smallest integer type of the bucket rows ``0..2*clip`` the kernels read."""
    return torch.int8 if 2 * clip <= torch.iinfo(torch.int8).max else torch.int32


def _block_size(length: int) -> int:
    """Query and key rows per tile: at least ``tl.dot``'s 16, 64 for long inputs."""
    return 16 if length <= 32 else 32 if length <= 128 else 64


def _in_layout(x: Tensor, like: Tensor) -> Tensor:
    """``x`` with the strides of ``like`` (one set serves every ``[B, H, T, D]`` tensor of the kernels)."""
    return x if x.stride() == like.stride() else torch.empty_like(like, dtype=x.dtype).copy_(x)


class _ShawFlashAttention(torch.autograd.Function):
    """Set 1 is ``None`` with one set of positions; the kernels then read set
    0's tensors in its place and never use them."""

    @staticmethod
    def forward(ctx, q, k, v, pads, dropout_p, seed, buckets0, keys0, values0, buckets1, keys1, values1):
        batch, heads, length, head_dim = q.shape
        two_sets = buckets1 is not None
        if not two_sets:
            buckets1, keys1, values1 = buckets0, keys0, values0
        k, v = _in_layout(k, q), _in_layout(v, q)
        out = torch.empty_like(q)
        stats = torch.empty(2, batch * heads, length, dtype=torch.float32, device=q.device)  # M, L
        block = _block_size(length)
        ctx.launch = dict(
            seed=seed, dropout_p=dropout_p, scale=head_dim**-0.5,
            stride_b=q.stride(0), stride_h=q.stride(1), stride_t=q.stride(2),
            bucket_b0=buckets0.stride(0), bucket_b1=buckets1.stride(0), H=heads, T=length, D=head_dim,
            R0=keys0.size(0), R1=keys1.size(0), R0_PAD=padded(keys0.size(0)), R1_PAD=padded(keys1.size(0)),
            BLOCK_M=block, BLOCK_N=block, BLOCK_D=padded(head_dim), TWO_SETS=two_sets,
            HAS_PADS=pads is not None, DROPOUT=dropout_p > 0,
            # Triton's interpreter multiplies bfloat16 tiles as raw bits: float32 there
            FLOAT32_DOTS=q.dtype == torch.bfloat16 and interpreted(),
            PRECISION="tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee",
        )
        pads = q.new_empty(0, dtype=torch.uint8) if pads is None else pads.contiguous().view(torch.uint8)
        tables = (buckets0, keys0, values0, buckets1, keys1, values1)
        _forward[(triton.cdiv(length, block), batch * heads)](
            q, k, v, out, stats[0], stats[1], pads, *tables, **ctx.launch)
        ctx.save_for_backward(q, k, v, out, stats, pads, *tables)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, stats, pads, *tables = ctx.saved_tensors
        launch = ctx.launch
        grad_out = _in_layout(grad_out, q)
        delta = (grad_out.float() * out.float()).sum(-1).flatten(0, 1)  # dO_i . z_i
        row_blocks = triton.cdiv(launch["T"], launch["BLOCK_M"])
        slots = row_blocks * delta.size(0)  # one per program of _backward_rows
        tables_learned = tables[1:3] + (tables[4:6] if launch["TWO_SETS"] else [])  # a^K, a^V of each set
        table_grads = [torch.empty(slots, *table.shape, dtype=torch.float32, device=q.device)
                       for table in tables_learned]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _backward_rows[(row_blocks, delta.size(0))](
            q, k, v, grad_out, dq, stats[0], stats[1], delta, pads, *tables,
            *table_grads, *([] if launch["TWO_SETS"] else table_grads), **launch)
        _backward_keys[(triton.cdiv(launch["T"], launch["BLOCK_N"]), delta.size(0))](
            q, k, v, grad_out, dk, dv, stats[0], stats[1], delta, pads, *tables, **launch)
        grads = [grad.sum(0).to(table.dtype) for grad, table in zip(table_grads, tables_learned)]
        dk0, dv0, dk1, dv1 = grads + [None] * (4 - len(grads))
        return dq, dk, dv, None, None, None, None, dk0, dv0, None, dk1, dv1


def shaw_flash_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
    position_sets: Sequence[Tuple[Tensor, Tensor, Tensor]], dropout_p: float = 0.0, seed: int = 0,
) -> Tensor:
    """Attention (``[B, H, T, d_h]``, laid out as ``q``) with Shaw relative keys and values
    of one or two ``position_sets``, each ``(buckets, a^K, a^V)``: ``[B or 1, T, T]``
    contiguous table rows (:func:`bucket_dtype`) and the ``[2k+1, d_h]`` tables.
    ``q, k, v``: ``[B, H, T, d_h]`` (float32, float16 or bfloat16), ``q`` not yet
    scaled; ``key_padding_mask``: ``[B, T]``, True at pads, or None."""
    batch, _, length, _ = q.shape
    sets = [(buckets.expand(batch, length, length), keys, values) for buckets, keys, values in position_sets]
    second = sets[1] if len(sets) == 2 else (None, None, None)
    return _ShawFlashAttention.apply(q, k, v, key_padding_mask, dropout_p, seed, *sets[0], *second)
