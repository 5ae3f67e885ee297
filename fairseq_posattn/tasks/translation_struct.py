"""``translation_struct``: translation whose source sentences carry dependency trees.

Training and ``fairseq-generate`` read the tree files that
``fairseq-posattn-preprocess`` wrote beside the binarized source, checked
against it, and the split's files against the checksums of the data-bin,
when a split is loaded; ``fairseq-interactive``, whose batches hold only
subword pieces, parses the words of each line with ``--parser``
(:meth:`TranslationStructTask.inference_step`).  Either way the encoder
receives in ``net_input`` the tree inputs it reads, and only those
(:class:`~fairseq_posattn.structure.TreeInputs`: ``src_depths``,
``src_structural_positions``, ``src_tree_distances``, ``src_parent_positions``),
built by :func:`~fairseq_posattn.structure.batch_tree_inputs`; an ensemble
receives what its models read together.  Its own options act on the trees:
given to a model that reads none, they are refused when the model is built.
"""

import functools
import inspect
import logging
import operator
import os
from dataclasses import dataclass, field
from typing import Iterable, List, Optional

from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..config_check import architecture, filled_model_options, refuse_inert
from ..data import checksums
from ..data.alignment import WordStarts
from ..data.parsers import PARSER_HELP, PARSERS, build_parser
from ..data.tree_dataset import TreeLanguagePairDataset
from ..data.tree_files import load_trees
from ..modules.options import TREES
from ..structure import SCHEMES, WANG_TREE_INPUTS, TreeInputs, batch_trees_of_pieces, tree_inputs_of
from ..structure.pieces import end_cut_word
from ..modules.options import plain
from .input_options import RemembersInputOptions, default_of, input_option

logger = logging.getLogger(__name__)


@dataclass
class TranslationStructConfig(TranslationConfig):
    structural_relative_rule: Optional[ChoiceEnum(["figure", "text"])] = input_option(
        "figure",
        "relative structural position of two words on one path to the root: "
        "sign(k-q)*|d_k-d_q| as the paper's Figure 1 computes it (figure), or "
        "d_k-d_q as its text writes (text)", needs=(TREES,),
    )
    subword_scheme: Optional[ChoiceEnum(list(SCHEMES))] = input_option(
        "subword_nmt",
        "how source pieces make words: subword-nmt '@@ ' continuation, "
        "sentencepiece '\u2581' word starts, or none (pieces are words)",
    )
    # fairseq-interactive parses its raw input (see PARSER_HELP)
    parser: Optional[ChoiceEnum(list(PARSERS))] = field(
        default=None, metadata={"help": "fairseq-interactive: " + PARSER_HELP["parser"],
                                  "needs": (TREES,)})
    parser_model: Optional[str] = field(
        default=None, metadata={"help": "fairseq-interactive: " + PARSER_HELP["parser_model"],
                                  "needs": (TREES,)})
    parser_lang: str = field(
        default="en", metadata={"help": "fairseq-interactive: " + PARSER_HELP["parser_lang"],
                                  "needs": (TREES,)})
    stanza_dir: Optional[str] = field(
        default=None, metadata={"help": "fairseq-interactive: " + PARSER_HELP["stanza_dir"],
                                  "needs": (TREES,)})


