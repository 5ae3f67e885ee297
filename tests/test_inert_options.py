"""An option that cannot take effect is refused when the model is built,
naming the option and what it needs; a named architecture's own defaults
never are.  The walk: every option of every registered architecture of the
plugin, set to each value other than the architecture's, either changes the
model built (its parameters, its modules' settings or its encoder's output)
or is refused naming the option, so that an option added without declaring
what it needs fails here.  Everything in-process at a tiny size."""

import argparse
import copy
import re
import types
from enum import Enum
from unittest import mock

import pytest
import torch
from fairseq import checkpoint_utils, models
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from omegaconf import OmegaConf

import fairseq_posattn  # noqa: F401  (registers the models and tasks)
from fairseq_posattn.config_check import check_model_effects
from fairseq_posattn.models.from_flags import parse_model_flags, stand_in_dictionary

from conftest import TINY_MODEL_ARGS, USER_DIR, encoded_tree_inputs, random_piece_tree, run_cli_in_process
from test_options import FAMILIES, Routes, composed, dictionaries, refused, train_main  # noqa: F401  (fixture)
from test_standard_flags import PLUGIN_ARCHS, model_name

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
# a value for an option whose doubled default would be no valid one
VALUES = {"encoder_onlstm_chunk_size": 2, "char_kernel_size": 3}
LENGTH = 5  # tokens of the encoder input (below every table)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    # words of two pieces: PASCAL's anchors differ
    trees = encoded_tree_inputs([random_piece_tree(LENGTH - 1, seed) for seed in (1, 2)], encoder.tree_inputs)
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



# ------------------------------------------------------- the routes, by example

def translation_task():
    dictionary = stand_in_dictionary(20)
    return types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary,
                                 cfg=types.SimpleNamespace(_name="translation"))


# fairseq-train's flags on transformer_posattn and what the refusal says they need
REFUSED_FLAGS = {
    "--encoder-recurrent-cell lstm": "--encoder-recurrent-cell lstm has no effect: it needs recurrent layers "
                                     "(--encoder-recurrent-layers > 0), and --arch transformer_posattn has "
                                     "--encoder-recurrent-layers 0: set that, or leave --encoder-recurrent-cell out",
    "--encoder-onlstm-chunk-size 7": "--encoder-onlstm-chunk-size 7 has no effect: it needs recurrent layers",
    "--encoder-recurrent-layers 1 --encoder-recurrent-cell lstm --encoder-onlstm-chunk-size 2":
        "--encoder-onlstm-chunk-size 2 has no effect: it needs --encoder-recurrent-cell onlstm, and "
        "--arch transformer_posattn has --encoder-recurrent-cell lstm",
    "--max-relative-position 8": "--max-relative-position 8 has no effect: it needs --relative-positions, "
                                 "and --arch transformer_posattn has no --relative-positions",
    "--no-relative-values": "--no-relative-values has no effect: it needs --relative-positions or "
                            "--structural-relative-positions",
    "--max-structural-relative-position 8": "it needs --structural-relative-positions",
    "--query-relative-clip 4": "--query-relative-clip 4 has no effect: it needs --query-relative-positions",
    "--position-interaction-layers all": "it needs --position-interactions P, R or PR",
    "--position-interactions R --encoder-layers 1 --position-interaction-layers all":
        "it needs more than one self-attention layer (--encoder-layers > 1), and --arch transformer_posattn "
        "has --encoder-layers 1",
    "--interaction-max-len 64": "--interaction-max-len 64 has no effect: it needs --position-interactions, "
                                "--convolved-attention 1d, or --query-relative-positions without "
                                "--query-relative-clip",
    "--interaction-overflow clamp": "--interaction-overflow clamp has no effect",
    "--encoder-position-concat-dim 8": "it needs --encoder-position-embedding concat, and --arch "
                                       "transformer_posattn has --encoder-position-embedding add",
    "--encoder-recurrent-layers 2 --encoder-layers 0 --relative-positions":
        "--relative-positions has no effect: it needs self-attention layers (--encoder-layers > 0)",
}


