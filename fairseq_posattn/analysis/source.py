"""A trained translation model's encoder, fed with text lines.

Lines are the model's source pieces (tokenized and BPE'd like the training
data), or tokenized words when ``--bpe subword_nmt --bpe-codes FILE`` or
``--bpe sentencepiece --sentencepiece-model FILE`` is given (fairseq's own
BPE encoders apply it).  Dependency trees (over the words the pieces spell)
come from ``--conllu`` (one tree per line) or are parsed with ``--parser``
(:mod:`fairseq_posattn.data.parsers`); an encoder with structural positions
needs them.  Batches are laid out as fairseq lays out the source: EOS
appended, left-padded when the task left-pads (its default).
"""

import logging
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils, encoders
from torch import Tensor

from ..data.parsers import PARSERS, ParserSetupError, add_parser_args, build_parser
from ..structure import (
    SCHEMES,
    SUBWORD_MODELS,
    DependencyTree,
    batch_tree_inputs,
    encode_piece_tree,
    piece_word_map,
    read_conllu,
    tree_inputs_of,
    words_from_pieces,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


def run_command(parser, main: Callable[..., T], argv: Optional[Sequence[str]] = None) -> T:
    """``main(args)`` with ``argv`` parsed by ``parser``.  As a console script
    (``argv`` None) it logs in fairseq's format at INFO (importing fairseq
    leaves the root logger at DEBUG).  Bad input (files, options, trees,
    parser set-up) ends the program with its message, not a traceback."""
    args = parser.parse_args(argv)
    if argv is None:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                            format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    try:
        return main(args)
    except (ValueError, OSError, ParserSetupError) as exc:
        sys.exit(f"{parser.prog}: error: {exc}")


def add_source_args(parser, path_required: bool = True) -> None:
    """The options of :class:`CheckpointEncoder` (checkpoint, BPE, trees)."""
    group = parser.add_argument_group("model and source sentences")
    group.add_argument("--path", required=path_required, metavar="CHECKPOINT",
                       help="checkpoint of fairseq-train (--task translation or "
                            "translation_struct, any architecture)")
    group.add_argument("--data", metavar="DIR",
                       help="binarized data directory with the dictionaries (default: the "
                            "one the checkpoint was trained on)")
    group.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                       help="torch device (default: %(default)s)")
    group.add_argument("--bpe", choices=SUBWORD_MODELS,
                       help="the lines are tokenized words: apply this BPE first "
                            "(without --bpe they are the model's pieces already)")
    group.add_argument("--bpe-codes", metavar="FILE", help="subword-nmt codes (--bpe subword_nmt)")
    group.add_argument("--sentencepiece-model", metavar="FILE",
                       help="sentencepiece model (--bpe sentencepiece)")
    group.add_argument("--subword-scheme", choices=SCHEMES,
                       help="how pieces make words, for the trees (default: the task's; "
                            "else sentencepiece with --bpe sentencepiece, else subword_nmt)")
    group.add_argument("--conllu", metavar="FILE",
                       help="dependency trees of the input lines, one sentence per line, "
                            "over the words the pieces spell")
    add_parser_args(group)


@dataclass
class SourceSentence:
    """One input line as the encoder sees it."""

    pieces: List[str]  # subword pieces, without EOS
    tokens: Tensor  # their dictionary ids, EOS appended
    words: List[str]  # the words the pieces spell
    piece_words: np.ndarray  # 0-based word of each piece
    tree: Optional[DependencyTree] = None