@register_task("translation_struct", dataclass=TranslationStructConfig)
class TranslationStructTask(RemembersInputOptions, TranslationTask):
    """Translation with the source's dependency trees (Wang et al. 2019)."""

    cfg: TranslationStructConfig
    feeds_trees = True  # structural positions need this (fairseq_posattn.config_check)
    options_from_checkpoint = False  # the hub's task: its options are the checkpoint's, as it was trained

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._read_by_models: List[TreeInputs] = []  # of every model built, in order

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        task.options_from_checkpoint = kwargs.get("from_checkpoint", False)
        return task

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if "src_depths" not in inspect.signature(model.encoder.forward).parameters:
            raise ValueError(
                f"--task translation_struct feeds dependency trees to the encoder, which "
                f"{type(model).__name__} does not take: use a fairseq_posattn architecture "
                f"(transformer_struct, transformer_posattn, ...) or --task translation"
            )
        if not self.options_from_checkpoint:
            self.refuse_inert_options(cfg)
        self._read_by_models.append(tree_inputs_of(model.encoder))
        return model

    def tree_inputs(self) -> TreeInputs:
        """What the collaters build: the tree inputs of the models this task
        built, together (an ensemble's; :func:`refuse_mixed_anchors` names the
        checkpoints whose anchors differ); Wang et al.'s two before any model."""
        return together(self._read_by_models) if self._read_by_models else WANG_TREE_INPUTS

    @classmethod
    def load_dictionary(cls, filename):
        """The dictionary ``filename``, checked first against the checksums of
        its folder where it has them (:mod:`~fairseq_posattn.data.checksums`)."""
        checksums.verify(os.path.dirname(filename), [os.path.basename(filename)],
                         warn_unverified=False)
        return super().load_dictionary(filename)

    def refuse_inert_options(self, model_cfg, names=None) -> None:
        """Refuse an option given (of ``names``, unless None) that acts on trees
        the model (its config ``model_cfg``) does not read.  (``--subword-scheme``
        acts on them too, but also checks the tree files against the pieces.)"""

        def unset(name):  # an input option not given is the checkpoint's or the default
            if name in self._not_given:
                return plain(getattr(self.cfg, name))
            return default_of(TranslationStructConfig, name)

        refuse_inert(f"--arch {architecture(model_cfg)}", (TranslationStructConfig,), self.cfg,
                     filled_model_options(model_cfg), unset, names)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        checksums.verify_split(data_path, split, self.cfg.source_lang, self.cfg.target_lang, combine)
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pairs = self.datasets[split]
        trees = load_trees(
            data_path, split, self.cfg.source_lang, self.cfg.target_lang,
            self.cfg.dataset_impl, combine, self.cfg.upsample_primary,
            WordStarts(self.src_dict, self.cfg.subword_scheme),
        )
        self.datasets[split] = TreeLanguagePairDataset(
            pairs, trees, rule=self.cfg.structural_relative_rule, name=split, wanted=self.tree_inputs
        )

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Decode; batches without the tree inputs that ``models`` read
        (fairseq-interactive and the hub build their own batches from the
        source tokens only) are parsed first."""
        net_input = sample["net_input"]
        wanted = together(tree_inputs_of(model.encoder) for model in models)
        if any(key not in net_input for key in wanted.keys()):
            net_input.update(self.parse_source(net_input["src_tokens"], wanted))
        return super().inference_step(
            generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
        )

    def parse_source(self, src_tokens, wanted: TreeInputs):
        """The tree inputs ``wanted`` of a padded batch of source pieces, laid
        out like the pieces: rebuild the words (``--subword-scheme``; with
        ``--truncate-source`` a word cut off at the end is the pieces of it
        that were kept), parse them (``--parser``) and batch the trees as the
        collater batches the tree files (:func:`~fairseq_posattn.structure.batch_trees_of_pieces`)."""
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        pieces = [
            [self.src_dict[t] for t in row if t != pad and t != eos]
            for row in src_tokens.tolist()
        ]
        if self.cfg.truncate_source:  # fairseq-interactive may cut a line inside a word
            pieces = [end_cut_word(row, self.cfg.subword_scheme) for row in pieces]
        inputs = batch_trees_of_pieces(
            pieces, self.cfg.subword_scheme,
            lambda words: [tree.heads for tree in self.parser.parse(words)],
            wanted,
            rule=self.cfg.structural_relative_rule,
            left_pad=bool(src_tokens[:, 0].eq(pad).any()),
            width=src_tokens.size(1),
        )
        return {key: value.to(src_tokens.device) for key, value in inputs.items()}

    @functools.cached_property
    def parser(self):
        """The parser of ``--parser``, loaded when first used."""
        if self.cfg.parser is None:
            raise ValueError("fairseq-interactive with --task translation_struct parses its input: "
                             "pass --parser spacy|stanza|udpipe (and --parser-model)")
        return build_parser(self.cfg.parser, model=self.cfg.parser_model,
                            lang=self.cfg.parser_lang, stanza_dir=self.cfg.stanza_dir)


def together(inputs: Iterable[TreeInputs]) -> TreeInputs:
    """The tree inputs of an ensemble's models: what any of them reads."""
    return functools.reduce(operator.or_, inputs, TreeInputs())


def refuse_mixed_anchors(models, filenames) -> None:
    """Refuse an ensemble (``models``, loaded from ``filenames``) whose models
    read PASCAL's parent positions at different ``--pascal-anchor`` values:
    their batches can hold the positions of one anchor only."""
    anchors = {}
    for model, filename in zip(models, filenames):
        anchor = tree_inputs_of(getattr(model, "encoder", None)).parent_anchor
        if anchor is not None:
            anchors.setdefault(anchor, []).append(str(filename))
    if len(anchors) > 1:
        listed = "; ".join(f"--pascal-anchor {anchor}: {', '.join(files)}"
                           for anchor, files in sorted(anchors.items()))
        raise ValueError(f"the checkpoints of an ensemble must read the source's parent positions at one "
                         f"--pascal-anchor, and these differ ({listed}): decode with checkpoints of one anchor")
