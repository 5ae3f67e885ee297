"""fairseq_posattn.compat.hydra: fairseq's TransformerConfig.from_namespace
drops a hydra config's undeclared (plugin) options; repaired, it keeps them as
it keeps an argparse namespace's.  tests/test_hydra.py trains through
fairseq-hydra-train."""

from argparse import Namespace

from fairseq.models.transformer import TransformerConfig
from omegaconf import OmegaConf

import fairseq_posattn  # noqa: F401  (installs the repairs)
from fairseq_posattn.compat import hydra

OPTIONS = {"relative_positions": True, "encoder_recurrent_layers": 2, "encoder_layers": 3}


def test_fairseq_drops_a_dict_configs_plugin_options():
    original = TransformerConfig.from_namespace.__wrapped__
    config = original(OmegaConf.create(OPTIONS))
    assert config.encoder.layers == 3
    assert not hasattr(config, "relative_positions") and config.encoder_recurrent_layers is None
    kept = original(Namespace(**OPTIONS))  # the argparse path keeps them
    assert kept.relative_positions is True and kept.encoder_recurrent_layers == 2


def test_repaired_a_dict_config_gives_what_a_namespace_gives():
    assert not hydra.drops_undeclared_keys()
    from_hydra = TransformerConfig.from_namespace(OmegaConf.create(OPTIONS))
    from_argparse = TransformerConfig.from_namespace(Namespace(**OPTIONS))
    for name in OPTIONS:
        assert getattr(from_hydra, name) == getattr(from_argparse, name) == OPTIONS[name]
    hydra.install()  # idempotent: wrapped once
    assert TransformerConfig.from_namespace.__wrapped__.__func__ is not None
    assert not hasattr(TransformerConfig.from_namespace.__wrapped__, "__wrapped__")
