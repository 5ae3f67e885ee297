"""CANDIDATE: the per-step Triton loop of :mod:`..onlstm_triton` replayed from CUDA graphs:
a layer's steps, forward and backward, recorded the first time a batch
shape comes and replayed after as one launch each way, so the host no
longer launches a matmul and a kernel per step.

A graph replays fixed addresses, so what it reads and writes lives in a
*slot*: flat buffers that every call of a shape carves the same way, held by
a layer from its forward until the backward releases it (or autograd frees
the forward's context, which keeps the :class:`Lease`).  Layers in flight
together take different slots (at most :data:`MAX_SLOTS` per device; beyond,
the loop runs without graphs); a slot records a new shape after running it
once (at most :data:`MAX_GRAPHS`, least recently used dropped first), and a
buffer that grows drops the graphs that read it.  Shapes repeat because the
batch is padded to multiples of :data:`BUCKET` sentences and steps
(:func:`bucketed_layout`).  On the CPU (Triton's interpreter) a "graph" is
the loop itself, run again at each replay.
"""

import itertools
import math
import weakref
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .. import onlstm_triton
from ..onlstm_packed import gate_buffers, state_buffers

__all__ = ["BUCKET", "MAX_GRAPHS", "MAX_SLOTS", "Lease", "bucket", "bucketed_layout", "clear", "onlstm_backward",
           "onlstm_forward"]

BUCKET = 8  # batches are padded to multiples of this many sentences and steps
MAX_SLOTS = 8  # ON-LSTM layers in flight at once, per device
MAX_GRAPHS = 64  # recorded graphs kept per slot
PHASES = ("forward", "backward")  # the first element of a graph's key


