"""Every option of the plugin's models and tasks checked against its one
declaration, a ``FairseqDataclass`` field (type, choices, help), on every route.

fairseq's parser, generated from the fields, checks the command line; hydra
configs, overrides and a checkpoint's saved config are checked here, a task
section where fairseq merges it with its dataclass and a model section before
``fairseq.models.build_model`` runs its architecture functions (the hooks:
:mod:`~fairseq_posattn.compat.option_names`).  Refused, naming the option: an
unknown key (with the nearest valid name), a value outside the choices
(listing them), a value of another type; a value of the declared type in
another form (``"true"``, ``"16"``) is converted.

The models are not registered with a dataclass (``register_model(name,
dataclass=...)``, as the tasks are): they extend fairseq's legacy Transformer,
whose flat options no fairseq 0.12 dataclass declares; fairseq would register a
no-op architecture under the model's name, fairseq-hydra-train would fill every
default before a named architecture's function sets what is unset, and
``build_model`` would drop undeclared keys without a word.  So the options keep
their dataclasses (each model's ``option_groups``), and the checks here read them.
"""

import argparse
import difflib
from dataclasses import fields
from enum import Enum
from functools import lru_cache
from typing import Any, Iterable, Optional, Sequence

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import ValidationError

KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def nearest(name: str, known: Iterable[str], cutoff: float = 0.6) -> Optional[str]:
    """The known name closest to ``name`` (a typo's intended name), if any is
    as close as ``cutoff`` (difflib's similarity ratio)."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def refuse_unknown(section: str, owner: str, keys: Iterable[str], known: Iterable[str]) -> None:
    """Refuse the first of ``keys`` outside ``known``, naming the nearest known one."""
    known = set(known)
    for key in sorted(set(keys) - known):
        guess = nearest(key, known)
        hint = f"did you mean {section}.{guess}?" if guess else "correct or remove it"
        raise ValueError(f"{section}.{key}: {owner} has no such option; {hint}")


def _value(config, name: str) -> Any:
    if isinstance(config, argparse.Namespace):
        return getattr(config, name, None)
    if name not in config or OmegaConf.is_interpolation(config, name):
        return None  # interpolations (``II("common.seed")``) are fairseq's to resolve
    return config[name]


def _set(config, name: str, value) -> None:
    if isinstance(config, argparse.Namespace):
        setattr(config, name, value)
    else:
        with open_dict(config):
            config[name] = value


def _set_keys(config) -> Iterable[str]:
    """The keys of ``config`` that hold a value (None sets nothing: the
    example configs list every encoder option unset, for every model)."""
    keys = vars(config) if isinstance(config, argparse.Namespace) else config.keys()
    return [key for key in keys if _value(config, key) is not None]


@lru_cache(maxsize=None)
def scratch_config(group: type):
    """``group`` as an OmegaConf structured config, whose typed fields convert
    and validate a value assigned to them (overwritten by every check)."""
    return OmegaConf.structured(group)


def typed(section: str, owner: str, schema, option, value):
    """``value`` as the dataclass field ``option`` declares it (``schema``:
    :func:`scratch_config` of its dataclass); refused if it is none of the
    field's values."""
    try:
        schema[option.name] = value
    except ValidationError:
        declared = getattr(option.type, "__args__", (option.type,))[0]  # Optional[X]: X
        if isinstance(declared, type) and issubclass(declared, Enum):
            expected = "one of " + ", ".join(choice.value for choice in declared)
        else:
            expected = KINDS.get(declared, getattr(declared, "__name__", str(declared)))
        raise ValueError(f"{section}.{option.name}: {value!r} is not {expected} "
                         f"(an option of {owner})") from None
    checked = schema[option.name]
    return checked.value if isinstance(checked, Enum) else checked


def check_options(section: str, owner: str, config, groups: Sequence[type],
                  known: Optional[Iterable[str]] = None) -> None:
    """Refuse keys of ``config`` set outside ``known`` (unless None) and values
    the fields of ``groups`` (dataclasses) do not allow; set every given
    option (not None) to its declared type."""
    if known is not None:
        refuse_unknown(section, owner, _set_keys(config), known)
    for group in groups:
        schema = scratch_config(group)
        for f in fields(group):
            value = _value(config, f.name)
            if value is not None and not f.name.startswith("_"):
                checked = typed(section, owner, schema, f, value)
                if checked != value or type(checked) is not type(value):
                    _set(config, f.name, checked)


@lru_cache(maxsize=None)
def model_keys(model_cls) -> frozenset:
    """Every key a model section of ``model_cls`` may hold: its flags (its
    ``add_args``), what its architectures fill in (fairseq's
    ``base_architecture`` sets ``decoder_input_dim``, no flag) and ``_name``."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS, add_help=False)
    model_cls.add_args(parser)
    keys = {action.dest for action in parser._actions} | {"_name"}
    for arch, cls in ARCH_MODEL_REGISTRY.items():
        if cls is model_cls:
            filled = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[arch](filled)
            keys |= set(vars(filled))
    return frozenset(keys)


def check_model_config(model_cls, cfg) -> None:
    """Check a model section against ``model_cls.option_groups``.  A hydra model
    section (a config, overrides, a checkpoint of fairseq-hydra-train) may hold
    only the model's own keys; fairseq-train's namespace (also in a checkpoint it
    wrote, with the hub's keyword arguments added) holds every component's
    options, whose keys its parser checked: only its values are checked."""
    owner = getattr(cfg, "_name", None) or getattr(cfg, "arch", None) or model_cls.__name__
    known = None if isinstance(cfg, argparse.Namespace) else model_keys(model_cls)
    check_options("model", owner, cfg, model_cls.option_groups, known)


def check_task_config(group: type, cfg) -> None:
    """Check a task section of a dataclass task (``group``, its dataclass)."""
    check_options("task", cfg.get("_name") or group.__name__, cfg, (group,),
                  known=[f.name for f in fields(group)])
