"""Every option of the plugin's models and tasks checked against its one
declaration, a ``FairseqDataclass`` field (type, choices, help), on every route.

fairseq's parser, generated from the fields, checks the command line (an
unknown flag refused with the nearest one: :func:`with_nearest_flags`); hydra
configs, overrides and a checkpoint's saved config are checked here, a task
section where fairseq merges it with its dataclass and a model section before
``fairseq.models.build_model`` runs its architecture functions (the hooks:
:mod:`~fairseq_posattn.compat.option_names`).  Refused, naming the option: an
unknown key (with the nearest valid name), a value outside the choices
(listing them), a value of another type; a value of the declared type in
another form (``"true"``, ``"16"``) is converted.

When the model is built, an option that cannot take effect is refused too
(:func:`check_model_effects`): one whose value differs from the
architecture's and a need of which its field declares is unmet (its
metadata's ``needs``, :class:`~fairseq_posattn.modules.options.Need`),
and structural positions under a task that gives no dependency trees.

The models are not registered with a dataclass (``register_model(name,
dataclass=...)``, as the tasks are): they extend fairseq's legacy Transformer,
whose flat options no fairseq 0.12 dataclass declares; fairseq would register a
no-op architecture under the model's name, fairseq-hydra-train would fill every
default before a named architecture's function sets what is unset, and
``build_model`` would drop undeclared keys without a word.  So the options keep
their dataclasses (each model's ``option_groups``), and the checks here read them.
"""

import argparse
from dataclasses import fields
from enum import Enum
from functools import lru_cache
from typing import Any, Callable, Iterable, Optional, Sequence

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import ValidationError

from .errors import nearest
from .modules.options import plain

UNRECOGNIZED = "unrecognized arguments: "  # the start of argparse's error for unknown flags
KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def with_nearest_flags(parser: argparse.ArgumentParser, argv, message: str) -> str:
    """argparse's error ``message`` with, for each unrecognized argument, the
    nearest flag of ``parser`` or the switch it follows in ``argv``."""
    if not message.startswith(UNRECOGNIZED):
        return message
    names = [flag[2:] for action in parser._actions for flag in action.option_strings
             if flag.startswith("--")]
    switches = {flag for action in parser._actions if action.nargs == 0
                for flag in action.option_strings}
    notes = []
    for argument in message[len(UNRECOGNIZED):].split(" "):
        if argument.startswith("--"):
            guess = nearest(argument.split("=")[0][2:], names)
            if guess:
                notes.append(f"{argument}: did you mean --{guess}?")
        elif argument in argv and argv.index(argument) > 0:
            before = argv[argv.index(argument) - 1]
            if before in switches:
                notes.append(f"{before} is a switch and takes no value ({argument!r})")
    return "; ".join([message, *notes])


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
    return plain(checked)


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


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def as_given(name: str, value) -> str:
    """An option's value as a command line gives it (a switch by its presence)."""
    value = plain(value)
    if isinstance(value, bool):
        return flag(name) if value else "no " + flag(name)
    return f"{flag(name)} {value}"


def refuse_inert(owner: str, groups: Sequence[type], values, options, default_of: Callable[[str], Any],
                 names: Optional[Iterable[str]] = None) -> None:
    """Refuse the first option of ``groups`` (of those in ``names``, unless
    None) whose value in ``values`` differs from ``default_of(name)`` and has
    no effect: a need that its field declares is unmet by ``options`` (the
    model's options, filled in; ``owner`` has them)."""
    for group in groups:
        for option in fields(group):
            if names is not None and option.name not in names:
                continue
            unmet = [need for need in option.metadata.get("needs", ()) if not need.met(options)]
            value = _value(values, option.name)
            if unmet and plain(value) != default_of(option.name):
                has = ", ".join(as_given(name, getattr(options, name, None)) for name in unmet[0].shown)
                raise ValueError(
                    f"{as_given(option.name, value)} has no effect: it needs {unmet[0].condition}, and "
                    f"{owner} has {has}: set that, or leave {flag(option.name)} out")


def filled_model_options(cfg) -> argparse.Namespace:
    """A copy of a model section with its architecture's defaults filled in."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    given = vars(cfg) if isinstance(cfg, argparse.Namespace) else OmegaConf.to_container(
        cfg, resolve=True, enum_to_str=True)
    options = argparse.Namespace(**given)
    ARCH_CONFIG_REGISTRY[architecture(cfg)](options)
    return options


def architecture(cfg) -> str:
    return getattr(cfg, "_name", None) or getattr(cfg, "arch", None)


def architecture_value(arch: str, options: argparse.Namespace, name: str):
    """The value the architecture ``arch`` gives option ``name`` when it is
    not set, every other option as in ``options``."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    unset = argparse.Namespace(**vars(options))
    delattr(unset, name)
    ARCH_CONFIG_REGISTRY[arch](unset)
    return getattr(unset, name, None)


def check_model_effects(model_cls, cfg, task, names: Optional[Iterable[str]] = None) -> None:
    """Refuse a model section (of ``model_cls``, built for ``task``) whose
    structural positions ``task`` gives no trees for, and an option of the
    model that cannot take effect (of ``names`` only, unless None)."""
    from .modules.options import TREE_OPTIONS, PositionAttentionConfig

    options, arch = filled_model_options(cfg), architecture(cfg)
    attention_cfg = PositionAttentionConfig.from_namespace(options)
    if attention_cfg.uses_structure() and not getattr(task, "feeds_trees", False):
        task_name = getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__
        off = PositionAttentionConfig()
        given = ", ".join(as_given(name, getattr(attention_cfg, name)) for name in TREE_OPTIONS
                          if getattr(attention_cfg, name) != getattr(off, name))
        raise ValueError(
            f"--arch {arch} ({given}) reads the dependency trees of the source, which --task {task_name} "
            f"does not give it: use --task translation_struct, or turn those options off")
    refuse_inert(f"--arch {arch}", model_cls.option_groups, options, options,
                 lambda name: architecture_value(arch, options, name), names)
