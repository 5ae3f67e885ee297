"""Every option of the plugin's models and tasks on every route: the command
line (fairseq-train's parser), hydra (an example config composed with an
override, then fairseq-hydra-train's own steps: ``add_defaults``,
``tasks.setup_task``, ``task.build_model``) and a checkpoint's saved config
(``load_model_ensemble_and_task``, which fairseq-generate, fairseq-interactive
and the hub use).  Each option with a valid value (accepted, arriving typed),
a typo of its name (refused, naming the option meant), an invalid choice
(refused, listing the choices) and a value of the wrong type (refused).
Everything in-process at a tiny size; nothing trains."""

import argparse
import copy
import functools
import shutil
from dataclasses import dataclass, fields
from enum import Enum
from typing import Dict, List, Optional

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.configs import FairseqConfig
from fairseq.dataclass.initialize import add_defaults
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.tasks import TASK_DATACLASS_REGISTRY
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

import fairseq_posattn  # noqa: F401  (registers the models and tasks)
from conftest import REPO, USER_DIR, run_cli
from test_logic_inference import TRAIN_MAX, logic_data  # noqa: F401  (fixture)
from test_pos_tagging import treebank  # noqa: F401  (fixture)
from test_relation_classification import toy_tacred  # noqa: F401  (fixture)

CONFIGS = REPO / "examples" / "hydra"


@dataclass
class Family:
    """An example config of examples/hydra, its task and arch, the fixture of
    its data, and the overrides of a tiny model."""
    config: str
    task: str
    arch: str
    data: str
    tiny: Dict[str, object]


TINY_TRANSLATION = {
    "task.source_lang": "en", "task.target_lang": "de", "model.encoder_layers": 1,
    "model.decoder_layers": 1, "model.encoder_embed_dim": 32, "model.decoder_embed_dim": 32,
    "model.encoder_ffn_embed_dim": 64, "model.decoder_ffn_embed_dim": 64,
    "model.encoder_attention_heads": 2, "model.decoder_attention_heads": 2}
FAMILIES = {
    "positions": Family("positions", "translation", "transformer_posattn", "dictionaries",
                        TINY_TRANSLATION),
    "structure": Family("structure", "translation_struct", "transformer_struct", "dictionaries", {
        **TINY_TRANSLATION, "model.max_source_positions": 64, "model.max_target_positions": 64}),
    "tagging": Family("tagging", "pos_tagging", "posattn_tagger", "treebank", {
        "task.max_piece_length": 12, "model.word_embed_dim": 8, "model.char_embed_dim": 8,
        "model.encoder_layers": 1}),
    "logic": Family("logic", "logic_inference", "logic_onlstm_san", "logic_data", {
        "task.max_train_operators": TRAIN_MAX, "model.encoder_embed_dim": 16,
        "model.encoder_ffn_embed_dim": 32, "model.encoder_attention_heads": 2}),
    "relations": Family("relations", "relation_classification", "bilan_roth_relation",
                        "toy_tacred", {
                            "model.encoder_embed_dim": 24, "model.pos_tag_embed_dim": 4,
                            "model.ner_tag_embed_dim": 4, "model.encoder_ffn_embed_dim": 16}),
}

