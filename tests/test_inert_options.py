"""An option that cannot take effect is refused when the model is built,
naming the option and what it needs; a named architecture's own defaults
never are.  The walk: every option of every registered architecture of the
plugin, set to each value other than the architecture's, either changes the
model built (its parameters, its modules' settings or its encoder's output)
or is refused naming the option, so that an option added without declaring
what it needs fails here.  Everything in-process at a tiny size."""

import argparse
import copy
import types
from dataclasses import fields
from enum import Enum
from unittest import mock

import pytest
import torch
from fairseq import models
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_posattn  # noqa: F401  (registers the models and tasks)
from fairseq_posattn.config_check import check_model_effects
from fairseq_posattn.models.from_flags import parse_model_flags, stand_in_dictionary

# the tiny size of each model (the architecture keeps its layers)
SIZES = {
    "transformer_posattn": ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim",
                            "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
                            "--decoder-attention-heads", "2", "--decoder-layers", "1"],
    "sentence_pair_classifier": ["--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
                                 "--encoder-attention-heads", "2"],
    "relation_classifier": ["--encoder-embed-dim", "24", "--pos-tag-embed-dim", "4", "--ner-tag-embed-dim", "4",
                            "--encoder-ffn-embed-dim", "16"],
    "posattn_tagger": ["--word-embed-dim", "8", "--char-embed-dim", "8"],
}
PLUGIN_ARCHS = sorted(arch for arch, cls in ARCH_MODEL_REGISTRY.items()
                      if cls.__module__.startswith("fairseq_posattn."))
# a value for an option whose doubled default would be no valid one
VALUES = {"encoder_onlstm_chunk_size": 2, "char_kernel_size": 3}
LENGTH = 5  # tokens of the encoder input (below every table)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def model_name(arch: str) -> str:
    return next(name for name, cls in models.MODEL_REGISTRY.items() if cls is ARCH_MODEL_REGISTRY[arch])


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """What every plugin model reads of its task, trees included."""
    dictionary = stand_in_dictionary(20)
    vectors = tmp_path_factory.mktemp("vectors") / "vectors.vec"
    vectors.write_text("1 8\nw1 " + " ".join(["0.5"] * 8) + "\n")
    return types.SimpleNamespace(
        source_dictionary=dictionary, target_dictionary=dictionary, feeds_trees=True,
        tag_dictionaries={"stanford_pos": dictionary, "stanford_ner": dictionary}, num_classes=lambda: 3,
        vocabulary=types.SimpleNamespace(words=dictionary, chars=dictionary, tags=dictionary),
        max_positions=lambda: 16, cfg=types.SimpleNamespace(_name="stand-in"), vectors=str(vectors))


def given(arch: str) -> argparse.Namespace:
    """fairseq-train's namespace of the tiny size, before the architecture fills it in."""
    with mock.patch.dict(ARCH_CONFIG_REGISTRY, {arch: lambda args: None}):
        return parse_model_flags(["--arch", arch, *SIZES[model_name(arch)]])


def build(args, task):
    torch.manual_seed(0)
    return models.build_model(copy.deepcopy(args), task)


def fingerprint(model):
    """What a user could tell apart: parameters, module settings, the encoder's output (training mode)."""
    settings = sorted((name, key, repr(value)) for name, module in model.named_modules()
                      for key, value in vars(module).items()
                      if not key.startswith("_") and key != "training"
                      and isinstance(value, (str, int, float, bool, type(None))))
    encoder = model.encoder
    width = encoder.cfg.encoder.embed_dim
    if encoder.attention_cfg.encoder_position_embedding == "concat" and encoder.embed_positions is not None:
        width -= encoder.embed_positions.embedding_dim
    torch.manual_seed(1)
    tokens = torch.randint(4, 20, (2, LENGTH))
    trees = {}
    if encoder.attention_cfg.uses_structure():
        trees = dict(src_depths=torch.arange(LENGTH).expand(2, LENGTH),
                     src_structural_positions=torch.zeros(2, LENGTH, LENGTH, dtype=torch.long))
    out = encoder(tokens, torch.full((2,), LENGTH), token_embeddings=torch.randn(2, LENGTH, width), **trees)
    return {**model.state_dict(), "encoder output": out["encoder_out"][0]}, settings


def same(one, other) -> bool:
    (tensors, settings), (other_tensors, other_settings) = one, other
    return settings == other_settings and tensors.keys() == other_tensors.keys() and all(
        tensor.shape == other_tensors[name].shape and torch.equal(tensor, other_tensors[name])
        for name, tensor in tensors.items())


def other_values(option, default, task):
    """The values of ``option`` (a dataclass field) other than the architecture's ``default``."""
    kind = getattr(option.type, "__args__", (option.type,))[0]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return [choice.value for choice in kind if choice.value != default]
    if kind is bool:
        return [not default]
    if option.name in VALUES:
        return [VALUES[option.name]]
    if kind is int:
        return [2 * default if default else 8]
    if kind is float:
        return [default + 0.1]
    return [task.vectors]  # the one string: --pretrained-word-vectors


def options_of(arch):
    return [option for group in ARCH_MODEL_REGISTRY[arch].option_groups for option in group.option_fields()]


@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_every_option_takes_effect_or_is_refused_by_name(arch, task):
    base = given(arch)
    filled = copy.deepcopy(base)
    ARCH_CONFIG_REGISTRY[arch](filled)
    baseline = fingerprint(build(base, task))
    for option in options_of(arch):
        for value in other_values(option, getattr(filled, option.name), task):
            args = copy.deepcopy(base)
            setattr(args, option.name, value)
            flag = "--" + option.name.replace("_", "-")
            try:
                model = build(args, task)
            except ValueError as refusal:
                assert flag in str(refusal), f"{flag} {value}: {refusal}"
                continue
            assert not same(fingerprint(model), baseline), f"{flag} {value} on {arch} built the same model"


@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_an_architectures_own_defaults_are_never_refused(arch, task):
    """No flag but the architecture (the full size: only the check runs)."""
    check_model_effects(ARCH_MODEL_REGISTRY[arch], argparse.Namespace(arch=arch), task)

