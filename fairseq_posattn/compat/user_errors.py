"""The plugin's errors about the user's input, options or files as one line,
``<command>: error: <message>``, from fairseq's commands as from the plugin's.

fairseq's commands let every exception end in Python's traceback; hydra
(``fairseq-hydra-train``) prints a traceback of its own; an error in a
DataLoader worker reaches the main process as a new exception whose message
holds the worker's traceback; one in a process that ``torch.multiprocessing.spawn``
started (fairseq's distributed training) stops the parent with the child's
traceback.  :func:`install` routes the plugin's user errors
(:func:`fairseq_posattn.errors.is_user_error`) to
:func:`fairseq_posattn.errors.report` on each of these paths; any other error
keeps its traceback, and ``FAIRSEQ_POSATTN_TRACEBACK=1`` keeps every one's.
"""

import multiprocessing
import sys

from torch.multiprocessing import ProcessExitedException

from ..errors import is_user_error, report, reported, traceback_wanted
from .patching import wrap_once

# a spawned training process's exit status after it reported a user error itself
REPORTED_EXIT_STATUS = 65
_fairseq_distributed_main = None


def reported_in_a_child(error: BaseException) -> bool:
    """True for torch's exception about a spawned process that reported a user error."""
    return isinstance(error, ProcessExitedException) and error.exit_code == REPORTED_EXIT_STATUS


def _reporting(excepthook):
    def hook(kind, error, tb):
        if reported_in_a_child(error):
            return  # the child printed the message; the exit status is 1
        if is_user_error(error) and not traceback_wanted():
            report(error)
        else:
            excepthook(kind, error, tb)

    return hook


def _full_error_for_user_errors(is_env_set):
    """hydra's check of HYDRA_FULL_ERROR, true while a user error is handled:
    hydra then re-raises it to the excepthook instead of printing its traceback."""
    def wrapper(name):
        error = sys.exc_info()[1]
        if name == "HYDRA_FULL_ERROR" and error is not None and (
                is_user_error(error) or reported_in_a_child(error)):
            return True
        return is_env_set(name)

    return wrapper


def _keeping_the_message(init):
    """In a DataLoader worker: keep a user error's own message for the main process."""
    def wrapper(self, exc_info=None, *args, **kwargs):
        init(self, exc_info, *args, **kwargs)
        error = (exc_info or sys.exc_info())[1]
        if error is not None and is_user_error(error):
            self.user_message = getattr(error, "user_message", None) or str(error)

    return wrapper


def _reraising_with_the_message(reraise):
    def wrapper(self):
        try:
            reraise(self)
        except Exception as error:
            if getattr(self, "user_message", None) is not None:
                error.user_message = self.user_message
            raise

    return wrapper


def distributed_main(i, main, cfg, kwargs):
    """fairseq's ``distributed_main``; in a process that torch spawned, a user
    error is reported there and ends the process with :data:`REPORTED_EXIT_STATUS`.
    (A module-level function: spawn pickles it by name.)"""
    if multiprocessing.parent_process() is None:  # --distributed-no-spawn, torchrun: the excepthook
        return _fairseq_distributed_main(i, main, cfg, kwargs)
    with reported(status=REPORTED_EXIT_STATUS):
        return _fairseq_distributed_main(i, main, cfg, kwargs)


def install() -> None:
    global _fairseq_distributed_main
    from fairseq.distributed import utils as distributed_utils
    from hydra._internal import utils as hydra_utils
    from torch._utils import ExceptionWrapper

    wrap_once(sys, "excepthook", _reporting)
    wrap_once(hydra_utils, "_is_env_set", _full_error_for_user_errors)
    wrap_once(ExceptionWrapper, "__init__", _keeping_the_message)
    wrap_once(ExceptionWrapper, "reraise", _reraising_with_the_message)
    if distributed_utils.distributed_main is not distributed_main:
        _fairseq_distributed_main = distributed_utils.distributed_main
        distributed_utils.distributed_main = distributed_main