@pytest.mark.parametrize("flags", REFUSED_FLAGS)
def test_the_command_line_refuses_an_option_without_effect(flags):
    args = parse_model_flags(["--arch", "transformer_posattn", *SIZES["transformer_posattn"], *flags.split()])
    with pytest.raises(ValueError, match=re.escape(REFUSED_FLAGS[flags])):
        models.build_model(args, translation_task())


@pytest.mark.parametrize("arch, flags", [
    ("transformer_posattn", "--encoder-recurrent-cell onlstm --max-relative-position 16"),
    ("transformer_onlstm6", "--encoder-recurrent-cell onlstm --encoder-onlstm-chunk-size 2"),
    ("transformer_posattn", "--relative-positions --max-relative-position 8 --no-relative-values"),
])
def test_a_value_that_takes_effect_or_is_the_architectures_is_not_refused(arch, flags):
    args = parse_model_flags(["--arch", arch, *SIZES["transformer_posattn"], *flags.split()])
    models.build_model(args, translation_task())


def test_a_hydra_config_is_refused_an_option_without_effect(dictionaries):
    cfg = composed(FAMILIES["positions"], dictionaries, {"model.encoder_recurrent_cell": "lstm"})
    assert REFUSED_FLAGS["--encoder-recurrent-cell lstm"] in refused(train_main, cfg)


def weightless_checkpoint(routes: Routes, path, **model_values):
    """A checkpoint of ``routes``' family (its tiny model, ``model_values`` set
    in its saved config as 0.3.0 let any value through), without weights."""
    container = OmegaConf.to_container(routes.base, resolve=True, enum_to_str=True)
    container["model"].update(model_values)
    routes.save(container, path)
    return str(path)


def load(path, data, task=None, **overrides):
    """``load_model_ensemble_and_task``: fairseq-generate's (the task given) or the hub's (task None)."""
    return checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": str(data), **overrides}, task=task, strict=False)


def test_a_checkpoint_loads_as_trained_and_overrides_without_effect_are_refused(dictionaries, tmp_path):
    """0.3.0 saved any value: an inert one in a checkpoint loads as it was
    trained; a value without effect given now (--model-overrides, hub
    keyword arguments) is refused, the architecture's own is not."""
    routes = Routes(FAMILIES["positions"], dictionaries, tmp_path)
    old = weightless_checkpoint(routes, tmp_path / "old.pt", encoder_recurrent_cell="lstm",
                                max_relative_position=8)
    for task in (routes.task, None):
        (model,), cfg, _ = load(old, dictionaries, task)
        assert cfg.model.encoder_recurrent_cell == "lstm" and not len(model.encoder.recurrent_layers)
    load(old, dictionaries, encoder_recurrent_cell="onlstm")
    clean = weightless_checkpoint(routes, tmp_path / "clean.pt")
    for task in (routes.task, None):
        assert REFUSED_FLAGS["--max-relative-position 8"] in refused(
            lambda: load(clean, dictionaries, task, max_relative_position=8))


