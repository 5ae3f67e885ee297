"""Repairs of fairseq 0.12 (and fairseq-fixed 0.12.3.1) and torch behaviour that
would stop the plugin's commands or silently change their results, installed
by :func:`install` when the plugin is imported, one module each.  Each module
names the behaviour it repairs and the versions that have it, and most probe
for it and leave fairseq unchanged where it is absent; docs/setup.md (What the
plugin repairs) lists them.
"""

from . import (bf16, checkpoint_integrity, checkpoint_task, clean_exit, hub_skipped_inputs, hydra,
               interactive_lines, last_batch, model_dir, option_names, reserved_symbols, safe_loading,
               user_dir, user_errors)
from . import atomic_copies, distributed_launch


def install() -> None:
    """Install every repair (idempotent)."""
    safe_loading.install()
    checkpoint_integrity.install()
    atomic_copies.install()
    distributed_launch.install()
    interactive_lines.install()
    reserved_symbols.install()
    hub_skipped_inputs.install()
    model_dir.install()
    user_dir.install()
    last_batch.install()
    option_names.install()  # before bf16, which reads parse_args_and_arch's code once
    bf16.install()
    hydra.install()
    checkpoint_task.install()
    clean_exit.install()
    user_errors.install()