# a valid value of every option, not its default (what its family's tiny model builds with)
VALID = {
    "model.encoder_position_embedding": "none", "model.encoder_position_concat_dim": 8,
    "model.position_interactions": "PR", "model.position_interaction_layers": "all",
    "model.interaction_max_len": 64, "model.interaction_overflow": "clamp",
    "model.learnable_temperature": True, "model.convolved_attention": "2d",
    "model.relative_positions": True, "model.max_relative_position": 4,
    "model.no_relative_values": True, "model.query_relative_positions": True,
    "model.query_relative_clip": 8, "model.structural_position_embedding": "add",
    "model.structural_relative_positions": True, "model.max_structural_relative_position": 4,
    "model.encoder_attention_kernel": "explicit",
    "model.rotary_positions": True, "model.rotary_base": 500.0, "model.alibi": True,
    "model.t5_relative_bias": True, "model.t5_bias_buckets": 16, "model.t5_bias_max_distance": 64,
    "model.dependency_distance_bias": True, "model.pascal_heads": 1, "model.pascal_layers": "all",
    "model.pascal_sigma": 0.5, "model.pascal_anchor": "root",
    "model.encoder_recurrent_layers": 1, "model.encoder_recurrent_cell": "lstm",
    "model.encoder_recurrent_hidden_dim": 16, "model.encoder_recurrent_unidirectional": True,
    "model.encoder_onlstm_chunk_size": 2, "model.encoder_stack_order": "attention-first",
    "model.encoder_shortcut": True, "model.encoder_recurrent_kernel": "reference",
    # posattn_tagger
    "model.encoder_layers": 2, "model.encoder_attention_heads": 2, "model.dropout": 0.2,
    "model.attention_dropout": 0.1, "model.word_embed_dim": 12, "model.char_embed_dim": 12,
    "model.char_conv_layers": 2, "model.char_kernel_size": 3,
    "model.pretrained_word_vectors": "vectors.vec",
    # sentence_pair_classifier
    "model.pooling": "mean", "model.classifier_layers": 2, "model.classifier_hidden_dim": 8,
    "model.classifier_dropout": 0.2,
    # relation_classifier
    "model.pos_tag_embed_dim": 6, "model.ner_tag_embed_dim": 6, "model.entity_position_dim": 8,
    "model.relation_attention_dim": 8, "model.relation_pooling": "max",
    "model.raw_entity_positions": True, "model.no_object_position_input": True,
    "model.encoder_norm": "layer", "model.encoder_residual": "per-sublayer",
    "model.encoder_ffn_activation": "fairseq", "model.encoder_init": "xavier",
    # tasks
    "task.structural_relative_rule": "text", "task.subword_scheme": "sentencepiece",
    "task.parser": "spacy", "task.parser_model": "en_core_web_sm", "task.parser_lang": "de",
    "task.stanza_dir": "stanza", "task.tag_column": "xpos", "task.max_piece_length": 10,
    "task.min_word_count": 1, "task.max_word_chars": 10, "task.max_train_operators": 2,
    "task.valid_every": 5,
    "task.negative_label": "other", "task.lowercase": True, "task.no_entity_masking": True,
}
# what an option needs besides itself to build and take effect in its family's model
RECURRENT = {"encoder_recurrent_layers": 1}
TABLES = {"position_interactions": "R"}
COMPANIONS = {
    "model.encoder_position_concat_dim": {"encoder_position_embedding": "concat"},
    "model.position_interaction_layers": {"position_interactions": "PR", "encoder_layers": 2},
    "model.interaction_max_len": TABLES, "model.interaction_overflow": TABLES,
    "model.query_relative_clip": {"query_relative_positions": True},
    "model.rotary_base": {"rotary_positions": True},
    "model.t5_bias_buckets": {"t5_relative_bias": True}, "model.t5_bias_max_distance": {"t5_relative_bias": True},
    "model.pascal_layers": {"pascal_heads": 1, "encoder_layers": 2},
    "model.pascal_sigma": {"pascal_heads": 1}, "model.pascal_anchor": {"pascal_heads": 1},
    **{f"model.{name}": RECURRENT for name in (
        "encoder_recurrent_cell", "encoder_recurrent_hidden_dim", "encoder_recurrent_unidirectional",
        "encoder_onlstm_chunk_size", "encoder_stack_order", "encoder_shortcut", "encoder_recurrent_kernel")},
}
# tested in another family than its group's: PE[con] cannot share all embeddings, as the structure family does
FAMILY_OF_OPTION = {"model.encoder_position_concat_dim": "tagging"}
# read at training start only: a checkpoint holds the trained vectors, and its
# value is set aside unread (PosTaggingTask.build_model)
UNREAD_FROM_CHECKPOINTS = {"model.pretrained_word_vectors"}
# the positional DATA and the task's copy of --seed are no options of their own
PLUMBING = {"data", "seed"}


