"""``fairseq-posattn-parse``: tokenized text (one sentence per line) -> CoNLL-U.

One tree per input line, in the same order, over exactly the line's
whitespace-separated tokens; ``# sent_id`` is the 1-based line number and
``# text`` the line.  The input is cut into chunks of ``--chunk-size`` lines,
each written atomically under ``<output>.parts``, so a run resumes, parses in
``--workers`` processes (:mod:`.workers`) and splits into ``--shard i/N`` jobs;
when every chunk exists they are checked against their lines and merged into
``<output>``, and ``<output>.parts`` is removed.
``<output>.parts/meta.json`` records the input, the chunk size and the parser,
so chunks of another input or parser are never mixed in.  ``--parser conllu
--conllu FILE`` checks an existing parse against the text instead, in the same
chunks.  docs/structure.md ("Parsing") is the manual.
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from itertools import groupby
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tqdm import tqdm

from fairseq_posattn.structure import (DependencyTree, StructureError, check_tree,
                                       read_conllu, write_conllu)
from fairseq_posattn.structure.conllu_io import index_sentences

from ..errors import UserError, at_least_one, quoted, quoted_pair, reported
from ..files import atomic_output
from .parsers import BACKENDS, ExistingParse, Parser, add_parser_args, build_parser
from .workers import START_METHODS, worker_pool

logger = logging.getLogger(__name__)

__all__ = ["ParseInputError", "InputIndex", "scan_input", "parse_file", "merge_chunks",
           "chunk_path", "parts_dir_for", "cli_main"]

CHUNK_RE = re.compile(r"^chunk-(\d{6,})\.conllu$")
META_NAME = "meta.json"
MERGE_LOCK = ".merge.lock"
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CLEANING_HINT = ("remove empty lines (and the same lines of the other side of a parallel "
                  "corpus) with the recipe's cleaning step, e.g. fairseq's "
                  "clean-corpus-n / `paste src tgt | awk -F'\\t' 'NF==2 && $1~/[^ ]/ "
                  "&& $2~/[^ ]/'`, before parsing")


class ParseInputError(UserError, ValueError):
    """Bad input or inconsistent chunks; the message names file and line."""


# ---------------------------------------------------------------------------
# input
# ---------------------------------------------------------------------------

@dataclass
class InputIndex:
    """Where each chunk of an input file starts (byte offsets), found in one pass."""

    path: str
    n_lines: int
    chunk_size: int
    offsets: List[int]  # byte offset of the first line of each chunk, plus the file size
    size: int
    sha256: str

    @property
    def n_chunks(self) -> int:
        return len(self.offsets) - 1

    def chunk_lines(self, c: int) -> Tuple[int, int]:
        """(first line number, 1-based; number of lines) of chunk ``c``."""
        first = c * self.chunk_size
        return first + 1, min(self.chunk_size, self.n_lines - first)

    def lines_of(self, c: int) -> str:
        """Chunk ``c`` in words: ``"lines 11-15 of in.txt"``."""
        first, n = self.chunk_lines(c)
        return "lines %d-%d of %s" % (first, first + n - 1, self.path)

    def read_chunk(self, c: int) -> List[str]:
        """The lines of chunk ``c`` (newline removed)."""
        with open(self.path, "rb") as f:
            f.seek(self.offsets[c])
            data = f.read(self.offsets[c + 1] - self.offsets[c])
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        first, n = self.chunk_lines(c)
        out = [_decode_line(raw, self.path, first + i) for i, raw in enumerate(lines)]
        if len(out) != n:
            raise ParseInputError("%s changed while it was being parsed (chunk %d has %d lines, "
                                  "expected %d)" % (self.path, c, len(out), n))
        return out


def _decode_line(raw: bytes, path: str, line_no: int) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseInputError("%s, line %d: not valid UTF-8 (%s); convert the file to UTF-8"
                              % (path, line_no, exc)) from None
    if "\r" in text:
        raise ParseInputError(
            "%s, line %d: contains a carriage return inside the line; fairseq would read "
            "it as a line break, so the sentence count would differ. Replace it with a "
            "space (e.g. tr '\\r' ' ')" % (path, line_no))
    return text


def scan_input(path: str, chunk_size: int) -> InputIndex:
    """One pass over ``path``: line count, chunk offsets, sha256, and the
    checks that every line decodes and has at least one token."""
    if chunk_size < 1:
        raise ParseInputError("--chunk-size must be >= 1")
    if not os.path.isfile(path):
        raise ParseInputError("input file %s does not exist" % path)
    digest = hashlib.sha256()
    offsets = [0]
    pos = 0
    n = 0
    empty: List[int] = []
    with open(path, "rb") as f:
        for raw in f:
            digest.update(raw)
            n += 1
            text = _decode_line(raw.rstrip(b"\n"), path, n)
            if not text.split():
                empty.append(n)
            pos += len(raw)
            if n % chunk_size == 0:
                offsets.append(pos)
    if offsets[-1] != pos or n == 0:
        offsets.append(pos)
    if n == 0:
        raise ParseInputError("%s is empty: nothing to parse" % path)
    if empty:
        shown = ", ".join(str(i) for i in empty[:10])
        raise ParseInputError(
            "%s, line %d: empty line (%d empty or whitespace-only line(s) in all: line%s %s%s). "
            "Every line must hold one tokenized sentence; %s"
            % (path, empty[0], len(empty), "s" if len(empty) > 1 else "", shown,
               ", ..." if len(empty) > 10 else "", _CLEANING_HINT))
    return InputIndex(path=path, n_lines=n, chunk_size=chunk_size, offsets=offsets,
                      size=pos, sha256=digest.hexdigest())


# ---------------------------------------------------------------------------
# chunks
# ---------------------------------------------------------------------------

def parts_dir_for(output: str) -> str:
    return output + ".parts"


def chunk_path(parts_dir: str, c: int) -> str:
    return os.path.join(parts_dir, "chunk-%06d.conllu" % c)


def verify_chunk(path: str, lines: Sequence[str], first_line: int) -> None:
    """Check that chunk file ``path`` holds exactly the trees of ``lines``
    (input lines ``first_line``, ``first_line + 1``, ...): one per line (as
    :func:`read_conllu` checks them), ``sent_id`` = line numbers; raises
    :class:`StructureError` or :class:`ParseInputError`."""
    _check_sent_ids(read_conllu(path, texts=lines), path, first_line, len(lines), 1)


def _check_sent_ids(trees: Iterable[DependencyTree], path: str, first_line: int, n: int,
                    first_sentence: int) -> None:
    """``sent_id`` of the trees of input lines ``first_line``... (sentence
    ``first_sentence``... of ``path``) = their line numbers."""
    for i, tree in enumerate(trees):
        want = str(first_line + i)
        if tree.sent_id != want:
            raise ParseInputError("%s, sentence %d: sent_id %s, expected %s (chunk of input "
                                  "lines %d-%d)" % (path, first_sentence + i, quoted(tree.sent_id),
                                                    want, first_line, first_line + n - 1))


def verify_output(index: InputIndex, output: str) -> None:
    """Check that a merged ``output`` holds exactly the trees of every input
    line, one chunk of lines at a time; raises :class:`StructureError` or
    :class:`ParseInputError`."""
    merged = index_sentences(output, index.chunk_size)
    for c in range(index.n_chunks):
        lines = index.read_chunk(c)
        trees = merged.read_part(c, texts=lines, last=c == index.n_chunks - 1)
        first = index.chunk_lines(c)[0]
        _check_sent_ids(trees, output, first, len(lines), first)


def parse_lines(parser: Parser, lines: Sequence[str], first_line: int, source: str,
                batch_size: int, progress=None) -> Tuple[List[DependencyTree], Dict[str, int]]:
    """Parse ``lines`` (input lines ``first_line``...) in batches; every tree
    is checked against its line (token count: error naming the line; forms:
    the input's are kept) and for cycles/bad heads; the trees and counts of
    trees with several roots and with forms changed."""
    trees: List[DependencyTree] = []
    stats = {"multi_root": 0, "forms_changed": 0}
    for start in range(0, len(lines), batch_size):
        batch = [line.split() for line in lines[start:start + batch_size]]  # as fairseq splits
        parsed = parser.parse(batch)
        if len(parsed) != len(batch):
            raise ParseInputError(
                "%s, lines %d-%d: the %s parser returned %d trees for %d lines"
                % (source, first_line + start, first_line + start + len(batch) - 1,
                   parser.name, len(parsed), len(batch)))
        for j, (tokens, tree) in enumerate(zip(batch, parsed)):
            where = "%s, line %d" % (source, first_line + start + j)
            if len(tree.words) != len(tokens) or len(tree.heads) != len(tokens):
                raise ParseInputError(
                    "%s: the %s parser returned %d tokens for the %d tokens of the line "
                    "(%s for %s); no tree is written for it rather than a shifted one. Check "
                    "the line's tokens (or use another parser/backend for this corpus)"
                    % (where, parser.name, len(tree.words), len(tokens),
                       quoted(" ".join(tree.words[:50])), quoted(" ".join(tokens[:50]))))
            if list(tree.words) != tokens:
                if stats["forms_changed"] == 0:
                    diff = next(k for k, (a, b) in enumerate(zip(tree.words, tokens)) if a != b)
                    logger.warning("%s: the parser changed token %d %s to %s; the input's "
                                   "forms are kept", where, diff + 1,
                                   *quoted_pair(tokens[diff], tree.words[diff]))
                stats["forms_changed"] += 1
                tree.words = list(tokens)
            check_tree(tree.heads, where=where, words=tree.words)
            if sum(1 for h in tree.heads if h == 0) > 1:
                stats["multi_root"] += 1
            if tree.deprels is not None and len(tree.deprels) != len(tokens):
                tree.deprels = None
            trees.append(tree)
        if progress is not None:
            progress(len(batch))
    return trees, stats


# ---------------------------------------------------------------------------
# chunk jobs, in this process or in workers
# ---------------------------------------------------------------------------

class ChunkJob:
    """Does one chunk: skips it if it is done, else parses it with ``args.parser``
    (loaded for the first chunk that needs it) or reads it from ``existing``
    (the conllu backend), and writes it atomically."""

    def __init__(self, args, index: InputIndex, parts_dir: str,
                 existing: Optional[ExistingParse], threads: Optional[int]):
        self.parser = existing
        self.backend, self.options, self.threads = args.parser, parser_options(args), threads
        self.index, self.parts_dir, self.batch_size = index, parts_dir, args.batch_size

    def is_done(self, c: int, lines: List[str]) -> bool:
        """True if chunk ``c`` exists and holds exactly its lines; a corrupt
        chunk is removed with a warning (it will be redone)."""
        path = chunk_path(self.parts_dir, c)
        if not os.path.exists(path):
            return False
        try:
            verify_chunk(path, lines, self.index.chunk_lines(c)[0])
            return True
        except (StructureError, ParseInputError, UnicodeDecodeError) as exc:
            logger.warning("chunk %s is incomplete or corrupt, redoing it: %s", path, exc)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False

    def __call__(self, c: int, progress=None) -> Dict[str, object]:
        lines = self.index.read_chunk(c)
        if self.is_done(c, lines):
            return {"chunk": c, "sentences": len(lines), "skipped": True}
        if self.parser is None:
            if self.threads and "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(self.threads)
            t0 = time.time()
            self.parser = build_parser(self.backend, **self.options)
            logger.info("loaded the %s parser in %.1f s (pid %d)", self.backend, time.time() - t0,
                        os.getpid())
        t0 = time.time()
        first = self.index.chunk_lines(c)[0]
        if isinstance(self.parser, ExistingParse):  # checked against the lines as it is read
            trees, stats = list(self.parser.index.read_part(
                c, texts=lines, last=c == self.index.n_chunks - 1)), {}
            if progress is not None:
                progress(len(trees))
        else:
            trees, stats = parse_lines(self.parser, lines, first, self.index.path, self.batch_size,
                                       progress)
        seconds = time.time() - t0
        for i, (tree, line) in enumerate(zip(trees, lines)):
            tree.sent_id, tree.text = str(first + i), line.strip()
        with atomic_output(chunk_path(self.parts_dir, c)) as f:
            write_conllu(trees, f)
        return {"chunk": c, "sentences": len(trees), "skipped": False, "seconds": seconds,
                **stats}


_JOB: Optional[ChunkJob] = None  # a worker process's job


def _worker_init(job: ChunkJob, log_level: int) -> None:
    global _JOB
    logging.basicConfig(level=log_level, format=LOG_FORMAT, stream=sys.stderr, force=True)
    _JOB = job


def _worker_task(c: int) -> Dict[str, object]:
    return _JOB(c)


# ---------------------------------------------------------------------------
# meta, merge
# ---------------------------------------------------------------------------

def check_or_write_meta(parts_dir: str, meta: Dict[str, object], write: bool = True) -> None:
    path = os.path.join(parts_dir, META_NAME)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
        except (OSError, ValueError) as exc:
            raise ParseInputError("%s cannot be read (%s); remove it (and the chunks, if they "
                                  "may come from another input) and rerun" % (path, exc))
        diff = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
        has_chunks = any(CHUNK_RE.match(n) for n in os.listdir(parts_dir))
        if not diff:
            return
        if has_chunks or not write:
            raise ParseInputError(
                "%s was made for another input, chunk size or parser (differs in %s: %s vs "
                "now %s). Rerun with the same input and options, or remove %s to start over"
                % (parts_dir, ", ".join(diff), {k: old.get(k) for k in diff},
                   {k: meta.get(k) for k in diff}, parts_dir))
        # nothing was parsed under the old settings (e.g. the model failed to load)
        logger.info("%s holds no chunks yet; starting it with the new settings", parts_dir)
    if write:
        with atomic_output(path) as f:
            json.dump(meta, f, indent=1, sort_keys=True)


def missing_chunks(index: InputIndex, parts_dir: str) -> List[int]:
    return [c for c in range(index.n_chunks) if not os.path.exists(chunk_path(parts_dir, c))]


def _ranges(numbers: Sequence[int]) -> str:
    """Sorted numbers as runs: ``0-2, 5``."""
    runs = [[n for _, n in run] for _, run in groupby(enumerate(numbers), lambda p: p[1] - p[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else "%d-%d" % (r[0], r[-1]) for r in runs)


def merge_chunks(index: InputIndex, parts_dir: str, output: str,
                 trusted: Iterable[int] = ()) -> int:
    """Check every chunk against its lines and concatenate them in order into
    ``output`` (atomically).  Returns the number of sentences.  Chunks in
    ``trusted`` were written or verified by this very run and are not read
    twice."""
    trusted = set(trusted)
    missing = missing_chunks(index, parts_dir)
    if missing:
        raise ParseInputError(
            "cannot merge into %s: %d of %d chunks are missing in %s (chunk%s %s); run the "
            "missing shards (chunk c belongs to shard c %% N) or the command without "
            "--merge-only" % (output, len(missing), index.n_chunks, parts_dir,
                              "s" if len(missing) > 1 else "", _ranges(missing)))
    with atomic_output(output, mode="wb") as out:
        for c in range(index.n_chunks):
            path = chunk_path(parts_dir, c)
            first, n = index.chunk_lines(c)
            if c not in trusted:
                try:
                    verify_chunk(path, index.read_chunk(c), first)
                except (StructureError, ParseInputError) as exc:
                    raise ParseInputError(
                        "chunk %s does not hold exactly input lines %d-%d: %s. Remove it and "
                        "rerun the command (for its shard, %d %% N) to redo it"
                        % (path, first, first + n - 1, exc, c)) from None
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    return index.n_lines


@contextlib.contextmanager
def _merging(parts_dir: str):
    """Hold the merge lock of ``parts_dir`` for the block, so that shards that
    finish together check, merge and remove the chunks one at a time; yields
    whether ``parts_dir`` is still there (else another run merged it)."""
    try:
        fd = os.open(os.path.join(parts_dir, MERGE_LOCK), os.O_RDWR | os.O_CREAT, 0o666)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the kernel lets go when fd is closed
        yield fd is not None and os.fstat(fd).st_nlink > 0
    finally:
        if fd is not None:
            os.close(fd)


def _remove_parts(parts_dir: str) -> None:
    """Remove the chunks once merged, renamed out of the way first, so that a
    run coming to merge them finds them gone as a whole."""
    doomed = "%s.removed-%d" % (parts_dir, os.getpid())
    os.rename(parts_dir, doomed)
    shutil.rmtree(doomed)


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------

def _shard(text: str) -> Tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise argparse.ArgumentTypeError("must be i/N with 0 <= i < N (0-based), got %r" % text)
    return int(m.group(1)), int(m.group(2))


def _start_method(text: str) -> str:
    if text not in START_METHODS:
        raise argparse.ArgumentTypeError(
            "%r is not one of %s%s" % (text, ", ".join(START_METHODS), "; fork is not offered: "
                                       "forking a process that runs threads can hang it"
                                       if text == "fork" else ""))
    return text


def parser_options(args) -> Dict[str, object]:
    return {"lang": args.parser_lang, "model": args.parser_model, "stanza_dir": args.stanza_dir,
            "download": args.download, "batch_size": args.batch_size,
            "use_gpu": False if args.cpu else None}


def parser_identity(args) -> Dict[str, object]:
    model = args.parser_model
    if model and os.path.sep in model:
        model = os.path.basename(os.path.normpath(model))
    return {"backend": args.parser, "model": model,
            "lang": args.parser_lang if args.parser in ("stanza", "udpipe") else None}


def _run_chunks(args, index: InputIndex, parts_dir: str, todo: List[int],
                existing: Optional[ExistingParse] = None) -> Tuple[Counter, set]:
    """Do the chunks ``todo`` in this process or in ``--workers`` processes;
    the sentences parsed and skipped and the seconds spent (a Counter), and
    the chunks done."""
    summary, chunks = Counter(), set()
    in_process = args.workers <= 1 or len(todo) <= 1
    t0 = time.time()
    with tqdm(total=sum(index.chunk_lines(c)[1] for c in todo), unit="sent", desc="parsing",
              disable=args.no_progress_bar, dynamic_ncols=True, mininterval=1.0) as bar:
        def account(result):
            chunks.add(result.pop("chunk"))
            sentences, skipped = result.pop("sentences"), result.pop("skipped")
            summary["skipped" if skipped else "parsed"] += sentences
            if skipped or not in_process:  # else the bar moved batch by batch
                bar.update(sentences)
            summary.update(result)  # seconds, multi_root, forms_changed

        if in_process:
            job = ChunkJob(args, index, parts_dir, existing, args.threads)
            for c in todo:
                account(job(c, progress=bar.update))
        else:
            workers = min(args.workers, len(todo))
            threads = args.threads or max(1, (os.cpu_count() or 1) // workers)
            job = ChunkJob(args, index, parts_dir, existing, threads)
            added = [var for var in THREAD_VARIABLES if var not in os.environ]
            os.environ.update({var: str(threads) for var in added})
            with contextlib.ExitStack() as stack:
                try:  # the workers start here and inherit the variables
                    each = stack.enter_context(worker_pool(
                        workers, _worker_init, (job, logger.getEffectiveLevel()), args.start_method))
                finally:
                    for var in added:
                        os.environ.pop(var, None)
                for result in each(_worker_task, todo, ordered=False, name=index.lines_of):
                    account(result)
    summary["wall_seconds"] = time.time() - t0
    return summary, chunks


def _remove_stale_temp_files(parts_dir: str, todo: Iterable[int]) -> None:
    mine = {os.path.basename(chunk_path(parts_dir, c)) for c in todo}
    for name in os.listdir(parts_dir):
        if name.startswith(".") and name.endswith(".tmp"):
            base = name[1:].rsplit(".", 2)[0]  # ".chunk-000001.conllu.XXXX.tmp"
            if base in mine:
                logger.info("removing %s, left by an interrupted run",
                            os.path.join(parts_dir, name))
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(parts_dir, name))


def parse_file(args) -> None:
    """Run the command for parsed arguments (see :func:`get_argparser`)."""
    t_start = time.time()
    index = scan_input(args.input, args.chunk_size)
    logger.info("%s: %d lines, %d chunk(s) of up to %d lines", args.input, index.n_lines,
                index.n_chunks, args.chunk_size)
    existing = None
    if args.parser == "conllu":
        if not args.conllu:
            raise ParseInputError("--parser conllu needs --conllu FILE (the existing parse)")
        existing = ExistingParse(args.conllu, args.chunk_size)
        logger.info("%s: %d sentences", args.conllu, existing.index.sentences)
    parts_dir = parts_dir_for(args.output)
    shard_i, shard_n = args.shard or (0, 1)
    meta = {"input_sha256": index.sha256, "input_bytes": index.size, "input_lines": index.n_lines,
            "chunk_size": index.chunk_size, "chunks": index.n_chunks,
            "parser": existing.describe() if existing else parser_identity(args)}

    if args.merge_only:
        with _merging(parts_dir) as there:
            if there:
                check_or_write_meta(parts_dir, meta, write=False)
                n = merge_chunks(index, parts_dir, args.output)
                _remove_parts(parts_dir)
        if there:
            logger.info("merged %d sentences from %d chunks into %s", n, index.n_chunks,
                        args.output)
            return
        if not os.path.exists(args.output):
            raise ParseInputError("--merge-only: %s does not exist; run the parse first (a run "
                                  "that merges its chunks removes them)" % parts_dir)
        try:
            verify_output(index, args.output)
        except (StructureError, ParseInputError, UnicodeDecodeError) as exc:
            raise ParseInputError(
                "--merge-only: %s does not exist, and %s does not hold the parse of %s (%s); "
                "run the parse first" % (parts_dir, args.output, args.input, exc)) from None
        logger.info("%s already holds the %d trees of %s: another run has merged the chunks "
                    "and removed %s", args.output, index.n_lines, args.input, parts_dir)
        return

    os.makedirs(parts_dir, exist_ok=True)
    check_or_write_meta(parts_dir, meta)
    mine = [c for c in range(index.n_chunks) if c % shard_n == shard_i]
    _remove_stale_temp_files(parts_dir, mine)
    if args.shard:
        logger.info("shard %d/%d: %d of %d chunks", shard_i, shard_n, len(mine),
                    index.n_chunks)
    summary, done = _run_chunks(args, index, parts_dir, mine, existing)
    if summary["parsed"]:
        per_worker = summary["parsed"] / summary["seconds"] if summary["seconds"] else 0.0
        logger.info(
            "parsed %d sentences in %.1f s (%.1f sentences/s overall, %.1f sentences/s per "
            "worker without model loading; %d worker(s)); %d sentences already done",
            summary["parsed"], summary["wall_seconds"],
            summary["parsed"] / max(summary["wall_seconds"], 1e-9), per_worker,
            max(1, min(args.workers, len(mine))), summary["skipped"])
    else:
        logger.info("all %d sentences of %s were already parsed", summary["skipped"],
                    "this shard" if args.shard else "the input")
    if summary["multi_root"]:
        logger.warning("%d sentence(s) got several roots (kept as a forest)",
                       summary["multi_root"])
    if summary["forms_changed"]:
        logger.warning("the parser changed token forms in %d sentence(s); the input's forms "
                       "were kept", summary["forms_changed"])

    with _merging(parts_dir) as there:
        missing = missing_chunks(index, parts_dir) if there else []
        if missing:
            logger.info("shard %d/%d done; %d chunk(s) of other shards still missing (%s): "
                        "merge with --merge-only once every shard has finished",
                        shard_i, shard_n, len(missing), _ranges(missing))
            return
        if there:
            n = merge_chunks(index, parts_dir, args.output, trusted=done)
            _remove_parts(parts_dir)
    if there:
        logger.info("wrote %d trees to %s (%.1f s in all)", n, args.output,
                    time.time() - t_start)
    else:
        logger.info("another run has merged the chunks of %s into %s and removed them",
                    parts_dir, args.output)


def get_argparser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairseq-posattn-parse",
        description="Parse a tokenized text file (one sentence per line, whitespace-separated "
        "tokens) into CoNLL-U: one tree per line, same order, tokens kept 1:1. Resumable "
        "and shardable (see --chunk-size, --shard).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--input", required=True, help="tokenized text, one sentence per line")
    p.add_argument("--output", required=True, help="CoNLL-U file to write")
    add_parser_args(p, choices=BACKENDS, default="stanza", old_names=True)
    p.add_argument("--download", action="store_true",
                   help="stanza: allow downloading missing models (network)")
    p.add_argument("--conllu", default=None,
                   help="conllu backend: an existing parse of --input, checked against its "
                   "lines and written normalised")
    p.add_argument("--workers", type=at_least_one, default=1, help="parser processes")
    p.add_argument("--threads", type=int, default=None,
                   help="threads per worker (torch/BLAS; default: cores / workers)")
    p.add_argument("--chunk-size", type=at_least_one, default=1000,
                   help="lines per chunk (the unit of resuming and sharding)")
    p.add_argument("--batch-size", type=at_least_one, default=64, help="sentences per parser call")
    p.add_argument("--shard", type=_shard, default=None, metavar="i/N",
                   help="do only chunks c with c %% N == i (0-based i), e.g. one array job "
                   "per shard on a cluster; all shards share <output>.parts")
    p.add_argument("--merge-only", action="store_true",
                   help="only check and merge the chunks of <output>.parts into <output> (when "
                   "another run has merged them already, check <output> against the input)")
    p.add_argument("--cpu", action="store_true", help="do not use a GPU (stanza, spacy)")
    p.add_argument("--start-method", default="spawn", type=_start_method,
                   help="how the --workers processes start: spawn (each imports the plugin) or "
                   "forkserver (forked from one process that imported it once)")
    p.add_argument("--no-progress-bar", action="store_true", help="no tqdm progress bar")
    p.add_argument("--log-level", default="INFO",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    args = get_argparser().parse_args(argv)
    if argv is None:  # the console script: our format (fairseq's import configured logging)
        logging.basicConfig(level=getattr(logging, args.log_level), format=LOG_FORMAT,
                            stream=sys.stderr, force=True)
    else:  # called from Python: leave the caller's handlers alone
        logging.getLogger("fairseq_posattn").setLevel(getattr(logging, args.log_level))
    try:
        with reported("fairseq-posattn-parse"):
            parse_file(args)
    except KeyboardInterrupt:
        sys.stderr.write("fairseq-posattn-parse: interrupted; finished chunks are kept in %s, "
                         "rerun the same command to resume\n" % parts_dir_for(args.output))
        sys.exit(130)


if __name__ == "__main__":
    cli_main()
