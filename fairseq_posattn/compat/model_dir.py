"""A model directory's raw-input settings on fairseq's hub and fairseq-interactive.

fairseq 0.12's (and fairseq-fixed 0.12.3.1's) ``from_pretrained`` finds a
directory's dictionaries and subword model, but the tokenizer and ``--bpe``
only in its ``archive_map`` or the checkpoint; ``fairseq-interactive`` takes
none of them from the directory or the checkpoint, so raw text is read without
the tokenization the model was trained on.  :func:`install` wraps
``checkpoint_utils.load_model_ensemble_and_task`` (under ``from_pretrained``,
the plugin imported by its ``user_dir``) and ``fairseq_cli.interactive.main``
(where it is imported, see :mod:`.interactive_lines`) so that the options that
the :data:`~fairseq_posattn.data.model_dir.SETTINGS` beside a checkpoint hold
are taken from them when they are not given, and refused when given otherwise
(:func:`fairseq_posattn.data.model_dir.merge`).
"""

import dataclasses
import functools
import os

from ..data.model_dir import merge, read
from .interactive_lines import interactive_modules
from .patching import wrap_once


def _reading_model_dir(load_model_ensemble_and_task):
    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, arg_overrides=None, *args, **kwargs):
        directory = os.path.dirname(os.path.abspath(filenames[0]))
        if read(directory):
            arg_overrides = merge(arg_overrides or {}, directory)
        return load_model_ensemble_and_task(filenames, arg_overrides, *args, **kwargs)

    return wrapper


def _default(config_class, option):
    """The default of ``option`` in a dataclass config class, or None."""
    for f in dataclasses.fields(config_class) if config_class else ():
        if f.name == option:
            return f.default if f.default is not dataclasses.MISSING else None
    return None


def given_options(cfg, options) -> dict:
    """The ``options`` that a fairseq-interactive config gives: a registry
    choice (``tokenizer``, ``bpe``), or a field of the task or of a chosen
    registry's config whose value is not its default."""
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    given = {}
    groups = {"task": TASK_DATACLASS_REGISTRY.get(cfg.task._name)}
    for name in ("tokenizer", "bpe"):
        if cfg.get(name) is not None:
            given[name] = cfg[name]._name
            groups[name] = REGISTRIES[name]["dataclass_registry"].get(cfg[name]._name)
    for option in options:
        for name, config_class in groups.items():
            value = cfg[name].get(option) if option in cfg[name] else None
            if value is not None and value != _default(config_class, option):
                given.setdefault(option, value)
    return given


def _interactive_reading_model_dir(main):
    @functools.wraps(main)
    def wrapper(cfg, *args, **kwargs):
        from fairseq import utils
        from fairseq.dataclass.utils import overwrite_args_by_name

        directory = os.path.dirname(os.path.abspath(utils.split_paths(cfg.common_eval.path)[0]))
        saved = read(directory)
        if saved:
            overwrite_args_by_name(cfg, merge(given_options(cfg, saved), directory))
        return main(cfg, *args, **kwargs)

    return wrapper


def install() -> None:
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _reading_model_dir)
    for module in interactive_modules():
        wrap_once(module, "main", _interactive_reading_model_dir)
