"""The fast paths of the encoder's layers, each tested against the layer's
definition, and the one place that chooses among them (:mod:`.dispatch`).

* self-attention: :mod:`.shaw_flash` (Shaw relative keys and values in one
  flash-style Triton kernel), :mod:`.convolved_2d` (the 2d convolved
  attention around its convolution in Triton kernels);
* the ON-LSTM recurrence: :mod:`.onlstm_cpp` (the C++ cell, ``csrc/``),
  with oneDNN's packed weights (:mod:`.onednn`), and :mod:`.onlstm_triton`
  (a fused Triton kernel per time step), both on the packed layout of
  :mod:`.onlstm_packed`;
* what the Triton kernels share: :mod:`.triton_common`;
* :mod:`.candidates`: kernels that wait for a measurement, reached by the
  benchmarks only.

A :class:`Kernel` describes one fast path (or the layer's own code) for the
table of :mod:`.dispatch`.
"""

from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["Kernel"]


def _always() -> Optional[str]:
    return None


@dataclass(frozen=True)
class Kernel:
    """One way to compute a layer.

    ``name`` is what the build log, the manual and the tests call it;
    ``layer`` is ``"attention"`` or ``"recurrence"``; ``option`` the value
    of the layer's flag that asks for it (None: a candidate, asked for by
    :func:`.candidates.use` only); ``computes`` and ``auto`` (where
    ``auto`` takes it; empty: never) are the manual's words; ``home`` the
    module that holds it.  ``run`` is what the layer calls (attention: the
    kernels' function; recurrence: a :class:`.onlstm_packed.PackedRecurrence`,
    None for the reference); ``serves(score_terms, probability_terms,
    value_terms)`` says whether an attention kernel computes a layer with
    these terms; ``unavailable()`` why it cannot run on this machine, or
    None.  A candidate also says what measurement would promote or remove
    it (``verdict``) and which value of the flag asked for it before it
    became one (``removed_option``)."""

    name: str
    layer: str
    option: Optional[str]
    computes: str
    auto: str
    home: str
    run: object = None
    serves: Callable[..., bool] = None
    unavailable: Callable[[], Optional[str]] = _always
    verdict: str = ""
    removed_option: Optional[str] = None
