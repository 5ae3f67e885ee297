"""A model built from ``fairseq-train`` flags alone, without data: fairseq's
own argument parsing (the arch's defaults, the plugin's flags) with stand-in
dictionaries of a given size.  The benchmark, the parameter counter and the
recipes' arch plan all build or parse their models this way, so their figures
are those of a real training run with the same flags."""

import os
import types
from argparse import Namespace
from typing import Optional, Sequence

from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

USER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stand_in_dictionary(size: int) -> Dictionary:
    """A fairseq dictionary of ``size`` symbols (the specials included)."""
    dictionary = Dictionary()
    for i in range(size - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def parse_model_flags(flags: Sequence[str], task: str = "translation") -> Namespace:
    """``fairseq-train`` flags (``--arch`` among them) parsed as fairseq-train
    parses them, with this plugin as ``--user-dir``."""
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["<data>", "--user-dir", USER_DIR, "--task", task, *flags])


def build_model_from_flags(flags: Sequence[str], vocab: int,
                           target_vocab: Optional[int] = None,
                           source: Optional[Dictionary] = None):
    """``(args, model)`` for ``flags`` with dictionaries of ``vocab`` (source
    and, unless ``target_vocab`` is given, target) symbols, or with ``source``
    as both."""
    args = parse_model_flags(flags)
    source = source if source is not None else stand_in_dictionary(vocab)
    target = source if target_vocab is None else stand_in_dictionary(target_vocab)
    task = types.SimpleNamespace(source_dictionary=source, target_dictionary=target)
    return args, ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)
