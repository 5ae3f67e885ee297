"""Repairs of fairseq 0.12 (and fairseq-fixed 0.12.3.1) and torch behaviour that
would stop the plugin's commands or silently change their results, installed
by :func:`install` when the plugin is imported.  Each module names the
behaviour it repairs and the versions that have it, and leaves fairseq
unchanged where the behaviour is absent:

* :mod:`.safe_loading`: torch >= 2.6 loads with ``weights_only=True`` and
  refuses fairseq's checkpoints; the globals they need are allow-listed;
* :mod:`.checkpoint_integrity`: ``torch.load`` ignores the CRC-32s of its zip
  archives, so a damaged checkpoint loads silently; fairseq's loads verify them;
* :mod:`.interactive_lines`: ``fairseq-interactive`` stops at a line longer
  than the model's positions, translates an empty line silently and ends an
  ``--input`` file's lines at bare carriage returns; such lines are truncated
  (``--truncate-source``) or skipped, with a warning naming them, and lines
  end at line feeds only;
* :mod:`.reserved_symbols`: ``<pad>``, ``</s>`` or ``<s>`` typed as a word gets
  the symbol's id; raw input reads it as ``<unk>``, with a warning;
* :mod:`.hub_skipped_inputs`: the hub's ``generate`` with
  ``skip_invalid_size_inputs=True`` closes up its outputs; each skipped input
  gets an empty one in its place, with a warning naming its index;
* :mod:`.user_dir`: ``--user-dir`` pointing at a second copy of the plugin
  raises in fairseq's ``import_user_module``; the imported copy is kept;
* :mod:`.last_batch`: fairseq-fixed's ``batch_by_size`` drops an epoch's last
  batch; it is given back;
* :mod:`.bf16`: ``--bf16`` implies ``--tpu`` in fairseq's argument parsing,
  and fairseq-generate ignores it; the device is kept and decoding casts;
* :mod:`.hydra`: ``TransformerConfig.from_namespace`` drops a hydra config's
  plugin options; they are kept;
* :mod:`.input_options`: a resumed ``fairseq-train`` run reads its task options
  from the command line alone, and the hub drops ``task=``; the plugin tasks'
  input options come from the checkpoint, and another task is refused;
* :mod:`.option_names`: fairseq builds a legacy model from whatever its config
  holds and drops a checkpoint's unknown task keys silently, and refuses an
  unknown key or flag without the name meant; the plugin's model and task
  configs are checked (:mod:`fairseq_posattn.config_check`), naming it;
* :mod:`.clean_exit`: fairseq's data-loading daemon threads outlive a run, and
  one that shutdown meets inside torch aborts the process (exit code 134);
  they are stopped and joined at exit.
"""

from . import (bf16, checkpoint_integrity, clean_exit, hub_skipped_inputs, hydra, input_options,
               interactive_lines, last_batch, option_names, reserved_symbols, safe_loading,
               user_dir)


def install() -> None:
    """Install every repair (idempotent)."""
    safe_loading.install()
    checkpoint_integrity.install()
    interactive_lines.install()
    reserved_symbols.install()
    hub_skipped_inputs.install()
    user_dir.install()
    last_batch.install()
    option_names.install()  # before bf16, which reads parse_args_and_arch's code once
    bf16.install()
    hydra.install()
    input_options.install()
    clean_exit.install()
