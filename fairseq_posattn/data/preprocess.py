"""``fairseq-posattn-preprocess``: ``fairseq-preprocess`` plus the source trees.

Takes every ``fairseq-preprocess`` option and, for each split, the CoNLL-U
parse of its source (sentence i of ``{pref}.{src}.conllu`` is the tree of line
i of ``{pref}.{src}``, over the words its subword pieces spell), and writes
the tree file ``{split}.{src}-{tgt}.{src}.trees.{bin,idx}``
(:mod:`~fairseq_posattn.data.tree_files`) beside fairseq's binarized source,
in constant memory and in ``--workers`` processes.  Trees that do not match
the text or its binarization, and source and target files of different line
counts, are refused naming the file, line and sentence.  Reserved symbols
typed as words are binarized as ``<unk>``
(:mod:`fairseq_posattn.compat.reserved_symbols`); one run at a time writes
into a ``--destdir`` (:mod:`~fairseq_posattn.data.destination`), whose output
(text, trees and their checksums, :mod:`~fairseq_posattn.data.checksums`)
moves into it only when every split is written and checked.
``--control-trees`` writes deliberately wrong trees over the same words
(:mod:`fairseq_posattn.structure.control_trees`).  docs/structure.md ("Tree
files") is the manual.
"""

import argparse
import contextlib
import errno
import functools
import glob
import io
import logging
import os
import shutil
import sys
import traceback
import zlib
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
from fairseq import options
from fairseq.data import Dictionary, data_utils
from fairseq_cli import preprocess
from tqdm import tqdm

from .reserved_symbols import binarizing_as_unknown
from ..errors import fail, unusual_characters
from ..structure import (CONTROL_TREES, SCHEMES, StructureError, encode_piece_tree,
                         piece_word_map, words_from_pieces)
from ..structure.conllu_io import SentenceIndex, index_sentences
from . import checksums
from .alignment import WordStarts
from .destination import destination_lock, staged
from .parse import InputIndex, scan_input
from .tree_files import TREES, TreeFileWriter, block_values, blocks, refuse_mismatch, tree_dtype
from .workers import worker_pool

logger = logging.getLogger("fairseq_posattn.preprocess")


def add_tree_args(parser):
    group = parser.add_argument_group("dependency trees of the source (fairseq_posattn)")
    group.add_argument("--trees-suffix", default="conllu",
                       help="the trees of {pref}.{src} are in {pref}.{src}.SUFFIX (CoNLL-U)")
    group.add_argument("--subword-scheme", default="subword_nmt",
                       choices=SCHEMES,
                       help="how the source pieces make words (as --subword-scheme of "
                       "--task translation_struct)")
    group.add_argument("--trees-only", action="store_true",
                       help="the text is binarized already (same --destdir): write only the trees")
    group.add_argument("--control-trees", choices=sorted(CONTROL_TREES), default=None,
                       help="write deliberately wrong trees of the right shape over each parse's "
                       "words instead of the parse (a control run: is the gain syntax?)")
    group.add_argument("--control-trees-seed", type=int, default=1,
                       help="seed of --control-trees random-projective (per split)")
    return group


def split_prefixes(args):
    """``(output split, input prefix)`` pairs, named as fairseq-preprocess names them."""
    if args.trainpref:
        yield "train", args.trainpref
    for kind, prefixes in (("valid", args.validpref), ("test", args.testpref)):
        for k, prefix in enumerate(prefixes.split(",") if prefixes else []):
            yield f"{kind}{k if k > 0 else ''}", prefix


