"""Reading and writing dependency trees as CoNLL-U.

Reading is strict and done here line by line (the ``conllu`` package is
lenient: it also splits columns at two spaces and keeps no line numbers);
writing goes through ``conllu``'s serializer.  Every problem is a
:class:`StructureError` that names the file, the 1-based sentence number, the
1-based line and what to do.
"""

import hashlib
import io
import os
import re
from dataclasses import dataclass, field
from typing import IO, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy as np
from conllu.models import TokenList

from ..errors import fail, location, quoted, quoted_pair
from .tree import DependencyTree, _as_heads, analyse_heads, check_tree, collapse_multiword_tokens

PathOrFile = Union[str, "os.PathLike[str]", IO[str]]

_WORD_ID = re.compile(r"[1-9][0-9]*")
_RANGE_ID = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_EMPTY_NODE_ID = re.compile(r"[0-9]+\.[1-9][0-9]*")
_HEAD = re.compile(r"-?[0-9]+")  # a negative one is read, to be out of range
_METADATA = re.compile(r"#\s*(sent_id|text)\s*=(.*)")
_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")

_HINT_COLUMNS = ("a CoNLL-U token line has 10 columns separated by single tabs "
                 "(spaces do not separate columns); fix the line")
_HINT_IDS = ("word IDs must run 1, 2, ..., n within a sentence (multiword ranges a-b "
             "just before word a); is the blank line between two sentences missing?")
_HINT_REPARSE = ("the CoNLL-U must be the parse of exactly this tokenized text (pretokenized "
                 "input, one sentence per line): re-parse it or fix the text")


class SentenceStart(NamedTuple):
    """Where a sentence of a CoNLL-U file begins: the byte offset of its
    first line, its 1-based sentence number and its 1-based line number."""

    offset: int
    sentence: int
    line: int


@dataclass
class SentenceIndex:
    """Every ``every``-th sentence start of a CoNLL-U file (:func:`index_sentences`):
    part ``k`` holds sentences ``k * every + 1`` to ``(k + 1) * every``."""

    path: str
    every: int
    starts: List[SentenceStart]
    sentences: int
    lines: int
    size: int
    sha256: str

    def read_part(self, k: int, texts: Optional[Iterable[str]] = None,
                  last: bool = False) -> Iterator[DependencyTree]:
        """The trees of part ``k`` (checked against ``texts`` as by
        :func:`read_conllu`); a part past the last is empty.  ``last``: read to
        the end of the file, so that sentences beyond the text's last line are
        an error."""
        if k >= len(self.starts):
            start = SentenceStart(self.size, self.sentences + 1, self.lines + 1)
        else:
            start = self.starts[k]
        end = self.starts[k + 1].offset if k + 1 < len(self.starts) and not last else self.size
        with open(self.path, "rb") as f:
            f.seek(start.offset)
            data = f.read(end - start.offset)
        return read_conllu(io.BytesIO(data), texts=texts, source=self.path, start=start)


def _is_blank(raw: bytes) -> bool:
    """Whether a line ends a sentence, as :func:`read_conllu` decides it: it
    holds nothing but whitespace, Unicode's included (token and comment lines
    are not decoded)."""
    if raw[:1].isdigit() or raw[:1] == b"#":
        return False
    return not raw.decode("utf-8", "replace").strip()


def index_sentences(path: str, every: int) -> SentenceIndex:
    """One pass over a CoNLL-U file: its sentence count, sha256 and the start of every ``every``-th sentence."""
    if every < 1:
        raise ValueError("every must be >= 1")
    digest = hashlib.sha256()
    starts: List[SentenceStart] = []
    sentences, offset, in_sentence, lineno = 0, 0, False, 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            digest.update(raw)
            line = raw[3:] if lineno == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
            if _is_blank(line):
                in_sentence = False
            elif not in_sentence:
                in_sentence = True
                if sentences % every == 0:
                    starts.append(SentenceStart(offset, sentences + 1, lineno))
                sentences += 1
            offset += len(raw)
    return SentenceIndex(path=path, every=every, starts=starts, sentences=sentences,
                         lines=lineno, size=offset, sha256=digest.hexdigest())


