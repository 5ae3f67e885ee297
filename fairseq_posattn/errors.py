"""Errors about bad input that say where it is and what to do.

:class:`UserError` is the base of the package's errors about the user's input,
options or files; :func:`is_user_error` also counts a ``ValueError`` that a
``raise`` of the package raised (its refusals of options), and :func:`report`
prints either as ``<command>: error: <message>``, without a traceback unless
``FAIRSEQ_POSATTN_TRACEBACK=1`` (:func:`reported` for a command's body).
:class:`StructureError` is the error of the tree logic
(:mod:`fairseq_posattn.structure`) and of every reader of tree-shaped or
token-level input; :func:`location` and :func:`fail` format ``"<file>, sentence <n>, line <m>: <problem>. <Hint>"`` for it
and for the other readers of the package; :func:`quoted` quotes every token,
word or field of the input that a message shows, naming its invisible and
unusual whitespace characters, and :func:`quoted_pair` two that differ but
print alike, by code point; :func:`at_least_one` is the argparse type of
counts.  :class:`DamagedCheckpointError` is the error of checkpoint files
(:mod:`fairseq_posattn.compat.checkpoint_integrity`), :class:`RendezvousTimeoutError`
the error of ranks that never met.
Imports nothing of the plugin or of fairseq, so the pure tree logic can use it.
"""

import argparse
import contextlib
import difflib
import dis
import os
import re
import sys
import unicodedata
from typing import Iterable, List, Optional, Tuple

TRACEBACK_VARIABLE = "FAIRSEQ_POSATTN_TRACEBACK"  # set to 1: the user's errors with their traceback
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class UserError(Exception):
    """Base of the package's errors about the user's input, options or files:
    the message says what is wrong, where and what to do."""


class StructureError(UserError, ValueError):
    """Bad tree input, e.g. ``train.en.conllu, sentence 12, line 240: HEAD 31 is
    out of range ...``: the file, the 1-based sentence and line numbers (kept as
    attributes too, ``None`` when unknown) and what to do."""

    def __init__(self, message: str, source: Optional[str] = None,
                 sentence: Optional[int] = None, line: Optional[int] = None):
        super().__init__(message)
        self.source = source
        self.sentence = sentence
        self.line = line


class DamagedCheckpointError(UserError, ValueError):
    """A checkpoint file that cannot be what ``torch.save`` wrote: empty,
    truncated, a member whose checksum fails, or no torch checkpoint at all.
    The message names the file, what is wrong and what to do; ``path`` keeps
    the file."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


class RendezvousTimeoutError(UserError, RuntimeError):
    """Ranks of a multi-process training that did not all join within the
    rendezvous timeout (:mod:`fairseq_posattn.compat.distributed_launch`); the
    message names the ranks waited for and how to wait longer."""
def raised_by_the_package(error: BaseException) -> bool:
    """True if ``error`` comes from a ``raise`` statement of this package (not
    from a call inside it that failed, such as ``int("x")``)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    code = tb.tb_frame.f_code
    return (os.path.abspath(code.co_filename).startswith(_PACKAGE_DIR)
            and dis.opname[code.co_code[tb.tb_lasti]] == "RAISE_VARARGS")


def is_user_error(error: BaseException) -> bool:
    """True for the package's errors about the user's input, options or files:
    a :class:`UserError`, a ``ValueError`` the package raised (its refusals),
    or one of either re-raised from another process with its message kept in
    ``user_message``."""
    return (isinstance(error, UserError) or hasattr(error, "user_message")
            or isinstance(error, ValueError) and raised_by_the_package(error))


def traceback_wanted() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")


def command_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def report(error: BaseException, command: Optional[str] = None) -> None:
    """Print ``<command>: error: <message>`` on stderr (the command: ``sys.argv[0]``'s name)."""
    message = getattr(error, "user_message", None) or str(error)
    sys.stderr.write("%s: error: %s\n" % (command or command_name(), message))
    sys.stderr.flush()


@contextlib.contextmanager
def reported(command: Optional[str] = None, status: int = 1):
    """A command's body: a user error inside is reported (:func:`report`) and
    exits with ``status``; any other error, or any with ``FAIRSEQ_POSATTN_TRACEBACK=1``,
    propagates with its traceback."""
    try:
        yield
    except Exception as error:
        if not is_user_error(error) or traceback_wanted():
            raise
        report(error, command)
        sys.exit(status)


def nearest(name: str, known: Iterable[str], cutoff: float = 0.6) -> Optional[str]:
    """The known name closest to ``name`` (a typo's intended name), if any is
    as close as ``cutoff`` (difflib's similarity ratio)."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return close[0] if close else None


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


def code_point(c: str) -> str:
    """``"U+00A0 NO-BREAK SPACE"``: a character by code point and name."""
    return "U+%04X %s" % (ord(c), unicodedata.name(c, None) or _CONTROL_NAMES.get(ord(c))
                          or _UNNAMED.get(unicodedata.category(c), "<unnamed>"))


def unusual_characters(text: str) -> List[str]:
    """Each invisible or unusual whitespace character of ``text`` (every one
    but the plain space U+0020 that shows nothing or separates words), once,
    in order, by code point and name: ``["U+00A0 NO-BREAK SPACE"]``."""
    unusual = (c for c in text if c != " " and (unicodedata.category(c) in _UNSEEN or c.isspace()))
    return [code_point(c) for c in dict.fromkeys(unusual)]


def quoted(value) -> str:
    """``repr(value)`` for a message, followed by the invisible and unusual
    whitespace characters of a string, e.g.
    ``'dog\\xa0sleeps' (holds U+00A0 NO-BREAK SPACE)``."""
    names = unusual_characters(value) if isinstance(value, str) else []
    return repr(value) + (" (holds %s)" % ", ".join(names) if names else "")


def _spelled(text: str) -> str:
    """``text`` character by character: runs of printable ASCII as they are,
    every other character by code point and name (``A + U+030A COMBINING RING ABOVE + ngstr``)."""
    parts: List[str] = []
    for c in text:
        if " " < c < "\x7f":
            if parts and not parts[-1].startswith("U+"):
                parts[-1] += c
                continue
            parts.append(c)
        else:
            parts.append(code_point(c))
    return " + ".join(parts)


def _seen(text: str) -> str:
    """What ``text`` shows: compatibility-normalized, invisible characters left out."""
    return "".join(c for c in unicodedata.normalize("NFKC", text)
                   if unicodedata.category(c) not in _UNSEEN)


def quoted_pair(a, b) -> Tuple[str, str]:
    """``quoted(a), quoted(b)``; where two strings differ but show alike (they
    differ by Unicode normalization or invisible characters), each spelled out
    by code point: ``'Ångström' (A + U+030A COMBINING RING ABOVE + ngstr + ...)``."""
    if isinstance(a, str) and isinstance(b, str) and a != b and _seen(a) == _seen(b):
        return tuple(repr(s) if _spelled(s) == s else "%r (%s)" % (s, _spelled(s)) for s in (a, b))
    return quoted(a), quoted(b)


def at_least_one(text: str) -> int:
    """argparse type of a count (workers, batch size, ...): an integer >= 1."""
    if not re.fullmatch(r"\s*[0-9]+\s*", text) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be an integer >= 1, got %r" % text)
    return int(text)