def bucket(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`BUCKET`."""
    return -(-n // BUCKET) * BUCKET


def bucketed_layout(lengths: Tensor, reverse: Optional[Tensor], seq_len: int,
                    bsz: int) -> Tuple[Tensor, List[int], Tensor]:
    """:func:`..onlstm_packed.packed_layout` for graphs: the batch padded to
    :func:`bucket` sentences and steps, every sentence running every step
    (pad steps come after a sentence's tokens in both directions; padding
    sentences read row 0), so that batches of one bucket replay one graph."""
    device = lengths.device
    num_steps, rows = bucket(seq_len), bucket(bsz)
    t_idx = torch.arange(num_steps, device=device).repeat_interleave(rows)
    b_idx = torch.arange(rows, device=device).repeat(num_steps)
    real = (t_idx < seq_len) & (b_idx < bsz)
    t_idx, b_idx = t_idx.clamp(max=seq_len - 1), b_idx.clamp(max=bsz - 1)
    src_t = [t_idx] if reverse is None else [t_idx, reverse[t_idx, b_idx]]
    in_rows = torch.cat([torch.where(real, s * bsz + b_idx, 0) for s in src_t])
    steps = torch.arange(seq_len, device=device)
    tokens = steps.unsqueeze(1) < lengths.unsqueeze(0)  # [T, B]
    packed_row = steps.unsqueeze(1) * rows + torch.arange(bsz, device=device)
    return in_rows, [rows] * num_steps, packed_row.masked_fill(~tokens, num_steps * rows)


class _Rerun:
    """A recorded graph where CUDA has none (Triton's interpreter): replaying runs the steps again."""

    def __init__(self, steps: Callable[[], None]):
        self.replay = steps


class _Slot:
    """The buffers of one layer's call, from its forward to its backward, and the graphs recorded on them."""

    def __init__(self, device: torch.device):
        self.flat: Dict[Tuple[str, int, torch.dtype], Tensor] = {}
        self.graphs: "OrderedDict[tuple, object]" = OrderedDict()
        self.holder: Optional[weakref.ref] = None
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None

    def busy(self) -> bool:
        return self.holder is not None and self.holder() is not None

    def carve(self, phase: str) -> Callable:
        """``torch.empty`` for one call's ``phase``: its ``i``-th buffer is the
        start of the flat buffer ``(phase, i, dtype)``, which grows when it is
        too small, dropping the graphs that read it (a backward reads its
        forward's buffers too)."""
        count = itertools.count()

        def empty(shape, dtype: torch.dtype, device: torch.device) -> Tensor:
            name = (phase, next(count), dtype)
            numel = math.prod(shape)
            flat = self.flat.get(name)
            if flat is None or flat.numel() < numel:
                with torch.inference_mode(False):  # a plain tensor, which training may write and save
                    flat = self.flat[name] = torch.empty(numel, dtype=dtype, device=device)
                stale = PHASES[PHASES.index(phase):]  # the graphs that read this phase's buffers
                for key in [key for key in self.graphs if key[0] in stale]:
                    del self.graphs[key]
            return flat[:numel].view(shape)

        return empty

    def run(self, key: tuple, steps: Callable[[], None]) -> None:
        """Replay the graph of ``key``; without one, run ``steps`` (this call's
        results; Triton compiles what they launch) and record them."""
        graph = self.graphs.get(key)
        if graph is not None:
            self.graphs.move_to_end(key)
            graph.replay()
            return
        steps()
        if self.pool is None:
            graph = _Rerun(steps)
        else:
            graph = torch.cuda.CUDAGraph()
            # thread_local: only this thread must not call CUDA while recording
            # (a backward records on autograd's thread while the main one waits)
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                steps()
        self.graphs[key] = graph
        if len(self.graphs) > MAX_GRAPHS:
            self.graphs.popitem(last=False)


class Lease:
    """A slot held from a forward to its backward, with the forward's shape and
    its copy of the recurrent weights; the slot is free once the backward has
    released it or this is freed (a forward without a backward)."""

    def __init__(self, slot: _Slot, key: tuple, w_hh: Tensor):
        self.slot, self.key, self.w_hh = slot, key, w_hh
        slot.holder = weakref.ref(self)

    def release(self, *saved: Tensor) -> None:
        """Free the slot; a later backward through the ``saved`` tensors (the
        slot's, which another call may now overwrite) is refused by autograd."""
        for tensor in saved:
            torch.autograd.graph.increment_version(tensor)
        if self.slot.holder is not None and self.slot.holder() is self:
            self.slot.holder = None


_SLOTS: Dict[torch.device, List[_Slot]] = {}


def clear() -> None:
    """Drop every slot with its graphs and buffers (a slot held by a forward
    goes after its backward)."""
    _SLOTS.clear()


def _free_slot(device: torch.device, key: tuple) -> Optional[_Slot]:
    """A free slot on ``device``, one that has recorded ``key`` first; a new
    one while there are fewer than :data:`MAX_SLOTS`; else None."""
    slots = _SLOTS.setdefault(device, [])
    free = [slot for slot in slots if not slot.busy()]
    for slot in free:
        if key in slot.graphs:
            return slot
    if free:
        return free[0]
    if len(slots) < MAX_SLOTS:
        slots.append(_Slot(device))
        return slots[-1]
    return None


def onlstm_forward(
    xs: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, batch_sizes: List[int],
    hidden: int, chunk_size: int, save: bool,
) -> Tuple[Tensor, Tensor, Tensor, Optional[Lease]]:
    """:func:`..onlstm_triton.onlstm_forward` with its steps replayed from a
    graph, and, with ``save``, the :class:`Lease` that the backward needs
    (None where every slot was busy: the steps ran without a graph)."""
    key = ("forward", tuple(batch_sizes), tuple(xs.shape), xs.dtype, tuple(w_hh.shape), chunk_size, save)
    slot = _free_slot(xs.device, key)
    if slot is None:
        return (*onlstm_triton.onlstm_forward(xs, w_ih, bias, w_hh, batch_sizes, hidden, chunk_size, save), None)
    empty = slot.carve("forward")
    xg, acts = gate_buffers(xs, w_ih, bias, save, empty)
    cells, out = state_buffers(xs, batch_sizes, hidden, save, empty)
    weights = empty(w_hh.shape, dtype=w_hh.dtype, device=w_hh.device).copy_(w_hh)
    slot.run(key, lambda: onlstm_triton.forward_steps(xg, acts, cells, out, weights, batch_sizes, hidden, chunk_size,
                                                      save))
    if not save:  # the slot is free again at return: the caller gets its own copy
        return out.clone(), acts, cells, None
    # new tensor objects on the slot's memory: what autograd attaches to them
    # (the context, which holds the lease) must not live as long as the slot
    return out.detach(), acts.detach(), cells.detach(), Lease(slot, key, weights)


def onlstm_backward(
    grad_hs: Tensor, w_hh: Tensor, hs: Tensor, acts: Tensor, cells: Tensor,
    batch_sizes: List[int], hidden: int, chunk_size: int, lease: Optional[Lease] = None,
) -> Tuple[Tensor, Tensor]:
    """:func:`..onlstm_triton.onlstm_backward` with its steps replayed from a
    graph on the slot of the forward's ``lease``, which it releases.  The gate
    gradients are the slot's until its next call: the caller uses them at once."""
    if lease is None:
        return onlstm_triton.onlstm_backward(grad_hs, w_hh, hs, acts, cells, batch_sizes, hidden, chunk_size)
    slot = lease.slot
    empty = slot.carve("backward")
    upstream = empty(grad_hs.shape, dtype=grad_hs.dtype, device=grad_hs.device).copy_(grad_hs)
    grad_xg = onlstm_triton.gate_gradient_buffer(acts, hs, empty)
    weights = lease.w_hh
    slot.run(("backward",) + lease.key[1:], lambda: onlstm_triton.backward_steps(
        upstream, weights, acts, cells, grad_xg, batch_sizes, hidden, chunk_size))
    grad_w_hh = onlstm_triton.weight_gradient(grad_xg, acts, hs, w_hh, batch_sizes)
    lease.release(hs, acts, cells)
    return grad_xg, grad_w_hh
