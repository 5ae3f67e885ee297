"""Multi-process launches as the launcher and the flags say.

torchrun (``torch.distributed.run``) starts its processes with ``WORLD_SIZE``,
``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set.  fairseq 0.12's
``infer_init_method`` reads them only when its own world size is not 1, and
that defaults to the number of GPUs (at least 1): on CPUs or one GPU every
process trains alone, as rank 0 of a world of one, into the same
``--save-dir``; elsewhere a ``--distributed-world-size`` that contradicts
``WORLD_SIZE`` is replaced by it without a word, and ``RANK`` modulo the GPU
count divides by zero on a machine without GPUs.  :func:`install` wraps
``infer_init_method``: under such a launcher the world size is ``WORLD_SIZE``
when the user set none (fairseq's default, not named on the command line), and
one the user set otherwise is refused, naming ``--distributed-world-size``
with ``WORLD_SIZE``; a process without GPUs gets device 0.

``distributed_init`` lets ``torch.distributed.init_process_group`` wait for the
other ranks for torch's default, 30 minutes, when one of them died before the
rendezvous (``--heartbeat-timeout`` starts after the first forward).  The
rendezvous waits :func:`rendezvous_timeout` seconds instead
(``FAIRSEQ_POSATTN_RENDEZVOUS_TIMEOUT``, default 300), then stops with an error
naming the ranks it waited for; the collectives of the training keep torch's
default timeout.
"""

import contextlib
import functools
import logging
import math
import os
import sys
import time
from datetime import timedelta

from ..errors import RendezvousTimeoutError
from .patching import wrap_once

logger = logging.getLogger(__name__)

LAUNCHER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")  # as fairseq reads them
TIMEOUT_VARIABLE = "FAIRSEQ_POSATTN_RENDEZVOUS_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 300


def _world_size_on_command_line() -> bool:
    """Whether the command line names the world size (a flag or a hydra override)."""
    return any(arg.split("=")[0].lstrip("+") in ("--distributed-world-size",
                                                  "distributed_training.distributed_world_size")
               for arg in sys.argv[1:])


def _launched_world_size(infer_init_method):
    @functools.wraps(infer_init_method)
    def wrapper(cfg, *args, **kwargs):
        if cfg.distributed_init_method is None and not cfg.tpu and all(
                name in os.environ for name in LAUNCHER_VARIABLES):
            _adopt_world_size(cfg, int(os.environ["WORLD_SIZE"]))
        return infer_init_method(cfg, *args, **kwargs)

    return wrapper


def _adopt_world_size(cfg, launched: int) -> None:
    """The launcher's ``WORLD_SIZE`` where the user set no world size; refuse another."""
    from fairseq.dataclass.configs import DistributedTrainingConfig

    if cfg.distributed_world_size == launched:
        return
    default = DistributedTrainingConfig.__dataclass_fields__["distributed_world_size"].default
    if cfg.distributed_world_size != default or _world_size_on_command_line():
        given = cfg.distributed_world_size
        raise ValueError(
            "the launcher started this process as rank %s of WORLD_SIZE=%d processes, but "
            "--distributed-world-size is %d: pass --distributed-world-size %d (or leave it out), "
            "or have the launcher start %d" % (os.environ["RANK"], launched, given, launched, given))
    logger.info("WORLD_SIZE=%d (set by the launcher, e.g. torchrun): training as %d ranks "
                "(--distributed-world-size %d)", launched, launched, launched)
    cfg.distributed_world_size = launched


def _init_from_launcher(cfg) -> None:
    """fairseq's ``_infer_torch_distributed_launch_init``, whose device, ``RANK``
    modulo the GPU count, divides by zero without GPUs (there: device 0, which a
    CPU run does not use)."""
    import torch

    cfg.distributed_init_method = "env://"
    cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
    cfg.distributed_rank = int(os.environ["RANK"])
    cfg.device_id = cfg.distributed_rank % max(1, torch.cuda.device_count())
    cfg.distributed_no_spawn = True  # the launcher started the processes


def rendezvous_timeout() -> float:
    """Seconds a rank waits for the others to join (``FAIRSEQ_POSATTN_RENDEZVOUS_TIMEOUT``)."""
    value = os.environ.get(TIMEOUT_VARIABLE, str(DEFAULT_TIMEOUT_SECONDS))
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < math.inf:
        raise ValueError("%s=%r: give the seconds a rank waits for the others to join, a finite "
                         "number above 0 (default %d)" % (TIMEOUT_VARIABLE, value, DEFAULT_TIMEOUT_SECONDS))
    return seconds


@contextlib.contextmanager
def _default_timeouts(timeout: timedelta):
    """torch's default process-group timeouts set to ``timeout`` (read by
    ``init_process_group`` when it is given none, as fairseq gives none)."""
    from torch.distributed import distributed_c10d

    names = ("default_pg_timeout", "default_pg_nccl_timeout")
    saved = {name: getattr(distributed_c10d, name) for name in names}
    for name in names:
        setattr(distributed_c10d, name, timeout)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(distributed_c10d, name, value)


def _bounded_rendezvous(distributed_init):
    @functools.wraps(distributed_init)
    def wrapper(cfg, *args, **kwargs):
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        distributed = getattr(cfg, "distributed_training", cfg)  # a config or a namespace
        if getattr(distributed, "tpu", False) or dist.is_initialized():
            return distributed_init(cfg, *args, **kwargs)
        seconds = rendezvous_timeout()
        start = time.monotonic()
        try:
            with _default_timeouts(timedelta(seconds=seconds)):
                rank = distributed_init(cfg, *args, **kwargs)
        except dist.DistError as exc:
            if time.monotonic() - start < seconds:
                raise
            raise _timed_out(distributed, seconds, exc) from exc
        # the training's collectives wait as long as torch's default
        distributed_c10d._set_pg_timeout(distributed_c10d._get_default_timeout(
            distributed_c10d.get_backend()))
        return rank

    return wrapper


def _timed_out(distributed, seconds: float, exc: Exception) -> RendezvousTimeoutError:
    rank, world_size = distributed.distributed_rank, distributed.distributed_world_size
    others = [r for r in range(world_size) if r != rank]
    return RendezvousTimeoutError(
        "rank %d gave up after %g s at %s waiting for rank%s %s (--distributed-world-size %d) to "
        "join (torch: %s). A rank that failed to start or stopped before the rendezvous says why "
        "in its own log; start every rank, or set %s=SECONDS to wait longer"
        % (rank, seconds, distributed.distributed_init_method, "s" if len(others) > 1 else "",
           ", ".join(map(str, others)), world_size, str(exc).strip().splitlines()[0].rstrip("."),
           TIMEOUT_VARIABLE))


def install() -> None:
    """Read the launcher's world size and bound the rendezvous (idempotent)."""
    from fairseq.distributed import utils as distributed_utils

    wrap_once(distributed_utils, "infer_init_method", _launched_world_size)
    distributed_utils._infer_torch_distributed_launch_init = _init_from_launcher
    wrap_once(distributed_utils, "distributed_init", _bounded_rendezvous)
