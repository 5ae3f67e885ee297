"""Input options: task options that decide how a trained model reads its input.

Each is declared once with :func:`input_option`: its config value is None
until resolved ("not given"), and its documented default applies only where
no checkpoint says otherwise.  Every checkpoint records the resolved values in
its task state (``task_state["input_options"]``); training resolves them
against the checkpoint it resumes or fine-tunes (:func:`resolve_for_training`),
loading a checkpoint binds them to its values (:meth:`RemembersInputOptions.load_state_dict`),
and a value given that contradicts a checkpoint is refused naming both, except
with ``--finetune-from-model`` (a warning), as is decoding a checkpoint with
another task (:func:`refuse_another_task`).  fairseq's routes reach these through
:mod:`fairseq_posattn.compat.checkpoint_task`.  docs/reliability.md, "What a
checkpoint remembers", lists every task option and says why it is or is not one.
"""

import dataclasses
import logging
import os
from typing import Any, Dict, Mapping, Optional, Set

from ..config_check import flag
from ..errors import UserError
from ..modules.options import plain

logger = logging.getLogger(__name__)

RECORD = "input_options"  # the key of the resolved values in a checkpoint's task state
_DEFAULT = "input_option_default"  # the field metadata that marks an input option


class ContradictsCheckpoint(UserError, ValueError):
    """A task option given with another value than the checkpoint was trained with."""


def input_option(default, help: str, needs=()):
    """The dataclass field of an input option: None (not given) until resolved;
    ``needs``: what it needs to take effect (:class:`..modules.options.Need`)."""
    return dataclasses.field(default=None, metadata={
        "help": f"{help} (default: the checkpoint's value; {_shown(default)} without one)",
        _DEFAULT: default, "needs": needs,
    })


def default_of(config_class, name: str):
    """The documented default of an option of a task config class."""
    option = next(f for f in dataclasses.fields(config_class) if f.name == name)
    return option.metadata.get(_DEFAULT, option.default)


def input_options(config_class) -> Dict[str, Any]:
    """``{name: documented default}`` of the input options of a task config class."""
    if config_class is None or not dataclasses.is_dataclass(config_class):
        return {}
    return {f.name: f.metadata[_DEFAULT] for f in dataclasses.fields(config_class)
            if _DEFAULT in f.metadata}


def _shown(value) -> str:
    return "'%s'" % value if isinstance(value, str) else str(value)


def fill_defaults(cfg, options: Mapping[str, Any]) -> Set[str]:
    """Give every option that is not given its documented default; the names not given."""
    unset = {name for name in options if getattr(cfg, name, None) is None}
    for name in unset:
        setattr(cfg, name, options[name])
    return unset


def bind(cfg, options: Mapping[str, Any], recorded: Mapping[str, Any], unset: Set[str],
         checkpoint: str, refuse: bool = True) -> None:
    """Take the checkpoint's value of each option in ``unset`` (and drop it from
    ``unset``); refuse a value given that differs, or with ``refuse=False`` keep
    it with a warning."""
    for name, saved in recorded.items():
        if name not in options or saved is None:
            continue  # an option this version does not have
        given = plain(getattr(cfg, name))
        if name in unset:
            setattr(cfg, name, saved)
            unset.discard(name)
        elif given != saved and refuse:
            raise ContradictsCheckpoint(
                f"{flag(name)} {_shown(given)} contradicts {checkpoint}, which was trained with "
                f"{flag(name)} {_shown(saved)}: leave the option out to use the checkpoint's value")
        elif given != saved:
            logger.warning("%s %s differs from %s, which was trained with %s %s: the model "
                           "is fine-tuned reading its input with %s", flag(name), _shown(given),
                           checkpoint, flag(name), _shown(saved), _shown(given))


class RemembersInputOptions:
    """Mixin of a plugin task (first among its bases) whose config declares input
    options: resolved when the task is made, recorded in its state (saved in
    every checkpoint), bound to each checkpoint loaded into it."""

    def __init__(self, cfg, *args, **kwargs):
        options = input_options(getattr(type(self), "__dataclass", None))
        self._not_given = fill_defaults(cfg, options)
        super().__init__(cfg, *args, **kwargs)
        self._input_options = options
        self._record()

    def _record(self):
        recorded = {name: plain(getattr(self.cfg, name)) for name in self._input_options}
        self.state.merge_state_dict({RECORD: recorded})

    def load_state_dict(self, state_dict):
        """Bind the input options to the checkpoint's (an ensemble's checkpoints
        must agree); a checkpoint without a record leaves them as they are."""
        bind(self.cfg, self._input_options, state_dict.get(RECORD) or {}, self._not_given,
             "the checkpoint being loaded")
        super().load_state_dict(state_dict)
        self._record()


def refuse_another_task(asked, trained: Optional[str], filenames) -> None:
    """Refuse a ``task`` override (``asked``, the hub's ``task=``) that names another
    task than the one ``filenames`` were trained with (``trained``)."""
    if isinstance(asked, str) and trained is not None and asked != trained:
        raise ContradictsCheckpoint(
            f"task={asked!r} contradicts {', '.join(map(str, filenames))}, which was "
            f"trained with task {trained!r}: a checkpoint is decoded with the task it was "
            f"trained with; leave task= out, or load a checkpoint trained with {asked!r}"
        )


def resumed_checkpoint(checkpoint) -> Optional[str]:
    """The file fairseq-train restores (``checkpoint_utils.load_checkpoint``'s
    choice, whose rules this follows), or None for a fresh start."""
    suffix = checkpoint.checkpoint_suffix or ""
    if checkpoint.restore_file == "checkpoint_last.pt":
        path = os.path.join(checkpoint.save_dir, f"checkpoint_last{suffix}.pt")
        if not os.path.isfile(path):
            path = getattr(checkpoint, "continue_once", None) or checkpoint.finetune_from_model
    else:
        path = checkpoint.restore_file.replace(".pt", suffix + ".pt")
    return path if path and os.path.isfile(path) else None


def resolve_for_training(cfg) -> None:
    """Resolve the input options of a training config (``cfg.task``) in place,
    against the checkpoint it resumes or fine-tunes (see the module doc)."""
    from fairseq import checkpoint_utils
    from fairseq.tasks import TASK_DATACLASS_REGISTRY
    from omegaconf import open_dict

    options = input_options(TASK_DATACLASS_REGISTRY.get(getattr(cfg.task, "_name", None)))
    path = resumed_checkpoint(cfg.checkpoint) if options else None
    state = checkpoint_utils.load_checkpoint_to_cpu(path) if path else {}
    recorded = (state.get("task_state") or {}).get(RECORD) or {}
    with open_dict(cfg.task):  # a hydra config may lack the keys its config file leaves out
        unset = fill_defaults(cfg.task, options)
        bind(cfg.task, options, recorded, unset, path,
             refuse=path != cfg.checkpoint.finetune_from_model)
