"""fairseq-hydra-train with the example configs of examples/hydra: every family
trains, and the same options through fairseq-train give the same model (the
parameters after two updates are equal, tensor for tensor)."""

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import COMMON_ARGS, REPO, USER_DIR, run_cli, run_cli_in_process
from test_logic_inference import logic_data  # noqa: F401  (fixture)
from test_pos_tagging import treebank  # noqa: F401  (fixture)
from test_relation_classification import toy_tacred  # noqa: F401  (fixture)

from fairseq_posattn.modules.options import PositionAttentionConfig, RecurrenceConfig

pytestmark = pytest.mark.slow

CONFIGS = REPO / "examples" / "hydra"
# the flag that names a section's registered choice
NAME_FLAGS = {"task": "--task", "model": "--arch", "criterion": "--criterion",
              "optimizer": "--optimizer", "lr_scheduler": "--lr-scheduler"}
TINY_TRANSLATION = {"model.encoder_layers": 1, "model.decoder_layers": 1,
                    "model.encoder_embed_dim": 32, "model.decoder_embed_dim": 32,
                    "model.encoder_ffn_embed_dim": 64, "model.decoder_ffn_embed_dim": 64,
                    "model.encoder_attention_heads": 2, "model.decoder_attention_heads": 2,
                    "dataset.max_tokens": 1000}


def hydra_overrides(config: str, overrides: dict) -> list:
    """``section.key=value`` overrides for the keys the config lists (every
    encoder option), ``++section.key=value`` (add or override) for the others."""
    listed = composed(config)
    return [("" if key.split(".")[1] in listed.get(key.split(".")[0], {}) else "++")
            + f"{key}={value}" for key, value in overrides.items()]


def composed(config: str, overrides: dict = None) -> dict:
    """The config as hydra composes it, with ``overrides`` (``section.key: value``)."""
    arguments = hydra_overrides(config, overrides) if overrides else []
    # hydra 1.1's defaults, as fairseq-hydra-train's; a later version_base would make
    # fairseq's own hydra.experimental.initialize fail later in this process
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.1"):
        cfg = compose(config, arguments)
    return OmegaConf.to_container(cfg, resolve=True)


def train_flags(cfg: dict) -> list:
    """The fairseq-train command line of a composed config."""
    flags = [cfg["task"]["data"]]
    for section, values in cfg.items():
        if section == "hydra" or not isinstance(values, dict):
            continue
        for key, value in values.items():
            if key == "data" or value is None or value is False:
                continue
            flag = NAME_FLAGS[section] if key == "_name" else "--" + key.replace("_", "-")
            if value is True:
                flags.append(flag)
            else:
                flags += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return flags


CASES = [  # config, data fixture, overrides
    ("positions", "toy_data_bin", {**TINY_TRANSLATION, "model._name": "transformer_posattn_pr",
                                     "model.relative_positions": "true"}),
    ("structure", "toy_struct_bin", TINY_TRANSLATION),
    ("hybrid", "toy_data_bin", {**TINY_TRANSLATION, "model.encoder_recurrent_cell": "lstm"}),
    # the P and R tables' t is the task's --max-piece-length on both routes
    ("tagging", "treebank", {"model._name": "posattn_tagger_pr", "task.max_piece_length": 12,
                             "model.word_embed_dim": 8, "model.char_embed_dim": 8,
                             "model.encoder_layers": 1, "dataset.batch_size": 8}),
    ("logic", "logic_data", {"task.max_train_operators": 3,
                                       "model.encoder_embed_dim": 16,
                                       "model.encoder_ffn_embed_dim": 32,
                                       "model.encoder_attention_heads": 2,
                                       "dataset.batch_size": 16}),
    ("relations", "toy_tacred", {"model.encoder_embed_dim": 24, "model.pos_tag_embed_dim": 4,
                                 "model.ner_tag_embed_dim": 4,
                                               "model.encoder_ffn_embed_dim": 16,
                                               "dataset.batch_size": 16}),
]


@pytest.mark.parametrize("config, data, overrides", CASES, ids=[c[0] for c in CASES])
def test_hydra_trains_the_model_that_fairseq_train_trains(config, data, overrides, request,
                                                          tmp_path):
    run = {**overrides, "task.data": request.getfixturevalue(data),
           "common.user_dir": USER_DIR, "common.cpu": "true", "common.seed": 3,
           "dataset.num_workers": 0, "optimization.max_update": 2,
           "optimization.max_epoch": 0, "checkpoint.no_epoch_checkpoints": "true"}
    run_cli("fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", config,
            *hydra_overrides(config, {**run, "checkpoint.save_dir": tmp_path / "hydra"}),
            cwd=tmp_path)
    # fairseq-train's entry point here: the plugin is loaded in both processes
    flags = train_flags(composed(config, {**run, "checkpoint.save_dir": tmp_path / "argparse"}))
    run_cli_in_process("fairseq-train", *flags, *COMMON_ARGS)

    states = [torch.load(tmp_path / run_dir / "checkpoint_last.pt", weights_only=True)
              for run_dir in ("hydra", "argparse")]
    assert states[0]["optimizer_history"][-1]["num_updates"] == 2
    by_hydra, by_argparse = (state["model"] for state in states)
    assert by_hydra.keys() == by_argparse.keys()
    for name in by_hydra:
        assert torch.equal(by_hydra[name], by_argparse[name]), name
    if config == "positions":  # the override reached the encoder: Shaw's relative values
        assert any(".self_attn.value_terms." in name for name in by_hydra)


def test_the_example_configs_list_every_encoder_option():
    """So that ``model.OPTION=VALUE`` overrides any of them (hydra refuses a key
    a config does not have, unless written ``+model.OPTION=VALUE``)."""
    listed = OmegaConf.load(CONFIGS / "options" / "encoder.yaml")
    options = [f.name for config in (PositionAttentionConfig, RecurrenceConfig)
               for f in config.option_fields()]
    assert sorted(listed) == sorted(options)
    assert all(value is None for value in listed.values())  # the architecture decides
    for config, *_ in CASES:
        model = composed(config, {"task.data": "x"})["model"]
        assert set(options) <= set(model)