class CheckpointEncoder:
    """The encoder of a checkpoint, with the input options of :func:`add_source_args`."""

    def __init__(self, args):
        if args.conllu and args.parser:
            raise ValueError("give the trees either as --conllu or with --parser, not both")
        overrides = {"data": args.data} if args.data else {}
        try:
            models, _, task = checkpoint_utils.load_model_ensemble_and_task(
                [args.path], arg_overrides=overrides
            )
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{exc}; pass --data DIR, the binarized data directory with the "
                f"dictionaries of {args.path}"
            ) from None
        self.args = args
        self.task = task
        self.model = models[0].to(args.device).eval()
        self.encoder = self.model.encoder
        self.device = torch.device(args.device)
        self.dictionary = task.source_dictionary
        self.left_pad = bool(getattr(task.cfg, "left_pad_source", True))
        self.bpe = self._build_bpe(args)
        self.scheme = getattr(task.cfg, "subword_scheme", None) or args.subword_scheme or (
            "sentencepiece" if args.bpe == "sentencepiece" else "subword_nmt"
        )
        self.tree_inputs = tree_inputs_of(self.encoder)  # what the encoder reads of the trees, if any

    @staticmethod
    def _build_bpe(args):
        if args.bpe is None:
            return None
        needed = {"subword_nmt": "bpe_codes", "sentencepiece": "sentencepiece_model"}[args.bpe]
        if not getattr(args, needed):
            raise ValueError(f"--bpe {args.bpe} needs --{needed.replace('_', '-')}")
        return encoders.build_bpe(args)

    # ------------------------------------------------------------------
    # lines -> sentences

    def prepare(self, lines: Sequence[str], source: str) -> List[SourceSentence]:
        """:meth:`sentences` of all lines with their trees when the options
        give trees, or the encoder needs them (then it is an error not to)."""
        sentences = self.sentences(lines, source)
        if self.args.conllu or self.args.parser or self.tree_inputs:
            self.add_trees(sentences)
        return sentences

    def sentences(self, lines: Sequence[str], source: str) -> List[SourceSentence]:
        """Pieces and token ids of ``lines`` (``source`` names them in errors)."""
        limit = self.encoder.max_positions()
        out, unknown, total = [], 0, 0
        for number, line in enumerate(lines, 1):
            where = f"{source}, line {number}"
            text = self.bpe.encode(line.strip()) if self.bpe is not None else line
            pieces = text.split()
            if not pieces:
                raise ValueError(f"{where}: the line is empty; every line must hold a sentence")
            tokens = self.dictionary.encode_line(
                " ".join(pieces), add_if_not_exist=False, append_eos=True
            ).long()
            if len(tokens) > limit:
                raise ValueError(
                    f"{where}: {len(tokens)} tokens (with EOS), more than the encoder "
                    f"takes ({limit}); shorten or drop the line"
                )
            unknown += int(tokens.eq(self.dictionary.unk()).sum())
            total += len(pieces)
            out.append(SourceSentence(
                pieces, tokens, words_from_pieces(pieces, self.scheme, where),
                piece_word_map(pieces, self.scheme, where),
            ))
        if unknown:
            logger.warning(
                "%s: %d of %d pieces are not in the source dictionary (are the lines "
                "BPE'd like the training data? --bpe applies the BPE)", source, unknown, total
            )
        return out

    def add_trees(self, sentences: Sequence[SourceSentence]) -> None:
        """Trees from ``--conllu`` (one per sentence, same words) or ``--parser``."""
        if self.args.conllu:
            texts = [" ".join(s.words) for s in sentences]
            trees = list(read_conllu(self.args.conllu, texts=texts))
        elif self.args.parser:
            parser = build_parser(self.args.parser, model=self.args.parser_model,
                                  lang=self.args.parser_lang, stanza_dir=self.args.stanza_dir)
            trees = parser.parse([s.words for s in sentences])
        else:
            raise ValueError(
                f"the encoder of {self.args.path} uses dependency trees: pass --conllu FILE "
                f"(the trees of the input lines) or --parser {'|'.join(PARSERS)}"
            )
        for sentence, tree in zip(sentences, trees):
            sentence.tree = tree

    # ------------------------------------------------------------------
    # sentences -> encoder

    def net_input(self, sentences: Sequence[SourceSentence]) -> Dict[str, Tensor]:
        """The encoder's input for a batch, laid out as fairseq's collater lays it out."""
        tokens = data_utils.collate_tokens(
            [s.tokens for s in sentences], self.dictionary.pad(), self.dictionary.eos(),
            left_pad=self.left_pad,
        )
        net = {
            "src_tokens": tokens,
            "src_lengths": torch.tensor([len(s.tokens) for s in sentences]),
        }
        if self.tree_inputs:
            if any(s.tree is None for s in sentences):
                raise ValueError("the encoder uses dependency trees: add_trees() first")
            net.update(batch_tree_inputs(
                [encode_piece_tree(s.tree.heads, s.piece_words) for s in sentences], self.tree_inputs,
                rule=getattr(self.task.cfg, "structural_relative_rule", "figure"),
                left_pad=self.left_pad,
                width=tokens.size(1),
            ))
        return {name: value.to(self.device) for name, value in net.items()}

    @torch.no_grad()
    def run(self, sentences: Sequence[SourceSentence]) -> dict:
        """fairseq's encoder output dictionary, with every layer's states
        (``encoder_states``) and ``src_tokens`` of the batch added."""
        net = self.net_input(sentences)
        out = self.encoder(**net, return_all_hiddens=True)
        out["src_tokens"] = [net["src_tokens"]]
        return out
