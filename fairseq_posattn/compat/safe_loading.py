"""Let ``torch.load`` read fairseq checkpoints with ``weights_only=True``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``: it unpickles
only tensors, containers and primitive types plus globals registered with
``torch.serialization.add_safe_globals``.  fairseq 0.12 (and fairseq-fixed)
call ``torch.load`` without ``weights_only``, so ``fairseq-generate``,
``fairseq-interactive``, resuming ``fairseq-train`` and
``checkpoint_utils.load_model_ensemble`` fail on their own checkpoints.

:func:`install` (called when the plugin is imported) allow-lists exactly the
globals found in the checkpoints that ``fairseq-train`` of fairseq-fixed
0.12.3.1 writes (:func:`fairseq_checkpoint_globals`), and, only while
fairseq's ``_broadcast_object_slow`` sends a resumed state to the other ranks
of a distributed job, the few more that message needs
(:func:`broadcast_globals`).  Nothing else is allowed: an object of any other
class in a checkpoint still makes ``torch.load`` raise
``pickle.UnpicklingError`` ("Weights only load failed").  ``weights_only`` is
never turned off and ``torch.load`` is not patched.  On torch < 2.4 (no
``add_safe_globals``, and ``weights_only`` defaults to False) it does nothing.

Checkpoints averaged by fairseq's ``scripts/average_checkpoints.py`` copy the
first input and replace its ``model`` entry by an ``OrderedDict`` of tensors,
so they need the same globals as their inputs.  The script calls
``torch.load`` itself: run it in a Python where this plugin is imported (e.g.
``python -c "import fairseq_posattn, runpy, sys; sys.argv = [...];
runpy.run_path('average_checkpoints.py', run_name='__main__')"``).
"""

import argparse
from typing import Callable, List, Tuple, Union

__all__ = [
    "install",
    "fairseq_checkpoint_globals",
    "broadcast_globals",
]

SafeGlobal = Union[Callable, Tuple[Callable, str]]


def _qualified_name(obj) -> str:
    return "%s.%s" % (obj.__module__, obj.__qualname__)


def fairseq_checkpoint_globals() -> List[Tuple[object, str]]:
    """The allow-listed globals as ``(object, "module.qualname")`` pairs.

    The name is the one a pickle refers to; one object may appear under two
    names (numpy moved ``numpy.core`` to ``numpy._core`` in 2.0).  They were
    found with ``torch.serialization.get_unsafe_globals_in_checkpoint`` in
    ``checkpointN.pt``, ``checkpoint_best.pt``, ``checkpoint_last.pt``,
    ``checkpoint_E_U.pt`` and ``checkpoint.best_*.pt`` files with optimizer
    state and ``extra_state``, for the transformer, transformer_iwslt_de_en,
    lstm and fconv archs, adam/nag/adafactor optimizers,
    inverse_sqrt/reduce_lr_on_plateau/polynomial_decay schedulers,
    label-smoothed and plain cross-entropy, EMA, ``--eval-bleu``, averaged
    checkpoints and 2-process gloo training:

    * ``argparse.Namespace``, always: ``cfg["model"]`` is the namespace of
      the model arguments for every architecture registered the legacy way
      (``register_model_architecture`` + ``add_args``), and ``args`` of
      checkpoints written by fairseq < 0.10 is one too.  Unpickling it sets
      its ``__dict__`` and calls nothing else.
    * ``numpy.ndarray``, numpy's ``_reconstruct``, ``numpy.dtype`` and the
      int64 dtype class: with ``--eval-bleu`` the translation task logs the
      BLEU n-gram counts as int64 arrays, which ``extra_state["metrics"]``
      saves.  They rebuild plain numeric arrays; an array of Python objects
      needs the object dtype class, which is not allowed.
    """
    out: List[Tuple[object, str]] = [(argparse.Namespace, "argparse.Namespace")]
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency of fairseq
        np = None
    if np is not None:
        reconstruct = np.empty(0).__reduce__()[0]  # numpy's _reconstruct, either version
        names = {
            _qualified_name(reconstruct),
            "numpy.core.multiarray._reconstruct",
            "numpy._core.multiarray._reconstruct",
        }
        out += [(reconstruct, name) for name in sorted(names)]
        out.append((np.ndarray, "numpy.ndarray"))
        out.append((np.dtype, "numpy.dtype"))
        int64_dtype_cls = type(np.dtype(np.int64))
        if int64_dtype_cls is not np.dtype:  # numpy >= 1.20: a subclass per dtype
            out.append((int64_dtype_cls, _qualified_name(int64_dtype_cls)))
    return out


