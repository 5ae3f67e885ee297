"""Checkpoints keep how they read their input on fairseq's training and hub routes.

fairseq 0.12 (and fairseq-fixed 0.12.3.1) sets a resumed ``fairseq-train`` run
up from its command line alone, so a task option it does not repeat takes its
default; and ``from_pretrained(..., task=...)`` (a ``task`` in the
``arg_overrides`` of ``load_model_ensemble_and_task``) is dropped silently.
:func:`install` wraps ``fairseq.tasks.setup_task``, so that a training run
(fairseq-train, fairseq-hydra-train, every process) first resolves the plugin
tasks' input options against the checkpoint it resumes
(:func:`fairseq_posattn.tasks.input_options.resolve_for_training`), and
``load_model_ensemble_and_task``, so that a ``task`` override naming another
task than the checkpoint's is refused, naming both
(:func:`fairseq_posattn.tasks.input_options.refuse_another_task`), and an
ensemble whose models read the source's trees in ways one batch cannot hold
together is refused naming the checkpoints
(:func:`fairseq_posattn.tasks.translation_struct.refuse_mixed_anchors`).
"""

import functools

from .patching import wrap_once


def _training_config(task_cfg):
    """The whole config of a training run whose task group ``task_cfg`` is, else
    None: fairseq-train's and fairseq-hydra-train's name no checkpoint to
    decode (``common_eval.path``), which every decoding command's does."""
    from omegaconf import OmegaConf

    root = task_cfg._get_parent() if OmegaConf.is_config(task_cfg) else None
    if root is None or "checkpoint" not in root or "common_eval" not in root:
        return None
    return root if root.common_eval.path is None else None


def _resolving_training_options(setup_task):
    @functools.wraps(setup_task)
    def wrapper(cfg, **kwargs):
        training = None if kwargs.get("from_checkpoint") else _training_config(cfg)
        if training is not None:
            from ..tasks.input_options import resolve_for_training

            resolve_for_training(training)
        return setup_task(cfg, **kwargs)

    return wrapper


def _checking_the_ensemble(load_model_ensemble_and_task):
    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, arg_overrides=None, *args, **kwargs):
        from ..tasks.input_options import refuse_another_task
        from ..tasks.translation_struct import refuse_mixed_anchors

        ensemble, cfg, task = load_model_ensemble_and_task(filenames, arg_overrides, *args,
                                                           **kwargs)
        refuse_another_task((arg_overrides or {}).get("task"),
                            getattr(getattr(cfg, "task", None), "_name", None), filenames)
        refuse_mixed_anchors(ensemble, filenames)
        return ensemble, cfg, task

    return wrapper


def install() -> None:
    from fairseq import checkpoint_utils, tasks

    wrap_once(tasks, "setup_task", _resolving_training_options)
    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _checking_the_ensemble)
