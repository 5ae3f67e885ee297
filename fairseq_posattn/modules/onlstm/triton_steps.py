"""The ON-LSTM recurrence on CUDA: the gate arithmetic of
:func:`.reference.onlstm_cell` (Hao et al. 2019, Eq. 3-9, cumax included)
and the cell update, forward and a hand-written backward, in two forms:

* ``kernel="triton"``: per time step one matmul (cuBLAS) and one fused
  kernel (:func:`onlstm_forward`, :func:`onlstm_backward`; their step loops,
  :func:`forward_steps` and :func:`backward_steps`, are what
  :mod:`.cuda_graphs` records); one program handles one row (one sentence,
  one direction);
* ``kernel="persistent"``: every step of a layer in one launch each way, the
  programs sharing each step's matmul and rows with a barrier between
  phases (:func:`onlstm_forward_persistent`, :func:`onlstm_backward_persistent`).

Both run the same row arithmetic (:func:`_row_forward`, :func:`_row_backward`),
which keeps each gate's ``hidden`` units as a ``[n_chunk, chunk_size]`` tile,
so a master unit covers its chunk by broadcasting.  The gate arithmetic and
the cell state are float32; the pre-activations are summed in float32 from
the input projection and the recurrent matmul.

Triton is optional (:data:`triton` is None without it).  The tests run these
kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).
"""

import os
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .packed import gate_buffers, recurrent_weight_grad, state_buffers, step_starts

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

