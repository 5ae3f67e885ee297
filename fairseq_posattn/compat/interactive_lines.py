"""Keep ``fairseq-interactive``'s input lines whole, numbered and translated.

fairseq 0.12's ``fairseq-interactive`` (and fairseq-fixed 0.12.3.1's) stops at
a line longer than the model's source positions, translates an empty line as
EOS alone and a line that is not UTF-8 as ``<unk>`` (or stops at it in an
``--input`` file), ends an ``--input`` file's lines at bare carriage returns,
merges the words on the two sides of a separator that subword-nmt keeps in a
piece (:mod:`fairseq_posattn.data.raw_text`) and reads reserved symbols' texts
as the symbols.  :func:`install` wraps ``buffered_read`` so that a file's lines
end at line feeds only, and ``make_batches`` so that each line is checked and
encoded once before it is batched, with a warning naming it: a line too long
is truncated (``--truncate-source``) or skipped, an empty, blank or non-UTF-8
one skipped, a separator read as a space, and the others keep their numbers
(docs/reliability.md, Long and odd inputs).  Tasks that read input lines as fairseq's base task does get this.
The wrapper goes into a ``fairseq_cli.interactive`` imported before the plugin
(as the command and ``python -m`` import it): importing that module for nothing
would set up the root logger on stdout.
"""

import functools
import itertools
import logging
import os
import sys
import tempfile

import torch

from ..data.raw_text import spaces_for_separators, unreadable
from ..data.reserved_symbols import READ_AS, as_unknown
from .patching import wrap_once

logger = logging.getLogger(__name__)


def source_positions(max_positions):
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
        limit = source_positions(max_positions)
        truncate = getattr(cfg.task, "truncate_source", False)
        encoded, kept = {}, []
        for i, (number, line) in enumerate(zip(numbers, lines)):
            source = line.split("\t")[0] if cfg.generation.constraints else line
            problem = unreadable(source)
            if problem:
                logger.warning("input line %d %s: skipped (it gets no S-%d or H-%d line)",
                               number, problem, number - 1, number - 1)
                continue
            text, separators = spaces_for_separators(source)
            if separators:
                logger.warning("input line %d holds %s: kept in the line, read as a space "
                               "between words", number, ", ".join(separators))
            pieces, reserved = as_unknown(tokenize_line(encode_fn(text)),
                                          task.source_dictionary)
            if reserved:
                logger.warning("input line %d: %s %s", number, ", ".join(reserved), READ_AS)
            if not pieces:
                logger.warning("input line %d is empty once tokenized: skipped (it gets no S-%d "
                               "or H-%d line)", number, number - 1, number - 1)
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


def _whole_lines(buffered_read):
    @functools.wraps(buffered_read)
    def wrapper(input, buffer_size):
        if input == "-":
            yield from buffered_read(input, buffer_size)
            return
        with open(input, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
            lines = (line.strip() for line in f)
            yield from iter(lambda: list(itertools.islice(lines, buffer_size)), [])

    return wrapper


def splits_lines_at_carriage_returns(buffered_read) -> bool:
    """True if ``buffered_read`` ends a file's line at a bare carriage return."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "input")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("a\rb\n")
        return sum(len(buffer) for buffer in buffered_read(path, 2)) > 1


def interactive_modules():
    """``fairseq_cli.interactive`` where it is imported: by name, or as ``__main__``."""
    modules = [sys.modules.get("fairseq_cli.interactive")]
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.interactive":
        modules.append(main)
    return [module for module in modules if module is not None]


def install() -> None:
    """Wrap ``make_batches`` and (where it splits lines at carriage returns)
    ``buffered_read`` of an imported ``fairseq_cli.interactive`` (idempotent)."""
    for module in interactive_modules():
        wrap_once(module, "make_batches", _fitting_lines)
        if splits_lines_at_carriage_returns(module.buffered_read):
            wrap_once(module, "buffered_read", _whole_lines)