@dataclass
class Option:
    section: str
    name: str
    declared: type  # the field's type (X of Optional[X])
    family: str

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def typo(self) -> str:
        return self.name[:-2] + self.name[-1]  # one letter left out

    @property
    def choices(self) -> Optional[List[str]]:
        if isinstance(self.declared, type) and issubclass(self.declared, Enum):
            return [choice.value for choice in self.declared]
        return None

    def valid(self, data_files):
        value = VALID[self.key]
        return str(data_files / value) if self.name == "pretrained_word_vectors" else value


def own_fields(group) -> list:
    """The fields a dataclass declares itself (not those of fairseq's base)."""
    return [f for f in fields(group) if f.name in vars(group).get("__annotations__", {})]


def declared_type(f):
    return getattr(f.type, "__args__", (f.type,))[0]


def family_of(group) -> str:
    """The family whose task or model declares ``group`` (the encoder's: structure)."""
    if group in ARCH_MODEL_REGISTRY["transformer_posattn"].option_groups:
        return "structure"
    for name, family in FAMILIES.items():
        if group is TASK_DATACLASS_REGISTRY.get(family.task) or group in getattr(
                ARCH_MODEL_REGISTRY[family.arch], "option_groups", ()):
            return name
    raise AssertionError(f"no family tests {group.__name__}")


PLUGIN_MODELS = [cls for cls in MODEL_REGISTRY.values()
                 if cls.__module__.startswith("fairseq_posattn.")]
MODEL_GROUPS = list(dict.fromkeys(group for cls in PLUGIN_MODELS for group in cls.option_groups))
TASK_GROUPS = [dc for dc in TASK_DATACLASS_REGISTRY.values()
               if dc.__module__.startswith("fairseq_posattn.")]
OPTIONS = [Option(section, f.name, declared_type(f),
                  FAMILY_OF_OPTION.get(f"{section}.{f.name}", family_of(group)))
           for section, groups in (("model", MODEL_GROUPS), ("task", TASK_GROUPS))
           for group in groups for f in own_fields(group) if f.name not in PLUMBING]


def test_every_option_is_tested():
    """Each plugin model declares its options in ``option_groups``; each has a valid value here."""
    assert all(hasattr(cls, "option_groups") for cls in PLUGIN_MODELS)
    assert {option.key for option in OPTIONS} == set(VALID)


# ------------------------------------------------------------------ the routes

@pytest.fixture(scope="module")
def dictionaries(tmp_path_factory):
    """dict.en.txt and dict.de.txt: all translation_struct's setup reads."""
    directory = tmp_path_factory.mktemp("dictionaries")
    for lang in ("en", "de"):
        (directory / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(20)))
    return directory


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    """Files that option values name: fastText vectors 8 wide (the tagger's tiny width)."""
    directory = tmp_path_factory.mktemp("option-files")
    (directory / "vectors.vec").write_text("2 8\nthe " + " ".join(["0.1"] * 8) + "\n")
    return directory


def hydra_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def composed(family: Family, data, overrides: Dict[str, object], directory=CONFIGS):
    """The family's example config with ``overrides`` (``section.key``: value;
    a key the config lacks is added with ``++``, a key written ``+section.key``
    as it is), as fairseq-hydra-train hands it to fairseq-train's ``main``."""
    arguments = []
    for key, value in {**family.tiny, "task.data": data, **overrides}.items():
        section, name = key.lstrip("+").split(".")
        prefix = "" if key.startswith("+") or name in listed_keys(family.config)[section] else "++"
        arguments.append(f"{prefix}{key}={hydra_value(value)}")
    # composed against fairseq's schema, then fairseq_cli.hydra_train._hydra_main's steps
    cfg = OmegaConf.merge(OmegaConf.structured(FairseqConfig),
                          compose_config(family.config, arguments, directory))
    add_defaults(cfg)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return cfg


