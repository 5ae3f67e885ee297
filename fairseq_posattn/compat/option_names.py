"""The plugin's model and task configs checked on every route, and unknown
option names refused with the nearest valid one.

:func:`install` wraps ``fairseq.models.build_model`` (every route that builds
a model: fairseq-train, fairseq-hydra-train, a checkpoint loaded by
fairseq-generate, -interactive or the hub), which runs a model's architecture
functions on its config as it is, to check a config of the plugin's models
first (:func:`fairseq_posattn.config_check.check_model_config`), and what
cannot take effect in it (:func:`~fairseq_posattn.config_check.check_model_effects`;
in a model loaded from a checkpoint only the values ``load_model_ensemble_and_task``'s
``arg_overrides`` give now, so that a checkpoint of 0.3.0 loads as it was trained); and
``merge_with_parent`` (``add_defaults``, ``tasks.setup_task``), which stops at
an unknown task key with no valid name or drops it from a checkpoint's
config, to check a config of the plugin's tasks first
(:func:`fairseq_posattn.config_check.check_task_config`).  The wrapped
``fairseq.options.parse_args_and_arch`` adds to argparse's "unrecognized
arguments" the nearest flag, or the switch a value follows
(:func:`fairseq_posattn.config_check.with_nearest_flags`).
"""

import functools
import sys

from .patching import wrap_once


def _plugin_task_config(dataclass_or_instance):
    """The dataclass, if it is the config of one of the plugin's tasks."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    group = dataclass_or_instance if isinstance(dataclass_or_instance, type) else type(
        dataclass_or_instance)
    plugin = group.__module__.startswith("fairseq_posattn.")
    return group if plugin and group in TASK_DATACLASS_REGISTRY.values() else None


def _checking_plugin_tasks(merge_with_parent):
    @functools.wraps(merge_with_parent)
    def wrapper(dc, cfg, *args, **kwargs):
        from omegaconf import OmegaConf

        from ..config_check import check_task_config

        group = _plugin_task_config(dc)
        if group is not None and OmegaConf.is_config(cfg):
            check_task_config(group, cfg)
        return merge_with_parent(dc, cfg, *args, **kwargs)

    return wrapper


def _checking_plugin_models(build_model):
    @functools.wraps(build_model)
    def wrapper(cfg, task, *args, **kwargs):
        from fairseq.models import ARCH_MODEL_REGISTRY

        from ..config_check import architecture, check_model_config, check_model_effects

        model_cls = ARCH_MODEL_REGISTRY.get(architecture(cfg))
        if hasattr(model_cls, "option_groups"):
            check_model_config(model_cls, cfg)
            from_checkpoint = args[0] if args else kwargs.get("from_checkpoint", False)
            check_model_effects(model_cls, cfg, task, names=() if from_checkpoint else None)
        return build_model(cfg, task, *args, **kwargs)

    return wrapper


def _refusing_inert_overrides(load_model_ensemble_and_task):
    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, arg_overrides=None, *args, **kwargs):
        from fairseq.models import ARCH_MODEL_REGISTRY

        from ..config_check import architecture, check_model_effects

        ensemble, cfg, task = load_model_ensemble_and_task(filenames, arg_overrides, *args, **kwargs)
        given = set(arg_overrides or ())
        model_cls = ARCH_MODEL_REGISTRY.get(architecture(cfg.model))
        if given and hasattr(model_cls, "option_groups"):
            check_model_effects(model_cls, cfg.model, task, names=given)
        if given and hasattr(task, "refuse_inert_options"):
            task.refuse_inert_options(cfg.model, names=given)
        return ensemble, cfg, task

    return wrapper


def _suggesting(parse_args_and_arch):
    @functools.wraps(parse_args_and_arch)
    def wrapper(parser, input_args=None, *args, **kwargs):
        from ..config_check import with_nearest_flags

        argv = [str(a) for a in (sys.argv[1:] if input_args is None else input_args)]
        parser.error = lambda message: type(parser).error(
            parser, with_nearest_flags(parser, argv, message))
        return parse_args_and_arch(parser, input_args, *args, **kwargs)

    return wrapper


def install() -> None:
    from fairseq import checkpoint_utils, models, options, tasks
    from fairseq.dataclass import utils as dataclass_utils

    wrap_once(models, "build_model", _checking_plugin_models)
    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _refusing_inert_overrides)
    # add_defaults imports merge_with_parent when it runs; fairseq.tasks at its import
    for module in (dataclass_utils, tasks):
        wrap_once(module, "merge_with_parent", _checking_plugin_tasks)
    wrap_once(options, "parse_args_and_arch", _suggesting)
