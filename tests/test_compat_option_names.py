"""fairseq_posattn.compat.option_names: what fairseq does with a misspelled
option without it, and the hooks with it.  tests/test_options.py drives every
option through every route."""

import argparse

import pytest
from fairseq import models, tasks
from fairseq.dataclass import utils as dataclass_utils
from omegaconf import OmegaConf

import fairseq_posattn  # noqa: F401  (installs the hooks)
from fairseq_posattn.config_check import with_nearest_flags
from fairseq_posattn.models.from_flags import stand_in_dictionary
from fairseq_posattn.tasks.translation_struct import TranslationStructConfig

TYPO = {"_name": "translation_struct", "subword_schem": "sentencepiece"}


@pytest.mark.parametrize("module", [dataclass_utils, tasks])
def test_fairseq_drops_a_checkpoints_unknown_task_key(module):
    merged = module.merge_with_parent.__wrapped__(TranslationStructConfig(),
                                                  OmegaConf.create(TYPO), remove_missing=True)
    assert "subword_schem" not in merged
    assert merged.subword_scheme == TranslationStructConfig().subword_scheme  # the default
    with pytest.raises(ValueError, match="task.subword_schem: translation_struct has no such "
                                         "option; did you mean task.subword_scheme?"):
        module.merge_with_parent(TranslationStructConfig(), OmegaConf.create(TYPO),
                                 remove_missing=True)


def test_fairseq_builds_a_legacy_model_whatever_its_config_holds():
    cfg = {"_name": "transformer_posattn", "relative_positon": True, "encoder_layers": 1,
           "decoder_layers": 1, "encoder_embed_dim": 8, "decoder_embed_dim": 8,
           "encoder_attention_heads": 2, "decoder_attention_heads": 2}
    dictionary = stand_in_dictionary(10)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = models.build_model.__wrapped__(OmegaConf.create(cfg), task)
    assert not any(".value_terms." in name for name, _ in model.named_parameters())
    with pytest.raises(ValueError, match="did you mean model.relative_positions?"):
        models.build_model(OmegaConf.create(cfg), task)


def test_an_unrecognized_argument_gets_the_nearest_flag_or_its_switch():
    parser = argparse.ArgumentParser()
    parser.add_argument("--relative-positions", action="store_true")
    parser.add_argument("--max-relative-position", type=int)
    argv = ["--relative-positon", "--relative-positions", "maybe", "--other"]
    message = "unrecognized arguments: --relative-positon maybe --other"
    assert with_nearest_flags(parser, argv, message) == (
        message + "; --relative-positon: did you mean --relative-positions?"
        "; --relative-positions is a switch and takes no value ('maybe')")
    assert with_nearest_flags(parser, argv, "argument --x: invalid") == "argument --x: invalid"