def train_main(cfg, task=None):
    """fairseq-train's ``main`` (train.py) up to the built model: ``(task, model)``."""
    add_defaults(cfg)
    task = task or tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model)


@functools.lru_cache(maxsize=None)
def listed_keys(config: str) -> Dict[str, set]:
    """The keys of each section of an example config."""
    return {section: set(values or ()) for section, values in compose_config(config, []).items()
            if section != "hydra"}


def compose_config(name: str, arguments: List[str], directory=CONFIGS):
    # hydra 1.1's defaults, as fairseq-hydra-train's hydra.main (no version_base)
    # has them; a later base would stay set and stop fairseq's
    # convert_namespace_to_omegaconf, which still uses hydra.experimental
    with initialize_config_dir(config_dir=str(directory), version_base="1.1"):
        return compose(name, arguments)


class Routes:
    """The three routes for one family.  Hydra's own part, composing a config
    with an override, is slow (it copies fairseq's whole config store) and the
    same for every option: the family's config is composed once, and each
    option set in a copy of it, as ``+section.key=value`` would."""

    def __init__(self, family: Family, data, tmp_path):
        self.family, self.data, self.tmp_path = family, data, tmp_path
        self.base = composed(family, data, {})
        self.task, _ = train_main(copy.deepcopy(self.base))
        self._valid = {}

    def command_line(self, flags: List[str], capsys):
        """fairseq-train's parse: ``(args, "")``, or ``(None, its error)``."""
        argv = [str(self.data), "--user-dir", str(USER_DIR), "--task", self.family.task,
                "--arch", self.family.arch, *flags]
        try:
            return options.parse_args_and_arch(options.get_training_parser(), argv), ""
        except SystemExit:
            return None, capsys.readouterr().err

    def valid(self, section: str, values: Dict[str, object]):
        """:meth:`hydra` of valid ``values``, once for the hydra and the checkpoint route."""
        key = (section, tuple(sorted(values.items())))
        if key not in self._valid:
            self._valid[key] = self.hydra(section, values)
        return self._valid[key]

    def hydra(self, section: str, values: Dict[str, object]):
        """fairseq-hydra-train's steps up to the built model, with ``values``
        set in the config's ``section``: the config as the model got it.
        (``add_defaults`` leaves a legacy model's section as it is: for a
        model option only that section is copied.)"""
        if section == "model":
            cfg = copy.deepcopy(self.base.model)
            with open_dict(cfg):
                cfg.update(values)
            self.task.build_model(cfg)
            return OmegaConf.create({**OmegaConf.to_container(self.base), "model": cfg})
        cfg = copy.deepcopy(self.base)
        with open_dict(cfg):
            cfg.task.update(values)
        train_main(cfg)
        return cfg

    @staticmethod
    def save(container: dict, path) -> None:
        """A checkpoint of the saved config ``container``, without weights."""
        torch.save({"cfg": container, "model": {}, "extra_state": {"train_iterator": None},
                    "optimizer_history": [{"criterion_name": "", "optimizer_name": "",
                                           "lr_scheduler_state": {}, "num_updates": 0}]}, path)

    def checkpoint(self, cfg, section: str, change=None):
        """``load_model_ensemble_and_task`` of a checkpoint whose saved config is
        ``cfg`` (a hydra config; ``change(container)`` edits it first), its
        weights left out: the config as loaded.  For a model option the task
        is given, as fairseq-generate gives it; for a task option it comes
        from the checkpoint, as for the hub."""
        container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        if change is not None:
            change(container)
        path = self.tmp_path / "checkpoint.pt"
        self.save(container, path)
        _, loaded, _ = checkpoint_utils.load_model_ensemble_and_task(
            [str(path)], arg_overrides={"data": str(self.data)}, strict=False,
            task=self.task if section == "model" else None)
        return loaded


