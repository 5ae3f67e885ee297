"""Average the parameters of the last checkpoints (Vaswani et al. 2017, Sec. 6.1:
the last 5 checkpoints for base models, the last 20 for big ones).

    fairseq-posattn-average-checkpoints --inputs DIR --num-checkpoints 5 --output avg.pt

pip-installed fairseq lacks ``scripts/average_checkpoints.py``.  Which
checkpoints are the last, ``checkpoint_last.pt`` included when it is newer, and
how they are averaged: docs/recipes.md ("Averaging").
"""

import argparse
import math
import os
import re
import sys
from collections import OrderedDict
from typing import List, Optional, Sequence, Tuple

import torch

from ..compat.checkpoint_integrity import verify_checkpoint
from ..errors import DamagedCheckpointError, UserError
from ..files import atomic_output

_UPDATE_CHECKPOINT = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
_EPOCH_CHECKPOINT = re.compile(r"^checkpoint(\d+)\.pt$")


class AverageError(UserError, ValueError):
    pass


def training_order(name: str) -> Optional[Tuple[int, float]]:
    """(epoch, update within the run or inf for the end of the epoch) of a
    checkpoint file name; None for other files (checkpoint_best.pt, ...)."""
    m = _UPDATE_CHECKPOINT.match(name)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _EPOCH_CHECKPOINT.match(name)
    if m:
        return int(m.group(1)), math.inf
    return None


def load_verified(path: str, **kwargs) -> dict:
    """``torch.load`` of ``path`` (on the CPU) once its checksums are verified."""
    verify_checkpoint(path)
    return torch.load(path, map_location="cpu", **kwargs)


def updates_of(path: str) -> int:
    """The number of updates after which fairseq saved the checkpoint ``path``."""
    try:
        state = load_verified(path, mmap=True)
        return int(state["optimizer_history"][-1]["num_updates"])
    except (RuntimeError, EOFError, KeyError, IndexError, TypeError) as exc:
        raise AverageError("%s is not a complete fairseq checkpoint (%s: %s); delete it or "
                           "average named files with --inputs" % (path, type(exc).__name__, exc))


def last_checkpoints(directory: str, n: int) -> List[str]:
    """The last ``n`` checkpoints of ``directory`` in training order, oldest first."""
    found = sorted((key, name) for name in os.listdir(directory)
                   for key in [training_order(name)] if key is not None)
    final = os.path.join(directory, "checkpoint_last.pt")
    if os.path.exists(final) and (
            not found or updates_of(final) > updates_of(os.path.join(directory, found[-1][1]))):
        found.append(((math.inf, math.inf), "checkpoint_last.pt"))
    if len(found) < n:
        raise AverageError(
            "%s has %d checkpoint_<epoch>_<update>.pt / checkpoint<epoch>.pt / newer "
            "checkpoint_last.pt file(s), %d "
            "wanted: keep more (--keep-interval-updates, --keep-last-epochs) or average fewer"
            % (directory, len(found), n))
    return [os.path.join(directory, name) for _, name in found[-n:]]


def average_model_states(states: Sequence[dict], names: Sequence[str]) -> "OrderedDict":
    """Element-wise mean of the ``model`` entries of ``states`` (float64, stored in each
    tensor's dtype); integer tensors must be equal in all."""
    first = states[0]["model"]
    averaged = OrderedDict()
    for name, state in zip(names[1:], states[1:]):
        if list(state["model"]) != list(first):
            raise AverageError("%s has other parameters than %s; average checkpoints of one "
                               "training run" % (name, names[0]))
    for key, tensor in first.items():
        tensors = [s["model"][key] for s in states]
        if tensor.is_floating_point():
            averaged[key] = (sum(t.double() for t in tensors) / len(tensors)).to(tensor.dtype)
        else:
            for name, t in zip(names, tensors):
                if not torch.equal(t, tensor):
                    raise AverageError("integer tensor %s differs between %s and %s"
                                       % (key, names[0], name))
            averaged[key] = tensor
    return averaged


def average_checkpoints(paths: Sequence[str]) -> dict:
    states = [load_verified(p) for p in paths]
    result = states[-1]
    result["model"] = average_model_states(states, paths)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="fairseq-posattn-average-checkpoints",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", nargs="+", required=True,
                   help="checkpoint files, or one directory with --num-checkpoints")
    p.add_argument("--num-checkpoints", type=int, default=None,
                   help="average the directory's last N checkpoints (training order)")
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    try:
        if args.num_checkpoints is not None:
            if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
                raise AverageError("--num-checkpoints needs one directory as --inputs")
            paths = last_checkpoints(args.inputs[0], args.num_checkpoints)
        else:
            paths = args.inputs
        state = average_checkpoints(paths)
    except (AverageError, DamagedCheckpointError, OSError) as exc:
        sys.exit("checkpoint_average: error: %s" % exc)
    with atomic_output(args.output, "wb") as f:
        torch.save(state, f)
    print("averaged %d checkpoints (%s) into %s"
          % (len(paths), ", ".join(os.path.basename(p) for p in paths), args.output))


if __name__ == "__main__":
    main()
