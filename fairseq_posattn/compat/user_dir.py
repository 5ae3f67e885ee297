"""Make ``--user-dir`` tolerate a second copy of this plugin.

fairseq imports a user directory as a top-level module named after the
directory (``fairseq.utils.import_user_module``).  If a module of that name is
already imported from another path, it raises::

    ImportError: Failed to import --user-dir=... because the corresponding
    module name (fairseq_posattn) is not globally unique. ...

That happens with this plugin when, for example, an installed copy (site
packages) was imported first (``import fairseq_posattn`` in a script, or
through another entry point) and then a command gets ``--user-dir`` of a
checkout, or when ``from_pretrained(..., user_dir=...)`` names another copy.

:func:`install` wraps ``fairseq.utils.import_user_module`` (every fairseq call
site calls it as ``utils.import_user_module``).  The wrapper handles one
case itself and passes everything else to fairseq unchanged:

* the requested directory is named like the already imported plugin, is not
  on its ``__path__`` (fairseq's own "already imported" case), and is a copy of
  this plugin (its ``__init__.py`` carries the marker line below) or the same
  directory under another spelling (a symlink): log a warning naming both
  paths, keep the copy already imported (fairseq's registries already hold its
  classes; importing a second copy would register every task and
  architecture twice), and return.

A directory of the same name that is something else still gets fairseq's
``ImportError``.
"""

import functools
import logging
import os
import sys

logger = logging.getLogger(__name__)

PACKAGE_NAME = __name__.split(".", 1)[0]  # "fairseq_posattn"
# A line that every copy of this plugin has in its __init__.py.
PLUGIN_MARKER = '__fairseq_plugin__ = "fairseq_posattn"'

__all__ = ["install", "is_plugin_copy", "PLUGIN_MARKER"]


def is_plugin_copy(path: str) -> bool:
    """True if directory ``path`` holds a copy of this plugin (not executed)."""
    init = os.path.join(path, "__init__.py")
    try:
        with open(init, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    return any(line.partition("#")[0].strip() == PLUGIN_MARKER for line in text.splitlines())


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _wrap(original):
    tolerated = set()  # copies already warned about

    @functools.wraps(original)
    def import_user_module(args):
        user_dir = getattr(args, "user_dir", None)
        if user_dir is not None:
            module_path = os.path.abspath(user_dir)
            name = os.path.basename(module_path)
            loaded = sys.modules.get(name)
            loaded_paths = [os.path.abspath(p) for p in getattr(loaded, "__path__", [])]
            if (
                loaded is not None
                and name == PACKAGE_NAME
                and os.path.isdir(module_path)
                and module_path not in loaded_paths
                and getattr(loaded, "__fairseq_plugin__", None) == PACKAGE_NAME
            ):
                if any(_same_dir(module_path, p) for p in loaded_paths):
                    logger.info(
                        "--user-dir=%s is %s, already imported", module_path, loaded_paths[0]
                    )
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
        return original(args)

    import_user_module.__fairseq_posattn_compat__ = True
    return import_user_module


def install() -> None:
    """Wrap ``fairseq.utils.import_user_module`` once (idempotent)."""
    from fairseq import utils

    current = utils.import_user_module
    if getattr(current, "__fairseq_posattn_compat__", False):
        return
    # fairseq's function keeps its memo as an attribute of whatever the module
    # global ``import_user_module`` names; functools.wraps copies the memo set
    # (same object) to the wrapper, so it stays shared.
    utils.import_user_module = _wrap(current)