@pytest.fixture(scope="module")
def routes(request, tmp_path_factory):
    """The routes of each family, made when first asked for."""
    made = {}

    def of(name: str) -> Routes:
        if name not in made:
            family = FAMILIES[name]
            made[name] = Routes(family, request.getfixturevalue(family.data),
                                tmp_path_factory.mktemp(name))
        return made[name]

    return of


def refused(route, *args) -> str:
    with pytest.raises(ValueError) as refusal:
        route(*args)
    return str(refusal.value)


def wrong_value(option: Option):
    """A value of ``option`` that is none of its choices, or of another type."""
    if option.choices:
        return VALID[option.key].swapcase()  # "pr" for PR
    return {int: "sixteen", float: "sixteen", bool: "maybe"}.get(option.declared, ["a", "b"])


def expected_refusal(option: Option, value) -> str:
    if option.choices:
        return f"{option.key}: {value!r} is not one of {', '.join(option.choices)}"
    kind = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    return f"{option.key}: {value!r} is not {kind[option.declared]}"


@pytest.mark.parametrize("route", ["command line", "hydra", "checkpoint"])
@pytest.mark.parametrize("option", OPTIONS, ids=[o.key for o in OPTIONS])
def test_an_option_on_a_route(option, route, routes, data_files, capsys):
    family = routes(option.family)
    value, wrong = option.valid(data_files), wrong_value(option)
    if route == "command line":
        switch = option.declared is bool
        given = [option.flag] if switch else [option.flag, str(value)]
        args, error = family.command_line(given, capsys)
        assert error == "" and getattr(args, option.name) == value
        _, error = family.command_line([option.flag[:-2] + option.flag[-1], *given[1:]], capsys)
        assert f"did you mean {option.flag}?" in error
        if switch:
            _, error = family.command_line([option.flag, wrong], capsys)
            assert f"{option.flag} is a switch and takes no value ({wrong!r})" in error
        elif isinstance(wrong, str):  # a command line has no lists
            _, error = family.command_line([option.flag, wrong], capsys)
            assert f"argument {option.flag}: " in error and wrong in error
            assert all(choice in error for choice in option.choices or ())
        return
    section, companions = option.section, COMPANIONS.get(option.key, {})
    cfg = family.valid(section, {**companions, option.name: value})
    assert cfg[section][option.name] == value
    typo = f"{section}.{option.typo}: "
    if route == "hydra":
        error = refused(family.hydra, section, {**companions, option.typo: value})
        assert typo in error and f"did you mean {option.key}?" in error
        error = refused(family.hydra, section, {**companions, option.name: wrong})
        assert expected_refusal(option, wrong) in error
        return
    loaded = family.checkpoint(cfg, section)
    unread = option.key in UNREAD_FROM_CHECKPOINTS
    assert loaded[section][option.name] == (None if unread else value)
    error = refused(family.checkpoint, cfg, section,
                    lambda saved: saved[section].update({option.typo: value}))
    assert typo in error and f"did you mean {option.key}?" in error
    if unread:
        return
    error = refused(family.checkpoint, cfg, section,
                    lambda saved: saved[section].update({option.name: wrong}))
    assert expected_refusal(option, wrong) in error


# ------------------------------------------- the cases, hydra end to end

def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


REFUSED_OVERRIDES = {
    "+model.relative_positon": (True, "model.relative_positon: transformer_posattn has no such "
                                      "option; did you mean model.relative_positions?"),
    "++model.relative_positon": (True, "did you mean model.relative_positions?"),
    "model.position_interactions": ("pr", "model.position_interactions: 'pr' is not one of "
                                          "none, P, R, PR"),
    "model.encoder_position_embedding": ("concatt", "'concatt' is not one of add, concat, none"),
    "model.relative_positions": ("maybe", "model.relative_positions: 'maybe' is not true or false"),
    "model.max_relative_position": ("sixteen", "'sixteen' is not an integer"),
}


@pytest.mark.parametrize("key", REFUSED_OVERRIDES)
def test_a_hydra_override_is_refused_by_name(key, dictionaries):
    value, refusal = REFUSED_OVERRIDES[key]
    cfg = composed(FAMILIES["positions"], dictionaries, {key: value})
    assert refusal in refused(train_main, cfg)


