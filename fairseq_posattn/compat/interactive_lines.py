"""Keep ``fairseq-interactive`` going past lines that it cannot translate.

fairseq 0.12's ``fairseq-interactive`` (and fairseq-fixed 0.12.3.1's) builds
each buffer of input lines into batches in ``fairseq_cli.interactive.make_batches``,
under the model's ``max_positions``:

* a line with more tokens (after ``--tokenizer``, ``--bpe`` and EOS) than the
  model's source positions stops the command with fairseq's "Size of sample
  #0 is invalid" exception, and the lines after it are never translated;
  ``--truncate-source`` does not apply there (it truncates datasets read from
  disk);
* an empty line (or one without tokens) becomes EOS alone and gets a made-up
  translation without a word.

:func:`install` wraps ``make_batches`` so that each line is encoded once and
checked before it is batched:

* no tokens: skipped, with a warning naming the line;
* more tokens than the source positions, with ``--truncate-source``: its first
  positions - 1 tokens and EOS are translated, with a warning naming the line;
* more tokens, without ``--truncate-source``: skipped, with a warning naming
  the line.

A skipped line gets no ``S-``, ``H-``, ``D-`` or ``P-`` line; the others keep
their numbers (input line n is ``S-``\\ (n-1)).  Tasks that read input lines
as fairseq's base task does (``FairseqTask.get_interactive_tokens_and_lengths``:
``translation``, ``translation_struct``, ...) get this; others keep fairseq's
behaviour.  The wrapper goes into a ``fairseq_cli.interactive`` that is
imported before the plugin, as the ``fairseq-interactive`` command and
``python -m fairseq_cli.interactive`` import it (the plugin comes with
``--user-dir``); importing that module for nothing would set up the root
logger on stdout.
"""

import functools
import itertools
import logging
import sys

import torch

from .patching import wrap_once

logger = logging.getLogger(__name__)


def _source_positions(max_positions):
    """The source side of fairseq's resolved ``max_positions`` (None: no limit)."""
    if isinstance(max_positions, (tuple, list)):
        max_positions = max_positions[0]
    return max_positions if isinstance(max_positions, int) else None


def _fitting_lines(make_batches):
    line_numbers = itertools.count(1)  # the next input line's, over the whole run

    @functools.wraps(make_batches)
    def wrapper(lines, cfg, task, max_positions, encode_fn):
        from fairseq.tasks import FairseqTask
        from fairseq.tokenizer import tokenize_line

        numbers = [next(line_numbers) for _ in lines]
        if (type(task).get_interactive_tokens_and_lengths
                is not FairseqTask.get_interactive_tokens_and_lengths):
            yield from make_batches(lines, cfg, task, max_positions, encode_fn)
            return
        limit = _source_positions(max_positions)
        truncate = getattr(cfg.task, "truncate_source", False)
        encoded, kept = {}, []
        for i, (number, line) in enumerate(zip(numbers, lines)):
            source = line.split("\t")[0] if cfg.generation.constraints else line
            pieces = tokenize_line(encode_fn(source))
            if not pieces:
                logger.warning("input line %d is empty: skipped (it gets no S-%d or H-%d line)",
                               number, number - 1, number - 1)
                continue
            if limit is not None and len(pieces) + 1 > limit:
                too_long = ("input line %d has %d tokens with EOS, more than the model's %d "
                            "source positions" % (number, len(pieces) + 1, limit))
                if not truncate:
                    logger.warning("%s: skipped (it gets no S-%d or H-%d line); "
                                   "--truncate-source translates its first %d tokens instead",
                                   too_long, number - 1, number - 1, limit - 1)
                    continue
                logger.warning("%s: translating its first %d tokens and EOS (--truncate-source)",
                               too_long, limit - 1)
                pieces = pieces[:limit - 1]
            encoded[source] = " ".join(pieces)
            kept.append(i)
        if not kept:
            return
        ids = torch.tensor(kept)
        for batch in make_batches([lines[i] for i in kept], cfg, task, max_positions,
                                  lambda text: encoded[text] if text in encoded
                                  else encode_fn(text)):
            yield batch._replace(ids=ids[batch.ids])

    return wrapper


def _interactive_modules():
    """``fairseq_cli.interactive`` where it is imported: by name, or as ``__main__``."""
    modules = [sys.modules.get("fairseq_cli.interactive")]
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.interactive":
        modules.append(main)
    return [module for module in modules if module is not None]


def install() -> None:
    """Wrap ``make_batches`` of an imported ``fairseq_cli.interactive`` (idempotent)."""
    for module in _interactive_modules():
        wrap_once(module, "make_batches", _fitting_lines)
