"""The ON-LSTM recurrence on CUDA (Hao et al. 2019, Eq. 3-9), one time step
at a time: per step one matmul (cuBLAS) and one fused Triton kernel for the
gates and the cell update, forward and a hand-written backward, one program
per row (one sentence, one direction).  The row arithmetic (float32) keeps
each gate's units as a ``[n_chunk, chunk_size]`` tile, so a master unit covers
its chunk by broadcasting; the candidates reuse it and the step loops.
"""

from typing import List, Tuple

import torch
from torch import Tensor

from .onlstm_packed import gate_buffers, recurrent_weight_grad, state_buffers, step_starts
from .triton_common import triton

__all__ = ["backward_steps", "forward_steps", "gate_gradient_buffer", "onlstm_backward", "onlstm_forward",
           "tile_shape", "weight_gradient"]


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _tanh(x):
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0

    @triton.jit
    def unit_tiles(N_CHUNK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
        """Unit offsets of a row's ``hidden`` units as a ``[BLOCK_M, BLOCK_C]`` tile
        (master unit ``k`` covers units ``k * CHUNK + j``) and their mask; the
        master units ``[BLOCK_M]`` and theirs."""
        k = tl.arange(0, BLOCK_M)[:, None]
        j = tl.arange(0, BLOCK_C)[None, :]
        m = tl.arange(0, BLOCK_M)
        return k * CHUNK + j, (k < N_CHUNK) & (j < CHUNK), m, m < N_CHUNK

    @triton.jit
    def load_gates(row_ptr, unit, mask, m, valid, HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr, master_pad,
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
    def row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_row, c_row, h_row, unit, mask, m, valid,
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
    def row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_row, dc_row, unit, mask, m, valid,
                     HIDDEN: tl.constexpr, N_CHUNK: tl.constexpr):
        """:func:`row_forward` back-propagated from ``dh`` and the later step's
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
        """:func:`row_forward` of ``z = x (+ rec)`` for one row; ``*_dir`` are the
        direction strides; ``act_ptr`` may alias ``x_ptr``."""
        row = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        unit, mask, m, valid = unit_tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        zf, zi, zo, zc, zmf, zmi = load_gates(x_ptr + d * x_dir + row * G, unit, mask, m, valid,
                                              HIDDEN, N_CHUNK, float("-inf"), "")
        if HAS_PREV:
            rf, ri, ro, rc, rmf, rmi = load_gates(rec_ptr + d * rec_dir + row * G, unit, mask, m, valid,
                                                  HIDDEN, N_CHUNK, 0.0, "")
            zf += rf
            zi += ri
            zo += ro
            zc += rc
            zmf += rmf
            zmi += rmi
        c_prev = tl.load(c_prev_ptr + d * c_dir + row * HIDDEN + unit, mask=mask & HAS_PREV, other=0.0)
        tl.debug_barrier()  # every read of the row is done before ``act_ptr`` overwrites it
        row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_ptr + d * act_dir + row * G,
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
        """:func:`row_backward` of one row with ``dh = gh (+ rec`` for rows ``< n_rec``:
        the later step's recurrent gradient) and ``dc`` from ``dc_ptr`` (zero for
        rows that end here); ``dg_ptr`` may alias ``act_ptr``."""
        row = tl.program_id(0)
        d = tl.program_id(1)
        G: tl.constexpr = 4 * HIDDEN + 2 * N_CHUNK
        unit, mask, m, valid = unit_tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        f, i, o, c_hat, pf, pi = load_gates(act_ptr + d * act_dir + row * G, unit, mask, m, valid,
                                            HIDDEN, N_CHUNK, 0.0, "")
        c = tl.load(c_ptr + d * c_dir + row * HIDDEN + unit, mask=mask, other=0.0)
        c_prev = tl.load(c_prev_ptr + d * c_dir + row * HIDDEN + unit, mask=mask & HAS_PREV, other=0.0)
        dh = tl.load(gh_ptr + d * gh_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        if HAS_REC:
            if row < n_rec:
                dh += tl.load(rec_ptr + d * rec_dir + row * HIDDEN + unit, mask=mask, other=0.0).to(tl.float32)
        dc_row = dc_ptr + d * dc_dir + row * HIDDEN
        dc = tl.load(dc_row + unit, mask=mask, other=0.0)
        tl.debug_barrier()  # every read of the row is done before ``dg_ptr`` overwrites it
        row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_ptr + d * dg_dir + row * G, dc_row,
                     unit, mask, m, valid, HIDDEN, N_CHUNK)


def tile_shape(hidden: int, chunk_size: int) -> dict:
    """The row kernels' constants: the gate widths and the ``[n_chunk, chunk_size]`` tile padded to powers of two."""
    n_chunk = hidden // chunk_size
    return dict(HIDDEN=hidden, N_CHUNK=n_chunk, CHUNK=chunk_size, BLOCK_M=triton.next_power_of_2(n_chunk),
                BLOCK_C=triton.next_power_of_2(chunk_size))


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
    """The steps of :func:`onlstm_forward` in the buffers of :mod:`.onlstm_packed`
    (the input projections ``xg`` already in)."""
    num_dir = xg.size(0)
    shape = tile_shape(hidden, chunk_size)
    prev = 0
    for t, (start, n) in enumerate(zip(step_starts(batch_sizes), batch_sizes)):
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


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`.onlstm_cpp.onlstm_forward`'s arguments and results (the gates one ``[D, N, G]`` tensor)."""
    xg, acts = gate_buffers(xs, w_ih, bias, save)
    cells, out = state_buffers(xs, batch_sizes, hidden, save)
    forward_steps(xg, acts, cells, out, w_hh, batch_sizes, hidden, chunk_size, save)
    return out, acts, cells


def backward_steps(grad_hs: Tensor, w_hh: Tensor, acts: Tensor, cells: Tensor, grad_xg: Tensor,
                   batch_sizes: List[int], hidden: int, chunk_size: int) -> None:
    """The steps of :func:`onlstm_backward`, last first: the gate gradients into
    ``grad_xg`` (:func:`gate_gradient_buffer`)."""
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    if steps == 0:
        return
    w_t = w_hh.transpose(1, 2).contiguous()  # [D, G, hidden]
    starts = step_starts(batch_sizes)
    shape = tile_shape(hidden, chunk_size)
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
    """:func:`.onlstm_cpp.onlstm_backward`'s arguments and results."""
    grad_xg = gate_gradient_buffer(acts, hs)
    backward_steps(grad_hs, w_hh, acts, cells, grad_xg, batch_sizes, hidden, chunk_size)
    return grad_xg, weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)
