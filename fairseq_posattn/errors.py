"""Errors about bad input that say where it is and what to do.

:class:`StructureError` is the error of the tree logic (:mod:`fairseq_posattn.structure`)
and of every reader of tree-shaped or token-level input; :func:`location` and
:func:`fail` format ``"<file>, sentence <n>, line <m>: <problem>. <Hint>"`` for it
and for the other readers of the package; :func:`quoted` quotes every token,
word or field of the input that a message shows, naming its invisible and
unusual whitespace characters; :func:`at_least_one` is the argparse type of
counts.  :class:`DamagedCheckpointError` is the error of checkpoint files
(:mod:`fairseq_posattn.compat.checkpoint_integrity`), :class:`RendezvousTimeoutError`
the error of ranks that never met.
Imports nothing of the plugin or of fairseq, so the pure tree logic can use it.
"""

import argparse
import re
import unicodedata
from typing import List, Optional


class StructureError(ValueError):
    """Bad tree input, e.g. ``train.en.conllu, sentence 12, line 240: HEAD 31 is
    out of range ...``: the file, the 1-based sentence and line numbers (kept as
    attributes too, ``None`` when unknown) and what to do."""

    def __init__(self, message: str, source: Optional[str] = None,
                 sentence: Optional[int] = None, line: Optional[int] = None):
        super().__init__(message)
        self.source = source
        self.sentence = sentence
        self.line = line


class DamagedCheckpointError(ValueError):
    """A checkpoint file that cannot be what ``torch.save`` wrote: empty,
    truncated, a member whose checksum fails, or no torch checkpoint at all.
    The message names the file, what is wrong and what to do; ``path`` keeps
    the file."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


class RendezvousTimeoutError(RuntimeError):
    """Ranks of a multi-process training that did not all join within the
    rendezvous timeout (:mod:`fairseq_posattn.compat.distributed_launch`); the
    message names the ranks waited for and how to wait longer."""


def location(source: Optional[str] = None, sentence: Optional[int] = None,
             line: Optional[int] = None) -> str:
    """``"file, sentence 3, line 17"`` with the unknown parts left out."""
    parts = ((source, "%s"), (sentence, "sentence %d"), (line, "line %d"))
    return ", ".join(form % value for value, form in parts if value is not None)


def fail(problem: str, hint: str, source: Optional[str] = None,
         sentence: Optional[int] = None, line: Optional[int] = None,
         where: str = "") -> StructureError:
    """Build (not raise) a StructureError ``"<where>: <problem>. <hint>"``."""
    where = where or location(source, sentence, line)
    message = "%s. %s%s" % (problem, hint[:1].upper(), hint[1:]) if hint else problem
    if where:
        message = "%s: %s" % (where, message)
    return StructureError(message, source=source, sentence=sentence, line=line)


# Controls that Python and fairseq split words at; unicodedata gives controls no name.
_CONTROL_NAMES = {0x09: "CHARACTER TABULATION", 0x0A: "LINE FEED", 0x0B: "LINE TABULATION",
                  0x0C: "FORM FEED", 0x0D: "CARRIAGE RETURN", 0x1C: "INFORMATION SEPARATOR FOUR",
                  0x1D: "INFORMATION SEPARATOR THREE", 0x1E: "INFORMATION SEPARATOR TWO",
                  0x1F: "INFORMATION SEPARATOR ONE", 0x85: "NEXT LINE"}
# Unicode categories of characters that show nothing: controls, formats (zero
# width, joiners, direction marks), surrogates, private use, unassigned, line
# and paragraph separators; and what to call those of them without a name.
_UNSEEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_UNNAMED = {"Cc": "<control>", "Cs": "<surrogate>", "Co": "<private use>", "Cn": "<unassigned>"}


def unusual_characters(text: str) -> List[str]:
    """Each invisible or unusual whitespace character of ``text`` (every one
    but the plain space U+0020 that shows nothing or separates words), once,
    in order, by code point and name: ``["U+00A0 NO-BREAK SPACE"]``."""
    names = {}
    for c in text:
        category = unicodedata.category(c)
        if c != " " and c not in names and (category in _UNSEEN or c.isspace()):
            names[c] = "U+%04X %s" % (ord(c), unicodedata.name(c, None)
                                      or _CONTROL_NAMES.get(ord(c))
                                      or _UNNAMED[category])
    return list(names.values())


def quoted(value) -> str:
    """``repr(value)`` for a message, followed by the invisible and unusual
    whitespace characters of a string, e.g.
    ``'dog\\xa0sleeps' (holds U+00A0 NO-BREAK SPACE)``."""
    names = unusual_characters(value) if isinstance(value, str) else []
    return repr(value) + (" (holds %s)" % ", ".join(names) if names else "")


def at_least_one(text: str) -> int:
    """argparse type of a count (workers, batch size, ...): an integer >= 1."""
    if not re.fullmatch(r"\s*[0-9]+\s*", text) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be an integer >= 1, got %r" % text)
    return int(text)
