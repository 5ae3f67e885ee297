"""A model directory that translates raw text, as fairseq's released models do.

Beside its checkpoints the recipes write (:func:`write`) the dictionaries
(``dict.SRC.txt``, ``dict.TGT.txt``), the subword model under the name that
fairseq's ``from_pretrained`` maps to its option (``bpecodes``:
``--bpe-codes``, ``sentencepiece.bpe.model``: ``--sentencepiece-model``) and
:data:`SETTINGS`, the options the training text went through: ``--source-lang``,
``--target-lang``, ``--tokenizer`` and its options, ``--bpe``, and the parser of
a model that reads trees.  ``TransformerModel.from_pretrained(DIR, ...)`` and
``fairseq-interactive DIR --path DIR/CHECKPOINT`` take every option that is not
given from it (:func:`merge`; a value given that differs is refused, naming
both), so that raw text is read as the training and test text was.
"""

import json
import logging
import os
import shutil
from typing import Any, Dict, Mapping, Optional

from ..files import atomic_output

logger = logging.getLogger(__name__)

SETTINGS = "raw_input.json"
# the options whose value is a file of the directory, by the name fairseq's from_pretrained maps
FILES = {"bpe_codes": "bpecodes", "sentencepiece_model": "sentencepiece.bpe.model"}


class ContradictsModelDir(ValueError):
    """An option given with another value than the model directory's settings."""


def write(directory: str, dictionaries, settings: Mapping[str, Any],
          subword_model: Optional[str] = None) -> None:
    """Copy ``dictionaries`` and ``subword_model`` (for the option of :data:`FILES`
    that ``settings`` names) into ``directory`` and write ``settings`` there."""
    os.makedirs(directory, exist_ok=True)
    for path in dictionaries:
        shutil.copyfile(path, os.path.join(directory, os.path.basename(path)))
    settings = dict(settings)
    for option, name in FILES.items():
        if option in settings:
            if subword_model is None:
                raise ValueError(f"{option} needs the subword model file")
            shutil.copyfile(subword_model, os.path.join(directory, name))
            settings[option] = name
    with atomic_output(os.path.join(directory, SETTINGS)) as out:
        json.dump(settings, out, indent=1, sort_keys=True)
        out.write("\n")


def read(directory: str) -> Dict[str, Any]:
    """The settings of a model directory (its files as paths), {} without them."""
    path = os.path.join(directory, SETTINGS)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            settings = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not JSON ({exc}): write it again with "
                             f"fairseq-posattn-corpus model-dir") from None
    for option in FILES:
        if option in settings:
            settings[option] = os.path.join(directory, settings[option])
    return settings


def _same(option: str, given, saved) -> bool:
    if option in FILES and isinstance(given, str):
        return os.path.exists(given) and os.path.samefile(given, saved)
    return given == saved


def merge(given: Mapping[str, Any], directory: str) -> Dict[str, Any]:
    """``given`` with every option of ``directory``'s settings that it leaves
    out; an option given with another value is refused, naming both."""
    saved = read(directory)
    for option, value in given.items():
        if option in saved and not _same(option, value, saved[option]):
            flag = "--" + option.replace("_", "-")
            raise ContradictsModelDir(
                f"{flag} {value!r} contradicts {os.path.join(directory, SETTINGS)}, which says "
                f"{flag} {saved[option]!r} (the training text was read so): leave it out to use "
                f"the model directory's value")
    taken = {option: value for option, value in saved.items() if option not in given}
    if taken:
        logger.info("from %s: %s", os.path.join(directory, SETTINGS),
                    ", ".join(f"{option}={value!r}" for option, value in sorted(taken.items())))
    return {**taken, **given}