def test_a_typo_in_a_hydra_config_file_is_refused(dictionaries, tmp_path):
    shutil.copytree(CONFIGS, tmp_path, dirs_exist_ok=True)
    config = tmp_path / "positions.yaml"
    config.write_text(config.read_text().replace("model:\n", "model:\n  relative_positon: true\n"))
    cfg = composed(FAMILIES["positions"], dictionaries, {}, directory=tmp_path)
    assert "did you mean model.relative_positions?" in refused(train_main, cfg)


# hydra overrides and what they add to the tiny transformer_posattn (1 encoder
# layer, d = 32, 2 heads, t = 256): Shaw's a^K and a^V, 2k+1 vectors of d/h each
# (k = 16 unless set); Dufter's P (h t^2) and R (h (2t - 1)).  A value written as
# a string is converted to the option's type.
EFFECTS = [
    ({"model.relative_positions": True}, 2 * 33 * 16),
    ({"model.relative_positions": "'true'"}, 2 * 33 * 16),
    ({"model.relative_positions": "'false'"}, 0),
    ({"model.relative_positions": True, "model.max_relative_position": "'4'"}, 2 * 9 * 16),
    ({"model.position_interactions": "P"}, 2 * 256 * 256),
    ({"model.position_interactions": "R"}, 2 * 511),
    ({"model.position_interactions": "PR"}, 2 * 256 * 256 + 2 * 511),
]


@pytest.fixture(scope="module")
def default_size(dictionaries) -> int:
    return parameters(train_main(composed(FAMILIES["positions"], dictionaries, {}))[1])


@pytest.mark.parametrize("overrides, added", EFFECTS, ids=[str(e[0]) for e in EFFECTS])
def test_a_hydra_option_takes_effect(overrides, added, dictionaries, default_size):
    _, model = train_main(composed(FAMILIES["positions"], dictionaries, overrides))
    assert parameters(model) - default_size == added


@pytest.mark.slow
def test_fairseq_hydra_train_refuses_a_misspelled_option(dictionaries, tmp_path):
    """The example of docs/setup.md, as a command line."""
    proc = run_cli("fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", "positions",
                   f"common.user_dir={USER_DIR}", f"task.data={dictionaries}",
                   "task.source_lang=en", "task.target_lang=de", "+model.relative_positon=true",
                   check=False, cwd=tmp_path)
    assert proc.returncode != 0
    assert ("fairseq-hydra-train: error: model.relative_positon: transformer_posattn has no such option; "
            "did you mean model.relative_positions?") in proc.stderr


def test_a_fairseq_train_checkpoint_and_model_overrides_are_checked(dictionaries, tmp_path):
    """A checkpoint of fairseq-train keeps its model config as the parsed
    namespace (every option of the run): its values are checked, so a value
    that ``--model-overrides`` of fairseq-generate (``arg_overrides``) sets is."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    routes = Routes(FAMILIES["positions"], dictionaries, tmp_path)
    args, _ = routes.command_line(["--source-lang", "en", "--target-lang", "de",
                                   "--relative-positions", "--encoder-layers", "1"], None)
    cfg = convert_namespace_to_omegaconf(args)
    assert isinstance(cfg.model, argparse.Namespace)
    path = tmp_path / "checkpoint.pt"
    routes.save(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), path)

    def load(**overrides):
        return checkpoint_utils.load_model_ensemble_and_task(
            [str(path)], arg_overrides={"data": str(dictionaries), **overrides}, strict=False)

    (model,), loaded, _ = load()
    assert loaded.model.relative_positions is True
    assert any(".value_terms." in name for name, _ in model.named_parameters())
    assert "model.position_interactions: 'pr' is not one of none, P, R, PR" in refused(
        lambda: load(position_interactions="pr"))
    assert "model.relative_positions: 'maybe' is not true or false" in refused(
        lambda: load(relative_positions="maybe"))
