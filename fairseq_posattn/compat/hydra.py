"""The plugin's model options through ``fairseq-hydra-train``.

fairseq 0.12's legacy Transformer (and fairseq-fixed 0.12.3.1's) builds a
``TransformerConfig`` with ``from_namespace``, which keeps an argparse
namespace's undeclared arguments but drops those of the ``DictConfig`` that
fairseq-hydra-train passes, so the plugin's options arrive as None.
:func:`install` wraps ``from_namespace`` where it drops them, and copies them
over as it copies a namespace's.
"""

from .patching import wrap_once


def _undeclared_keys(config, args) -> dict:
    """The keys of ``args`` that ``config`` lacks (TransformerConfig answers None
    for an undeclared ``encoder_*`` name instead of raising)."""
    from omegaconf import OmegaConf

    return {key: value for key, value in OmegaConf.to_container(args, resolve=True).items()
            if getattr(config, key, None) is None}


def _keeping_undeclared_keys(from_namespace):
    def wrapper(cls, args):
        from omegaconf import OmegaConf

        config = from_namespace.__func__(cls, args)
        if OmegaConf.is_config(args) and config is not args:
            for key, value in _undeclared_keys(config, args).items():
                setattr(config, key, value)
        return config

    wrapper.__wrapped__ = from_namespace
    return classmethod(wrapper)


def drops_undeclared_keys() -> bool:
    """True if ``TransformerConfig.from_namespace`` loses a DictConfig's own keys."""
    from fairseq.models.transformer import TransformerConfig
    from omegaconf import OmegaConf

    config = TransformerConfig.from_namespace(OmegaConf.create({"a_plugin_option": 1}))
    return not hasattr(config, "a_plugin_option")


def install() -> None:
    from fairseq.models.transformer import TransformerConfig

    if drops_undeclared_keys():
        wrap_once(TransformerConfig, "from_namespace", _keeping_undeclared_keys)