def count_lines(path: str) -> int:
    """The lines of a text file as fairseq's binarizer reads them (universal newlines)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return sum(1 for _ in f)


def text_paths(args, prefix: str):
    """The text files of a split: the source's, and the target's unless
    ``--only-source``."""
    sides = [args.source_lang]
    if not args.only_source and args.target_lang:
        sides.append(args.target_lang)
    return [f"{prefix}.{lang}" for lang in sides]


def refuse_unequal_sides(args) -> None:
    """Every split's source and target files have as many lines."""
    if args.only_source or not args.target_lang:
        return
    for _, prefix in split_prefixes(args):
        paths = text_paths(args, prefix)
        if not all(os.path.exists(path) for path in paths):
            continue  # fairseq-preprocess names the missing file
        source, target = (count_lines(path) for path in paths)
        if source != target:
            raise fail(f"{paths[0]} has {source} lines but {paths[1]} has {target}",
                       "line i of one side must translate line i of the other: align the two "
                       "files (remove the extra lines or restore the missing ones) and rerun")


PART = 10_000  # sentences per unit of work; fixed, so the output does not depend on --workers


@dataclass
class _Split:
    """What a worker needs to encode the trees of one part of a split."""

    text: InputIndex
    trees: SentenceIndex
    scheme: str
    control: Optional[str]
    seed: int
    split: str


