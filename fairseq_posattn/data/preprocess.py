"""``fairseq-posattn-preprocess``: ``fairseq-preprocess`` plus the source trees.

Takes every ``fairseq-preprocess`` option and, for each split, the CoNLL-U
parse of its source: sentence i of ``{pref}.{src}.conllu`` is the tree of line
i of ``{pref}.{src}`` (over the words that line's subword pieces spell; the
parse of the tokenized text before BPE).  Beside fairseq's
``{split}.{src}-{tgt}.{src}.bin/.idx`` it writes, in fairseq's indexed-dataset
format and naming, O(T) per sentence:

* ``{split}.{src}-{tgt}.{src}.heads``: the 1-based head of every word (0 = root);
* ``{split}.{src}-{tgt}.{src}.piece2word``: the 0-based word of every piece.

A tree whose words differ from the words the pieces spell, a missing or extra
tree, or a piece count that differs from the binarized source is an error
naming the file, line and sentence.

``--control-trees left-neighbour|random-projective`` writes, instead of each
parse, a deliberately wrong tree over the same words (see
:mod:`fairseq_posattn.structure.control_trees`): the control run that tells
whether a structural model gains from syntax or from any tree-shaped signal.
"""

import logging
import os
import zlib

import numpy as np
from fairseq import options
from fairseq.data import data_utils
from fairseq_cli import preprocess
from tqdm import tqdm

from ..structure import (CONTROL_TREES, SCHEMES, StructureError, piece_word_map, read_conllu,
                         words_from_pieces)
from .tree_files import TreeFileWriter

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


def write_trees(args, split: str, input_prefix: str) -> int:
    """Write the trees of one split; return the number of sentences."""
    src = args.source_lang
    text_path = f"{input_prefix}.{src}"
    tree_path = f"{text_path}.{args.trees_suffix}"
    dest = preprocess.dataset_dest_prefix(args, split, src)
    binarized = data_utils.load_indexed_dataset(dest, None, args.dataset_impl)
    if binarized is None:
        raise FileNotFoundError(f"{dest}.bin/.idx not found: binarize the text first "
                                f"(run without --trees-only)")
    if not os.path.exists(tree_path):
        raise FileNotFoundError(
            f"{tree_path} not found: parse the tokenized source of {text_path} into "
            f"CoNLL-U first (fairseq-posattn-parse), one tree per line"
        )
    scheme = args.subword_scheme
    control = CONTROL_TREES[args.control_trees] if args.control_trees else None
    rng = np.random.default_rng([args.control_trees_seed, zlib.crc32(split.encode())])

    def spelled_words(path):
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                pieces = line.split()
                if not pieces:
                    raise StructureError(
                        f"{path}, line {number}: empty line; it has no tree — remove empty "
                        f"lines from both sides of the corpus before BPE and parsing"
                    )
                yield " ".join(words_from_pieces(pieces, scheme, where=f"{path}, line {number}"))

    count = 0
    with open(text_path, encoding="utf-8") as text, TreeFileWriter(dest) as out:
        trees = read_conllu(tree_path, texts=spelled_words(text_path))
        # trees first: a missing or extra tree surfaces as read_conllu's own error
        for index, (tree, line) in enumerate(
            tqdm(zip(trees, text), desc=f"trees {split}", unit=" sentences",
                 total=len(binarized))
        ):
            pieces = line.split()
            if index >= len(binarized) or binarized.sizes[index] != len(pieces) + 1:
                raise StructureError(
                    f"{text_path}, line {index + 1} (split '{split}', sentence {index}): "
                    f"{len(pieces)} pieces, but the binarized source in {dest} has "
                    + (f"{binarized.sizes[index] - 1}" if index < len(binarized)
                       else "no such")
                    + " tokens; binarize this very file (same --srcdict/prefixes)"
                )
            heads = control(len(tree), rng) if control else tree.heads
            out.add(heads, piece_word_map(pieces, scheme))
            count += 1
        if count != len(binarized):
            raise StructureError(f"{text_path} has {count} lines but {dest} has "
                                 f"{len(binarized)} sentences; binarize this very file")
    what = f"{args.control_trees} control trees over the words" if control else "trees"
    logger.info(f"wrote {count} {what} of {tree_path} to {dest}.{{heads,piece2word}}")
    return count


def main(args):
    if not args.trees_only:
        preprocess.main(args)
    for split, prefix in split_prefixes(args):
        write_trees(args, split, prefix)


def cli_main(argv=None):
    parser = options.get_preprocessing_parser()
    add_tree_args(parser)
    main(parser.parse_args(argv))


if __name__ == "__main__":
    cli_main()