@dataclass
class _Block:
    """The lines of one sentence as they are read."""

    number: int                      # 1-based sentence number
    first_line: Optional[int] = None  # first token line (any kind)
    comment_line: Optional[int] = None
    forms: List[str] = field(default_factory=list)
    heads: List[int] = field(default_factory=list)
    deprels: List[str] = field(default_factory=list)
    upos: List[str] = field(default_factory=list)
    xpos: List[str] = field(default_factory=list)
    lines: List[int] = field(default_factory=list)
    ranges: List[Tuple[int, int, str, int]] = field(default_factory=list)  # a, b, form, line
    metadata: Dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.first_line is None and self.comment_line is None


def _open(path_or_file: PathOrFile, mode: str, source: Optional[str]):
    """(file, close it?, name)."""
    if isinstance(path_or_file, (str, os.PathLike)):
        name = source if source is not None else os.fspath(path_or_file)
        if mode == "r":  # bytes: each line decoded alone, so errors name their line
            return open(path_or_file, "rb"), True, name
        return open(path_or_file, "w", encoding="utf-8", newline="\n"), True, name
    if source is None:
        source = getattr(path_or_file, "name", None)
        source = source if isinstance(source, str) else None
    return path_or_file, False, source


def read_conllu(path_or_file: PathOrFile, texts: Optional[Iterable[str]] = None,
                source: Optional[str] = None, start: Optional[SentenceStart] = None
                ) -> Iterator[DependencyTree]:
    """Yield the dependency trees of a CoNLL-U file (a path or a text file), lazily.

    Comments keep ``# sent_id`` and ``# text``; empty nodes (``8.1``) are
    skipped; a multiword range ``a-b`` becomes one node (the surface token,
    :func:`.tree.collapse_multiword_tokens`).  With ``texts`` (the tokenized
    text, one sentence per line), every tree's tokens must equal its line's.
    ``source`` names the file in errors; ``start``: the file is a part of a
    larger one that begins at this sentence and line (:func:`index_sentences`),
    so that messages and ``tree.index`` count from the start of the whole file.
    """
    handle, close, name = _open(path_or_file, "r", source)
    text_lines = iter(texts) if texts is not None else None
    start = start or SentenceStart(0, 1, 1)
    try:
        block = _Block(number=start.sentence)
        lineno = start.line - 1
        for lineno, raw in enumerate(_decoded_lines(handle, name, start.line), start.line):
            line = raw.rstrip("\r\n")
            if lineno == 1:
                line = line.lstrip("\ufeff")
            if not line.strip():
                if not block.empty:
                    yield _finish(block, name, text_lines)
                    block = _Block(number=block.number + 1)
            elif line.startswith("#"):
                _comment(block, line, lineno)
            else:
                _token_line(block, line, lineno, name)
        if not block.empty:
            yield _finish(block, name, text_lines)
            block = _Block(number=block.number + 1)
        if text_lines is not None and next(text_lines, None) is not None:
            raise fail("the file ends after %d sentences but the text has more lines (line "
                       "%d of the text has no tree)" % (block.number - 1, block.number),
                       _HINT_REPARSE, source=name, line=lineno or None)
    finally:
        if close:
            handle.close()


def _decoded_lines(handle, name: Optional[str], first_line: int = 1) -> Iterator[str]:
    """The lines of a text or binary file; a binary line that is not UTF-8 is an error naming its line."""
    for lineno, line in enumerate(handle, first_line):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise fail("the line is not valid UTF-8 (%s)" % exc, "convert the file to UTF-8",
                           source=name, line=lineno) from None
        yield line


def _comment(block: _Block, line: str, lineno: int) -> None:
    if block.comment_line is None:
        block.comment_line = lineno
    m = _METADATA.fullmatch(line)
    if m:
        block.metadata[m.group(1)] = m.group(2).strip()


