"""The ON-LSTM recurrence on CUDA: per time step one matmul (cuBLAS) and one
fused Triton kernel for the gate arithmetic of :func:`.reference.onlstm_cell`
(Hao et al. 2019, Eq. 3-9, cumax included) and the cell update, forward and a
hand-written backward.  One program handles one row (one sentence, one
direction) and keeps each gate's ``hidden`` units as a ``[n_chunk,
chunk_size]`` tile, so a master unit covers its chunk by broadcasting.  The
gate arithmetic and the cell state are float32; the pre-activations are
summed in float32 from the input projection and the recurrent matmul.

Triton is optional (:data:`triton` is None without it).  The tests run these
kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from typing import List, Tuple

import torch
from torch import Tensor

from .packed import gate_buffers, recurrent_weight_grad, state_buffers, step_starts

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

__all__ = ["DTYPES", "onlstm_forward", "onlstm_backward", "triton"]

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
        dg = dg_ptr + d * dg_dir + row * G
        out_ty = dg_ptr.dtype.element_ty
        tl.store(dg + unit, (d_f_hat * w * f * nf).to(out_ty), mask=mask)
        tl.store(dg + HIDDEN + unit, (d_i_hat * w * i * ni).to(out_ty), mask=mask)
        tl.store(dg + 2 * HIDDEN + unit, (dh * tc * o * (1.0 - o)).to(out_ty), mask=mask)
        d_chat = dc * i_hat
        tl.store(dg + 3 * HIDDEN + unit, (d_chat * (1.0 - c_hat * c_hat)).to(out_ty), mask=mask)
        # dL/d cumax of each master unit: its chunk's sum (Eq. 8, 9)
        d_cmf = tl.sum(tl.where(mask, d_f_hat - neg_dw * mi, 0.0), 1)
        d_cmi = -tl.sum(tl.where(mask, d_i_hat - neg_dw * mf, 0.0), 1)
        # cumsum backward: suffix sums; then softmax backward (Eq. 7)
        dpf = tl.sum(d_cmf, 0) - tl.cumsum(d_cmf, 0) + d_cmf
        dpi = tl.sum(d_cmi, 0) - tl.cumsum(d_cmi, 0) + d_cmi
        gf = pf * (dpf - tl.sum(pf * dpf, 0))
        gi = pi * (dpi - tl.sum(pi * dpi, 0))
        tl.store(dg + 4 * HIDDEN + m, gf.to(out_ty), mask=valid)
        tl.store(dg + 4 * HIDDEN + N_CHUNK + m, gi.to(out_ty), mask=valid)
        tl.store(dc_at, dc * f_hat, mask=mask)


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


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`.cpu_cell.onlstm_backward`'s arguments and results, one fused
    kernel and one matmul per step."""
    num_dir = acts.size(0)
    steps = len(batch_sizes)
    grad_xg = acts if acts.dtype == hs.dtype else torch.empty(acts.shape, dtype=hs.dtype, device=hs.device)
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
    if grad_xg is acts:  # the kernels wrote over the saved gates: a second backward must be refused
        torch.autograd.graph.increment_version(acts)
    return grad_xg, recurrent_weight_grad(hs, grad_xg.unbind(0), w_hh, batch_sizes)
