"""fairseq_posattn: position- and structure-aware Transformer encoders for fairseq.

Load it with ``--user-dir <path>/fairseq_posattn`` (or ``import fairseq_posattn``).
Importing the package installs the repairs of :mod:`fairseq_posattn.compat` and
registers the plugin's models, architectures, tasks, criteria, optimizers and
tokenizer with fairseq.
"""

__fairseq_plugin__ = "fairseq_posattn"  # marker read by compat.user_dir.is_plugin_copy

from .version import __version__  # noqa: E402,F401

from . import compat  # noqa: E402

compat.install()

from . import criterions, models, optim, tasks  # noqa: F401,E402  (registration)
from .data import tokenizer  # noqa: F401,E402  (registration)