def _token_line(block: _Block, line: str, lineno: int, name: Optional[str]) -> None:
    def error(problem: str, hint: str):
        return fail(problem, hint, source=name, sentence=block.number, line=lineno)

    if block.first_line is None:
        block.first_line = lineno
    cols = line.split("\t")
    if len(cols) != 10:
        raise error("expected 10 tab-separated columns, found %d" % len(cols), _HINT_COLUMNS)
    if "" in cols:
        raise error("column %s is empty" % _COLUMNS[cols.index("")].upper(),
                    "write '_' for an unknown value")
    tid, form = cols[0], cols[1]
    expected = len(block.forms) + 1
    if _WORD_ID.fullmatch(tid):
        if int(tid) != expected:
            raise error("word ID %s where %d was expected" % (tid, expected), _HINT_IDS)
        if not _HEAD.fullmatch(cols[6]):
            raise error("HEAD %s of word %s is not an integer" % (quoted(cols[6]), tid),
                        "HEAD must be 0 (root) or the ID of a word of the same sentence")
        block.forms.append(form)
        block.heads.append(int(cols[6]))
        block.deprels.append(cols[7])
        block.upos.append(cols[3])
        block.xpos.append(cols[4])
        block.lines.append(lineno)
        return
    if _EMPTY_NODE_ID.fullmatch(tid):
        return  # empty node: enhanced dependencies only
    m = _RANGE_ID.fullmatch(tid)
    if not m:
        raise error("ID %s is not a word ID 1, 2, ..., a range a-b or an empty node i.j" % quoted(tid),
                    _HINT_IDS)
    a, b = int(m.group(1)), int(m.group(2))
    if a >= b:
        raise error("multiword range %s must span at least two words" % tid, _HINT_IDS)
    if a != expected:
        raise error("multiword range %s where a range starting at word %d was expected"
                    % (tid, expected), _HINT_IDS)
    if block.ranges and block.ranges[-1][1] >= a:
        raise error("multiword range %s overlaps range %d-%d" % ((tid,) + block.ranges[-1][:2]),
                    _HINT_IDS)
    block.ranges.append((a, b, form, lineno))


def _finish(block: _Block, name: Optional[str], text_lines: Optional[Iterator[str]]
            ) -> DependencyTree:
    """Validate a sentence, collapse its multiword tokens, compare it with its text."""
    first = block.first_line if block.first_line is not None else block.comment_line

    def error(problem: str, hint: str, line: Optional[int] = first):
        return fail(problem, hint, source=name, sentence=block.number, line=line)

    n = len(block.forms)
    if n == 0:
        raise error("the sentence has no words (only comments, ranges or empty nodes)",
                    "remove the block or add its token lines")
    if block.ranges and block.ranges[-1][1] > n:
        a, b, _, line = block.ranges[-1]
        raise error("multiword range %d-%d goes past the last word %d" % (a, b, n), _HINT_IDS, line)
    _, problem = analyse_heads(_head_array(block.heads), block.forms)
    if problem is not None:
        word, what, hint = problem
        raise error(what, hint, block.lines[word] if word >= 0 else first)
    words, heads, (deprels, upos, xpos) = _collapse(block)
    tree = DependencyTree(
        words=words, heads=heads, deprels=_unless_blank(deprels),
        sent_id=block.metadata.get("sent_id"), text=block.metadata.get("text"),
        upos=_unless_blank(upos), xpos=_unless_blank(xpos),
        source=name, line=block.first_line, index=block.number - 1)
    if text_lines is not None:
        text = next(text_lines, None)
        if text is None:
            raise error("the file has more sentences than the text has lines (%d)"
                        % (block.number - 1), _HINT_REPARSE)
        _compare(words, text.split(), block.number, error)
    return tree


def _head_array(heads: List[int]) -> np.ndarray:
    """The heads as int64, or as Python integers where one is too large (:func:`analyse_heads` refuses it)."""
    try:
        return np.asarray(heads, dtype=np.int64)
    except OverflowError:
        return np.asarray(heads, dtype=object)


def _unless_blank(column: List[str]) -> Optional[List[str]]:
    """A label column, or None when it is '_' throughout."""
    return None if all(v == "_" for v in column) else column