def test_a_fairseq_train_checkpoint_refuses_model_overrides_without_effect(dictionaries, tmp_path):
    """fairseq-train's checkpoint keeps the parsed namespace as its model config."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    routes = Routes(FAMILIES["positions"], dictionaries, tmp_path)
    args, _ = routes.command_line(["--source-lang", "en", "--target-lang", "de", *TINY_MODEL_ARGS], None)
    path = tmp_path / "namespace.pt"
    routes.save(OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True),
                path)
    assert REFUSED_FLAGS["--encoder-recurrent-cell lstm"] in refused(
        lambda: load(str(path), dictionaries, routes.task, encoder_recurrent_cell="lstm"))
    load(str(path), dictionaries, routes.task, encoder_recurrent_layers=1, encoder_recurrent_cell="lstm")


def test_structural_positions_without_trees_are_refused_before_any_data_is_read(dictionaries, tmp_path):
    """fairseq-train and fairseq-generate with --task translation and a model
    that reads trees stop when the model is built (the data directory holds
    only the dictionaries)."""
    refusal = ("--arch transformer_struct (--structural-position-embedding fuse, --structural-relative-positions) "
               "reads the dependency trees of the source, which --task translation does not give it: use "
               "--task translation_struct, or turn those options off")
    with pytest.raises(ValueError, match=re.escape(refusal)):
        run_cli_in_process("fairseq-train", dictionaries, "--user-dir", USER_DIR, "--task", "translation",
                           "--arch", "transformer_struct", "--source-lang", "en", "--target-lang", "de",
                           *TINY_MODEL_ARGS, "--max-tokens", "100", "--save-dir", tmp_path, "--cpu")
    struct = weightless_checkpoint(Routes(FAMILIES["structure"], dictionaries, tmp_path), tmp_path / "s.pt")
    translation = Routes(FAMILIES["positions"], dictionaries, tmp_path).task
    assert refusal in refused(load, struct, dictionaries, translation)


@pytest.mark.parametrize("arch, flags, given", [
    ("transformer_pascal", [], "--pascal-heads 2"),
    ("transformer_depdist", [], "--dependency-distance-bias"),
    ("transformer_rope", ["--pascal-heads", "1", "--structural-relative-positions"],
     "--structural-relative-positions, --pascal-heads 1"),
    ("posattn_tagger", ["--dependency-distance-bias"], "--dependency-distance-bias"),
    ("logic_san", ["--pascal-heads", "1"], "--pascal-heads 1"),
])
def test_tree_methods_without_trees_are_refused_naming_the_flag(arch, flags, given):
    args = parse_model_flags(["--arch", arch, *SIZES[model_name(arch)], *flags])
    with pytest.raises(ValueError, match=re.escape(
            f"--arch {arch} ({given}) reads the dependency trees of the source, which --task translation does "
            "not give it: use --task translation_struct, or turn those options off")):
        models.build_model(args, translation_task())


def struct_task_config(dictionaries, **task_values):
    """The structure family's config with a model that reads no trees."""
    return composed(FAMILIES["structure"], dictionaries, {
        "model._name": "transformer_posattn", **{f"task.{name}": value for name, value in task_values.items()}})


@pytest.mark.parametrize("option, value", [("structural_relative_rule", "text"), ("parser", "spacy"),
                                           ("parser_model", "en_core_web_sm"), ("parser_lang", "de"),
                                           ("stanza_dir", "stanza")])
def test_tree_options_of_translation_struct_need_a_model_that_reads_trees(dictionaries, option, value):
    flag = "--" + option.replace("_", "-")
    assert (f"{flag} {value} has no effect: it needs a model that reads dependency trees "
            f"(--structural-position-embedding fuse or add, --structural-relative-positions, "
            f"--dependency-distance-bias or --pascal-heads), and --arch transformer_posattn has "
            f"--structural-position-embedding none, no --structural-relative-positions, no "
            f"--dependency-distance-bias, --pascal-heads 0: set that, or leave {flag} out") in refused(
        train_main, struct_task_config(dictionaries, **{option: value}))
    train_main(struct_task_config(dictionaries, structural_relative_rule="figure", parser_lang="en"))
    train_main(composed(FAMILIES["structure"], dictionaries, {f"task.{option}": value}))


def test_the_hub_loads_tree_options_as_trained_and_refuses_them_given_now(dictionaries, tmp_path):
    routes = Routes(FAMILIES["structure"], dictionaries, tmp_path)
    container = OmegaConf.to_container(routes.base, resolve=True, enum_to_str=True)
    container["model"]["_name"] = "transformer_posattn"
    container["task"]["structural_relative_rule"] = "text"
    path = tmp_path / "plain.pt"
    routes.save(container, path)
    _, cfg, _ = load(str(path), dictionaries)
    assert cfg.task.structural_relative_rule == "text"
    assert "--parser spacy has no effect" in refused(lambda: load(str(path), dictionaries, parser="spacy"))


def test_interactive_parses_nothing_for_a_model_that_reads_no_trees(dictionaries):
    """fairseq-interactive's batches hold no trees: only a model that reads them needs --parser."""
    task, model = train_main(struct_task_config(dictionaries))
    tokens = torch.tensor([[4, 5, 6, task.source_dictionary.eos()]])
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": tokens, "src_lengths": torch.tensor([4])}}
    generator = task.build_generator([model.eval()], argparse.Namespace(beam=1, max_len_b=3))
    (hypotheses,) = task.inference_step(generator, [model], sample)
    assert "src_depths" not in sample["net_input"] and hypotheses[0]["tokens"].numel() > 0
