"""Make ``--user-dir`` tolerate a second copy of this plugin.

fairseq imports a user directory as a top-level module named after the
directory (``fairseq.utils.import_user_module``) and raises "... is not
globally unique" when a module of that name is already imported from another
path: here, when an installed copy was imported first and a command gets
``--user-dir`` of a checkout, or ``from_pretrained(..., user_dir=...)`` names
another copy.  :func:`install` wraps ``import_user_module``: a directory
named like the imported plugin, not on its ``__path__``, that is a copy of it
(its ``__init__.py`` carries :data:`PLUGIN_MARKER`) or the same directory
under another spelling keeps the imported copy, with a warning naming both
(importing the copy would register every task and architecture twice).
Anything else goes to fairseq unchanged.
"""

import functools
import logging
import os
import sys

from .patching import wrap_once

logger = logging.getLogger(__name__)

PACKAGE_NAME = __name__.split(".", 1)[0]  # "fairseq_posattn"
PLUGIN_MARKER = '__fairseq_plugin__ = "fairseq_posattn"'  # a line of every copy's __init__.py


def is_plugin_copy(path: str) -> bool:
    """True if directory ``path`` holds a copy of this plugin (not executed)."""
    try:
        with open(os.path.join(path, "__init__.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    return any(line.partition("#")[0].strip() == PLUGIN_MARKER for line in text.splitlines())


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _tolerating_plugin_copies(import_user_module):
    tolerated = set()  # copies already warned about

    # functools.wraps shares fairseq's memo (an attribute of the function) with the wrapper
    @functools.wraps(import_user_module)
    def wrapper(args):
        user_dir = getattr(args, "user_dir", None)
        module_path = os.path.abspath(user_dir) if user_dir is not None else None
        loaded = sys.modules.get(PACKAGE_NAME)
        loaded_paths = [os.path.abspath(p) for p in getattr(loaded, "__path__", [])]
        if (
            module_path is not None
            and os.path.basename(module_path) == PACKAGE_NAME
            and os.path.isdir(module_path)
            and module_path not in loaded_paths
            and getattr(loaded, "__fairseq_plugin__", None) == PACKAGE_NAME
        ):
            if any(_same_dir(module_path, p) for p in loaded_paths):
                logger.info("--user-dir=%s is %s, already imported", module_path, loaded_paths[0])
                return None
            if module_path in tolerated:
                return None
            if is_plugin_copy(module_path):
                tolerated.add(module_path)
                logger.warning(
                    "--user-dir=%s is another copy of the %s plugin; %s is already "
                    "imported from %s and that copy is used (fairseq cannot register "
                    "the same tasks and architectures twice)",
                    module_path, PACKAGE_NAME, PACKAGE_NAME, loaded_paths[0],
                )
                return None
        return import_user_module(args)

    return wrapper


def install() -> None:
    from fairseq import utils

    wrap_once(utils, "import_user_module", _tolerating_plugin_copies)