__all__ = [
    "DTYPES", "backward_steps", "forward_steps", "gate_gradient_buffer", "onlstm_backward", "onlstm_backward_persistent",
    "onlstm_forward", "onlstm_forward_persistent", "triton", "weight_gradient",
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
    def _load_gates(row_ptr, unit, mask, m, valid, HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, master_pad,
                    CACHE: tl.constexpr):
        """A row's ``f, i, o, c_hat`` tiles and master forget/input vectors, float32
        (``master_pad`` beyond the master units; ``CACHE``: ``tl.load``'s
        cache modifier, ``".cg"`` for what other programs of the launch wrote)."""
        f = tl.load(row_ptr + unit, mask=mask, other=0.0, cache_modifier=CACHE).to(tl.float32)
        i = tl.load(row_ptr + HIDDEN + unit, mask=mask, other=0.0, cache_modifier=CACHE).to(tl.float32)
        o = tl.load(row_ptr + 2 * HIDDEN + unit, mask=mask, other=0.0, cache_modifier=CACHE).to(tl.float32)
        c = tl.load(row_ptr + 3 * HIDDEN + unit, mask=mask, other=0.0, cache_modifier=CACHE).to(tl.float32)
        mf = tl.load(row_ptr + 4 * HIDDEN + m, mask=valid, other=master_pad, cache_modifier=CACHE).to(tl.float32)
        mi = tl.load(row_ptr + 4 * HIDDEN + N_CHUNK + m, mask=valid, other=master_pad,
                     cache_modifier=CACHE).to(tl.float32)
        return f, i, o, c, mf, mi

    @triton.jit
    def _row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_row, c_row, h_row, unit, mask, m, valid,
                     HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, SAVE: tl.constexpr):
        """One row's step from its pre-activations (Hao et al. 2019, Eq. 3-9):
        gates, cumax, ``c`` to ``c_row``, ``h`` to ``h_row``; with ``SAVE`` the
        activated gates (sigmoid f, i, o; tanh c_hat; the master softmax
        probabilities) to ``act_row``."""
        f = tl.sigmoid(zf)
        i = tl.sigmoid(zi)
        o = tl.sigmoid(zo)
        c_hat = _tanh(zc)
        pf = tl.where(valid, tl.exp(zmf - tl.max(zmf, 0)), 0.0)
        pf = pf / tl.sum(pf, 0)
        pi = tl.where(valid, tl.exp(zmi - tl.max(zmi, 0)), 0.0)
        pi = pi / tl.sum(pi, 0)
        mf = tl.cumsum(pf, 0)[:, None]  # Eq. 8: master forget gate, over its chunk
        mi = 1.0 - tl.cumsum(pi, 0)[:, None]  # Eq. 9: master input gate
        w = mf * mi  # Eq. 3
        f_hat = f * w + (mf - w)  # Eq. 4
        i_hat = i * w + (mi - w)  # Eq. 5
        c = f_hat * c_prev + i_hat * c_hat  # Eq. 6
        h = o * _tanh(c)
        if SAVE:
            tl.store(act_row + unit, f, mask=mask)
            tl.store(act_row + HIDDEN + unit, i, mask=mask)
            tl.store(act_row + 2 * HIDDEN + unit, o, mask=mask)
            tl.store(act_row + 3 * HIDDEN + unit, c_hat, mask=mask)
            tl.store(act_row + 4 * HIDDEN + m, pf, mask=valid)
            tl.store(act_row + 4 * HIDDEN + N_CHUNK + m, pi, mask=valid)
        tl.store(c_row + unit, c, mask=mask)
        tl.store(h_row + unit, h.to(h_row.dtype.element_ty), mask=mask)

    @triton.jit
    def _row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_row, dc_row, unit, mask, m, valid,
                      HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr):
        """:func:`_row_forward` back-propagated from ``dh`` and the later step's
        ``dc``: the gate gradients to ``dg_row``, ``dc * f_hat`` (the cell
        gradient for the step before) to ``dc_row``."""
        mf = tl.cumsum(pf, 0)[:, None]
        mi = 1.0 - tl.cumsum(pi, 0)[:, None]
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
        out_ty = dg_row.dtype.element_ty
        tl.store(dg_row + unit, (d_f_hat * w * f * nf).to(out_ty), mask=mask)
        tl.store(dg_row + HIDDEN + unit, (d_i_hat * w * i * ni).to(out_ty), mask=mask)
        tl.store(dg_row + 2 * HIDDEN + unit, (dh * tc * o * (1.0 - o)).to(out_ty), mask=mask)
        d_chat = dc * i_hat
        tl.store(dg_row + 3 * HIDDEN + unit, (d_chat * (1.0 - c_hat * c_hat)).to(out_ty), mask=mask)
        # dL/d cumax of each master unit: its chunk's sum (Eq. 8, 9)
        d_cmf = tl.sum(tl.where(mask, d_f_hat - neg_dw * mi, 0.0), 1)
        d_cmi = -tl.sum(tl.where(mask, d_i_hat - neg_dw * mf, 0.0), 1)
        # cumsum backward: suffix sums; then softmax backward (Eq. 7)
        dpf = tl.sum(d_cmf, 0) - tl.cumsum(d_cmf, 0) + d_cmf
        dpi = tl.sum(d_cmi, 0) - tl.cumsum(d_cmi, 0) + d_cmi
        gf = pf * (dpf - tl.sum(pf * dpf, 0))
        gi = pi * (dpi - tl.sum(pi * dpi, 0))
        tl.store(dg_row + 4 * HIDDEN + m, gf.to(out_ty), mask=valid)
        tl.store(dg_row + 4 * HIDDEN + N_CHUNK + m, gi.to(out_ty), mask=valid)
        tl.store(dc_row + unit, dc * f_hat, mask=mask)

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
                                               HIDDEN, N_CHUNK, float("-inf"), "")
        if HAS_PREV:
            rf, ri, ro, rc, rmf, rmi = _load_gates(rec_ptr + d * rec_dir + row * G, unit, mask, m, valid,
                                                   HIDDEN, N_CHUNK, 0.0, "")
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
        _row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_ptr + d * act_dir + row * G,
                     c_ptr + d * c_dir + row * HIDDEN, h_ptr + d * h_dir + row * HIDDEN, unit, mask, m, valid,
                     HIDDEN, N_CHUNK, SAVE)

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
                                             HIDDEN, N_CHUNK, 0.0, "")
        c = tl.load(c_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        if HAS_PREV:
            c_prev = tl.load(c_prev_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        else:
            c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
        dh = tl.load(gh_ptr + d * gh_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        if HAS_REC:
            if row < n_rec:
                dh += tl.load(rec_ptr + d * rec_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        dc_row = dc_ptr + d * dc_dir + row * HIDDEN
        dc = tl.load(dc_row + unit, mask=mask, other=0.0)
        tl.debug_barrier()  # every read of the row is done before ``dg_ptr`` overwrites it
        _row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_ptr + d * dg_dir + row * G, dc_row,
                      unit, mask, m, valid, HIDDEN, N_CHUNK)

    @triton.jit
    def _dot(a, b, PRECISION: tl.constexpr):
        """``a @ b`` in float32; ``PRECISION`` is ``tl.dot``'s, or ``"float32"``:
        the tiles multiplied in float32 (Triton's interpreter multiplies
        bfloat16 tiles as raw bits; :func:`_dot_precision`)."""
        if PRECISION == "float32":
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        return tl.dot(a, b, input_precision=PRECISION)

    @triton.jit
    def _step(step_ptr, steps, t):
        """Step ``t``'s first packed row, its row count, and the first packed row
        of step ``t - 1`` (of step 0 at step 0) from :func:`_step_table`."""
        return tl.load(step_ptr + t), tl.load(step_ptr + steps + t), tl.load(step_ptr + tl.maximum(t - 1, 0))

    @triton.jit
    def _all_arrived(flags_ptr, epoch, PROGRAMS: tl.constexpr, BLOCK_P: tl.constexpr):
        """A barrier among one direction's ``PROGRAMS`` programs, which are all
        resident on the GPU at once: this program publishes ``epoch`` in its
        flag (a release, after every write it made), polls the flags with
        plain L2 reads until every one holds it, then reads them once more
        with an acquire.  A wait longer than 2**20 polls sets the flag after
        them (``flags_ptr[PROGRAMS]``), which ends every later wait: a launch
        whose programs were not all resident finishes, with wrong results,
        rather than hang the GPU."""
        tl.debug_barrier()
        tl.atomic_xchg(flags_ptr + tl.program_id(0), epoch, sem="release", scope="gpu")
        p = tl.arange(0, BLOCK_P)
        polls = tl.full((), 0, tl.int32)
        seen = tl.full((), 0, tl.int32)
        while seen < epoch:
            flags = tl.load(flags_ptr + p, mask=p <= PROGRAMS, other=0, volatile=True)
            seen = tl.min(tl.where(p < PROGRAMS, flags, epoch), 0)
            if tl.max(tl.where(p == PROGRAMS, flags, 0), 0) > 0:
                seen = epoch
            polls += 1
            if polls > 1048576:
                tl.atomic_xchg(flags_ptr + PROGRAMS, 1, sem="release", scope="gpu")
                seen = epoch
        tl.atomic_add(flags_ptr + p, 0, mask=p < PROGRAMS, sem="acquire", scope="gpu")
        tl.debug_barrier()

    @triton.jit(do_not_specialize=["x_dir", "w_dir", "act_dir", "c_dir", "h_dir", "steps", "t_first", "t_last",
                                   "rows"])
    def _recurrence_forward(
        x_ptr, x_dir, w_ptr, w_dir, z_ptr, act_ptr, act_dir, c_ptr, c_dir, h_ptr, h_dir,
        step_ptr, steps, flags_ptr, t_first, t_last, rows,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        PROGRAMS: tl.constexpr,
        BLOCK_P: tl.constexpr, SAVE: tl.constexpr, MATMUL: tl.constexpr, CELL: tl.constexpr,
        ONE_LAUNCH: tl.constexpr, PRECISION: tl.constexpr,
    ):
        """Steps ``t_first`` to ``t_last - 1`` of one direction, its ``PROGRAMS``
        programs working together, each step in two phases.  The matmul:
        ``z = x + h_{t-1} W_hh`` for every row of the step, program ``p``
        taking the gate columns from ``p * BLOCK_N`` (into the float32 scratch
        ``z_ptr``, ``[D, rows, G]``).  The cell (:func:`_row_forward`):
        program ``p`` takes the rows ``p, p + PROGRAMS, ...``, so a row's cell
        state never leaves its program.  With ``ONE_LAUNCH`` a launch runs
        every step, a barrier (:func:`_all_arrived`) after each phase;
        otherwise it runs the phase that ``MATMUL`` or ``CELL`` names, one
        launch each, as Triton's interpreter (which runs programs one after
        another) can.  ``step_ptr``: each step's first packed row, then its
        row count."""
        p = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        x_ptr += d * x_dir
        w_ptr += d * w_dir
        act_ptr += d * act_dir
        c_ptr += d * c_dir
        h_ptr += d * h_dir
        z_ptr += d * rows * G
        flags_ptr += d * (PROGRAMS + 1)
        column = p * BLOCK_N + tl.arange(0, BLOCK_N)
        block_rows = tl.arange(0, BLOCK_B)
        k = tl.arange(0, BLOCK_K)
        unit, mask, m, valid = _tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        for t in range(t_first, t_last):
            start, n, prev = _step(step_ptr, steps, t)
            if MATMUL:
                for r0 in range(0, n, BLOCK_B):
                    row = r0 + block_rows
                    tile = (row < n)[:, None] & (column < G)[None, :]
                    acc = tl.load(x_ptr + (start + row)[:, None] * G + column[None, :], mask=tile,
                                  other=0.0).to(tl.float32)
                    if t > 0:
                        for k0 in range(0, HIDDEN, BLOCK_K):
                            depth = k0 + k
                            h = tl.load(h_ptr + (prev + row)[:, None] * HIDDEN + depth[None, :],
                                        mask=(row < n)[:, None] & (depth < HIDDEN)[None, :], other=0.0,
                                        cache_modifier=".cg")
                            w = tl.load(w_ptr + depth[:, None] * G + column[None, :],
                                        mask=(depth < HIDDEN)[:, None] & (column < G)[None, :], other=0.0)
                            acc += _dot(h, w, PRECISION)
                    tl.store(z_ptr + row[:, None] * G + column[None, :], acc, mask=tile)
                if ONE_LAUNCH:
                    _all_arrived(flags_ptr, 2 * t + 1, PROGRAMS, BLOCK_P)
            if CELL:
                for r in range(p, n, PROGRAMS):
                    zf, zi, zo, zc, zmf, zmi = _load_gates(z_ptr + r * G, unit, mask, m, valid, HIDDEN, N_CHUNK,
                                                           float("-inf"), ".cg")
                    if t > 0:
                        c_prev = tl.load(c_ptr + ((prev + r) if SAVE else r) * HIDDEN + unit, mask=mask, other=0.0)
                    else:
                        c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
                    _row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_ptr + (start + r) * G,
                                 c_ptr + ((start + r) if SAVE else r) * HIDDEN, h_ptr + (start + r) * HIDDEN,
                                 unit, mask, m, valid, HIDDEN, N_CHUNK, SAVE)
                if ONE_LAUNCH:
                    _all_arrived(flags_ptr, 2 * t + 2, PROGRAMS, BLOCK_P)

    @triton.jit(do_not_specialize=["act_dir", "c_dir", "gh_dir", "dg_dir", "w_dir", "steps", "t_first", "t_last",
                                   "rows"])
    def _recurrence_backward(
        act_ptr, act_dir, c_ptr, c_dir, gh_ptr, gh_dir, dg_ptr, dg_dir, w_ptr, w_dir, rec_ptr, dc_ptr,
        step_ptr, steps, flags_ptr, t_first, t_last, rows,
        HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        PROGRAMS: tl.constexpr,
        BLOCK_P: tl.constexpr, MATMUL: tl.constexpr, CELL: tl.constexpr, ONE_LAUNCH: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        """:func:`_recurrence_forward` back-propagated, last step first (``s``
        counts from the last step), each step in two phases.  The cell
        (:func:`_row_backward`), program ``p`` taking the rows ``p, p +
        PROGRAMS, ...``: ``dh`` from ``gh`` and the recurrent gradient that
        the later step left in the float32 scratch ``rec_ptr`` (``[D, rows,
        HIDDEN]``, zero for rows that end here), ``dc`` in the program's rows
        of ``dc_ptr`` (likewise).  The matmul: ``dh_{t-1} = dg_t W_hh^T`` into
        ``rec_ptr``, program ``p`` taking the hidden units from ``p * BLOCK_H``."""
        p = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        act_ptr += d * act_dir
        c_ptr += d * c_dir
        gh_ptr += d * gh_dir
        dg_ptr += d * dg_dir
        w_ptr += d * w_dir
        rec_ptr += d * rows * HIDDEN
        dc_ptr += d * rows * HIDDEN
        flags_ptr += d * (PROGRAMS + 1)
        hid = p * BLOCK_H + tl.arange(0, BLOCK_H)
        block_rows = tl.arange(0, BLOCK_B)
        k = tl.arange(0, BLOCK_K)
        unit, mask, m, valid = _tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        for s in range(t_first, t_last):
            t = steps - 1 - s
            start, n, prev = _step(step_ptr, steps, t)
            if CELL:
                for r in range(p, n, PROGRAMS):
                    f, i, o, c_hat, pf, pi = _load_gates(act_ptr + (start + r) * G, unit, mask, m, valid, HIDDEN,
                                                         N_CHUNK, 0.0, "")
                    c = tl.load(c_ptr + (start + r) * HIDDEN + unit, mask=mask, other=0.0)
                    if t > 0:
                        c_prev = tl.load(c_ptr + (prev + r) * HIDDEN + unit, mask=mask, other=0.0)
                    else:
                        c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
                    dh = tl.load(gh_ptr + (start + r) * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
                    dh += tl.load(rec_ptr + r * HIDDEN + unit, mask=mask, other=0.0, cache_modifier=".cg")
                    dc = tl.load(dc_ptr + r * HIDDEN + unit, mask=mask, other=0.0)
                    tl.debug_barrier()  # every read of the row is done before ``dg_ptr`` overwrites it
                    _row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_ptr + (start + r) * G,
                                  dc_ptr + r * HIDDEN, unit, mask, m, valid, HIDDEN, N_CHUNK)
                if ONE_LAUNCH:
                    _all_arrived(flags_ptr, 2 * s + 1, PROGRAMS, BLOCK_P)
            if MATMUL:
                if t > 0:
                    for r0 in range(0, n, BLOCK_B):
                        row = r0 + block_rows
                        acc = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
                        for g0 in range(0, G, BLOCK_K):
                            gate = g0 + k
                            dg = tl.load(dg_ptr + (start + row)[:, None] * G + gate[None, :],
                                         mask=(row < n)[:, None] & (gate < G)[None, :], other=0.0,
                                         cache_modifier=".cg")
                            w_t = tl.load(w_ptr + hid[None, :] * G + gate[:, None],
                                          mask=(gate < G)[:, None] & (hid < HIDDEN)[None, :], other=0.0)
                            acc += _dot(dg, w_t, PRECISION)
                        tl.store(rec_ptr + row[:, None] * HIDDEN + hid[None, :], acc,
                                 mask=(row < n)[:, None] & (hid < HIDDEN)[None, :])
                if ONE_LAUNCH:
                    _all_arrived(flags_ptr, 2 * s + 2, PROGRAMS, BLOCK_P)


def _shape(hidden: int, chunk_size: int) -> dict:
    n_chunk = hidden // chunk_size
    return dict(HIDDEN=hidden, N_CHUNK=n_chunk, CHUNK=chunk_size, BLOCK_M=_block(n_chunk), BLOCK_C=_block(chunk_size))


def gate_gradient_buffer(acts: Tensor, hs: Tensor, empty=torch.empty) -> Tensor:
    """Where a backward writes the gate gradients: over the saved gates when
    the dtypes agree, else a buffer from ``empty`` (``torch.empty``'s signature)."""
    return acts if acts.dtype == hs.dtype else empty(acts.shape, dtype=hs.dtype, device=hs.device)


def weight_gradient(grad_xg: Tensor, acts: Tensor, hs: Tensor, w_hh: Tensor, batch_sizes: List[int]) -> Tensor:
    """The recurrent weight's gradient after a backward's steps; if they wrote
    over the saved gates, a second backward must be refused."""
    if grad_xg is acts:
        torch.autograd.graph.increment_version(acts)
    return recurrent_weight_grad(hs, grad_xg.unbind(0), w_hh, batch_sizes)


def forward_steps(xg: Tensor, acts: Tensor, cells: Tensor, out: Tensor, w_hh: Tensor, batch_sizes: List[int],
                  hidden: int, chunk_size: int, save: bool) -> None:
    """The steps of :func:`onlstm_forward`, one matmul and one fused kernel
    each, in the buffers of :func:`.packed.gate_buffers` and
    :func:`.packed.state_buffers` (the input projections ``xg`` already in)."""
    num_dir = xg.size(0)
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


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`.cpu_cell.onlstm_forward`'s arguments and results (the gates one
    ``[D, N, G]`` tensor), one matmul and one fused kernel per step."""
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    forward_steps(xg, acts, cells, out, w_hh, batch_sizes, hidden, chunk_size, save)
    return out, acts, cells


def backward_steps(grad_hs: Tensor, w_hh: Tensor, acts: Tensor, cells: Tensor, grad_xg: Tensor,
                   batch_sizes: List[int], hidden: int, chunk_size: int) -> None:
    """The steps of :func:`onlstm_backward`, last first, one fused kernel and
    one matmul each: the gate gradients into ``grad_xg``
    (:func:`gate_gradient_buffer`)."""
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    if steps == 0:
        return
    w_t = w_hh.transpose(1, 2).contiguous()  # [D, G, hidden]
    starts = step_starts(batch_sizes)
    shape = _shape(hidden, chunk_size)
    dc = torch.zeros(num_dir, batch_sizes[0], hidden, dtype=torch.float32, device=acts.device)
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


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`.cpu_cell.onlstm_backward`'s arguments and results, one fused
    kernel and one matmul per step."""
    grad_xg = gate_gradient_buffer(acts, hs)
    backward_steps(grad_hs, w_hh, acts, cells, grad_xg, batch_sizes, hidden, chunk_size)
    return grad_xg, weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)


def _dot_precision(dtype: torch.dtype) -> str:
    """:func:`_dot`'s ``PRECISION``: float32 products as ``torch.bmm`` computes
    them by default (no TF32), half tiles on the tensor cores."""
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return "float32"
    return "ieee" if dtype == torch.float32 else "tf32"


def _multiprocessors(device: torch.device) -> Optional[int]:
    """The GPU's multiprocessor count; None on the CPU, where Triton's interpreter runs the kernels."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def _persistent_shape(hidden: int, chunk_size: int, num_dir: int, rows: int,
                      multiprocessors: Optional[int]) -> dict:
    """The persistent kernels' programs and tiles for batches of up to ``rows``
    sentences.  On a GPU every program of a launch must be resident at once
    (they wait for each other), so the launch takes at most half the GPU's
    ``multiprocessors``: the gate columns a program multiplies (``BLOCK_N``)
    double until it does.  A matmul tile takes up to 64 rows (``BLOCK_B``),
    so a program reads its weights once a step for up to 64 sentences.
    Triton's interpreter (``multiprocessors`` None) runs one phase per
    launch (``ONE_LAUNCH`` off), with the smallest tiles."""
    num_gates = 4 * hidden + 2 * (hidden // chunk_size)
    one_launch = multiprocessors is not None
    limit = multiprocessors // 2 if one_launch else 64
    block_n = 16
    while num_dir * triton.cdiv(num_gates, block_n) > limit:
        block_n *= 2
    programs = triton.cdiv(num_gates, block_n)
    return dict(_shape(hidden, chunk_size), PROGRAMS=programs, BLOCK_P=_block(programs + 1), BLOCK_N=block_n,
                BLOCK_H=max(16, _block(triton.cdiv(hidden, programs))), BLOCK_K=64 if one_launch else 16,
                BLOCK_B=max(16, min(64 if one_launch else 16, _block(rows))), ONE_LAUNCH=one_launch)


def _step_table(batch_sizes: List[int], device: torch.device) -> Tensor:
    """Each step's first packed row, then each step's row count (int32)."""
    return torch.tensor(step_starts(batch_sizes) + list(batch_sizes), dtype=torch.int32).to(device)


def onlstm_forward_persistent(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`onlstm_forward`'s arguments and results, every step in one launch
    on a GPU (:func:`_recurrence_forward`)."""
    num_dir = xs.size(0)
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    steps = len(batch_sizes)
    if steps == 0:
        return out, acts, cells
    shape = _persistent_shape(hidden, chunk_size, num_dir, batch_sizes[0], _multiprocessors(xs.device))
    del shape["BLOCK_H"]
    table = _step_table(batch_sizes, xs.device)
    z = torch.empty(num_dir, batch_sizes[0], xg.size(2), dtype=torch.float32, device=xs.device)
    flags = torch.zeros(num_dir, shape["PROGRAMS"] + 1, dtype=torch.int32, device=xs.device)
    w_hh = w_hh.contiguous()
    act = acts if save else xg

    def launch(t_first: int, t_last: int, **phases):
        _recurrence_forward[(shape["PROGRAMS"], num_dir)](
            xg, xg.stride(0), w_hh, w_hh.stride(0), z, act, act.stride(0), cells, cells.stride(0),
            out, out.stride(0), table, steps, flags, t_first, t_last, batch_sizes[0],
            SAVE=save, PRECISION=_dot_precision(xs.dtype), **phases, **shape)

    if shape["ONE_LAUNCH"]:
        launch(0, steps, MATMUL=True, CELL=True)
    else:
        for t in range(steps):
            launch(t, t + 1, MATMUL=True, CELL=False)
            launch(t, t + 1, MATMUL=False, CELL=True)
    return out, acts, cells


def onlstm_backward_persistent(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`onlstm_backward`'s arguments and results, every step in one
    launch on a GPU (:func:`_recurrence_backward`)."""
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    grad_xg = gate_gradient_buffer(acts, hs)
    if steps == 0:
        return grad_xg, torch.zeros_like(w_hh)
    shape = _persistent_shape(hidden, chunk_size, num_dir, batch_sizes[0], _multiprocessors(hs.device))
    del shape["BLOCK_N"]
    table = _step_table(batch_sizes, hs.device)
    rec, dc = (torch.zeros(num_dir, batch_sizes[0], hidden, dtype=torch.float32, device=hs.device) for _ in range(2))
    flags = torch.zeros(num_dir, shape["PROGRAMS"] + 1, dtype=torch.int32, device=hs.device)
    w_hh = w_hh.contiguous()

    def launch(s_first: int, s_last: int, **phases):
        _recurrence_backward[(shape["PROGRAMS"], num_dir)](
            acts, acts.stride(0), cells, cells.stride(0), grad_hs, grad_hs.stride(0), grad_xg, grad_xg.stride(0),
            w_hh, w_hh.stride(0), rec, dc, table, steps, flags, s_first, s_last, batch_sizes[0],
            PRECISION=_dot_precision(hs.dtype), **phases, **shape)

    if shape["ONE_LAUNCH"]:
        launch(0, steps, MATMUL=True, CELL=True)
    else:
        for s in range(steps):
            launch(s, s + 1, MATMUL=False, CELL=True)
            launch(s, s + 1, MATMUL=True, CELL=False)
    return grad_xg, weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)
