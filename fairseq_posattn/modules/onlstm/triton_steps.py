"""The ON-LSTM recurrence on CUDA (Hao et al. 2019, Eq. 3-9, cumax included;
the gate arithmetic of :func:`.reference.onlstm_cell`), forward and a
hand-written backward, in two forms:

* ``kernel="triton"``: per time step one matmul (cuBLAS) and one fused
  kernel; one program handles one row (one sentence, one direction) and
  keeps each gate's ``hidden`` units as a ``[n_chunk, chunk_size]`` tile, so
  a master unit covers its chunk by broadcasting;
* ``kernel="persistent"``: every step of a layer in one launch each way
  (:func:`onlstm_forward_persistent`, :func:`onlstm_backward_persistent`),
  each program a block of rows, the recurrent matmul inside.

Both share the arithmetic (:func:`_cell`, :func:`_cell_backward`).  The gate
arithmetic and the cell state are float32; the pre-activations are summed in
float32 from the input projection and the recurrent matmul.

Triton is optional (:data:`triton` is None without it).  The tests run these
kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).
"""

import os
from typing import List, Tuple

import torch
from torch import Tensor

from .packed import gate_buffers, recurrent_weight_grad, state_buffers, step_starts

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

__all__ = [
    "DTYPES", "onlstm_backward", "onlstm_backward_persistent", "onlstm_forward", "onlstm_forward_persistent", "triton",
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the kernels compute in


def _block(n: int) -> int:
    return triton.next_power_of_2(n)


if triton is not None:

    @triton.jit
    def _tanh(x):
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0

    @triton.jit
    def _tiles(N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
        """Unit offsets of a row's ``hidden`` units as a ``[BLOCK_M, BLOCK_C]`` tile
        (master unit ``k`` covers units ``k * CHUNK + j``) and their mask; the
        master units ``[BLOCK_M]`` and theirs."""
        k = tl.arange(0, BLOCK_M)[:, None]
        j = tl.arange(0, BLOCK_C)[None, :]
        m = tl.arange(0, BLOCK_M)
        return k * CHUNK + j, (k < N_CHUNK) & (j < CHUNK), m, m < N_CHUNK

    @triton.jit
    def _load_gates(row_ptr, unit, mask, m, valid, HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, master_pad):
        """A row's ``f, i, o, c_hat`` tiles and master forget/input vectors, float32
        (``master_pad`` beyond the master units)."""
        f = tl.load(row_ptr + unit, mask=mask, other=0.0).to(tl.float32)
        i = tl.load(row_ptr + HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        o = tl.load(row_ptr + 2 * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        c = tl.load(row_ptr + 3 * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        mf = tl.load(row_ptr + 4 * HIDDEN + m, mask=valid, other=master_pad).to(tl.float32)
        mi = tl.load(row_ptr + 4 * HIDDEN + N_CHUNK + m, mask=valid, other=master_pad).to(tl.float32)
        return f, i, o, c, mf, mi

    @triton.jit
    def _cell(zf, zi, zo, zc, mf, mi, c_prev):
        """The unit gates from their pre-activations and the master gates
        (broadcast over each chunk), then the cell and hidden state (Hao et
        al. 2019, Eq. 3-6): ``f, i, o, c_hat, c, h``."""
        f = tl.sigmoid(zf)
        i = tl.sigmoid(zi)
        o = tl.sigmoid(zo)
        c_hat = _tanh(zc)
        w = mf * mi  # Eq. 3
        f_hat = f * w + (mf - w)  # Eq. 4
        i_hat = i * w + (mi - w)  # Eq. 5
        c = f_hat * c_prev + i_hat * c_hat  # Eq. 6
        return f, i, o, c_hat, c, o * _tanh(c)

    @triton.jit
    def _cell_backward(f, i, o, c_hat, mf, mi, c, c_prev, dh, dc):
        """:func:`_cell` back-propagated from ``dh`` and the later step's ``dc``:
        the gradients of the four unit pre-activations, each unit's share of
        its master forget and input units' gradients (before their chunk's
        sum), and the cell gradient for the step before."""
        w = mf * mi
        nf = 1.0 - f
        ni = 1.0 - i
        tc = _tanh(c)
        # h = o * tanh(c);  c = f_hat * c_prev + i_hat * c_hat (Eq. 6)
        dc = dc + dh * o * (1.0 - tc * tc)
        f_hat = mf - w * nf
        i_hat = mi - w * ni
        d_f_hat = dc * c_prev
        d_i_hat = dc * c_hat
        neg_dw = d_f_hat * nf + d_i_hat * ni  # -dL/dw (Eq. 3-5)
        return (d_f_hat * w * f * nf, d_i_hat * w * i * ni, dh * tc * o * (1.0 - o),
                dc * i_hat * (1.0 - c_hat * c_hat), d_f_hat - neg_dw * mi, neg_dw * mf - d_i_hat, dc * f_hat)

    @triton.jit
    def _master_softmax(z, valid):
        """The softmax of a row's master-gate pre-activations over the ``valid``
        master units (Eq. 7; cumax is its cumulative sum), zero beyond."""
        p = tl.where(valid, tl.exp(z - tl.max(tl.where(valid, z, float("-inf")), 0)), 0.0)
        return p / tl.sum(p, 0)

    @triton.jit
    def _master_backward(p, d_cumax):
        """The gradient of a row's master-gate pre-activations from that of its
        cumax (Eq. 7-9): the cumulative sum's backward (suffix sums), then the
        softmax's."""
        dp = tl.sum(d_cumax, 0) - tl.cumsum(d_cumax, 0) + d_cumax
        return p * (dp - tl.sum(p * dp, 0))

    @triton.jit
    def _carried_cumsum(carry, x, BLOCK: tl.constexpr):
        """``carry + cumsum(x)`` along each row of a ``[rows, BLOCK]`` tile, and
        the carry for the next tile: that sum's last column (not ``tl.sum(x)``,
        which Triton 3.5-3.6 miscompiles where ``x`` is a load: a loop-carried
        sum of a loaded tile that the loop also reads fails its thread-locality pass)."""
        cum = carry[:, None] + tl.cumsum(x, 1)
        return cum, tl.sum(tl.where(tl.arange(0, BLOCK)[None, :] == BLOCK - 1, cum, 0.0), 1)

    @triton.jit
    def _running_max_sum(run_max, run_sum, z, valid):
        """Fold a tile of master pre-activations ``[rows, units]`` into each row's
        running maximum and sum of ``exp(z - maximum)``: a softmax over tiles."""
        z = tl.where(valid, z, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(z, 1))
        return new_max, run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(z - new_max[:, None]), 1)

    @triton.jit(do_not_specialize=["x_dir", "rec_dir", "act_dir", "c_dir", "h_dir"])
    def _step_forward(
        x_ptr, x_dir, rec_ptr, rec_dir, act_ptr, act_dir,
        c_prev_ptr, c_ptr, c_dir, h_ptr, h_dir,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
        HAS_PREV: tl.constexpr, SAVE: tl.constexpr,
    ):
        """One step of one row: ``z = x (+ rec)``, gates, cumax, ``c``, ``h`` (Hao et al. 2019, Eq. 3-9).

        Row strides are the unit counts (``G`` for gates, ``HIDDEN`` for
        states); ``*_dir`` are the direction strides.  ``SAVE`` writes the
        activated gates (sigmoid f, i, o; tanh c_hat; the master softmax
        probabilities) to ``act_ptr``, which may alias ``x_ptr``.
        """
        row = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        unit, mask, m, valid = _tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        zf, zi, zo, zc, zmf, zmi = _load_gates(x_ptr + d * x_dir + row * G, unit, mask, m, valid,
                                               HIDDEN, N_CHUNK, float("-inf"))
        if HAS_PREV:
            rf, ri, ro, rc, rmf, rmi = _load_gates(rec_ptr + d * rec_dir + row * G, unit, mask, m, valid,
                                                   HIDDEN, N_CHUNK, 0.0)
            zf += rf
            zi += ri
            zo += ro
            zc += rc
            zmf += rmf
            zmi += rmi
            c_prev = tl.load(c_prev_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        else:
            c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
        tl.debug_barrier()  # every read of the row is done before ``act_ptr`` overwrites it
        pf = _master_softmax(zmf, valid)
        pi = _master_softmax(zmi, valid)
        mf = tl.cumsum(pf, 0)[:, None]  # Eq. 8: master forget gate, over its chunk
        mi = 1.0 - tl.cumsum(pi, 0)[:, None]  # Eq. 9: master input gate
        f, i, o, c_hat, c, h = _cell(zf, zi, zo, zc, mf, mi, c_prev)
        if SAVE:
            a = act_ptr + d * act_dir + row * G
            tl.store(a + unit, f, mask=mask)
            tl.store(a + HIDDEN + unit, i, mask=mask)
            tl.store(a + 2 * HIDDEN + unit, o, mask=mask)
            tl.store(a + 3 * HIDDEN + unit, c_hat, mask=mask)
            tl.store(a + 4 * HIDDEN + m, pf, mask=valid)
            tl.store(a + 4 * HIDDEN + N_CHUNK + m, pi, mask=valid)
        tl.store(c_ptr + d * c_dir + row * HIDDEN + unit, c, mask=mask)
        tl.store(h_ptr + d * h_dir + row * HIDDEN + unit, h.to(h_ptr.dtype.element_ty), mask=mask)

    @triton.jit(do_not_specialize=["act_dir", "c_dir", "gh_dir", "rec_dir", "dc_dir", "dg_dir", "n_rec"])
    def _step_backward(
        act_ptr, act_dir, c_prev_ptr, c_ptr, c_dir, gh_ptr, gh_dir, rec_ptr, rec_dir, n_rec,
        dc_ptr, dc_dir, dg_ptr, dg_dir,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
        HAS_PREV: tl.constexpr, HAS_REC: tl.constexpr,
    ):
        """Gradients of one step of one row w.r.t. its pre-activations (Eq. 3-9 back-propagated).

        ``dh = gh (+ rec`` for rows ``< n_rec``: the later step's recurrent
        gradient); ``dc_ptr`` holds the cell gradient from the later step
        (zero for rows that end here) and gets ``dc * f_hat`` for the
        earlier one; ``dg_ptr`` gets the gate gradients (it may alias ``act_ptr``).
        """
        row = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        unit, mask, m, valid = _tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        f, i, o, c_hat, pf, pi = _load_gates(act_ptr + d * act_dir + row * G, unit, mask, m, valid,
                                             HIDDEN, N_CHUNK, 0.0)
        c = tl.load(c_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        if HAS_PREV:
            c_prev = tl.load(c_prev_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        else:
            c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
        dh = tl.load(gh_ptr + d * gh_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        if HAS_REC:
            if row < n_rec:
                dh += tl.load(rec_ptr + d * rec_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        dc_at = dc_ptr + d * dc_dir + row * HIDDEN + unit
        dc = tl.load(dc_at, mask=mask, other=0.0)
        tl.debug_barrier()  # every read of the row is done before ``dg_ptr`` overwrites it
        mf = tl.cumsum(pf, 0)[:, None]
        mi = 1.0 - tl.cumsum(pi, 0)[:, None]
        gf, gi, go, gc, share_f, share_i, dc = _cell_backward(f, i, o, c_hat, mf, mi, c, c_prev, dh, dc)
        dg = dg_ptr + d * dg_dir + row * G
        out_ty = dg_ptr.dtype.element_ty
        tl.store(dg + unit, gf.to(out_ty), mask=mask)
        tl.store(dg + HIDDEN + unit, gi.to(out_ty), mask=mask)
        tl.store(dg + 2 * HIDDEN + unit, go.to(out_ty), mask=mask)
        tl.store(dg + 3 * HIDDEN + unit, gc.to(out_ty), mask=mask)
        # dL/d cumax of each master unit: its chunk's sum (Eq. 8, 9)
        d_cmf = tl.sum(tl.where(mask, share_f, 0.0), 1)
        d_cmi = tl.sum(tl.where(mask, share_i, 0.0), 1)
        tl.store(dg + 4 * HIDDEN + m, _master_backward(pf, d_cmf).to(out_ty), mask=valid)
        tl.store(dg + 4 * HIDDEN + N_CHUNK + m, _master_backward(pi, d_cmi).to(out_ty), mask=valid)
        tl.store(dc_at, dc, mask=mask)

    @triton.jit
    def _dot(a, b, PRECISION: tl.constexpr):
        """``a @ b`` in float32; ``PRECISION`` is ``tl.dot``'s, or ``"float32"``:
        the tiles multiplied in float32 (Triton's interpreter multiplies
        bfloat16 tiles as raw bits; :func:`_dot_precision`)."""
        if PRECISION == "float32":
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        return tl.dot(a, b, input_precision=PRECISION)

    @triton.jit
    def _step_rows(step_ptr, steps, t, rows):
        """Step ``t`` of a block of rows, from :func:`_step_table`: their packed
        rows at ``t`` and at ``t - 1``, which of them are still running, and
        which of those have a step before."""
        here = tl.load(step_ptr + 1 + t) + rows
        live = rows < tl.load(step_ptr + 1 + steps + t)
        before = tl.load(step_ptr + t) + rows
        return here, live, before, live & (here != before)  # step 0's "before" is the leading zero: itself

    @triton.jit
    def _recurrent_dot(acc, h_prev_ptr, before, live, w_ptr, column, column_mask, HIDDEN: tl.constexpr,
                       G: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
        """``acc + h_prev[before] @ w[:, column]``: the recurrent pre-activations of
        a block of rows (zero where ``live`` is false) for some gate columns."""
        k = tl.arange(0, BLOCK_K)
        for k0 in range(0, HIDDEN, BLOCK_K):
            units = k0 + k
            h = tl.load(h_prev_ptr + before[:, None] * HIDDEN + units[None, :],
                        mask=live[:, None] & (units[None, :] < HIDDEN), other=0.0)
            w = tl.load(w_ptr + units[:, None] * G + column[None, :],
                        mask=(units[:, None] < HIDDEN) & column_mask[None, :], other=0.0)
            acc += _dot(h, w, PRECISION)
        return acc

    @triton.jit(do_not_specialize=["x_dir", "w_dir", "act_dir", "c_dir", "h_dir", "steps"])
    def _recurrence_forward(
        x_ptr, x_dir, w_ptr, w_dir, act_ptr, act_dir, c_ptr, c_dir, h_ptr, h_dir, master_ptr,
        step_ptr, steps,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        SAVE: tl.constexpr, PRECISION: tl.constexpr,
    ):
        """Every step of a block of ``BLOCK_B`` rows in one direction, in one
        launch: the recurrent matmul (``w_ptr``, ``[HIDDEN, G]``, read from the
        L2 cache at each step) and :func:`_cell`, for ``BLOCK_H`` units at a
        time, after the master gates, ``BLOCK_M`` master units at a time (a
        softmax over tiles, then cumulative sums carried from tile to tile).
        Rows never read each other's states, so the programs need no
        synchronisation.  ``step_ptr``: :func:`_step_table`; ``master_ptr`` is
        scratch for the rows' master gates (``[D, rows, 2, N_CHUNK]``, float32)."""
        block = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        x_ptr += d * x_dir
        w_ptr += d * w_dir
        act_ptr += d * act_dir
        c_ptr += d * c_dir
        h_ptr += d * h_dir
        rows = block * BLOCK_B + tl.arange(0, BLOCK_B)
        masters = master_ptr + (d * tl.num_programs(0) * BLOCK_B + rows[:, None]) * (2 * N_CHUNK)
        m = tl.arange(0, BLOCK_M)
        j = tl.arange(0, BLOCK_H)
        for t in range(steps):
            here, live, before, has_prev = _step_rows(step_ptr, steps, t, rows)
            # the master gates first (Eq. 7-9): every unit of the row needs them.  Their
            # pre-activations, a tile at a time, with each row's softmax maximum and sum ...
            max_f = tl.full((BLOCK_B,), float("-inf"), tl.float32)
            max_i = tl.full((BLOCK_B,), float("-inf"), tl.float32)
            sum_f = tl.zeros((BLOCK_B,), tl.float32)
            sum_i = tl.zeros((BLOCK_B,), tl.float32)
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                valid = unit < N_CHUNK
                mask = live[:, None] & valid[None, :]
                zf = tl.load(x_ptr + here[:, None] * G + 4 * HIDDEN + unit[None, :], mask=mask, other=0.0)
                zi = tl.load(x_ptr + here[:, None] * G + 4 * HIDDEN + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                zf = _recurrent_dot(zf.to(tl.float32), h_ptr, before, has_prev, w_ptr, 4 * HIDDEN + unit, valid,
                                    HIDDEN, G, BLOCK_K, PRECISION)
                zi = _recurrent_dot(zi.to(tl.float32), h_ptr, before, has_prev, w_ptr, 4 * HIDDEN + N_CHUNK + unit,
                                    valid, HIDDEN, G, BLOCK_K, PRECISION)
                tl.store(masters + unit[None, :], zf, mask=mask)
                tl.store(masters + N_CHUNK + unit[None, :], zi, mask=mask)
                max_f, sum_f = _running_max_sum(max_f, sum_f, zf, valid[None, :])
                max_i, sum_i = _running_max_sum(max_i, sum_i, zi, valid[None, :])
            tl.debug_barrier()
            # ... then softmax and cumulative sums, carried from tile to tile
            carry_f = tl.zeros((BLOCK_B,), tl.float32)
            carry_i = tl.zeros((BLOCK_B,), tl.float32)
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                valid = unit < N_CHUNK
                mask = live[:, None] & valid[None, :]
                zf = tl.load(masters + unit[None, :], mask=mask, other=0.0)
                zi = tl.load(masters + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                pf = tl.where(valid[None, :], tl.exp(zf - max_f[:, None]), 0.0) / sum_f[:, None]
                pi = tl.where(valid[None, :], tl.exp(zi - max_i[:, None]), 0.0) / sum_i[:, None]
                cum_f, carry_f = _carried_cumsum(carry_f, pf, BLOCK_M)
                cum_i, carry_i = _carried_cumsum(carry_i, pi, BLOCK_M)
                tl.store(masters + unit[None, :], cum_f, mask=mask)  # Eq. 8
                tl.store(masters + N_CHUNK + unit[None, :], 1.0 - cum_i, mask=mask)  # Eq. 9
                if SAVE:
                    tl.store(act_ptr + here[:, None] * G + 4 * HIDDEN + unit[None, :], pf, mask=mask)
                    tl.store(act_ptr + here[:, None] * G + 4 * HIDDEN + N_CHUNK + unit[None, :], pi, mask=mask)
            tl.debug_barrier()  # the master gates are in place before any unit reads them
            for j0 in range(0, HIDDEN, BLOCK_H):
                unit = j0 + j
                unit_mask = unit < HIDDEN
                mask = live[:, None] & unit_mask[None, :]
                gates = x_ptr + here[:, None] * G + unit[None, :]
                zf = tl.load(gates, mask=mask, other=0.0).to(tl.float32)
                zi = tl.load(gates + HIDDEN, mask=mask, other=0.0).to(tl.float32)
                zo = tl.load(gates + 2 * HIDDEN, mask=mask, other=0.0).to(tl.float32)
                zc = tl.load(gates + 3 * HIDDEN, mask=mask, other=0.0).to(tl.float32)
                zf = _recurrent_dot(zf, h_ptr, before, has_prev, w_ptr, unit, unit_mask, HIDDEN, G, BLOCK_K, PRECISION)
                zi = _recurrent_dot(zi, h_ptr, before, has_prev, w_ptr, HIDDEN + unit, unit_mask, HIDDEN, G, BLOCK_K,
                                    PRECISION)
                zo = _recurrent_dot(zo, h_ptr, before, has_prev, w_ptr, 2 * HIDDEN + unit, unit_mask, HIDDEN, G,
                                    BLOCK_K, PRECISION)
                zc = _recurrent_dot(zc, h_ptr, before, has_prev, w_ptr, 3 * HIDDEN + unit, unit_mask, HIDDEN, G,
                                    BLOCK_K, PRECISION)
                mf = tl.load(masters + (unit // CHUNK)[None, :], mask=mask, other=0.0)
                mi = tl.load(masters + N_CHUNK + (unit // CHUNK)[None, :], mask=mask, other=0.0)
                c_prev = tl.load(c_ptr + (before if SAVE else rows)[:, None] * HIDDEN + unit[None, :],
                                 mask=has_prev[:, None] & unit_mask[None, :], other=0.0)
                f, i, o, c_hat, c, h = _cell(zf, zi, zo, zc, mf, mi, c_prev)
                if SAVE:
                    a = act_ptr + here[:, None] * G + unit[None, :]
                    tl.store(a, f, mask=mask)
                    tl.store(a + HIDDEN, i, mask=mask)
                    tl.store(a + 2 * HIDDEN, o, mask=mask)
                    tl.store(a + 3 * HIDDEN, c_hat, mask=mask)
                tl.store(c_ptr + (here if SAVE else rows)[:, None] * HIDDEN + unit[None, :], c, mask=mask)
                tl.store(h_ptr + here[:, None] * HIDDEN + unit[None, :], h.to(h_ptr.dtype.element_ty), mask=mask)
            tl.debug_barrier()  # the step's states are in place before the next step reads them

    @triton.jit(do_not_specialize=["act_dir", "c_dir", "gh_dir", "dg_dir", "w_dir", "steps"])
    def _recurrence_backward(
        act_ptr, act_dir, c_ptr, c_dir, gh_ptr, gh_dir, dg_ptr, dg_dir, w_ptr, w_dir,
        dc_ptr, rec_ptr, master_ptr, sums_ptr, step_ptr, steps,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """:func:`_step_backward` for every step of a block of rows, last step
        first, in one launch, with the product ``dg_t @ w^T`` that carries the
        hidden state's gradient into step ``t - 1``.  Scratch, ``[D, rows, ...]``
        float32, zero where a row has not begun: ``dc_ptr`` and ``rec_ptr``
        (``HIDDEN``: the cell's and the hidden state's gradient from the later
        step), ``master_ptr`` (``2 * N_CHUNK``: the master gates) and
        ``sums_ptr`` (``2 * HIDDEN``: each unit's share of its master unit's
        gradient).  ``step_ptr``: :func:`_step_table`."""
        block = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        act_ptr += d * act_dir
        c_ptr += d * c_dir
        gh_ptr += d * gh_dir
        dg_ptr += d * dg_dir
        w_ptr += d * w_dir
        rows = block * BLOCK_B + tl.arange(0, BLOCK_B)
        scratch = d * tl.num_programs(0) * BLOCK_B + rows[:, None]
        dc_ptr += scratch * HIDDEN
        rec_ptr += scratch * HIDDEN
        masters = master_ptr + scratch * (2 * N_CHUNK)
        sums = sums_ptr + scratch * (2 * HIDDEN)
        m = tl.arange(0, BLOCK_M)
        chunk = tl.arange(0, BLOCK_C)
        j = tl.arange(0, BLOCK_H)
        k = tl.arange(0, BLOCK_K)
        for step in range(steps):
            here, live, before, has_prev = _step_rows(step_ptr, steps, steps - 1 - step, rows)
            # the master gates (Eq. 8, 9) from the saved softmax, a tile at a time
            carry_f = tl.zeros((BLOCK_B,), tl.float32)
            carry_i = tl.zeros((BLOCK_B,), tl.float32)
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                mask = live[:, None] & (unit < N_CHUNK)[None, :]
                pf = tl.load(act_ptr + here[:, None] * G + 4 * HIDDEN + unit[None, :], mask=mask, other=0.0)
                pi = tl.load(act_ptr + here[:, None] * G + 4 * HIDDEN + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                cum_f, carry_f = _carried_cumsum(carry_f, pf, BLOCK_M)
                cum_i, carry_i = _carried_cumsum(carry_i, pi, BLOCK_M)
                tl.store(masters + unit[None, :], cum_f, mask=mask)
                tl.store(masters + N_CHUNK + unit[None, :], 1.0 - cum_i, mask=mask)
            tl.debug_barrier()
            for j0 in range(0, HIDDEN, BLOCK_H):
                unit = j0 + j
                unit_mask = unit < HIDDEN
                mask = live[:, None] & unit_mask[None, :]
                a = act_ptr + here[:, None] * G + unit[None, :]
                f = tl.load(a, mask=mask, other=0.0)
                i = tl.load(a + HIDDEN, mask=mask, other=0.0)
                o = tl.load(a + 2 * HIDDEN, mask=mask, other=0.0)
                c_hat = tl.load(a + 3 * HIDDEN, mask=mask, other=0.0)
                mf = tl.load(masters + (unit // CHUNK)[None, :], mask=mask, other=0.0)
                mi = tl.load(masters + N_CHUNK + (unit // CHUNK)[None, :], mask=mask, other=0.0)
                c = tl.load(c_ptr + here[:, None] * HIDDEN + unit[None, :], mask=mask, other=0.0)
                c_prev = tl.load(c_ptr + before[:, None] * HIDDEN + unit[None, :],
                                 mask=has_prev[:, None] & unit_mask[None, :], other=0.0)
                dh = tl.load(gh_ptr + here[:, None] * HIDDEN + unit[None, :], mask=mask, other=0.0).to(tl.float32)
                dh += tl.load(rec_ptr + unit[None, :], mask=mask, other=0.0)
                dc = tl.load(dc_ptr + unit[None, :], mask=mask, other=0.0)
                gf, gi, go, gc, share_f, share_i, dc = _cell_backward(f, i, o, c_hat, mf, mi, c, c_prev, dh, dc)
                out_ty = dg_ptr.dtype.element_ty
                dg = dg_ptr + here[:, None] * G + unit[None, :]
                tl.store(dg, gf.to(out_ty), mask=mask)
                tl.store(dg + HIDDEN, gi.to(out_ty), mask=mask)
                tl.store(dg + 2 * HIDDEN, go.to(out_ty), mask=mask)
                tl.store(dg + 3 * HIDDEN, gc.to(out_ty), mask=mask)
                tl.store(sums + unit[None, :], share_f, mask=mask)
                tl.store(sums + HIDDEN + unit[None, :], share_i, mask=mask)
                tl.store(dc_ptr + unit[None, :], dc, mask=mask)
            tl.debug_barrier()  # every unit's share is in place before its master unit sums them
            # dL/d cumax of each master unit: its chunk's sum (Eq. 8, 9), over the
            # scratch of the master gates, which the units no longer read
            total_f = tl.zeros((BLOCK_B,), tl.float32)
            total_i = tl.zeros((BLOCK_B,), tl.float32)
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                valid = unit < N_CHUNK
                in_chunk = unit[None, :, None] * CHUNK + chunk[None, None, :]
                mask3 = live[:, None, None] & valid[None, :, None] & (chunk < CHUNK)[None, None, :]
                d_cmf = tl.sum(tl.load(sums[:, :, None] + in_chunk, mask=mask3, other=0.0), 2)
                d_cmi = tl.sum(tl.load(sums[:, :, None] + HIDDEN + in_chunk, mask=mask3, other=0.0), 2)
                mask = live[:, None] & valid[None, :]
                tl.store(masters + unit[None, :], d_cmf, mask=mask)
                tl.store(masters + N_CHUNK + unit[None, :], d_cmi, mask=mask)
                total_f += tl.sum(d_cmf, 1)
                total_i += tl.sum(d_cmi, 1)
            tl.debug_barrier()
            # the cumulative sum's backward, suffix sums carried from tile to tile (in
            # place), and the sums over the units of p * dp that the softmax's needs (Eq. 7)
            carry_f = tl.zeros((BLOCK_B,), tl.float32)
            carry_i = tl.zeros((BLOCK_B,), tl.float32)
            p_dp_f = tl.zeros((BLOCK_B,), tl.float32)
            p_dp_i = tl.zeros((BLOCK_B,), tl.float32)
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                mask = live[:, None] & (unit < N_CHUNK)[None, :]
                d_cmf = tl.load(masters + unit[None, :], mask=mask, other=0.0)
                d_cmi = tl.load(masters + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                cum_f, carry_f = _carried_cumsum(carry_f, d_cmf, BLOCK_M)
                cum_i, carry_i = _carried_cumsum(carry_i, d_cmi, BLOCK_M)
                dpf = total_f[:, None] - cum_f + d_cmf
                dpi = total_i[:, None] - cum_i + d_cmi
                pf = tl.load(act_ptr + here[:, None] * G + 4 * HIDDEN + unit[None, :], mask=mask, other=0.0)
                pi = tl.load(act_ptr + here[:, None] * G + 4 * HIDDEN + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                p_dp_f += tl.sum(pf * dpf, 1)
                p_dp_i += tl.sum(pi * dpi, 1)
                tl.store(masters + unit[None, :], dpf, mask=mask)
                tl.store(masters + N_CHUNK + unit[None, :], dpi, mask=mask)
            tl.debug_barrier()
            out_ty = dg_ptr.dtype.element_ty
            for m0 in range(0, N_CHUNK, BLOCK_M):
                unit = m0 + m
                mask = live[:, None] & (unit < N_CHUNK)[None, :]
                at = here[:, None] * G + 4 * HIDDEN + unit[None, :]
                pf = tl.load(act_ptr + at, mask=mask, other=0.0)
                pi = tl.load(act_ptr + at + N_CHUNK, mask=mask, other=0.0)
                dpf = tl.load(masters + unit[None, :], mask=mask, other=0.0)
                dpi = tl.load(masters + N_CHUNK + unit[None, :], mask=mask, other=0.0)
                tl.store(dg_ptr + at, (pf * (dpf - p_dp_f[:, None])).to(out_ty), mask=mask)
                tl.store(dg_ptr + at + N_CHUNK, (pi * (dpi - p_dp_i[:, None])).to(out_ty), mask=mask)
            tl.debug_barrier()  # the step's gate gradients are in place before they are multiplied
            # the hidden state's gradient into step t - 1: dg_t @ w^T
            for j0 in range(0, HIDDEN, BLOCK_H):
                unit = j0 + j
                unit_mask = unit < HIDDEN
                acc = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
                for g0 in range(0, G, BLOCK_K):
                    column = g0 + k
                    dg = tl.load(dg_ptr + here[:, None] * G + column[None, :],
                                 mask=has_prev[:, None] & (column < G)[None, :], other=0.0)
                    w_t = tl.load(w_ptr + unit[None, :] * G + column[:, None],
                                  mask=(column < G)[:, None] & unit_mask[None, :], other=0.0)
                    acc += _dot(dg, w_t, PRECISION)
                tl.store(rec_ptr + unit[None, :], acc, mask=live[:, None] & unit_mask[None, :])
            tl.debug_barrier()  # the next (earlier) step reads it


def _shape(hidden: int, chunk_size: int) -> dict:
    n_chunk = hidden // chunk_size
    return dict(HIDDEN=hidden, N_CHUNK=n_chunk, CHUNK=chunk_size, BLOCK_M=_block(n_chunk), BLOCK_C=_block(chunk_size))


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`.cpu_cell.onlstm_forward`'s arguments and results (the gates one
    ``[D, N, G]`` tensor), one matmul and one fused kernel per step."""
    num_dir = xs.size(0)
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    shape = _shape(hidden, chunk_size)
    start = 0
    prev = 0
    for t, n in enumerate(batch_sizes):
        stop = start + n
        rec = torch.bmm(out[:, prev : prev + n], w_hh) if t > 0 else xg
        c_new = cells[:, start:stop] if save else cells[:, :n]
        c_prev = cells[:, prev : prev + n] if save else c_new
        act = acts[:, start:stop] if save else xg
        _step_forward[(n, num_dir)](
            xg[:, start:stop], xg.stride(0), rec, rec.stride(0), act, act.stride(0),
            c_prev, c_new, cells.stride(0), out[:, start:stop], out.stride(0),
            HAS_PREV=t > 0, SAVE=save, **shape,
        )
        prev = start
        start = stop
    return out, acts, cells


PERSISTENT_ROWS = 16  # rows a persistent program takes (tl.dot's smallest tile)


def _tile(n: int, limit: int) -> int:
    """A tile of ``n`` (a power of two), at most ``limit`` and at least 16, as ``tl.dot`` needs."""
    return max(16, min(limit, _block(n)))


def _gate_gradient_buffer(acts: Tensor, hs: Tensor) -> Tensor:
    """Where the backward writes the gate gradients: over the saved gates when
    the dtypes agree."""
    return acts if acts.dtype == hs.dtype else torch.empty(acts.shape, dtype=hs.dtype, device=hs.device)


def _weight_gradient(grad_xg: Tensor, acts: Tensor, hs: Tensor, w_hh: Tensor, batch_sizes: List[int]) -> Tensor:
    """The recurrent weight's gradient after the backward's loop; if the loop
    wrote over the saved gates, a second backward is refused."""
    if grad_xg is acts:
        torch.autograd.graph.increment_version(acts)
    return recurrent_weight_grad(hs, grad_xg.unbind(0), w_hh, batch_sizes)


def _step_table(batch_sizes: List[int], device: torch.device) -> Tensor:
    """The persistent kernels' step table (int32): a zero, each step's first
    packed row (so entry ``t`` is step ``t - 1``'s, the zero step 0's own),
    then each step's row count."""
    return torch.tensor([0] + step_starts(batch_sizes) + list(batch_sizes), dtype=torch.int32).to(device)


def _dot_precision(dtype: torch.dtype) -> str:
    """:func:`_recurrent_dot`'s ``PRECISION``: float32 products as ``torch.bmm``
    computes them by default (no TF32), half tiles on the tensor cores."""
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return "float32"
    return "ieee" if dtype == torch.float32 else "tf32"


def onlstm_forward_persistent(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool, block_h: int = 64, block_k: int = 64,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`onlstm_forward`'s arguments and results, every step in one launch
    (:func:`_recurrence_forward`; ``block_h``/``block_k``: the units and the
    recurrent matmul's depth a program takes at a time, at least 16)."""
    num_dir = xs.size(0)
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    if len(batch_sizes) == 0:
        return out, acts, cells
    n_chunk = hidden // chunk_size
    steps = _step_table(batch_sizes, xs.device)
    blocks = triton.cdiv(batch_sizes[0], PERSISTENT_ROWS)
    masters = torch.empty(num_dir, blocks * PERSISTENT_ROWS, 2, n_chunk, dtype=torch.float32, device=xs.device)
    w_hh = w_hh.contiguous()
    act = acts if save else xg
    _recurrence_forward[(blocks, num_dir)](
        xg, xg.stride(0), w_hh, w_hh.stride(0), act, act.stride(0), cells, cells.stride(0), out, out.stride(0),
        masters, steps, len(batch_sizes),
        HIDDEN=hidden, N_CHUNK=n_chunk, CHUNK=chunk_size, BLOCK_M=_tile(n_chunk, block_h),
        BLOCK_B=PERSISTENT_ROWS, BLOCK_H=_tile(hidden, block_h), BLOCK_K=_tile(hidden, block_k),
        SAVE=save, PRECISION=_dot_precision(xs.dtype),
    )
    return out, acts, cells


def onlstm_backward_persistent(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int, block_h: int = 64, block_k: int = 64,
) -> Tuple[Tensor, Tensor]:
    """:func:`onlstm_backward`'s arguments and results, every step in one launch
    (:func:`_recurrence_backward`)."""
    num_dir = acts.size(0)
    grad_xg = _gate_gradient_buffer(acts, hs)
    if len(batch_sizes) == 0:
        return grad_xg, torch.zeros_like(w_hh)
    n_chunk = hidden // chunk_size
    steps = _step_table(batch_sizes, hs.device)
    blocks = triton.cdiv(batch_sizes[0], PERSISTENT_ROWS)
    dc, rec, sums, masters = (
        make(num_dir, blocks * PERSISTENT_ROWS, width, dtype=torch.float32, device=hs.device)
        for make, width in ((torch.zeros, hidden), (torch.zeros, hidden), (torch.empty, 2 * hidden),
                            (torch.empty, 2 * n_chunk))
    )
    w_hh = w_hh.contiguous()
    _recurrence_backward[(blocks, num_dir)](
        acts, acts.stride(0), cells, cells.stride(0), grad_hs, grad_hs.stride(0), grad_xg, grad_xg.stride(0),
        w_hh, w_hh.stride(0), dc, rec, masters, sums,
        steps, len(batch_sizes),
        HIDDEN=hidden, N_CHUNK=n_chunk, CHUNK=chunk_size,
        BLOCK_M=max(2, min(block_h, _block(n_chunk), 512 // _block(chunk_size))),  # chunk sums: <= 512 units a tile
        BLOCK_C=_block(chunk_size), BLOCK_B=PERSISTENT_ROWS, BLOCK_H=_tile(hidden, block_h),
        BLOCK_K=_tile(4 * hidden + 2 * n_chunk, block_k), PRECISION=_dot_precision(hs.dtype),
    )
    return grad_xg, _weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`.cpu_cell.onlstm_backward`'s arguments and results, one fused
    kernel and one matmul per step."""
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    grad_xg = _gate_gradient_buffer(acts, hs)
    if steps == 0:
        return grad_xg, torch.zeros_like(w_hh)
    w_t = w_hh.transpose(1, 2).contiguous()  # [D, G, hidden]
    starts = step_starts(batch_sizes)
    shape = _shape(hidden, chunk_size)
    dc = torch.zeros(num_dir, batch_sizes[0], hidden, dtype=torch.float32, device=hs.device)
    rec = grad_hs
    for t in range(steps - 1, -1, -1):
        start, n = starts[t], batch_sizes[t]
        c_prev = cells[:, starts[t - 1] :] if t > 0 else cells
        _step_backward[(n, num_dir)](
            acts[:, start:], acts.stride(0), c_prev, cells[:, start:], cells.stride(0),
            grad_hs[:, start:], grad_hs.stride(0), rec, rec.stride(0), rec.size(1) if t < steps - 1 else 0,
            dc, dc.stride(0), grad_xg[:, start:], grad_xg.stride(0),
            HAS_PREV=t > 0, HAS_REC=t < steps - 1, **shape,
        )
        if t > 0:
            rec = torch.bmm(grad_xg[:, start : start + n], w_t)  # [D, n, hidden]: dh from step t into t - 1
    return grad_xg, _weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)