def broadcast_globals() -> List[Tuple[object, str]]:
    """Globals allowed only inside fairseq's ``_broadcast_object_slow``.

    A distributed job (more than one process) resuming from a checkpoint:
    rank 0 reads the file, turns ``cfg`` into an omegaconf ``DictConfig`` and
    sends the state to the other ranks with
    ``fairseq.distributed.utils.broadcast_object``, which replaces the
    tensors by ``_TensorPlaceholder`` dataclasses, ``torch.save``s the rest
    and ``torch.load``s it on the receiving ranks.  That in-job message (not
    a file) needs these, never allowed for files (``dict``, ``list``, ``int``
    and ``defaultdict`` are the types omegaconf records as key, element and
    object types).  ``--load-checkpoint-on-all-dp-ranks`` makes every rank
    read the file itself instead."""
    import collections
    import typing

    out: List[Tuple[object, str]] = []
    try:
        from fairseq.distributed.utils import _TensorPlaceholder
    except ImportError:  # pragma: no cover - other fairseq versions
        pass
    else:
        out.append((_TensorPlaceholder, _qualified_name(_TensorPlaceholder)))
    try:
        from omegaconf import DictConfig, ListConfig
        from omegaconf.base import ContainerMetadata, Metadata
        from omegaconf.nodes import AnyNode
    except ImportError:  # pragma: no cover - omegaconf is a fairseq dependency
        pass
    else:
        for cls in (DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode):
            out.append((cls, _qualified_name(cls)))
    out += [
        (typing.Any, "typing.Any"),
        (collections.defaultdict, "collections.defaultdict"),
        (dict, "builtins.dict"),
        (list, "builtins.list"),
        (int, "builtins.int"),
    ]
    return out


def _install_broadcast_scope(named: bool) -> None:
    """Wrap ``fairseq.distributed.utils._broadcast_object_slow`` (idempotent)."""
    import functools

    import torch

    try:
        from fairseq.distributed import utils as dist_utils
    except ImportError:  # pragma: no cover
        return
    original = getattr(dist_utils, "_broadcast_object_slow", None)
    context = getattr(torch.serialization, "safe_globals", None)
    if original is None or context is None:
        return
    if getattr(original, "__fairseq_posattn_scoped__", False):
        return
    entries = broadcast_globals()
    scoped = [(o, n) for o, n in entries] if named else [o for o, _ in entries]

    @functools.wraps(original)
    def _broadcast_object_slow(*args, **kwargs):
        with context(scoped):
            return original(*args, **kwargs)

    _broadcast_object_slow.__fairseq_posattn_scoped__ = True
    dist_utils._broadcast_object_slow = _broadcast_object_slow


def _accepts_named_globals(add_safe_globals) -> bool:
    """True if ``add_safe_globals`` takes ``(obj, "module.name")`` pairs (torch >= 2.6)."""
    import inspect

    try:
        params = inspect.signature(add_safe_globals).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False
    param = params.get("safe_globals")
    return param is not None and "tuple" in str(param.annotation).lower()


def install() -> List[str]:
    """Register the globals fairseq checkpoints need with ``torch.serialization``.

    Idempotent.  Returns the names registered (empty on torch < 2.4).
    """
    import torch

    serialization = torch.serialization
    if not hasattr(serialization, "add_safe_globals"):
        return []
    entries = fairseq_checkpoint_globals()
    named = _accepts_named_globals(serialization.add_safe_globals)
    _install_broadcast_scope(named)
    if named:
        serialization.add_safe_globals([(obj, name) for obj, name in entries])
    else:
        # torch 2.4/2.5 take objects only (their torch.load defaults to
        # weights_only=False anyway); numpy 1.x pickles then need numpy 1.x.
        serialization.add_safe_globals(list({id(o): o for o, _ in entries}.values()))
    return [name for _, name in entries]