def encode_part(split: _Split, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The encoded trees of part ``k`` (lines ``k * PART + 1`` ...) of a
    split: their concatenated values and their piece counts."""
    lines = split.text.read_chunk(k)
    first, _ = split.text.chunk_lines(k)
    pieces = [line.split() for line in lines]
    words = [" ".join(words_from_pieces(p, split.scheme, where=f"{split.text.path}, line "
                                        f"{first + i}")) for i, p in enumerate(pieces)]
    try:
        trees = list(split.trees.read_part(k, texts=words, last=k == split.text.n_chunks - 1))
    except StructureError as error:
        raise naming_unusual_characters(error, split.text.path, lines, first) from None
    control = CONTROL_TREES[split.control] if split.control else None
    rng = np.random.default_rng([split.seed, zlib.crc32(split.split.encode()), k])
    values = [encode_piece_tree(control(len(tree), rng) if control else tree.heads,
                                piece_word_map(p, split.scheme))
              for tree, p in zip(trees, pieces)]
    return (np.concatenate(values) if values else np.zeros(0, dtype=np.int64),
            np.array([len(v) for v in values], dtype=np.int64))


def naming_unusual_characters(error: StructureError, path: str, lines, first: int
                              ) -> StructureError:
    """``error`` about the tree of sentence n, with the invisible and unusual
    whitespace characters of line n of the text (``lines`` from line ``first``)
    named: the pieces and the words rebuilt from them have lost them."""
    i = (error.sentence or 0) - first
    names = unusual_characters(lines[i]) if 0 <= i < len(lines) else []
    if not names:
        return error
    return StructureError(f"{error}. Line {error.sentence} of {path} holds {', '.join(names)}: "
                          f"replace unusual whitespace by spaces and remove invisible "
                          f"characters before subword segmentation and parsing",
                          error.source, error.sentence, error.line)


@contextlib.contextmanager
def parts_map(workers: int, parts: int, name=repr):
    """``map`` in order, in ``workers`` processes (:func:`~.workers.worker_pool`)
    when there is more than one part; ``name(part)`` names a part a worker died on."""
    if workers <= 1 or parts <= 1:
        yield map
        return
    with worker_pool(min(workers, parts)) as pool_map:
        yield functools.partial(pool_map, name=name)


def dictionary_path(args, lang: str) -> str:
    """Where fairseq-preprocess writes the dictionary of ``lang``."""
    return os.path.join(args.destdir, f"dict.{lang}.txt")


def write_trees(args, split: str, input_prefix: str, text_dir: str, out_dir: str) -> int:
    """Write the trees of one split into ``out_dir`` in parts of :data:`PART`
    sentences (in ``--workers`` processes; the file is the same for any
    number), checked against the binarized text in ``text_dir``; return the
    number of sentences."""
    src = args.source_lang
    text_path = f"{input_prefix}.{src}"
    tree_path = f"{text_path}.{args.trees_suffix}"
    dest = preprocess.dataset_dest_prefix(args, split, src)  # where the text is named
    name = os.path.basename(dest)
    binarized = data_utils.load_indexed_dataset(os.path.join(text_dir, name), None,
                                                args.dataset_impl)
    dictionary = os.path.join(text_dir, os.path.basename(dictionary_path(args, src)))
    missing = [path for path, there in ((f"{dest}.bin/.idx", binarized is not None),
                                        (dictionary_path(args, src), os.path.exists(dictionary)))
               if not there]
    if missing:
        raise FileNotFoundError(f"{' and '.join(missing)} not found: binarize the text first "
                                f"(run without --trees-only)")
    words = WordStarts(Dictionary.load(dictionary), args.subword_scheme)
    if not os.path.exists(tree_path):
        raise FileNotFoundError(
            f"{tree_path} not found: parse the tokenized source of {text_path} into "
            f"CoNLL-U first (fairseq-posattn-parse), one tree per line"
        )
    text = scan_input(text_path, PART)
    if text.n_lines != len(binarized):
        raise StructureError(f"{text_path} has {text.n_lines} lines but {dest} has "
                             f"{len(binarized)} sentences; binarize this very file")
    longest = max(int(binarized.sizes[start:end].max()) for start, end in blocks(len(binarized)))
    job = _Split(text, index_sentences(tree_path, PART), args.subword_scheme,
                 args.control_trees, args.control_trees_seed, split)
    with TreeFileWriter(os.path.join(out_dir, name), tree_dtype(longest)) as out, \
            parts_map(args.workers, text.n_chunks, text.lines_of) as each, \
            tqdm(total=text.n_lines, desc=f"trees {split}", unit=" sentences") as bar:
        for k, (values, sizes) in enumerate(each(functools.partial(encode_part, job),
                                                 range(text.n_chunks))):
            first = k * PART
            refuse_mismatch(
                sizes + 1 != binarized.sizes[first:first + len(sizes)],
                lambda i, count: f"{text_path}, line {i + 1} (split '{split}', sentence {i}): "
                f"{sizes[i - first]} pieces, but the binarized source in {dest} has "
                f"{binarized.sizes[i] - 1} tokens; binarize this very file (same "
                f"--srcdict/prefixes)", first=first)
            words.refuse_misaligned(
                block_values(binarized, first, first + len(sizes)), values, sizes,
                lambda i: f"{text_path}, line {i + 1} (split '{split}', sentence {i}; "
                f"binarized in {dest})", first=first)
            out.add_encoded(values, sizes)
            bar.update(len(sizes))
    what = f"{args.control_trees} control trees over the words" if args.control_trees else "trees"
    logger.info(f"wrote {text.n_lines} {what} of {tree_path} to {dest}.{TREES}")
    return text.n_lines


def refuse_existing_dictionaries(args) -> None:
    """fairseq-preprocess's refusal to replace a dictionary in --destdir that
    it would build, checked on --destdir (it writes into a staging folder)."""
    sides = [(args.source_lang, args.srcdict)]
    if not args.only_source:
        sides.append((args.target_lang, args.tgtdict))
    for lang, given in sides:
        path = dictionary_path(args, lang)
        if not given and os.path.exists(path):
            raise FileExistsError(f"{path} exists: --destdir holds a binarized corpus already; "
                                  f"add --trees-only to write just the trees beside it, write to "
                                  f"another --destdir, or pass its dictionaries "
                                  f"(--srcdict/--tgtdict) to binarize anew with them")


class DiskFull(OSError):
    """The disk of ``--destdir`` filled while the command wrote."""


def needed_bytes(args) -> int:
    """About the bytes the run writes, from the tokens of its input files: per
    binarized text file 2 per token and EOS (fairseq's uint16 below 65,500
    dictionary entries), per tree file 1; the index of either 12 per sentence.
    The dictionaries are left out."""
    total = 0
    for _, prefix in split_prefixes(args):
        for side, path in enumerate(text_paths(args, prefix)):
            spaces = lines = 0
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
                for chunk in iter(functools.partial(f.read, 1 << 20), b""):
                    spaces, lines = spaces + chunk.count(b" "), lines + chunk.count(b"\n")
            tokens = spaces + 2 * lines  # the words of each line and its EOS
            index = 12 * lines + 26  # the sizes, offsets and header
            if not args.trees_only:
                total += 2 * tokens + index  # fairseq's binarized text
            if side == 0:
                total += tokens + index  # the trees
    return total


def file_written(error_traceback) -> Optional[str]:
    """The name of a file open for writing in the innermost frame of
    ``error_traceback`` that holds one, as a variable or an attribute of one
    (a write error names no file)."""
    for frame, _ in reversed(list(traceback.walk_tb(error_traceback))):
        for value in frame.f_locals.values():
            for candidate in (value, *getattr(value, "__dict__", {}).values()):
                if isinstance(candidate, io.IOBase) and set(getattr(candidate, "mode", "")) & set("wa+"):
                    return candidate.name
    return None


@contextlib.contextmanager
def full_disk_reported(args, staging: str):
    """A full disk in the block (``ENOSPC``) as :class:`DiskFull` naming the
    file being written (``staging`` is where it goes first) and the space needed."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        path = error.filename or file_written(error.__traceback__) or staging
        written = sum(map(os.path.getsize, glob.glob(os.path.join(staging, "*"))))
        free = shutil.disk_usage(staging).free + written
        raise DiskFull(f"{path}: no space left on the device while writing it. This run needs "
                       f"about {needed_bytes(args):,} bytes in {args.destdir}, which has {free:,} "
                       f"bytes free: free space or pass another --destdir, and rerun (nothing of "
                       f"this run was kept)") from None


def record_checksums(args, staging: str) -> None:
    """The manifest of ``--destdir`` (:mod:`.checksums`) in ``staging``: its
    entries, updated with the files this run wrote; with ``--trees-only``, also
    the text and dictionaries that it does not record yet (:func:`binarized_text`)."""
    sums = checksums.read_manifest(args.destdir)
    sums.update((name, checksums.sha256(os.path.join(staging, name)))
                for name in os.listdir(staging) if not name.endswith(".log"))
    if args.trees_only:
        sums.update((name, checksums.sha256(os.path.join(args.destdir, name)))
                    for name in binarized_text(args) if name not in sums)
    checksums.write_manifest(staging, sums)


def binarized_text(args):
    """The names of the binarized text of every split and of the dictionaries
    that ``--destdir`` holds."""
    names = [os.path.basename(preprocess.dataset_dest_file(args, split, lang, ext))
             for split, _ in split_prefixes(args) for lang in (args.source_lang, args.target_lang)
             for ext in ("bin", "idx")]
    names += [os.path.basename(dictionary_path(args, lang)) for lang in (args.source_lang, args.target_lang)]
    return [name for name in names if os.path.exists(os.path.join(args.destdir, name))]


def main(args):
    """Write the binarized text (unless ``--trees-only``), the trees and the
    checksums of every split into a staging folder, and move them into
    ``--destdir`` when all are written and checked."""
    refuse_unequal_sides(args)
    with destination_lock(args.destdir), staged(args.destdir) as staging, \
            full_disk_reported(args, staging):
        text_dir = args.destdir
        if args.trees_only:  # the text is read from --destdir: checked where it has checksums
            checksums.verify(args.destdir, binarized_text(args), warn_unverified=False)
        else:
            texts = [path for _, prefix in split_prefixes(args)
                     for path in text_paths(args, prefix) if os.path.exists(path)]
            refuse_existing_dictionaries(args)
            with binarizing_as_unknown(texts):
                preprocess.main(argparse.Namespace(**{**vars(args), "destdir": staging}))
            text_dir = staging
        for split, prefix in split_prefixes(args):
            write_trees(args, split, prefix, text_dir, staging)
        record_checksums(args, staging)


def cli_main(argv=None):
    parser = options.get_preprocessing_parser()
    add_tree_args(parser)
    try:
        main(parser.parse_args(argv))
    except DiskFull as error:
        sys.exit(f"fairseq-posattn-preprocess: error: {error}")


if __name__ == "__main__":
    cli_main()
