"""Let ``torch.load`` read fairseq checkpoints with ``weights_only=True``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, and fairseq
0.12 (and fairseq-fixed) calls it without that argument, so fairseq-generate,
fairseq-interactive, resuming fairseq-train and the hub refuse fairseq's own
checkpoints.  :func:`install` allow-lists exactly the globals found in them
(:func:`fairseq_checkpoint_globals`), and, only while fairseq's
``_broadcast_object_slow`` sends a resumed state to the other ranks of a
distributed job, the few more that message needs (:func:`broadcast_globals`).
``weights_only`` stays on and ``torch.load`` is not patched: any other object
in a checkpoint still makes it raise ``pickle.UnpicklingError``.
docs/setup.md (Safe checkpoint loading) says why each global is needed.
"""

import argparse
import collections
import functools
import typing
from typing import List, Tuple

import numpy as np
import torch

from .patching import wrap_once


def _named(*objects) -> List[Tuple[object, str]]:
    return [(obj, f"{obj.__module__}.{obj.__qualname__}") for obj in objects]


def fairseq_checkpoint_globals() -> List[Tuple[object, str]]:
    """The allow-listed globals as ``(object, "module.qualname")`` pairs, the name
    a pickle refers to.  Found with ``torch.serialization.get_unsafe_globals_in_checkpoint``
    in every checkpoint file fairseq-train writes (several archs, optimizers,
    schedulers and criteria, EMA, ``--eval-bleu``, averaged, 2-process gloo):
    ``argparse.Namespace`` (the model config of a legacy-registered
    architecture) and what ``--eval-bleu``'s int64 arrays need, numpy's
    ``_reconstruct`` under its numpy 1.x and 2.x names."""
    reconstruct = np.empty(0).__reduce__()[0]
    names = {_named(reconstruct)[0][1], "numpy.core.multiarray._reconstruct",
             "numpy._core.multiarray._reconstruct"}
    return ([(argparse.Namespace, "argparse.Namespace")]
            + [(reconstruct, name) for name in sorted(names)]
            + _named(np.ndarray, np.dtype, type(np.dtype(np.int64))))


def broadcast_globals() -> List[Tuple[object, str]]:
    """Globals allowed only inside fairseq's ``_broadcast_object_slow``, never for
    files: rank 0 of a distributed job that resumes sends the state it loaded,
    ``cfg`` an omegaconf ``DictConfig`` and the tensors replaced by
    ``_TensorPlaceholder``, through ``torch.save``/``torch.load``
    (``--load-checkpoint-on-all-dp-ranks`` makes every rank read the file)."""
    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    # defaultdict, dict, list, int: the object, key and element types omegaconf records
    return (_named(_TensorPlaceholder, DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode)
            + [(typing.Any, "typing.Any")] + _named(collections.defaultdict, dict, list, int))


def _allowing_broadcast_globals(broadcast_object_slow):
    allowed = broadcast_globals()

    @functools.wraps(broadcast_object_slow)
    def wrapper(*args, **kwargs):
        with torch.serialization.safe_globals(allowed):
            return broadcast_object_slow(*args, **kwargs)

    return wrapper


def install() -> None:
    """Register the globals fairseq checkpoints need with ``torch.serialization``,
    and those of the broadcast inside it (idempotent)."""
    from fairseq.distributed import utils as dist_utils

    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
    wrap_once(dist_utils, "_broadcast_object_slow", _allowing_broadcast_globals)