def _collapse(block: _Block) -> Tuple[List[str], List[int], Tuple[List[str], ...]]:
    """Surface-token tree: every multiword range becomes one node.  Returns
    words, heads and the DEPREL, UPOS and XPOS columns."""
    labels = (block.deprels, block.upos, block.xpos)
    if not block.ranges:
        return block.forms, block.heads, labels
    token_of_word: List[int] = []
    words: List[str] = []
    starts = {a - 1: (b, form) for a, b, form, _ in block.ranges}
    i = 0
    while i < len(block.forms):
        end, form = starts.get(i, (i + 1, block.forms[i]))
        token_of_word += [len(words)] * (end - i)
        words.append(form)
        i = end
    heads, labels = collapse_multiword_tokens(len(words), token_of_word, block.heads, list(zip(*labels)))
    return words, heads, tuple(map(list, zip(*labels)))


def _compare(words: List[str], tokens: List[str], number: int, error) -> None:
    if words == tokens:
        return
    pos = next((i for i, (w, t) in enumerate(zip(words, tokens)) if w != t),
               min(len(words), len(tokens)))
    tree_tok, text_tok = (quoted_pair(words[pos], tokens[pos]) if pos < min(len(words), len(tokens))
                          else (quoted(side[pos]) if pos < len(side) else "(end)"
                                for side in (words, tokens)))
    if len(words) != len(tokens):
        what = ("the tree has %d surface tokens but line %d of the text has %d"
                % (len(words), number, len(tokens)))
    else:
        what = "the tree's tokens differ from line %d of the text" % number
    raise error("%s; first difference at token %d: tree %s, text %s"
                % (what, pos + 1, tree_tok, text_tok), _HINT_REPARSE)


def _serialize(tree: DependencyTree, where: str) -> str:
    words, n = tree.words, len(tree.words)
    if len(_as_heads(tree.heads, where)) != n:
        raise fail("%d words but %d heads" % (n, len(tree.heads)),
                   "give every word one head", where=where)
    check_tree(tree.heads, where=where, words=words)
    columns = []
    for kind, values in (("word", words), ("deprel", tree.deprels), ("UPOS tag", tree.upos),
                         ("XPOS tag", tree.xpos)):
        if values is None:
            values = [None] * n
        elif len(values) != n:
            raise fail("%d words but %d %ss" % (n, len(values), kind),
                       "give every word one %s (or none at all)" % kind, where=where)
        bad = "\t\n\r" if kind == "word" else " \t\n\r"
        for i, v in enumerate(values):
            if v is not None and (not isinstance(v, str) or not v or any(c in v for c in bad)):
                raise fail("%s %d is %s" % (kind, i + 1, quoted(v)),
                           "CoNLL-U fields must be non-empty strings without tabs or "
                           "line breaks", where=where)
        columns.append(values)
    _, deprels, upos, xpos = columns
    metadata = {}
    for key in ("sent_id", "text"):
        value = getattr(tree, key)
        if value:
            if "\n" in value or "\r" in value:
                raise fail("%s %s holds a line break" % (key, quoted(value)), "remove it",
                           where=where)
            metadata[key] = value
    tokens = []
    for i, (w, h, r, u, x) in enumerate(zip(words, tree.heads, deprels, upos, xpos)):
        r = r or ("root" if int(h) == 0 else "dep")
        tokens.append(dict(zip(_COLUMNS, (i + 1, w, None, u, x, None, int(h), r, None, None))))
    return TokenList(tokens, metadata).serialize()


def write_conllu(trees: Iterable[DependencyTree], path_or_file: PathOrFile) -> int:
    """Write ``trees`` as CoNLL-U (10 columns, ``_`` where unknown, DEPREL
    ``dep``/``root`` when unknown, ``# sent_id`` / ``# text`` when known) and
    return how many were written.  A bad tree raises :class:`StructureError`."""
    handle, close, name = _open(path_or_file, "w", None)
    count = 0
    try:
        for tree in trees:
            handle.write(_serialize(tree, where=location(name, count + 1)))
            count += 1
    finally:
        if close:
            handle.close()
    return count

