"""Launches that fairseq misreads (fairseq_posattn.compat.distributed_launch):
under torchrun's variables fairseq keeps its default world size of 1 on a
machine without GPUs (each process trains alone), replaces a contradicting
--distributed-world-size without a word, and divides RANK by the GPU count;
and its rendezvous waits 30 minutes for a rank that never comes.  These tests
read the command line as fairseq-train does; tests/test_distributed.py
launches the processes."""

import sys

import pytest
import torch
import torch.distributed as dist
from conftest import free_port
from fairseq import options
from fairseq.dataclass.configs import DistributedTrainingConfig
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed import utils as distributed_utils

import fairseq_posattn  # noqa: F401  (installs the repairs)
from fairseq_posattn.compat import distributed_launch

FAIRSEQ_DEFAULT = DistributedTrainingConfig.__dataclass_fields__["distributed_world_size"].default


def config(*flags):
    """The config of ``fairseq-train data FLAGS``."""
    argv = ["data", "--arch", "transformer", "--cpu", "--distributed-backend", "gloo", *flags]
    return convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), argv))


def launched(monkeypatch, *flags, world_size=2, rank=1, argv=None):
    """The distributed config of ``fairseq-train data FLAGS`` (or of another command
    line ``argv`` that sets FLAGS) as a launcher with WORLD_SIZE=``world_size``
    starts it as ``rank``, after fairseq inferred its init."""
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(sys, "argv", argv or ["fairseq-train", "data", *flags])
    cfg = config(*flags).distributed_training
    distributed_utils.infer_init_method(cfg)
    return cfg


@pytest.mark.skipif(FAIRSEQ_DEFAULT != 1, reason="fairseq's default world size is the GPU count")
def test_the_launchers_world_size_replaces_the_default(monkeypatch):
    cfg = launched(monkeypatch)
    assert cfg.distributed_world_size == 2  # fairseq: 1, and no distributed init at all
    assert cfg.distributed_init_method == "env://" and cfg.distributed_rank == 1
    assert cfg.distributed_no_spawn and cfg.device_id == 1 % max(1, torch.cuda.device_count())


def test_the_launchers_world_size_is_read_without_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    cfg = launched(monkeypatch, "--distributed-world-size", "2", world_size=2, rank=1)
    # fairseq: RANK % torch.cuda.device_count(), ZeroDivisionError
    assert (cfg.distributed_world_size, cfg.distributed_rank, cfg.device_id) == (2, 1, 0)


@pytest.mark.parametrize("flags", [["--distributed-world-size", "3"],
                                   ["--distributed-world-size", str(FAIRSEQ_DEFAULT)],
                                   ["--distributed-world-size=%d" % FAIRSEQ_DEFAULT]])
def test_a_world_size_the_launcher_contradicts_is_refused(flags, monkeypatch):
    # fairseq: WORLD_SIZE replaces a size other than 1 without a word, and with
    # a size of 1 each process trains alone
    with pytest.raises(ValueError, match=r"rank 1 of WORLD_SIZE=4 processes, but "
                       r"--distributed-world-size is \d+: pass --distributed-world-size 4"):
        launched(monkeypatch, *flags, world_size=4)


def test_a_hydra_override_of_the_default_world_size_is_refused(monkeypatch):
    """fairseq-hydra-train reads its overrides from the command line too."""
    override = "++distributed_training.distributed_world_size=%d" % FAIRSEQ_DEFAULT
    with pytest.raises(ValueError, match="WORLD_SIZE=4 processes, but --distributed-world-size"):
        launched(monkeypatch, world_size=4,
                 argv=["fairseq-hydra-train", "--config-name", "positions", override])


def test_an_agreeing_world_size_and_an_explicit_init_method_are_kept(monkeypatch):
    assert launched(monkeypatch, "--distributed-world-size", "2").distributed_world_size == 2
    cfg = launched(monkeypatch, "--distributed-world-size", "3", "--distributed-init-method",
                   "tcp://127.0.0.1:29501", "--distributed-rank", "2")
    assert (cfg.distributed_world_size, cfg.distributed_rank) == (3, 2)  # the user's own launch


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_a_bad_rendezvous_timeout_is_refused_naming_the_variable(value, monkeypatch):
    monkeypatch.setenv(distributed_launch.TIMEOUT_VARIABLE, value)
    with pytest.raises(ValueError, match="FAIRSEQ_POSATTN_RENDEZVOUS_TIMEOUT=.*finite number above 0"):
        distributed_launch.rendezvous_timeout()


def test_the_rendezvous_timeout_defaults_to_five_minutes(monkeypatch):
    monkeypatch.delenv(distributed_launch.TIMEOUT_VARIABLE, raising=False)
    assert distributed_launch.rendezvous_timeout() == 300
    monkeypatch.setenv(distributed_launch.TIMEOUT_VARIABLE, "12.5")
    assert distributed_launch.rendezvous_timeout() == 12.5


def test_the_collectives_keep_torchs_timeout(monkeypatch):
    """The bound is the rendezvous's alone: a long validation or save on one rank
    must not stop the others at their next collective after 5 minutes."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    monkeypatch.setenv(distributed_launch.TIMEOUT_VARIABLE, "7")
    distributed_utils.distributed_init(config("--distributed-world-size", "1",
                                              "--distributed-init-method",
                                              "tcp://127.0.0.1:%d" % free_port()))
    try:
        gloo = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert gloo.options._timeout == dist.default_pg_timeout  # 30 minutes, not 7 s
    finally:
        dist.destroy_process_group()
