"""CANDIDATE: the ON-LSTM recurrence with every step of a layer in one
launch each way (the persistent kernels).

Forward (:func:`onlstm_forward`) and backward (:func:`onlstm_backward`)
take the per-step kernels' arguments and results
(:mod:`..onlstm_triton`), and run their row arithmetic (Hao et al. 2019,
Eq. 3-9).  A direction's programs work together on each step in two
phases, the recurrent matmul spread over the gate columns (forward) or the
hidden units (backward) of the programs, and the cell, each program taking
every ``PROGRAMS``-th row, with a barrier among them between phases
(:func:`_all_arrived`); on the CPU (Triton's interpreter, which runs
programs one after another) one launch per phase instead.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..onlstm_packed import gate_buffers, state_buffers, step_starts
from ..onlstm_triton import gate_gradient_buffer, tile_shape, weight_gradient
from ..triton_common import interpreted, triton

__all__ = ["onlstm_backward", "onlstm_forward"]

if triton is not None:
    import triton.language as tl

    from ..onlstm_triton import load_gates, row_backward, row_forward, unit_tiles

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
        ``z_ptr``, ``[D, rows, G]``).  The cell (:func:`row_forward`):
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
        unit, mask, m, valid = unit_tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
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
                    zf, zi, zo, zc, zmf, zmi = load_gates(z_ptr + r * G, unit, mask, m, valid, HIDDEN, N_CHUNK,
                                                          float("-inf"), ".cg")
                    if t > 0:
                        c_prev = tl.load(c_ptr + ((prev + r) if SAVE else r) * HIDDEN + unit, mask=mask, other=0.0)
                    else:
                        c_prev = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
                    row_forward(zf, zi, zo, zc, zmf, zmi, c_prev, act_ptr + (start + r) * G,
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
        (:func:`row_backward`), program ``p`` taking the rows ``p, p +
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
        unit, mask, m, valid = unit_tiles(N_CHUNK, CHUNK, BLOCK_M, BLOCK_C)
        for s in range(t_first, t_last):
            t = steps - 1 - s
            start, n, prev = _step(step_ptr, steps, t)
            if CELL:
                for r in range(p, n, PROGRAMS):
                    f, i, o, c_hat, pf, pi = load_gates(act_ptr + (start + r) * G, unit, mask, m, valid, HIDDEN,
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
                    row_backward(f, i, o, c_hat, pf, pi, c, c_prev, dh, dc, dg_ptr + (start + r) * G,
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


def _dot_precision(dtype: torch.dtype) -> str:
    """:func:`_dot`'s ``PRECISION``: float32 products as ``torch.bmm`` computes
    them by default (no TF32), half tiles on the tensor cores."""
    if dtype == torch.bfloat16 and interpreted():
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
    power_of_2 = triton.next_power_of_2
    return dict(tile_shape(hidden, chunk_size), PROGRAMS=programs, BLOCK_P=power_of_2(programs + 1), BLOCK_N=block_n,
                BLOCK_H=max(16, power_of_2(triton.cdiv(hidden, programs))), BLOCK_K=64 if one_launch else 16,
                BLOCK_B=max(16, min(64 if one_launch else 16, power_of_2(rows))), ONE_LAUNCH=one_launch)


def _step_table(batch_sizes: List[int], device: torch.device) -> Tensor:
    """Each step's first packed row, then each step's row count (int32)."""
    return torch.tensor(step_starts(batch_sizes) + list(batch_sizes), dtype=torch.int32).to(device)


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`..onlstm_triton.onlstm_forward`'s arguments and results, every step in one launch
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


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int,
) -> Tuple[Tensor, Tensor]:
    """:func:`..onlstm_triton.onlstm_backward`'s arguments and results, every step in one
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
