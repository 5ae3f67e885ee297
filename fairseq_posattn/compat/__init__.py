"""Repairs of fairseq 0.12 (and fairseq-fixed 0.12.3.1) and torch behaviour that
would stop the plugin's commands, installed by :func:`install` when the plugin
is imported.  Each module names the behaviour it repairs and the versions that
have it, and leaves fairseq unchanged where the behaviour is absent:

* :mod:`.safe_loading`: torch >= 2.6 loads with ``weights_only=True`` and
  refuses fairseq's checkpoints; the globals they need are allow-listed;
* :mod:`.checkpoint_integrity`: ``torch.load`` ignores the CRC-32s of its zip
  archives, so a damaged checkpoint loads silently; fairseq's loads verify them;
* :mod:`.interactive_lines`: ``fairseq-interactive`` stops at a line longer
  than the model's positions and translates an empty line silently; such lines
  are truncated (``--truncate-source``) or skipped, with a warning naming them;
* :mod:`.user_dir`: ``--user-dir`` pointing at a second copy of the plugin
  raises in fairseq's ``import_user_module``; the imported copy is kept;
* :mod:`.last_batch`: fairseq-fixed's ``batch_by_size`` drops an epoch's last
  batch; it is given back;
* :mod:`.bf16`: ``--bf16`` implies ``--tpu`` in fairseq's argument parsing,
  and fairseq-generate ignores it; the device is kept and decoding casts;
* :mod:`.hydra`: ``TransformerConfig.from_namespace`` drops a hydra config's
  plugin options; they are kept;
* :mod:`.clean_exit`: fairseq's data-loading daemon threads outlive a run, and
  one that shutdown meets inside torch aborts the process (exit code 134);
  they are stopped and joined at exit.
"""

from . import (bf16, checkpoint_integrity, clean_exit, hydra, interactive_lines, last_batch,
               safe_loading, user_dir)


def install() -> None:
    """Install every repair (idempotent)."""
    safe_loading.install()
    checkpoint_integrity.install()
    interactive_lines.install()
    user_dir.install()
    last_batch.install()
    bf16.install()
    hydra.install()
    clean_exit.install()
